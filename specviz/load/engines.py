"""Engines a load run serves with: one batched model call per step, speculative or plain."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core.sampling import SamplingParams
from ..decoding.inputs import check_seed, eos_set
from ..drafting.policies import as_policy
from ..verification.base import get_verifier
from .workload import _check_int

__all__ = ["ServedBatch", "BatchEngine", "make_engine", "fixed_engine"]


# -- engines -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServedBatch:
    """What one batch run of the engine measured. Times are seconds since the call started."""

    new_tokens: tuple[tuple[int, ...], ...]  # per row
    token_times: tuple[tuple[float, ...], ...]  # per row, one per new token
    service_time: float  # wall time of the whole call (the server is busy this long)
    target_calls: int = 0  # batched target calls
    accepted: int = 0  # drafted tokens accepted (causal prefix), all rows
    drafted: int = 0
    row_calls: int = 0  # target calls counted per row (a call on 4 rows counts 4)
    # seconds of the decoding steps spent drafting and in the target's verify call (the
    # engine's own split; prefill and rollback are in neither)
    draft_time: float = 0.0
    verify_time: float = 0.0
    # seconds of the engine's start before its first step (the prompts' prefill, target and
    # draft), measured on the same clock as the token times, which include it
    prefill_seconds: float = 0.0

    @property
    def prefill_time(self) -> float:
        """Time to the batch's first token: the prompts' prefill + the first decode step."""
        firsts = [t[0] for t in self.token_times if t]
        return min(firsts) if firsts else self.service_time

    def __post_init__(self) -> None:
        if len(self.new_tokens) != len(self.token_times):
            raise ValueError("new_tokens and token_times must have one entry per row")
        for i, (toks, times) in enumerate(zip(self.new_tokens, self.token_times, strict=True)):
            if len(toks) != len(times):
                raise ValueError(
                    f"row {i}: {len(toks)} tokens but {len(times)} token times; the engine "
                    "must time every token"
                )


class BatchEngine(Protocol):
    """Runs one batch of prompts to completion. ``name`` identifies its configuration."""

    name: str
    speculative: bool

    def __call__(self, prompts: Sequence[Sequence[int]]) -> ServedBatch: ...


@dataclass(frozen=True)
class _ModelEngine:
    target: Any = field(repr=False)
    draft: Any = field(repr=False)
    speculative: bool
    kwargs: Mapping[str, Any] = field(repr=False)
    gamma: Any  # an int, or a policy of specviz.policies steering each batch
    name: str

    def config_key(self, prompts: Sequence[Sequence[int]]) -> str:
        """The configuration this batch really runs, for reusing a measurement: a
        :class:`~specviz.drafting.policies.BatchFallback` engine whose threshold the batch's
        distinct prompts never exceed runs its constant gamma, step for step (same drafts,
        same tokens), so it shares that engine's key; anything else is its own."""
        from ..drafting.policies import BatchFallback

        pol = self.gamma
        name = self.name
        if isinstance(pol, BatchFallback) and len({tuple(p) for p in prompts}) <= pol.max_batch:
            name = _engine_name(True, pol.gamma, self.kwargs.get("verifier", "lossless"))
        settings = ", ".join(f"{k}={v!r}" for k, v in sorted(self.kwargs.items()))
        # the same model objects too (a key lives only as long as one sweep's cache)
        return f"{name} [{settings}; models {id(self.target)}, {id(self.draft)}]"

    def __call__(self, prompts: Sequence[Sequence[int]]) -> ServedBatch:
        from ..decoding.batched import autoregressive_generate_batch, speculative_generate_batch

        ids = [list(p) for p in prompts]
        seed = _batch_seed(self.kwargs["seed"], ids)
        kw = {**self.kwargs, "seed": seed}
        t0 = time.perf_counter()
        if self.speculative:
            res = speculative_generate_batch(self.target, self.draft, ids, gamma=self.gamma, **kw)
        else:
            res = autoregressive_generate_batch(self.target, ids, **kw)
        wall = time.perf_counter() - t0
        times = getattr(res, "token_times", None)
        if times is None:
            raise RuntimeError(
                "this specviz.batch does not report per-token times (BatchResult.token_times); "
                "the load generator needs them"
            )
        if self.speculative:  # one verify call per step each row took part in
            row_calls = sum(len(a) for a in res.accepted_counts)
        else:  # one call per token
            row_calls = sum(len(s) for s in res.sequences)
        return ServedBatch(
            tuple(tuple(s) for s in res.sequences),
            tuple(tuple(float(t) for t in row) for row in times),
            wall,
            res.model_calls,
            sum(sum(a) for a in res.accepted_counts),
            sum(sum(d) for d in res.drafted_counts),
            row_calls,
            float(getattr(res, "draft_seconds", 0.0)),
            float(getattr(res, "verify_seconds", 0.0)),
            float(getattr(res, "prefill_seconds", 0.0)),
        )


