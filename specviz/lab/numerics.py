"""Numerics (notebook 06): greedy decoding of one model in fp32 vs bf16 -- where the two first part, and the logit margins that explain it."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ..decoding.serial import speculative_generate


@torch.inference_mode()
def logit_margins(model: Any, prompt: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
    """Top-1 minus top-2 logit of the target before each of ``tokens`` (teacher forcing, one
    forward pass over prompt + tokens, in the model's own dtype): ``m[i]`` is the margin of
    the decision that produced ``tokens[i]``. A greedy divergence at a small margin is a near
    tie that numerics can flip; at a large margin it is a bug."""
    if not tokens:
        return np.zeros(0)
    ids = torch.tensor([list(prompt) + list(tokens)], device=model.device)
    logits = model(input_ids=ids, logits_to_keep=len(tokens) + 1).logits[0, :-1].float()
    top = torch.topk(logits, 2, dim=-1).values  # [len(tokens), 2]
    return (top[:, 0] - top[:, 1]).cpu().numpy()


@torch.inference_mode()
def verify_decode_gaps(
    model: Any, prompt: Sequence[int], tokens: Sequence[int], *, gamma: int
) -> dict[str, np.ndarray]:
    """The target's logits before each of ``tokens`` computed the two ways greedy decoding
    computes them: one position per call (plain decoding) and ``gamma + 1`` positions per call
    (a speculative verify pass), both on a KV cache after the same prompt prefill, teacher
    forced along ``tokens`` (normally the plain greedy text).

    Returns arrays over the positions: ``gap`` (the largest absolute logit difference between
    the two), ``margin`` (top-1 minus top-2 logit of the one-per-call pass) and ``flip`` (the
    two passes' argmax differ there: a verify pass with these shapes would change the greedy
    text at that decision). A decision with ``margin <= gap`` is within reach of the rounding
    difference; whether it flips depends on the direction of the rounding. The real run's
    verify calls start wherever the previous step ended, so this measures the shapes, not the
    exact calls of one speculative run."""
    from transformers import DynamicCache

    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma must be an integer >= 1, got {gamma!r}")
    n = len(tokens)
    # transformers renamed ``past_key_values`` to ``cache`` (as core.runners.HFRunner does)
    fwd = getattr(model, "forward", None)
    kw = "cache" if fwd is not None and "cache" in inspect.signature(fwd).parameters else (
        "past_key_values")  # fmt: skip
    if n == 0:
        return {
            k: np.zeros(0, dtype=bool if k == "flip" else float) for k in ("gap", "margin", "flip")
        }

    def logits(chunk: int) -> torch.Tensor:
        cache = DynamicCache()
        ids = torch.tensor([list(prompt)], device=model.device)
        out = model(input_ids=ids, use_cache=True, **{kw: cache})
        rows = [out.logits[0, -1].float()]
        pos = 0
        while len(rows) < n:
            seg = torch.tensor([list(tokens[pos : pos + chunk])], device=model.device)
            out = model(input_ids=seg, use_cache=True, **{kw: cache})
            rows.extend(out.logits[0].float())
            pos += seg.shape[1]
        return torch.stack(rows[:n])

    dec, ver = logits(1), logits(gamma + 1)
    top = torch.topk(dec, 2, dim=-1).values
    return {
        "gap": (dec - ver).abs().amax(dim=-1).cpu().numpy().astype(float),
        "margin": (top[:, 0] - top[:, 1]).cpu().numpy().astype(float),
        "flip": (dec.argmax(-1) != ver.argmax(-1)).cpu().numpy(),
    }


def _first_diff(a: Sequence[int], b: Sequence[int]) -> int | None:
    i = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if i is None and len(a) != len(b):
        i = min(len(a), len(b))
    return i


def precision_greedy(
    targets: dict[str, Any],
    drafters: dict[str, Callable[[Any], Any]],
    prompts: Sequence[Any],
    tokenizer: Any,
    *,
    max_new_tokens: int,
    gamma: int = 4,
    near_tie: dict[str, float] | None = None,
    reference: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[Any, dict[str, np.ndarray]]:
    """Greedy plain and speculative decoding of every prompt with the same target in several
    precisions (``targets``: dtype label -> model; the first is the reference, normally fp32).

    Returns ``(table, margins)``. ``table`` has one row per (prompt, dtype, drafter): drafter
    ``"plain"`` compares plain greedy in this dtype with plain greedy in the reference dtype;
    every other drafter compares its speculative output with plain greedy *in the same dtype*.
    At the first divergence: the margin (top-1 minus top-2 logit) of the model that produced
    the reference text there, the reference dtype's margin at the same prefix, and a verdict
    (:func:`specviz.stats.greedy_consistency`: "numerics" below ``near_tie[dtype]``, else
    "bug"). ``margins[dtype]`` holds the margins at every generated position of the plain
    outputs: the background the divergence margins are compared with.
    """
    import pandas as pd

    from ..decoding.serial import autoregressive_generate
    from ..prompts import render_prompt
    from ..stats import DEFAULT_NEAR_TIE, greedy_consistency

    if not targets:
        raise ValueError("targets is empty")
    ref_name = reference or next(iter(targets))
    ties = {k: (near_tie or {}).get(k, DEFAULT_NEAR_TIE) for k in targets}
    rows, margins = [], {k: [] for k in targets}
    eos = tokenizer.eos_token_id
    for pr in prompts:
        ids = render_prompt(tokenizer, pr)
        pid = getattr(pr, "id", str(pr)[:20])
        cat = getattr(pr, "category", "unknown")
        plain, chance = {}, {}
        for dt, model in targets.items():
            plain[dt] = autoregressive_generate(
                model, ids, max_new_tokens=max_new_tokens, eos_token_id=eos
            ).new_tokens
            margins[dt].append(logit_margins(model, ids, plain[dt]))
            g = verify_decode_gaps(model, ids, plain[dt], gamma=gamma)
            gmax = float(g["gap"].max()) if len(g["gap"]) else 0.0
            chance[dt] = dict(verify_gap=gmax, within_gap=int((g["margin"] <= gmax).sum()),
                              decisions=len(plain[dt]),
                              verify_flips=int(g["flip"].sum()))  # fmt: skip
        ref_model = targets[ref_name]
        for dt, model in targets.items():
            cands: list[tuple[str, list[int], list[int], Any]] = []
            if dt != ref_name:
                cands.append(("plain", plain[ref_name], plain[dt], ref_model))
            for dname, make in drafters.items():
                t0 = time.perf_counter()
                spec = speculative_generate(
                    model, make(model), ids, gamma=gamma, max_new_tokens=max_new_tokens,
                    eos_token_id=eos, trace=False,
                ).new_tokens  # fmt: skip
                cands.append((dname, plain[dt], spec, model))
                if progress is not None:
                    progress(f"{pid} {dt} {dname}: {time.perf_counter() - t0:.1f} s")
            for dname, ref, cand, ref_producer in cands:
                i = _first_diff(ref, cand)
                m = mref = None
                if i is not None and i < len(ref):
                    m = float(logit_margins(ref_producer, ids, ref[: i + 1])[i])
                    mref = float(logit_margins(ref_model, ids, ref[: i + 1])[i])
                res = greedy_consistency([ref], [cand], [m], near_tie=ties[dt])
                rows.append(
                    dict(
                        prompt=pid,
                        category=cat,
                        dtype=dt,
                        drafter=dname,
                        identical=i is None,
                        first_divergence=i,
                        margin=m,
                        margin_reference=mref,
                        verdict=res.verdicts[0],
                        reference_token=ref[i] if i is not None and i < len(ref) else None,
                        candidate_token=cand[i] if i is not None and i < len(cand) else None,
                        new_tokens=len(cand),
                        **chance[dt],
                    )
                )
    flat = {k: np.concatenate(v) if v else np.zeros(0) for k, v in margins.items()}
    return pd.DataFrame(rows), flat
