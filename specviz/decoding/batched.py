"""Batched decoding with ragged acceptance: many sequences, one model call per step.

Each row accepts its own number of drafts. Instead of re-aligning rows, the KV cache keeps
one physical column per fed token and a validity mask: rejected drafts (and the dummy slots
of rows that have less to feed) become *holes* that attention never sees, and every row's
RoPE positions count only its valid tokens. Rollback is clearing mask bits.

Randomness is per row: row ``i`` uses a Generator seeded with ``seed + i`` and consumes it in
exactly the order :func:`specviz.speculative_generate` does, and verification is the very
same per-row verifier code, so row ``i`` reproduces the serial run with ``seed=seed + i``
(up to floating-point differences between batched and single-row matmuls) and is lossless
by construction. The batch buys speed where it matters -- the model forward passes.

Rows share one prompt (what sampling-based consistency checks need: it is prefilled once and
its KV cache copied to every row) or each row brings its own (a list of prompts, as a server
batches requests; shorter prompts simply leave holes). Every row runs until
``max_new_tokens`` or its EOS, and a finished row leaves the batch, so stragglers do not
drag the finished rows through every remaining model call.

Both functions are the decoding core (:mod:`specviz.decoding.step`) over a masked batch
cache: the same checks, step and records as the serial engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..core.sampling import SamplingParams, sampling_params
from ..core.trace import Trace
from .resolve import resolve
from .results import BatchResult
from .state import Row
from .step import Decoder

__all__ = ["BatchResult", "autoregressive_generate_batch", "speculative_generate_batch"]


def _result(rows: list[Row], decoder: Decoder, total: float, *, record: bool, plain: bool,
            traces: list[Trace] | None) -> BatchResult:  # fmt: skip
    return BatchResult(
        [list(r.tokens) for r in rows],
        [() if plain else tuple(s.accepted for s in r.steps) for r in rows],
        [() if plain else tuple(s.drafted for s in r.steps) for r in rows],
        decoder.calls,
        total,
        [r.seed for r in rows],
        [list(r.probs) for r in rows] if record else None,
        [list(r.above) for r in rows] if record else None,
        [list(r.times) for r in rows],
        traces,
        decoder.draft_seconds,
        decoder.verify_seconds,
        decoder.prefill_seconds,
    )


def autoregressive_generate_batch(
    target: Any,
    input_ids: Any,
    *,
    num_sequences: int | None = None,
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | torch.Generator | None = 0,
    eos_token_id: int | Sequence[int] | None = None,
    record: bool = False,
    params: SamplingParams | None = None,
) -> BatchResult:
    """Standard sampling, batched: ``num_sequences`` samples of one prompt, or one row per
    prompt when ``input_ids`` is a list of prompts. Row i == serial run with seed+i.

    ``model_calls`` counts batched forward passes; their rows are distinct prefixes only.
    ``params`` (a :class:`~specviz.SamplingParams`) may replace the four sampling keywords."""
    params = sampling_params(params, do_sample, temperature, top_k, top_p)
    r = resolve(target, input_ids, params=params, max_new_tokens=max_new_tokens, seed=seed,
                eos_token_id=eos_token_id, batched=True, num_sequences=num_sequences)  # fmt: skip
    decoder = r.decoder(plain=True, record=record)
    total = decoder.run()
    return _result(r.rows, decoder, total, record=record, plain=True, traces=None)


def speculative_generate_batch(
    target: Any,
    draft: Any,
    input_ids: Any,
    *,
    num_sequences: int | None = None,
    gamma: Any = 4,
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | torch.Generator | None = 0,
    eos_token_id: int | Sequence[int] | None = None,
    verifier: str = "lossless",
    record: bool = False,
    trace: bool = False,
    params: SamplingParams | None = None,
) -> BatchResult:
    """Speculative sampling, batched: ``num_sequences`` samples of one prompt, or one row per
    prompt when ``input_ids`` is a list of prompts.

    ``draft`` is a causal LM (or a :class:`~specviz.drafting.ModelDrafter` /
    :class:`~specviz.drafting.EarlyExitDrafter`: drafted batched, token by token, over the
    rows) or any other :class:`~specviz.drafting.Drafter` (prompt lookup, suffix matching, the
    EAGLE-style head: one drafter per group of identical rows, forked when rows diverge). Row
    i reproduces ``speculative_generate(..., seed=seed + i)`` on its prompt (session-memory
    drafters excepted: rows of a batch share a suffix drafter's memory).

    ``gamma`` is an int or a policy of :mod:`specviz.drafting.policies`, which here steers the
    whole batch: before each target call ``next_gamma()`` picks the drafts every row makes (0 =
    a plain decoding step for all rows; the draft then skips the call and catches up on the
    skipped tokens when drafting resumes), and ``observe_batch()`` tells it the rows in the call
    (:class:`~specviz.drafting.policies.AcceptanceEMA`'s ``max_batch`` fallback).
    ``update()`` gets the rows' mean drafted and accepted counts per call (accepted == drafted
    only when every row accepted everything).
    :class:`~specviz.drafting.policies.ConfidenceStop` stops each row's draft where its own
    draft confidence drops. Policies choose how much is drafted, never how it is verified, so
    every row stays lossless; a one-row batch reproduces the serial engine with the same
    policy. ``trace=True`` keeps every row's trace (``BatchResult.traces``). ``params`` (a
    :class:`~specviz.SamplingParams`) may replace the four sampling keywords.
    """
    params = sampling_params(params, do_sample, temperature, top_k, top_p)
    r = resolve(target, input_ids, params=params, max_new_tokens=max_new_tokens, seed=seed,
                eos_token_id=eos_token_id, draft=draft, gamma=gamma, verifier=verifier,
                batched=True, num_sequences=num_sequences)  # fmt: skip
    decoder = r.decoder(trace=trace, record=record)
    total = decoder.run()
    traces = None
    if trace:
        meta = {"kind": "speculative", "params": params.__dict__, "verifier": r.spec.name,
                "drafter": r.source.name, "vocab_size": decoder.vocab}  # fmt: skip
        traces = [
            Trace(tuple(row.steps), {**meta, "seed": row.seed, "prompt_length": row.prompt.numel()})
            for row in r.rows
        ]
    return _result(r.rows, decoder, total, record=record, plain=False, traces=traces)
