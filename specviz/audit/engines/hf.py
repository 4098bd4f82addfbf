"""transformers' own ``generate`` as an audited engine: plain sampling, assisted generation
with a draft model (``assistant_model=``), prompt lookup (``prompt_lookup_num_tokens=``) and
the deliberately lossy static ensemble (``assistant_ensemble_weight=w``: its verifier accepts
against w*p + (1-w)*q, so the output law at a drafted position is that mixture, TV (1-w)*TV(p, q)
away from the target's).

transformers reports no acceptance counts, so this adapter counts forward passes (hooks on the
two models): every target pass after the prefill is one verification step and commits the
accepted tokens plus one, so accepted = new tokens - target passes; with a draft model every
draft pass drafts one token. The assistant's confidence threshold is set to 0 and its schedule
to "constant", so every step drafts ``k`` tokens (where the length budget allows).

The models load with PyTorch's stock kernels (``packed=False``): the engine audited is
transformers as its users run it, not specviz's kernel chooser. On the bf16 Qwen pair this is
~5x slower per request on this CPU (17 s vs 3.3 s for 3 tokens of the 1.5B, under other load).
With ``dtype=bfloat16`` (or float16) the models load from a cached copy of their safetensors
folder stored in that dtype (:func:`~.convert.hf_folder` with ``dtype=``, made once in the
conversion child): converting the 1.5B's float32 file at load time peaked at 10.9 GB.

``batch=N`` (the plain arm only: assisted generation takes one sequence) samples N requests
in one ``generate`` call with ``num_return_sequences=N``: the RNG is seeded with the chunk's
first seed, and row i is the chunk's i-th request (the seeds recorded are the requests' own;
every chunk's first seed is distinct, so no two chunks share a random stream).

transformers' assistant drafts from the prompt: the first generated token goes through the
speculative path too (no first-token control here).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .base import Engine, EngineError, EngineSample, Sampling, check_sampling
from .convert import hf_folder

__all__ = ["TransformersEngine"]


@dataclass
class TransformersEngine(Engine):
    """``model`` (target) and optionally ``draft`` (``"target"`` for the target itself,
    ``"name@N"`` for its first N layers), ``lookup`` (prompt lookup: tokens drafted per step),
    ``ensemble`` (assistant_ensemble_weight, lossy), ``k`` (draft tokens per step)."""

    model: str = "smollm2-135m"
    draft: str | None = None
    lookup: int | None = None
    ensemble: float | None = None
    k: int = 3
    threads: int | None = None
    dtype: str = "float32"  # bfloat16 halves the memory of a Qwen pair
    batch: int = 1  # plain arm: requests per generate call (num_return_sequences)
    engine: str = "transformers"
    _state: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.draft is not None and self.lookup is not None:
            raise ValueError("transformers: a draft model and prompt lookup exclude each other")
        if self.ensemble is not None:
            if self.draft is None:
                raise ValueError("transformers: ensemble= needs a draft model (draft=...)")
            if not 0 < self.ensemble < 1:
                raise ValueError(f"transformers: ensemble must be in (0, 1), got {self.ensemble}")
            self.lossy = True
        if self.batch < 1:
            raise ValueError(f"transformers: batch must be >= 1, got {self.batch}")
        if self.batch > 1 and (self.draft is not None or self.lookup is not None):
            raise ValueError(
                "transformers: batch= is for the plain arm only (assisted generation and "
                "prompt lookup take one sequence per call)"
            )
        self.speculation = "draft" if self.draft else ("lookup" if self.lookup else "off")
        self.first_token_from_target = self.speculation == "off"
        self.sampled_draft = True if self.draft else None

    def load(self) -> None:
        import torch

        from ... import models

        if self.threads:
            torch.set_num_threads(self.threads)
        load = dict(dtype=self.dtype, progress=False, packed=False)  # stock kernels: see above
        folder = str(hf_folder(self.model, dtype=self.dtype))  # stored in self.dtype: mapped
        target = models.load_model(folder, **load)
        tok = models.load_tokenizer(folder, progress=False)
        draft = None
        if self.draft is not None:
            if self.draft in ("target", self.model):
                draft = _alias(target)  # the same weights, its own hooks and settings
            else:
                draft = models.load_model(str(hf_folder(self.draft, dtype=self.dtype)), **load)
            if draft.config.vocab_size != target.config.vocab_size:
                raise EngineError(
                    f"transformers: draft {self.draft} has vocabulary "
                    f"{draft.config.vocab_size}, the target {target.config.vocab_size}"
                )
            gc = draft.generation_config
            gc.num_assistant_tokens = self.k
            gc.num_assistant_tokens_schedule = "constant"
            gc.assistant_confidence_threshold = 0.0
        calls = {"target": 0, "draft": 0}

        def counter(key: str):
            def hook(module: Any, args: Any, kwargs: Any, out: Any) -> None:
                calls[key] += 1

            return hook

        hooks = [target.register_forward_hook(counter("target"), with_kwargs=True)]
        if draft is not None:
            hooks.append(draft.register_forward_hook(counter("draft"), with_kwargs=True))
        self._state = dict(target=target, draft=draft, tok=tok, calls=calls, hooks=hooks)

    def _kwargs(self, sampling: Sampling) -> dict[str, Any]:
        tok = self._state["tok"]
        kw: dict[str, Any] = dict(
            max_new_tokens=sampling.max_tokens,
            do_sample=not sampling.greedy,
            pad_token_id=tok.pad_token_id or tok.eos_token_id,
        )
        if not sampling.greedy:
            kw.update(
                temperature=sampling.temperature,
                top_k=sampling.top_k or 0,
                top_p=1.0 if sampling.top_p is None else sampling.top_p,
            )
        return kw

    def sample_one(self, prompt: str, sampling: Sampling, seed: int) -> EngineSample:
        import torch

        check_sampling(self.engine, sampling)
        st = self._state
        ids = st["tok"](prompt, return_tensors="pt")["input_ids"]
        kw = self._kwargs(sampling)
        if st["draft"] is not None:
            kw["assistant_model"] = st["draft"]
            if self.ensemble is not None:
                kw["assistant_ensemble_weight"] = self.ensemble
        elif self.lookup:
            kw["prompt_lookup_num_tokens"] = self.lookup
        calls = st["calls"]
        calls["target"] = calls["draft"] = 0
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = st["target"].generate(ids, attention_mask=torch.ones_like(ids), **kw)
        seconds = time.perf_counter() - t0
        new = [int(t) for t in out[0, ids.shape[1] :]]
        if self.speculation == "off":
            return EngineSample(tuple(new), seconds, steps=len(new))
        # the first target pass verifies the first draft too (the prompt is its prefix)
        steps = calls["target"]
        accepted = max(0, len(new) - steps)
        drafted = calls["draft"] if self.draft else None
        return EngineSample(tuple(new), seconds, drafted, accepted, steps)

    def sample(self, prompt: str, sampling: Sampling, seeds: Any) -> list[EngineSample]:
        if self.batch == 1 or len(seeds) <= 1 or sampling.greedy:
            return super().sample(prompt, sampling, seeds)

        def run(chunk: list[int]) -> list[tuple[int, ...]] | None:
            try:
                return self._generate(prompt, sampling, chunk[0], len(chunk))
            except (KeyboardInterrupt, MemoryError):
                raise
            except Exception:  # noqa: BLE001 - find which request fails, one at a time
                return None

        return self.sample_in_chunks(prompt, sampling, seeds, run, steps=True)

    def _generate(
        self, prompt: str, sampling: Sampling, seed: int, n: int
    ) -> list[tuple[int, ...]]:
        """``n`` sequences from one ``generate`` call (the plain arm's batches)."""
        import torch

        check_sampling(self.engine, sampling)
        st = self._state
        ids = st["tok"](prompt, return_tensors="pt")["input_ids"]
        kw = self._kwargs(sampling)
        torch.manual_seed(seed)
        with torch.no_grad():
            out = st["target"].generate(
                ids, attention_mask=torch.ones_like(ids), num_return_sequences=n, **kw
            )
        return [tuple(int(t) for t in row[ids.shape[1] :]) for row in out]

    def close(self) -> None:
        for h in self._state.get("hooks", ()):
            h.remove()
        self._state = {}
        self._loaded = False


def _alias(model: Any) -> Any:
    """A second module object over the same weights (no copy): draft = target, with its own
    forward hooks and generation config, so the two roles' passes are counted apart."""
    import copy
    from collections import OrderedDict

    alias = copy.copy(model)
    for name in ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called"):
        if hasattr(model, name):
            setattr(alias, name, OrderedDict())
    alias.generation_config = copy.deepcopy(model.generation_config)
    return alias


def load_bias_pair(target: str, draft: str, dtype: Any) -> tuple[Any, Any, Any]:
    """(tokenizer, target, draft) for :func:`ensemble_bias`: the models as the audit's
    transformers engine loads them (the folder stored in ``dtype``, stock kernels)."""
    from ... import models

    load = dict(dtype=dtype, progress=False, packed=False)
    tokenizer = models.load_tokenizer(str(hf_folder(target)), progress=False)
    target_model = models.load_model(str(hf_folder(target, dtype=dtype)), **load)
    draft_model = models.load_model(str(hf_folder(draft, dtype=dtype)), **load)
    return tokenizer, target_model, draft_model


def ensemble_bias(
    target: str | Any,
    draft: str | Any,
    prompt: str,
    weight: float,
    *,
    temperature: float = 1.0,
    dtype: str = "float32",
    tokenizer: Any = None,
    cover: float = 0.99,
    max_first: int = 16,
    laws: bool = False,
) -> dict[str, Any]:
    """The exact bias of ``assistant_ensemble_weight=weight``, from the two models' laws before
    any sampling. transformers' assistant drafts from the prompt, and its verifier is the
    lossless rule against v = w*p + (1-w)*q (``_speculative_sampling``), so every drafted
    position follows v: at the first token TV(v, p) = (1-w) * TV(p, q) exactly; with at least
    three new tokens (so the second is drafted too, in the first step or after a rejection)
    the first two tokens follow v1(x1) v2(x2|x1) instead of p1(x1) p2(x2|x1).

    ``target`` / ``draft``: model names (loaded here, in ``dtype``) or loaded models (then
    ``tokenizer`` too: nothing is loaded a second time). Returns ``tv_pq`` and
    ``predicted_tv`` (first token), ``predicted_tv2`` (the law of the first two tokens, over
    the first tokens that cover ``cover`` of both first-token laws, at most ``max_first`` of
    them -- 0: not computed, NaN; ``uncovered`` is the mass left out, a bound on the error), ``p_top`` / ``v_top`` (the five likeliest first tokens
    under each law), ``weight``, and with ``laws=True`` the first-token laws ``p_law`` and
    ``v_law`` (numpy arrays, for planning a sample size). No top-k / top-p: the prediction uses the temperature only.
    """
    import torch

    if isinstance(target, str):
        tokenizer, target, draft = load_bias_pair(target, draft, dtype)
    if tokenizer is None:
        raise ValueError("ensemble_bias: pass tokenizer= with loaded models")
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]

    def laws(model: Any, x1: list[int]) -> tuple[Any, Any]:
        """(law of token 1, laws of token 2 after each x1 in ``x1``)."""
        with torch.no_grad():
            first = model(input_ids=ids).logits[0, -1].float() / temperature
            second = None
            if x1:
                batch = torch.cat([ids.repeat(len(x1), 1), torch.tensor(x1)[:, None]], 1)
                second = model(input_ids=batch).logits[:, -1].float() / temperature
        return torch.softmax(first, -1), (None if second is None else torch.softmax(second, -1))

    # first pass: the first-token laws (x1 chosen from them, then one batched pass each)
    p1, _ = laws(target, [])
    q1, _ = laws(draft, [])
    v1 = weight * p1 + (1 - weight) * q1
    tv_pq = 0.5 * float((p1 - q1).abs().sum())
    both = torch.maximum(p1, v1)
    order = torch.argsort(both, descending=True)
    x1: list[int] = []
    for t in order.tolist()[: max(max_first, 0)]:
        if float(p1[x1].sum()) >= cover and float(v1[x1].sum()) >= cover:
            break
        x1.append(int(t))
    if not x1:
        joint, uncovered = float("nan"), float("nan")
    else:
        _, p2 = laws(target, x1)
        _, q2 = laws(draft, x1)
        v2 = weight * p2 + (1 - weight) * q2
        joint = 0.5 * float((p1[x1, None] * p2 - v1[x1, None] * v2).abs().sum())
        uncovered = float(1 - p1[x1].sum()) + float(1 - v1[x1].sum())

    def top(law: Any) -> list[list]:
        vals, idx = torch.topk(law, 5)
        return [
            [tokenizer.decode([int(i)]), round(float(v), 4)] for v, i in zip(vals, idx, strict=True)
        ]

    out: dict[str, Any] = {}
    if laws:
        out = {"p_law": p1.double().numpy(), "v_law": v1.double().numpy()}
    return {
        **out,
        "tv_pq": tv_pq,
        "predicted_tv": (1 - weight) * tv_pq,
        "predicted_tv2": joint,
        "uncovered": uncovered,
        "p_top": top(p1),
        "v_top": top(v1),
        "weight": weight,
    }
