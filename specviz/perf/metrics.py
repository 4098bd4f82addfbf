"""Serving metrics of a generation: latency, throughput, acceptance, draft cost, memory, cost.

Everything is computed from what the engine already records -- a
:class:`~specviz.engine.GenerationResult` (``token_times``, ``accepted_counts``, ...) and its
:class:`~specviz.trace.Trace` (per-step draft and verify times) -- so it costs nothing at
generation time. Tokens/s alone hides what a user feels; the article's list (claim 5) is
time to first token, inter-token latency, completion time, capacity, memory and cost per
token, all here.

Acceptance counts only the *causal prefix*: a draft that happens to equal the target's token
after an earlier rejection in the same step was never used, so it is not "accepted".

>>> import specviz as sv
>>> t, d = sv.toy_pair(5, 2, seed=0)
>>> r = sv.speculative_generate(t, d, [0], gamma=3, max_new_tokens=20, do_sample=True, seed=1)
>>> m = request_metrics(r)
>>> m.new_tokens, m.target_calls == r.target_calls
(20, True)
"""

from __future__ import annotations

import math
import resource
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..core.packed import packed_bytes

__all__ = [
    "LOWER_IS_BETTER",
    "RequestMetrics",
    "AggregateMetrics",
    "MemoryReport",
    "request_metrics",
    "aggregate",
    "percentile",
    "inter_token_latencies",
    "weights_bytes",
    "kv_cache_bytes_per_token",
    "peak_rss_bytes",
    "memory_report",
    "cost_per_token",
    "compute_per_token",
]


#: Metrics where lower is better (latencies); everything else compared is higher-is-better.
LOWER_IS_BETTER = frozenset(
    {
        "ttft_mean",
        "ttft_p50",
        "ttft_p90",
        "ttft_p99",
        "itl_mean",
        "itl_p50",
        "itl_p90",
        "itl_p99",
        "tpot_mean",
        "tpot_p50",
        "tpot_p90",
        "completion_mean",
        "completion_p50",
        "completion_p90",
        "completion_p99",
        "queue_p50",
        "queue_p90",
        "makespan_s",
    }
)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]); NaN for no values.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50)
    2.5
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def inter_token_latencies(token_times: Sequence[float]) -> tuple[float, ...]:
    """Gaps between consecutive tokens (the first token's latency is TTFT, not a gap).

    Tokens committed by one speculative step arrive together: their gaps are 0. That is what
    a streaming client sees, so it is kept -- speculative ITL is bursty by nature.
    """
    return tuple(b - a for a, b in zip(token_times, token_times[1:], strict=False))


@dataclass(frozen=True)
class RequestMetrics:
    """One request's numbers. Times are seconds from the start of generation (prefill
    included in TTFT)."""

    new_tokens: int
    ttft: float
    completion_time: float
    tokens_per_second: float
    itl_mean: float
    itl_p50: float
    itl_p90: float
    itl_p99: float
    target_calls: int
    target_calls_per_token: float
    drafted: int
    accepted: int  # causal prefix only
    acceptance_rate: float  # accepted / drafted (NaN when nothing was drafted)
    mean_accepted_length: float  # new tokens per target call
    draft_time: float
    verify_time: float
    overhead_time: float  # completion_time - draft_time - verify_time
    draft_cost_ratio: float  # c: seconds per drafted token / seconds per target step
    itl: tuple[float, ...] = ()  # the raw gaps, for pooled percentiles


def request_metrics(result: Any, *, target_step_time: float | None = None) -> RequestMetrics:
    """Metrics of one :class:`~specviz.engine.GenerationResult`.

    ``target_step_time`` (seconds of one plain decode step, e.g. from a plain run or
    :func:`specviz.theory.measure_step_times`) makes ``draft_cost_ratio`` the textbook c.
    Without it, the mean verify-call time of this run is the denominator -- a verify pass
    feeds gamma + 1 tokens, so that c is a lower bound.
    """
    n = len(result.new_tokens)
    times = tuple(result.token_times)
    itl = inter_token_latencies(times)
    trace = result.trace
    if trace is not None:
        steps = trace.steps
        drafted = sum(s.drafted for s in steps)
        accepted = sum(s.accepted for s in steps)
        draft_time = sum(s.draft_time for s in steps)
        verify_time = sum(s.verify_time for s in steps)
    else:
        drafted, accepted = sum(result.drafted_counts), sum(result.accepted_counts)
        draft_time = verify_time = math.nan
    calls = result.target_calls
    denom = target_step_time
    if denom is None and calls and not math.isnan(verify_time):
        denom = verify_time / calls
    c = math.nan  # undefined without drafts or without step times (trace=False)
    if drafted and denom and not math.isnan(draft_time):
        c = (draft_time / drafted) / denom
    total = result.total_time
    return RequestMetrics(
        new_tokens=n,
        ttft=result.ttft,
        completion_time=total,
        tokens_per_second=n / total if total > 0 else math.nan,
        itl_mean=sum(itl) / len(itl) if itl else math.nan,
        itl_p50=percentile(itl, 50),
        itl_p90=percentile(itl, 90),
        itl_p99=percentile(itl, 99),
        target_calls=calls,
        target_calls_per_token=calls / n if n else math.nan,
        drafted=drafted,
        accepted=accepted,
        acceptance_rate=accepted / drafted if drafted else math.nan,
        mean_accepted_length=n / calls if calls else math.nan,
        draft_time=draft_time,
        verify_time=verify_time,
        overhead_time=total - draft_time - verify_time,
        draft_cost_ratio=c,
        itl=itl,
    )


