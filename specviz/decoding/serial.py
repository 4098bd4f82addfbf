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

from ..core.runners import as_runner, vocab_size_of
from ..core.sampling import SamplingParams
from ..core.trace import Trace
from ..drafting.base import Drafter
from ..drafting.model import ConfidenceStopDrafter, as_drafter
from ..drafting.policies import ConstantGamma, GammaPolicy, as_policy
from ..verification.base import get_verifier
from .drafts import DrafterGroups, DraftSource
from .inputs import (
    _is_int,
    check_count,
    check_models,
    check_positions,
    check_vocab,
    eos_set,
    generator,
    prompt_tensor,
)
from .records import TOP_K_TRACE
from .results import GenerationResult
from .state import Row
from .step import Decoder
from .targets import BatchTarget, SingleTarget

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
) -> GenerationResult:
    """Standard decoding: one target call per token. The baseline for everything else."""
    params = SamplingParams(do_sample, temperature, top_k, top_p)
    max_new_tokens = check_count("max_new_tokens", max_new_tokens, 0)
    check_models(target)
    vocab = vocab_size_of(target)
    prompt = prompt_tensor(input_ids, vocab)
    check_positions(target, prompt.numel(), max_new_tokens)
    eos = eos_set(eos_token_id, vocab)
    runner = as_runner(target)
    gen, seed = generator(seed, runner.device)
    row = Row(0, gen, seed, prompt, max_new_tokens)
    decoder = Decoder(
        SingleTarget(runner),
        DraftSource(),
        [row],
        params=params,
        spec=get_verifier("lossless", greedy=params.is_greedy),
        policy=ConstantGamma(0),
        eos=eos,
        plain=True,
        vocab=vocab,
    )
    total = decoder.run()
    meta = {
        "kind": "autoregressive",
        "params": params.__dict__,
        "seed": seed,
        "prompt_length": prompt.numel(),
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
    """
    params = SamplingParams(do_sample, temperature, top_k, top_p)
    policy = as_policy(gamma)
    max_new_tokens = check_count("max_new_tokens", max_new_tokens, 0)
    check_models(target)
    vocab = vocab_size_of(target)
    prompt = prompt_tensor(input_ids, vocab)
    check_positions(target, prompt.numel(), max_new_tokens)
    eos = eos_set(eos_token_id, vocab)
    spec = get_verifier(verifier, greedy=params.is_greedy)
    drafter = policy_drafter(as_drafter(draft, mode=spec.draft_mode), policy)
    check_vocab(vocab, drafter)
    check_models(target, drafter, prompt.numel(), max_new_tokens)
    runner = as_runner(target)
    gen, seed = generator(seed, runner.device)
    row = Row(0, gen, seed, prompt, max_new_tokens)
    # token trees are verified with tree attention on the masked cache (a batch of one)
    rows_target = BatchTarget(target) if drafter.proposes_trees else SingleTarget(runner)
    decoder = Decoder(
        rows_target,
        DrafterGroups(drafter),
        [row],
        params=params,
        spec=spec,
        policy=policy,
        eos=eos,
        trace=trace,
        vocab=vocab,
    )
    total = decoder.run()
    tr = None
    if trace:
        meta = {
            "kind": "speculative",
            "gamma": gamma if _is_int(gamma) else policy.max_gamma,
            "gamma_policy": None if _is_int(gamma) else policy.name,
            "params": params.__dict__,
            "verifier": spec.name,
            "drafter": drafter.name,
            "seed": seed,
            "prompt_length": prompt.numel(),
            "vocab_size": decoder.vocab if row.steps else None,
        }
        tr = Trace(tuple(row.steps), meta)
    return _result(row, tr, total, plain=False)


def policy_drafter(drafter: Drafter, policy: GammaPolicy) -> Drafter:
    """The drafter a policy asks for: a confidence stop wraps a model drafter."""
    stop = policy.draft_stop()
    if stop is None:
        return drafter
    return ConfidenceStopDrafter(drafter, stop.threshold, stop.min_tokens)


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
