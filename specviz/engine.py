"""The decoding loops: plain autoregressive sampling and speculative decoding.

One speculative step (batch size 1)::

    draft   k tokens x_1..x_k with their q_draft            (drafter, own KV cache)
    verify  one target call on [pending, x_1..x_k]  -> p_target [k+1, V]
    decide  accept a prefix, then a corrected or bonus token (verifier)
    commit  crop both caches to the kept prefix (rollback is a crop, no recompute)

Both loops thread one ``torch.Generator`` (from ``seed``) through every random draw and
process logits with the same :class:`~specviz.sampling.SamplingParams`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .drafters import Draft, as_drafter
from .lm import as_runner, vocab_size_of
from .sampling import SamplingParams, check_logits, logits_to_probs, sample
from .trace import DraftPosition, Step, Trace, TraceSummary
from .verify import VERIFIERS, Verdict, get_verifier

__all__ = ["GenerationResult", "autoregressive_generate", "speculative_generate"]

TOP_K_TRACE = 10


@dataclass(frozen=True)
class GenerationResult:
    new_tokens: list[int]
    trace: Trace | None
    prompt_length: int
    target_calls: int
    accepted_counts: tuple[int, ...]  # per target call (empty for plain decoding)
    drafted_counts: tuple[int, ...]
    token_times: tuple[float, ...]  # seconds from start until each new token was available
    total_time: float
    seed: int | None  # None when the caller passed its own Generator

    @property
    def ttft(self) -> float:
        return self.token_times[0] if self.token_times else float("nan")

    @property
    def tokens_per_second(self) -> float:
        return len(self.new_tokens) / self.total_time if self.total_time > 0 else float("nan")

    def summary(self) -> TraceSummary:
        if self.trace is None:
            raise ValueError("this result was produced with trace=False; no trace to summarise")
        return self.trace.summary()


# -- input checking --------------------------------------------------------------------


def _prompt_tensor(input_ids: Any) -> torch.Tensor:
    if isinstance(input_ids, torch.Tensor):
        t = input_ids
        if t.dim() == 2:
            if t.shape[0] != 1:
                raise ValueError(
                    f"input_ids must be a single sequence (1xT), got batch of {t.shape[0]}"
                )
            t = t[0]
        if t.dim() != 1:
            raise ValueError(f"input_ids must be 1xT or T, got shape {tuple(input_ids.shape)}")
        if t.dtype.is_floating_point or t.dtype == torch.bool:
            raise ValueError(f"input_ids must be integer token ids, got dtype {t.dtype}")
        t = t.detach().to("cpu", torch.long)
    elif isinstance(input_ids, Sequence) and not isinstance(input_ids, (str, bytes)):
        flat = (
            list(input_ids[0])
            if input_ids and isinstance(input_ids[0], Sequence)
            else list(input_ids)
        )
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in flat):
            raise ValueError("input_ids must contain integer token ids")
        t = torch.tensor(flat, dtype=torch.long)
    else:
        raise TypeError(
            f"input_ids must be a tensor or a list of ints, got {type(input_ids).__name__}"
        )
    if t.numel() == 0:
        raise ValueError("input_ids is empty: the prompt needs at least one token (e.g. BOS)")
    if int(t.min()) < 0:
        raise ValueError("input_ids contains negative token ids")
    return t


def _eos_set(eos_token_id: int | Sequence[int] | None) -> frozenset[int]:
    if eos_token_id is None:
        return frozenset()
    if isinstance(eos_token_id, int):
        return frozenset([eos_token_id])
    return frozenset(int(e) for e in eos_token_id)


def _check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _generator(
    seed: int | torch.Generator | None, device: torch.device
) -> tuple[torch.Generator, int | None]:
    """One Generator for every draw of a generation. Passing a Generator (instead of an int)
    lets a caller thread one stream through many generations without reseeding."""
    if isinstance(seed, torch.Generator):
        if seed.device.type != device.type:
            raise ValueError(f"the generator is on {seed.device}, the model on {device}")
        return seed, None
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item())
    g = torch.Generator(device=device)
    g.manual_seed(int(seed))
    return g, int(seed)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _truncate(tokens: list[int], room: int, eos: frozenset[int]) -> tuple[list[int], bool]:
    tokens = tokens[:room]
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1], True
    return tokens, False


# -- plain decoding --------------------------------------------------------------------


def autoregressive_generate(
    target: Any,
    input_ids: Any,
    *,
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | torch.Generator | None = None,
    eos_token_id: int | Sequence[int] | None = None,
) -> GenerationResult:
    """Standard decoding: one target call per token. The baseline for everything else."""
    params = SamplingParams(do_sample, temperature, top_k, top_p)
    _check_count("max_new_tokens", max_new_tokens, 0)
    prompt = _prompt_tensor(input_ids)
    eos = _eos_set(eos_token_id)
    runner = as_runner(target)
    gen, seed = _generator(seed, runner.device)

    new: list[int] = []
    steps: list[Step] = []
    times: list[float] = []
    pending = prompt
    t_start = time.perf_counter()
    while len(new) < max_new_tokens:
        t0 = time.perf_counter()
        logits = runner.extend(pending, 1)[-1]  # [V]
        _check_target_logits(logits)
        if params.is_greedy:  # argmax of the logits = argmax of their one-hot "probabilities"
            tok = int(logits.argmax())
        else:
            tok = int(sample(logits_to_probs(logits, params), gen))
        t1 = time.perf_counter()
        new.append(tok)
        times.append(t1 - t_start)
        steps.append(
            Step(len(steps), len(new) - 1, 0, 0, (tok,), "target", 0.0, t1 - t0, t1 - t_start)
        )
        if tok in eos:
            break
        pending = torch.tensor([tok], dtype=torch.long)
    total = time.perf_counter() - t_start
    meta = {
        "kind": "autoregressive",
        "params": params.__dict__,
        "seed": seed,
        "prompt_length": prompt.numel(),
    }
    return GenerationResult(
        new,
        Trace(tuple(steps), meta),
        prompt.numel(),
        len(steps),
        (),
        (),
        tuple(times),
        total,
        seed,
    )


# -- speculative decoding --------------------------------------------------------------


def speculative_generate(
    target: Any,
    draft: Any,
    input_ids: Any,
    *,
    gamma: int | Any = 4,
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | torch.Generator | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    verifier: str = "lossless",
    trace: bool = True,
) -> GenerationResult:
    """Speculative decoding of ``target`` with ``draft`` (a causal LM or a drafter object).

    ``verifier="lossless"`` keeps the target's output law exactly (greedy matching when
    ``do_sample=False``); the other names are the deliberately broken rules of
    :data:`specviz.verify.VERIFIERS` (and ``"synthetic"``, the lossy benchmark-only rule of
    :mod:`specviz.synthetic`).

    ``gamma`` is a fixed number of drafts per target call, or a policy object from
    :mod:`specviz.policies` (``next_gamma()`` before each call, 0 meaning a plain decoding
    step; ``update(...)`` after it). Policies choose how many tokens are drafted, never how
    they are verified, so the output law is unchanged.
    """
    params = SamplingParams(do_sample, temperature, top_k, top_p)
    policy = _live_policy(gamma)
    _check_count("max_new_tokens", max_new_tokens, 0)
    prompt = _prompt_tensor(input_ids)
    eos = _eos_set(eos_token_id)
    spec = get_verifier(verifier, greedy=params.is_greedy)
    drafter = as_drafter(draft, mode=spec.draft_mode)
    if policy is not None:
        if hasattr(policy, "start"):
            policy.start()
        if hasattr(policy, "wrap_drafter"):  # e.g. stop drafting on low draft confidence
            drafter = policy.wrap_drafter(drafter)
    runner = as_runner(target)
    device = runner.device
    gen, seed = _generator(seed, device)
    _check_vocab_sizes(target, drafter)
    if hasattr(drafter, "start"):
        drafter.start(prompt, params)
    # Feature-level drafters (EAGLE-style) read the target's final hidden states.
    wants_hidden = bool(getattr(drafter, "wants_target_hidden", False))
    # Greedy matching reads only the argmax of p_target, which is the argmax of the logits:
    # untraced greedy runs skip building the one-hot [k+1, V] "probabilities".
    logits_suffice = spec is VERIFIERS["greedy"] and not trace

    context = prompt.clone()  # [T] on CPU: prompt + everything committed so far
    new: list[int] = []
    steps: list[Step] = []
    times: list[float] = []
    accepted_counts: list[int] = []
    drafted_counts: list[int] = []
    t_start = time.perf_counter()
    done = False
    while len(new) < max_new_tokens and not done:
        room = max_new_tokens - len(new)
        want = gamma if policy is None else _check_count("policy gamma", policy.next_gamma(), 0)
        k = min(want, room - 1)  # the step's own target token fills the last slot
        t0 = time.perf_counter()
        d = drafter.propose(context, k, gen) if k > 0 else Draft(torch.empty(0, dtype=torch.long))
        k = d.tokens.numel()
        _sync(device)
        t1 = time.perf_counter()

        pending = context[runner.length :]
        fed = torch.cat([pending, d.tokens])
        if wants_hidden:
            logits, hidden = runner.extend(fed, k + 1, return_hidden=True)  # [k+1,V], [m,H]
        else:
            logits = runner.extend(fed, k + 1)  # [k+1, V]
        _check_target_logits(logits)
        p_target = logits if logits_suffice else logits_to_probs(logits, params)  # [k+1, V]
        q_draft = d.q_draft
        if q_draft is not None:
            q_draft = q_draft.to(device)
            if q_draft.shape[-1] != p_target.shape[-1]:
                raise ValueError(
                    f"vocabulary mismatch: draft logits have {q_draft.shape[-1]} entries, "
                    f"target logits {p_target.shape[-1]}; draft and target must share a tokenizer"
                )
        if k and int(d.tokens.max()) >= p_target.shape[-1]:
            raise ValueError(
                f"drafter proposed token id {int(d.tokens.max())}, outside the target's "
                f"vocabulary of {p_target.shape[-1]}"
            )
        v = spec.verify(d.tokens, q_draft, p_target, gen)
        n = v.num_accepted
        runner.crop(context.numel() + n)  # keep context + accepted drafts
        if hasattr(drafter, "feedback"):
            drafter.feedback(n)
        if wants_hidden:  # features of the tokens the target keeps: pending + accepted
            kept = pending.numel() + n
            drafter.observe_target(fed[:kept], hidden[:kept])
        _sync(device)
        t2 = time.perf_counter()

        committed = d.tokens[:n].tolist() + [v.next_token]
        committed, done = _truncate(committed, room, eos)
        context = torch.cat([context, torch.tensor(committed, dtype=torch.long)])
        positions = _positions(len(new), d, q_draft, p_target, v, committed) if trace else ()
        steps.append(
            Step(
                step=len(steps),
                position=len(new),
                drafted=k,
                accepted=n,
                emitted=tuple(committed),
                final_kind=v.next_kind,
                draft_time=t1 - t0,
                verify_time=t2 - t1,
                end_time=t2 - t_start,
                positions=positions,
            )
        )
        new.extend(committed)
        times.extend([t2 - t_start] * len(committed))
        accepted_counts.append(n)
        drafted_counts.append(k)
        if policy is not None:
            policy.update(k, n, t1 - t0, t2 - t1)

    total = time.perf_counter() - t_start
    tr = None
    if trace:
        meta = {
            "kind": "speculative",
            "gamma": gamma if policy is None else getattr(policy, "max_gamma", None),
            "gamma_policy": None if policy is None else getattr(policy, "name", repr(policy)),
            "params": params.__dict__,
            "verifier": spec.name,
            "drafter": getattr(drafter, "name", type(drafter).__name__),
            "seed": seed,
            "prompt_length": prompt.numel(),
            "vocab_size": int(p_target.shape[-1]) if steps else None,
        }
        tr = Trace(tuple(steps), meta)
    return GenerationResult(
        new,
        tr,
        prompt.numel(),
        len(steps),
        tuple(accepted_counts),
        tuple(drafted_counts),
        tuple(times),
        total,
        seed,
    )


def _check_target_logits(logits: torch.Tensor) -> None:
    """check_logits at the cost of one reduction: any NaN/inf makes the sum non-finite; only
    then is the elementwise check run (it names the first bad entry, or passes if the sum
    merely overflowed)."""
    if not bool(torch.isfinite(logits.sum())):
        check_logits(logits, "target")


def _live_policy(gamma: Any) -> Any:
    """None for a plain int gamma (checked); the policy object otherwise."""
    if isinstance(gamma, int) and not isinstance(gamma, bool):
        _check_count("gamma", gamma, 1)
        return None
    if hasattr(gamma, "next_gamma") and hasattr(gamma, "update"):
        return gamma
    raise ValueError(
        f"gamma must be an integer >= 1 or a policy with next_gamma()/update() "
        f"(see specviz.policies), got {gamma!r}"
    )


def _check_vocab_sizes(target: Any, drafter: Any) -> None:
    draft_model = getattr(drafter, "model", None)
    if draft_model is None:
        return
    vt, vd = vocab_size_of(target), vocab_size_of(draft_model)
    if vt is not None and vd is not None and vt != vd:
        raise ValueError(
            f"vocabulary mismatch: draft logits have {vd} entries, target logits {vt}; "
            "draft and target must share a tokenizer (see specviz.models.check_vocab)"
        )


def _positions(
    start: int,
    d: Draft,
    q_draft: torch.Tensor | None,
    p_target: torch.Tensor,
    v: Verdict,
    committed: list[int],
) -> tuple[DraftPosition, ...]:
    """The per-position trace rows of one step (one host transfer for all of them)."""
    k = d.tokens.numel()
    n = v.num_accepted
    dev = p_target.device
    tok = d.tokens.to(dev)
    idx = torch.arange(k, device=dev)
    kk = min(TOP_K_TRACE, p_target.shape[-1])
    top_p = torch.topk(p_target, kk, dim=-1)  # [k+1, kk]
    host: dict[str, Any] = {
        "p_x": p_target[idx, tok],
        "q_x": q_draft[idx, tok] if q_draft is not None else torch.ones(k, device=dev),
        "acc": v.accept_prob,
        "u": v.u,
        "tp_i": top_p.indices,
        "tp_v": top_p.values,
    }
    if q_draft is not None and k:
        top_q = torch.topk(q_draft, kk, dim=-1)
        host["tq_i"], host["tq_v"] = top_q.indices, top_q.values
    if v.residual is not None:
        top_r = torch.topk(v.residual, kk)
        host["r_i"], host["r_v"] = top_r.indices, top_r.values
    h = {key: val.tolist() for key, val in host.items()}

    rows = []
    for i in range(k):
        kind = "accepted" if i < n else "corrected" if i == n else "discarded"
        # EOS or max_new_tokens can cut a step short: only committed tokens count as emitted.
        emitted = committed[i] if i < len(committed) else -1
        rej = i == n
        rows.append(
            DraftPosition(
                position=start + i,
                draft_token=int(d.tokens[i]),
                q_draft=h["q_x"][i],
                p_target=h["p_x"][i],
                accept_prob=h["acc"][i],
                u=h["u"][i],
                accepted=i < n,
                evaluated=i <= n,
                emitted_token=emitted,
                emitted_kind=kind,
                top_p_ids=tuple(h["tp_i"][i]),
                top_p_probs=tuple(h["tp_v"][i]),
                top_q_ids=tuple(h["tq_i"][i]) if "tq_i" in h else (),
                top_q_probs=tuple(h["tq_v"][i]) if "tq_v" in h else (),
                residual_ids=tuple(h["r_i"]) if rej and "r_i" in h else (),
                residual_probs=tuple(h["r_v"]) if rej and "r_v" in h else (),
            )
        )
    if n == k:
        nan = float("nan")
        rows.append(
            DraftPosition(
                position=start + k,
                draft_token=-1,
                q_draft=nan,
                p_target=nan,
                accept_prob=nan,
                u=nan,
                accepted=False,
                evaluated=True,
                emitted_token=committed[k] if len(committed) > k else -1,
                emitted_kind="bonus",
                top_p_ids=tuple(h["tp_i"][k]),
                top_p_probs=tuple(h["tp_v"][k]),
            )
        )
    return tuple(rows)