@dataclass(frozen=True)
class AggregateMetrics:
    """Many requests: latency percentiles pooled over requests, throughput over the total."""

    requests: int
    new_tokens: int
    ttft_mean: float
    ttft_p50: float
    ttft_p90: float
    ttft_p99: float
    itl_p50: float  # pooled over every gap of every request
    itl_p90: float
    itl_p99: float
    completion_p50: float
    completion_p90: float
    completion_p99: float
    tokens_per_second: float  # total tokens / total generation time (serial requests)
    target_calls_per_token: float
    acceptance_rate: float
    mean_accepted_length: float
    draft_cost_ratio: float  # drafted-token-weighted mean of the requests' c


def aggregate(metrics: Sequence[RequestMetrics]) -> AggregateMetrics:
    """Pool :class:`RequestMetrics` (e.g. one per prompt)."""
    if not metrics:
        raise ValueError("aggregate needs at least one RequestMetrics")
    tok = sum(m.new_tokens for m in metrics)
    calls = sum(m.target_calls for m in metrics)
    drafted = sum(m.drafted for m in metrics)
    accepted = sum(m.accepted for m in metrics)
    gaps = [g for m in metrics for g in m.itl]
    ttfts = [m.ttft for m in metrics]
    comp = [m.completion_time for m in metrics]
    time_total = sum(comp)
    cs = [(m.draft_cost_ratio, m.drafted) for m in metrics if m.drafted]
    c = sum(x * w for x, w in cs) / sum(w for _, w in cs) if cs else math.nan
    return AggregateMetrics(
        requests=len(metrics),
        new_tokens=tok,
        ttft_mean=sum(ttfts) / len(ttfts),
        ttft_p50=percentile(ttfts, 50),
        ttft_p90=percentile(ttfts, 90),
        ttft_p99=percentile(ttfts, 99),
        itl_p50=percentile(gaps, 50),
        itl_p90=percentile(gaps, 90),
        itl_p99=percentile(gaps, 99),
        completion_p50=percentile(comp, 50),
        completion_p90=percentile(comp, 90),
        completion_p99=percentile(comp, 99),
        tokens_per_second=tok / time_total if time_total > 0 else math.nan,
        target_calls_per_token=calls / tok if tok else math.nan,
        acceptance_rate=accepted / drafted if drafted else math.nan,
        mean_accepted_length=tok / calls if calls else math.nan,
        draft_cost_ratio=c,
    )


# -- memory ------------------------------------------------------------------------------


def weights_bytes(model: Any) -> int:
    """Bytes of a model's parameters and buffers as stored (tied weights counted once; a dense
    weight freed after packing counts only its placeholder's element)."""
    if not isinstance(model, torch.nn.Module):
        return 0
    return sum(_storages(model).values())


def _storages(model: torch.nn.Module) -> dict[int, int]:
    """{storage pointer: bytes} of a model's parameters and buffers."""
    out: dict[int, int] = {}
    for t in list(model.parameters()) + list(model.buffers()):
        s = t.untyped_storage()
        out[s.data_ptr()] = s.nbytes()
    return out


def kv_cache_bytes_per_token(config: Any, dtype: torch.dtype | None = None) -> int:
    """Bytes of K and V per token, from a transformers config:
    2 * layers * kv_heads * head_dim * bytes per element.

    >>> from types import SimpleNamespace as NS
    >>> kv_cache_bytes_per_token(NS(num_hidden_layers=16, num_attention_heads=32,
    ...     num_key_value_heads=8, hidden_size=2048), torch.bfloat16)
    32768
    """
    layers = int(config.num_hidden_layers)
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    if dtype is None:
        dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        if not isinstance(dtype, torch.dtype):
            dtype = torch.float32
    elem = torch.empty(0, dtype=dtype).element_size()
    return 2 * layers * kv_heads * int(head_dim) * elem


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