def _batch_seed(seed: int, prompts: Sequence[Sequence[int]]) -> int:
    """The seed of one batch: ``seed`` plus a hash of its prompts. Without it every batch
    would replay the same per-row random streams (row i is seeded ``seed + i``), so e.g.
    every request served alone would draw the very same uniforms. The same batch always
    gets the same seed, which keeps reused measurements valid."""
    import zlib

    blob = ",".join(" ".join(map(str, p)) for p in prompts).encode()
    return int(seed) + zlib.crc32(blob) % 1_000_003


def make_engine(
    target: Any,
    draft: Any = None,
    *,
    speculative: bool,
    max_new_tokens: int,
    gamma: Any = 4,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    eos_token_id: int | Sequence[int] | None = None,
    verifier: str = "lossless",
) -> BatchEngine:
    """The batched engine with speculation on (``draft`` required: a causal LM, e.g.
    ``specviz.drafters.early_exit_model(target, 20)``) or off.

    ``gamma`` is an int or a policy of :mod:`specviz.policies`; a policy steers every
    batch (started afresh per batch), e.g. ``AcceptanceEMA(max_batch=4)`` decodes plainly
    whenever more than 4 rows share a model call.

    Each batch is seeded with ``seed`` plus a hash of its prompts, and row ``i`` of it with
    that + ``i`` (the batch API's convention): a request's random stream depends on its
    batch and row, not on its identity alone.
    """
    # the decoding core's own checks, run now: a bad setting fails before any request
    _check_int("max_new_tokens", max_new_tokens, 1)
    params = SamplingParams(do_sample, temperature, top_k, top_p)
    as_policy(gamma)  # a bad gamma fails here, before any request
    eos_set(eos_token_id)
    check_seed(seed)
    if speculative:
        if draft is None:
            raise ValueError("speculative=True needs a draft model")
        get_verifier(verifier, greedy=params.is_greedy)
    kw: dict[str, Any] = dict(
        max_new_tokens=max_new_tokens,
        do_sample=do_sample,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        eos_token_id=eos_token_id,
    )
    if speculative:
        kw["verifier"] = verifier
    return _ModelEngine(
        target, draft, speculative, kw, gamma, _engine_name(speculative, gamma, verifier)
    )


def _engine_name(speculative: bool, gamma: Any, verifier: str) -> str:
    if not speculative:
        return "plain"
    tag = "" if verifier == "lossless" else f", {verifier}"
    label = f"gamma={gamma}" if isinstance(gamma, int) else as_policy(gamma).name
    return f"speculative({label}{tag})"


@dataclass(frozen=True)
class _FixedEngine:
    tokens: int
    step_time: float
    prefill_time: float
    per_row_time: float
    name: str
    speculative: bool = False

    def __call__(self, prompts: Sequence[Sequence[int]]) -> ServedBatch:
        step = self.step_time + self.per_row_time * len(prompts)
        times = tuple(self.prefill_time + step * (j + 1) for j in range(self.tokens))
        return ServedBatch(
            tuple(tuple(range(self.tokens)) for _ in prompts),
            tuple(times for _ in prompts),
            times[-1],
            self.tokens,
            row_calls=self.tokens * len(prompts),
            prefill_seconds=self.prefill_time,
        )


def fixed_engine(
    *,
    tokens: int,
    step_time: float,
    prefill_time: float = 0.0,
    per_row_time: float = 0.0,
    name: str = "fixed",
    speculative: bool = False,
) -> BatchEngine:
    """A fake engine with a known timing model, for tests and for explaining the simulator:
    every row emits ``tokens`` tokens, one per step of ``step_time + per_row_time * rows``
    seconds after ``prefill_time``. Nothing is computed and nothing sleeps."""
    _check_int("tokens", tokens, 1)
    for nm, v in (("step_time", step_time), ("prefill_time", prefill_time)):
        if not v >= 0:
            raise ValueError(f"{nm} must be >= 0, got {v!r}")
    return _FixedEngine(tokens, step_time, prefill_time, per_row_time, name, speculative)
