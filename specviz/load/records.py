"""What a load run records: per request, per batch, and the result with its metrics."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..perf.metrics import percentile

__all__ = ["RequestRecord", "BatchRecord", "LoadResult"]


# -- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestRecord:
    """One served request. All times are on the virtual clock (seconds since the first
    arrival of the run was possible, i.e. t = 0)."""

    request_id: int
    prompt_id: str
    category: str
    client: int | None
    arrival: float
    start: float  # when its batch started (queueing = start - arrival)
    token_times: tuple[float, ...]  # absolute virtual times of its tokens
    batch: int
    batch_size: int
    tokens: tuple[int, ...] = field(default=(), repr=False)  # what it generated

    @property
    def new_tokens(self) -> int:
        return len(self.token_times)

    @property
    def queue_time(self) -> float:
        return self.start - self.arrival

    @property
    def ttft(self) -> float:
        """Arrival to first token: queueing + (shared) prefill + first decode step."""
        return self.token_times[0] - self.arrival if self.token_times else math.nan

    @property
    def finish(self) -> float:
        return self.token_times[-1] if self.token_times else self.start

    @property
    def completion_time(self) -> float:
        return self.finish - self.arrival

    @property
    def itl(self) -> tuple[float, ...]:
        """Gaps between consecutive tokens as a streaming client sees them; tokens that one
        speculative step commits together have gap 0 (speculative streams are bursty)."""
        t = self.token_times
        return tuple(b - a for a, b in zip(t, t[1:], strict=False))

    @property
    def tpot(self) -> float:
        """Time per output token after the first: (finish - first token) / (tokens - 1)."""
        n = len(self.token_times)
        return (self.token_times[-1] - self.token_times[0]) / (n - 1) if n > 1 else math.nan


@dataclass(frozen=True)
class BatchRecord:
    index: int
    start: float  # virtual
    service_time: float  # measured (or reused from an identical earlier batch)
    request_ids: tuple[int, ...]
    target_calls: int
    accepted: int
    drafted: int
    kv_tokens: int  # prompt + generated tokens of all rows at the end (logical KV tokens)
    row_calls: int = 0
    reused: bool = False  # service measured once for this exact batch and reused
    prefill_seconds: float = 0.0  # measured prompt prefill at the start of the service

    @property
    def size(self) -> int:
        return len(self.request_ids)


def _side_by_side(columns: dict[str, Any]) -> Any:
    """Columns (Series sharing an index) side by side."""
    import pandas as pd

    return pd.DataFrame(columns)


def _pct(xs: Sequence[float], q: float) -> float:
    return percentile([x for x in xs if not math.isnan(x)], q)


def _mean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return sum(xs) / len(xs) if xs else math.nan


@dataclass(frozen=True)
class LoadResult:
    """One load level of one engine: every request and every batch, plus a summary."""

    engine: str
    speculative: bool
    scenario: str  # "rate" (open loop, Poisson) or "concurrency" (closed loop)
    level: float  # requests/s or number of clients
    max_batch: int
    requests: tuple[RequestRecord, ...]
    batches: tuple[BatchRecord, ...]
    repeat: int = 0  # which repeat of a sweep's level this run was

    def summary(self) -> dict[str, Any]:
        """One tidy row: latency percentiles, throughput, utilisation, acceptance.

        ``throughput_tok_s`` is all generated tokens over the span from the first arrival to
        the end of the run (the last token, or the end of the last batch's service if that is
        later: what the server delivered at this load); ``utilization`` is the share of that
        span the server was busy (1.0 = saturated: the load exceeds capacity). Token times
        include the prompts' prefill, so the busy time of one server never exceeds the span.
        """
        reqs = self.requests
        t0 = min(r.arrival for r in reqs)
        t1 = max(max(r.finish for r in reqs), max(b.start + b.service_time for b in self.batches))
        span = t1 - t0
        busy = sum(b.service_time for b in self.batches)
        tokens = sum(r.new_tokens for r in reqs)
        gaps = [g for r in reqs for g in r.itl]
        ttft = [r.ttft for r in reqs]
        comp = [r.completion_time for r in reqs]
        tpot = [r.tpot for r in reqs]
        queue = [r.queue_time for r in reqs]
        calls = sum(b.target_calls for b in self.batches)
        row_calls = sum(b.row_calls for b in self.batches)
        drafted = sum(b.drafted for b in self.batches)
        return {
            "engine": self.engine,
            "mode": "speculative" if self.speculative else "plain",
            "scenario": self.scenario,
            "level": self.level,
            "max_batch": self.max_batch,
            "requests": len(reqs),
            "new_tokens": tokens,
            "batches": len(self.batches),
            "mean_batch_size": len(reqs) / len(self.batches),
            "makespan_s": span,
            "busy_s": busy,
            "utilization": busy / span if span > 0 else math.nan,
            "throughput_tok_s": tokens / span if span > 0 else math.nan,
            "requests_per_s": len(reqs) / span if span > 0 else math.nan,
            "ttft_mean": _mean(ttft),
            "ttft_p50": _pct(ttft, 50),
            "ttft_p90": _pct(ttft, 90),
            "ttft_p99": _pct(ttft, 99),
            "itl_mean": _mean(gaps),
            "itl_p50": _pct(gaps, 50),
            "itl_p90": _pct(gaps, 90),
            "itl_p99": _pct(gaps, 99),
            "tpot_mean": _mean(tpot),
            "tpot_p50": _pct(tpot, 50),
            "tpot_p90": _pct(tpot, 90),
            "completion_mean": _mean(comp),
            "completion_p50": _pct(comp, 50),
            "completion_p90": _pct(comp, 90),
            "completion_p99": _pct(comp, 99),
            "queue_p50": _pct(queue, 50),
            "queue_p90": _pct(queue, 90),
            "target_calls": calls,
            "tokens_per_target_call": tokens / row_calls if row_calls else math.nan,
            "acceptance_rate": (
                sum(b.accepted for b in self.batches) / drafted if drafted else math.nan
            ),
            "kv_tokens_peak": max(b.kv_tokens for b in self.batches),
            "reused_batches": sum(b.reused for b in self.batches),
        }

    def accounting(self) -> dict[str, float]:
        """The checks the load accounting must pass: ``utilization`` (<= 1: one server is
        never busier than its span) and ``ttft_margin``, the smallest TTFT minus (queueing +
        its batch's measured prefill) over the requests (>= 0: no first token before the
        prompts were prefilled)."""
        prefill = {b.index: b.prefill_seconds for b in self.batches}
        margins = [r.ttft - r.queue_time - prefill[r.batch] for r in self.requests if r.token_times]
        return {
            "utilization": float(self.summary()["utilization"]),
            "ttft_margin": min(margins) if margins else math.nan,
        }

    def to_dataframe(self) -> Any:
        """One row per request (times in seconds, virtual clock)."""
        import pandas as pd

        return pd.DataFrame(
            [
                dict(
                    request_id=r.request_id,
                    prompt_id=r.prompt_id,
                    category=r.category,
                    client=r.client,
                    arrival=r.arrival,
                    start=r.start,
                    first_token=r.token_times[0] if r.token_times else math.nan,
                    finish=r.finish,
                    queue_time=r.queue_time,
                    ttft=r.ttft,
                    tpot=r.tpot,
                    completion_time=r.completion_time,
                    new_tokens=r.new_tokens,
                    batch=r.batch,
                    batch_size=r.batch_size,
                )
                for r in self.requests
            ]
        )