@dataclass(frozen=True)
class MemoryReport:
    target_weights_bytes: int
    draft_weights_bytes: int  # 0 for drafters without weights (n-gram) or shared weights
    target_kv_bytes_per_token: int
    draft_kv_bytes_per_token: int
    context_tokens: int
    kv_bytes_at_context: int  # both caches at ``context_tokens`` (+ gamma draft slots)
    peak_rss_bytes: int
    cuda_peak_bytes: int | None
    packed_weights_bytes: int = 0  # oneDNN copies of the linear weights (use_packed_weights)

    @property
    def total_bytes(self) -> int:
        return (
            self.target_weights_bytes
            + self.draft_weights_bytes
            + self.packed_weights_bytes
            + self.kv_bytes_at_context
        )


def _model_dtype(model: Any) -> torch.dtype:
    try:
        return next(model.parameters()).dtype
    except (AttributeError, StopIteration):
        return torch.float32


def memory_report(
    target: Any, draft: Any = None, *, context_tokens: int = 1024, gamma: int = 0
) -> MemoryReport:
    """Weights, KV-cache and peak memory of a target (and draft model, if any).

    A draft that shares the target's weights (early exit) adds its KV cache but no weights.
    A drafter that runs a module of its own on the target's features (the EAGLE-style head)
    names it ``memory_module`` and may state its KV cache with ``kv_cache_bytes_per_token()``.
    Packed linear weights (:func:`specviz.use_packed_weights`) are a second copy and are
    counted in ``packed_weights_bytes``.
    """
    draft_model = getattr(draft, "memory_module", None) or getattr(draft, "model", draft)
    t_bytes = weights_bytes(target)
    d_bytes = 0
    if isinstance(draft_model, torch.nn.Module):
        t_ptrs = _storages(target)
        d_bytes = sum(n for ptr, n in _storages(draft_model).items() if ptr not in t_ptrs)
    t_kv = kv_cache_bytes_per_token(target.config, _model_dtype(target))
    if callable(getattr(draft, "kv_cache_bytes_per_token", None)):
        d_kv = int(draft.kv_cache_bytes_per_token())
    elif hasattr(draft_model, "config"):
        d_kv = kv_cache_bytes_per_token(draft_model.config, _model_dtype(draft_model))
    else:
        d_kv = 0
    slots = context_tokens + gamma
    cuda_peak = None
    if torch.cuda.is_available():
        cuda_peak = int(torch.cuda.max_memory_allocated())
    return MemoryReport(
        target_weights_bytes=t_bytes,
        draft_weights_bytes=d_bytes,
        target_kv_bytes_per_token=t_kv,
        draft_kv_bytes_per_token=d_kv,
        context_tokens=context_tokens,
        kv_bytes_at_context=slots * (t_kv + d_kv),
        peak_rss_bytes=peak_rss_bytes(),
        cuda_peak_bytes=cuda_peak,
        packed_weights_bytes=packed_bytes(target, draft_model),
    )


# -- cost --------------------------------------------------------------------------------


def compute_per_token(m: RequestMetrics | AggregateMetrics, *, c: float | None = None) -> float:
    """Model compute per generated token, in units of one target decode step:
    (target calls + c * drafted tokens) / tokens. Plain decoding is 1.0; speculation trades
    fewer serial calls for extra draft work (and wider verify passes, which this ignores).
    """
    if isinstance(m, AggregateMetrics):
        raise TypeError("compute_per_token needs per-request metrics (drafted counts)")
    c = m.draft_cost_ratio if c is None else c
    c = 0.0 if math.isnan(c) else c
    return (m.target_calls + c * m.drafted) / m.new_tokens if m.new_tokens else math.nan


def cost_per_token(
    tokens_per_second: float, dollars_per_hour: float, *, concurrency: int = 1
) -> float:
    """Dollars per generated token for a machine rented at ``dollars_per_hour`` serving
    ``concurrency`` streams at ``tokens_per_second`` each.

    >>> round(cost_per_token(20.0, 3.6) * 1e6, 1)  # $/Mtok
    50.0
    """
    if tokens_per_second <= 0 or dollars_per_hour < 0 or concurrency < 1:
        raise ValueError("need tokens_per_second > 0, dollars_per_hour >= 0, concurrency >= 1")
    return dollars_per_hour / 3600.0 / (tokens_per_second * concurrency)
