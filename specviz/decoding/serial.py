"""The decoding loops for one sequence: plain autoregressive sampling and speculative decoding.

One speculative step (batch size 1)::

    draft   k tokens x_1..x_k with their q_draft            (drafter, own KV cache)
    verify  one target call on [pending, x_1..x_k]  -> p_target [k+1, V]
    decide  accept a prefix, then a corrected or bonus token (verifier)
    commit  crop both caches to the kept prefix (rollback is a crop, no recompute)

Both functions are the decoding core (:mod:`specviz.decoding.step`) on a batch of one: a
single-sequence runner (whose rollback is a crop, and which can be a static, compiled cache)
behind the same step, checks and records as the batched engine. They thread one
``torch.Generator`` (from ``seed``) through every random draw and process logits with the
same :class:`~specviz.core.sampling.SamplingParams`. The serial driver keeps its own runner
rather than a one-row masked batch cache because it is faster for one sequence (no attention
mask to build per call, a static cache and ``torch.compile`` possible).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..core.sampling import SamplingParams, sampling_params
from ..core.trace import Trace
from .inputs import _is_int
from .records import TOP_K_TRACE
from .resolve import resolve
from .results import GenerationResult
from .state import Row

__all__ = ["TOP_K_TRACE", "GenerationResult", "autoregressive_generate", "speculative_generate"]


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
    params: SamplingParams | None = None,
) -> GenerationResult:
    """Standard decoding: one target call per token. The baseline for everything else.

    ``params`` (a :class:`~specviz.SamplingParams`) may replace the four sampling keywords."""
    params = sampling_params(params, do_sample, temperature, top_k, top_p)
    r = resolve(target, input_ids, params=params, max_new_tokens=max_new_tokens, seed=seed,
                eos_token_id=eos_token_id)  # fmt: skip
    total = r.decoder(plain=True).run()
    row = r.rows[0]
    meta = {
        "kind": "autoregressive",
        "params": params.__dict__,
        "seed": row.seed,
        "prompt_length": row.prompt.numel(),
    }
    return _result(row, Trace(tuple(row.steps), meta), total, plain=True)


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
    params: SamplingParams | None = None,
) -> GenerationResult:
    """Speculative decoding of ``target`` with ``draft`` (a causal LM or a drafter object).

    ``verifier="lossless"`` keeps the target's output law exactly (greedy matching when
    ``do_sample=False``); the other names are the deliberately broken rules of
    :data:`specviz.verification.VERIFIERS` (and ``"synthetic"``, the lossy benchmark-only rule
    of :mod:`specviz.verification.synthetic`).

    ``gamma`` is a fixed number of drafts per target call, or a policy object from
    :mod:`specviz.drafting.policies` (``next_gamma()`` before each call, 0 meaning a plain
    decoding step; ``update(...)`` after it). Policies choose how many tokens are drafted,
    never how they are verified, so the output law is unchanged.

    ``params`` (a :class:`~specviz.SamplingParams`) may replace the four sampling keywords; a
    keyword set away from its default must then agree with it.
    """
    params = sampling_params(params, do_sample, temperature, top_k, top_p)
    r = resolve(target, input_ids, params=params, max_new_tokens=max_new_tokens, seed=seed,
                eos_token_id=eos_token_id, draft=draft, gamma=gamma, verifier=verifier)  # fmt: skip
    decoder = r.decoder(trace=trace)
    total = decoder.run()
    row, tr = r.rows[0], None
    if trace:
        meta = {
            "kind": "speculative",
            "gamma": gamma if _is_int(gamma) else r.policy.max_gamma,
            "gamma_policy": None if _is_int(gamma) else r.policy.name,
            "params": params.__dict__,
            "verifier": r.spec.name,
            "drafter": r.source.name,
            "seed": row.seed,
            "prompt_length": row.prompt.numel(),
            "vocab_size": decoder.vocab if row.steps else None,
        }
        tr = Trace(tuple(row.steps), meta)
    return _result(row, tr, total, plain=False)


def _result(row: Row, tr: Trace | None, total: float, *, plain: bool) -> GenerationResult:
    return GenerationResult(
        list(row.tokens),
        tr,
        row.prompt.numel(),
        len(row.steps),
        () if plain else tuple(s.accepted for s in row.steps),
        () if plain else tuple(s.drafted for s in row.steps),
        tuple(row.times),
        total,
        row.seed,
    )
