"""What a generation returns: :class:`GenerationResult` (one sequence) and
:class:`BatchResult` (many). Both are built from the same per-row step records."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.trace import Trace, TraceSummary

__all__ = ["BatchResult", "GenerationResult"]


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


@dataclass(frozen=True)
class BatchResult:
    sequences: list[list[int]]  # new tokens of each row
    accepted_counts: list[tuple[int, ...]]  # per row, per step it took part in
    drafted_counts: list[tuple[int, ...]]
    model_calls: int  # batched target calls
    total_time: float
    seeds: list[int]
    # With record=True: for every emitted token, the target's (processed) probability of it
    # and the probability mass ranked above it -- enough for log-probabilities and the
    # randomized PIT without a second teacher-forcing pass.
    token_probs: list[list[float]] | None = None
    mass_above: list[list[float]] | None = None
    # Seconds since the call started (before the prompts' prefill) at which each new token of
    # each row was committed (all tokens accepted in one verification share its time): TTFT
    # (prefill included) and inter-token latency.
    token_times: list[list[float]] | None = None
    # With trace=True: each row's trace (the same record the serial engine returns).
    traces: list[Trace] | None = None
    # Seconds of the decoding steps spent drafting (policy + drafter, before the target call)
    # and verifying (the target call and the accept/reject rule), summed over the steps; the
    # rest of ``total_time`` is prefill, rollback and the drafter's catching up on the target.
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    # Seconds of the start before the first step (the prompts' prefill, target and draft);
    # ``token_times`` and ``total_time`` count from the start of it.
    prefill_seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        n = sum(len(s) for s in self.sequences)
        return n / self.total_time if self.total_time > 0 else float("nan")
