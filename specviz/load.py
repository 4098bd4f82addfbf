"""Serving under load: requests arrive, queue, and are batched into the engine.

A load generator for the question of claim 4 -- *does speculation still pay when the server
is busy?* -- answered by measurement. Requests (prompts of ``data/prompts.jsonl``) arrive
either as a seeded Poisson process at a given rate (open loop) or from a fixed number of
clients that each send their next request as soon as the previous one is answered (closed
loop, "concurrency"). A single server takes up to ``max_batch`` waiting requests, runs them
as one batch through :func:`specviz.speculative_generate_batch` (speculation on) or
:func:`specviz.autoregressive_generate_batch` (off), and records for every request the time
to first token (queueing included), the inter-token gaps and the completion time.

**Two clocks, kept apart.** What the engine does is *measured*: every batch really runs, and
its service time and each row's token times are wall-clock readings (``perf_counter``).
Arrivals, the queue and the server clock are *virtual*: the server clock advances by the
measured service time of each batch and jumps over idle gaps straight to the next arrival,
so a sweep never sleeps. Because one server runs one batch at a time, a batch's service time
does not depend on when it started, and splicing measured service times into a simulated
timeline gives the latencies a real single-stream server would see -- except for the cost of
the bookkeeping itself and for interference from other processes on the machine.

**Scheduling is static batching.** A batch is formed from the requests waiting when the
server becomes free; finished rows leave the batch (the engine compacts them away) but new
requests cannot join a running batch: they wait for the whole batch to finish. Production
servers (vLLM, TGI, SGLang) use *continuous* batching, which admits requests at every step;
static batching gives longer queueing delays at medium load and so overstates TTFT there.
Both schedulers share the effect this module measures: at a large batch each model call is
already compute-bound, so the extra draft work and the wider verify pass of speculation stop
being free.

Common random numbers: every load level of a sweep uses the same unit-rate arrival gaps
(scaled by 1/rate) and the same prompt order, and both modes see the identical workload, so
differences between levels and modes are not sampling noise of the workload.

>>> from specviz.load import fixed_engine, serve
>>> eng = fixed_engine(tokens=4, step_time=0.25)  # a fake engine: 4 tokens, 0.25 s apart
>>> res = serve(eng, [[1, 2, 3]], concurrency=2, n_requests=4, max_batch=2, progress=False)
>>> [round(r.ttft, 2) for r in res.requests]
[0.25, 0.25, 0.25, 0.25]
>>> round(res.summary()["throughput_tok_s"], 2)
8.0
"""

from __future__ import annotations

import heapq
import math
import statistics
import time
import warnings
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from .metrics import percentile

__all__ = [
    "BatchEngine",
    "BatchRecord",
    "Crossover",
    "LoadPrompt",
    "LoadResult",
    "LoadSweep",
    "Request",
    "RequestRecord",
    "ServedBatch",
    "batch_sweep",
    "find_crossover",
    "fixed_engine",
    "load_prompts_for",
    "load_sweep",
    "mixed_prompts",
    "make_engine",
    "poisson_arrivals",
    "serve",
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


# -- workload ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadPrompt:
    """A prompt ready for the engine: token ids plus the labels results are split by."""

    input_ids: tuple[int, ...]
    prompt_id: str = ""
    category: str = ""

    def __post_init__(self) -> None:
        if not self.input_ids:
            raise ValueError(f"prompt {self.prompt_id!r} has no tokens")


def load_prompts_for(tokenizer: Any, prompts: Sequence[Any]) -> list[LoadPrompt]:
    """Render :class:`~specviz.prompts.Prompt` objects (or strings) with the chat template.

    >>> from specviz.prompts import load_prompts
    >>> class Tok:  # no chat template: contents are joined and encoded
    ...     def encode(self, text): return [len(w) for w in text.split()]
    >>> lp = load_prompts_for(Tok(), load_prompts(categories="structured", per_category=1))
    >>> lp[0].category
    'structured'
    """
    from .prompts import render_prompt

    out = []
    for i, p in enumerate(prompts):
        ids = tuple(render_prompt(tokenizer, p))
        out.append(LoadPrompt(ids, getattr(p, "id", f"p{i}"), getattr(p, "category", "")))
    return out


def mixed_prompts(
    tokenizer: Any, n: int, *, categories: Sequence[str] | None = None, path: Any = None
) -> list[LoadPrompt]:
    """``n`` distinct prompts of the prompt set, round-robin over the categories (so any
    prefix of the list mixes tasks), rendered with the chat template.

    Distinct prompts matter: rows with identical tokens can share work in a batched engine,
    which would flatter whichever mode exploits it.

    >>> class Tok:
    ...     def encode(self, text): return [len(w) for w in text.split()]
    >>> [p.category for p in mixed_prompts(Tok(), 3)]
    ['chat_writing', 'translation', 'summarization']
    """
    from .prompts import load_prompts

    n = _check_int("n", n, 1)
    pool = load_prompts(path, categories=list(categories) if categories else None)
    by_cat: dict[str, list[Any]] = {}
    for p in pool:
        by_cat.setdefault(p.category, []).append(p)
    order = [p for rank in range(max(map(len, by_cat.values()))) for ps in by_cat.values()
             if rank < len(ps) for p in [ps[rank]]]  # fmt: skip
    if n > len(order):
        raise ValueError(f"asked for {n} distinct prompts, the prompt set has {len(order)}")
    return load_prompts_for(tokenizer, order[:n])


def _as_load_prompts(prompts: Sequence[Any]) -> list[LoadPrompt]:
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence) or not prompts:
        raise ValueError("prompts must be a non-empty list of LoadPrompt or token-id lists")
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, LoadPrompt):
            out.append(p)
        elif isinstance(p, Sequence) and not isinstance(p, (str, bytes)):
            if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in p):
                raise ValueError(f"prompt {i} must contain non-negative integer token ids")
            out.append(LoadPrompt(tuple(p), f"p{i}", ""))
        else:
            raise TypeError(
                f"prompt {i} is a {type(p).__name__}; pass LoadPrompt or token ids "
                "(render Prompt objects with load_prompts_for(tokenizer, prompts))"
            )
    return out


@dataclass(frozen=True)
class Request:
    id: int
    arrival: float  # virtual seconds
    prompt: LoadPrompt = field(repr=False)
    client: int | None = None  # closed loop: which client sent it


def poisson_arrivals(rate: float, n: int, *, seed: int | torch.Generator = 0) -> list[float]:
    """Arrival times (seconds) of ``n`` requests of a Poisson process with ``rate`` req/s.

    The gaps are drawn at unit rate and divided by ``rate``, so the same seed gives the same
    pattern at every rate, only compressed (common random numbers across load levels).

    >>> a = poisson_arrivals(2.0, 3, seed=0)
    >>> b = poisson_arrivals(4.0, 3, seed=0)
    >>> [round(x / y, 6) for x, y in zip(a, b)]
    [2.0, 2.0, 2.0]
    """
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not rate > 0:
        raise ValueError(f"rate must be a positive number of requests per second, got {rate!r}")
    if not math.isfinite(rate):
        raise ValueError(f"rate must be finite, got {rate!r}")
    n = _check_int("n", n, 1)
    gen = seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(seed)
    u = torch.rand(n, generator=gen, dtype=torch.float64)
    gaps = -torch.log1p(-u)  # Exp(1)
    return (gaps.cumsum(0) / float(rate)).tolist()


def _prompt_order(n_prompts: int, n: int, seed: int) -> list[int]:
    """Which prompt each request uses: a seeded shuffle, cycled."""
    gen = torch.Generator().manual_seed(seed + 1)
    perm = torch.randperm(n_prompts, generator=gen).tolist()
    return [perm[i % n_prompts] for i in range(n)]


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


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

    @property
    def prefill_time(self) -> float:
        """Time to the batch's first token (prompt prefill + the first decode step)."""
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

    def __call__(self, prompts: Sequence[Sequence[int]]) -> ServedBatch:
        from .batch import autoregressive_generate_batch, speculative_generate_batch

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
    from .engine import _live_policy

    _check_int("max_new_tokens", max_new_tokens, 1)
    policy = _live_policy(gamma)
    if speculative and draft is None:
        raise ValueError("speculative=True needs a draft model")
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
        tag = "" if verifier == "lossless" else f", {verifier}"
        label = f"gamma={gamma}" if policy is None else getattr(policy, "name", repr(policy))
        name = f"speculative({label}{tag})"
    else:
        name = "plain"
    return _ModelEngine(target, draft, speculative, kw, gamma, name)


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

    def summary(self) -> dict[str, Any]:
        """One tidy row: latency percentiles, throughput, utilisation, acceptance.

        ``throughput_tok_s`` is all generated tokens over the span from the first arrival to
        the last token (what the server delivered at this load); ``utilization`` is the share
        of that span the server was busy (1.0 = saturated: the load exceeds capacity).
        """
        reqs = self.requests
        t0 = min(r.arrival for r in reqs)
        t1 = max(r.finish for r in reqs)
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


# -- the server loop ---------------------------------------------------------------------------


def _bar(enabled: bool, **kw: Any):
    from tqdm.auto import tqdm

    return tqdm(disable=not enabled, **kw)


def serve(
    engine: BatchEngine,
    prompts: Sequence[Any],
    *,
    rate: float | None = None,
    concurrency: int | None = None,
    n_requests: int,
    max_batch: int,
    seed: int = 0,
    think_time: float = 0.0,
    service_cache: dict[Any, ServedBatch] | None = None,
    progress: bool = True,
) -> LoadResult:
    """Serve ``n_requests`` requests with one server and static batches of <= ``max_batch``.

    Exactly one of ``rate`` (open loop: Poisson arrivals, requests/s) or ``concurrency``
    (closed loop: that many clients, each sending its next request ``think_time`` seconds
    after its previous one finished) sets the load. Service is measured (the engine really
    runs), the clock is virtual (see the module docstring). ``service_cache`` (a dict shared
    across calls) lets a batch with exactly the same prompts in the same rows, on the same
    engine, reuse the first measurement instead of running again -- its tokens would be
    identical (its seed derives from its prompts), only its timing noise would differ.
    """
    if (rate is None) == (concurrency is None):
        raise ValueError("give exactly one of rate (open loop) or concurrency (closed loop)")
    n_requests = _check_int("n_requests", n_requests, 1)
    max_batch = _check_int("max_batch", max_batch, 1)
    if not think_time >= 0:
        raise ValueError(f"think_time must be >= 0 seconds, got {think_time!r}")
    lp = _as_load_prompts(prompts)
    order = _prompt_order(len(lp), n_requests, seed)

    # future arrivals: heap of (time, request id); open loop knows them all up front
    pending: list[tuple[float, int]] = []
    reqs: dict[int, Request] = {}
    if rate is not None:
        for i, t in enumerate(poisson_arrivals(rate, n_requests, seed=seed)):
            reqs[i] = Request(i, t, lp[order[i]])
            pending.append((t, i))
        scenario, level = "rate", float(rate)
    else:
        concurrency = _check_int("concurrency", concurrency, 1)
        for i in range(min(concurrency, n_requests)):
            reqs[i] = Request(i, 0.0, lp[order[i]], client=i)
            pending.append((0.0, i))
        scenario, level = "concurrency", float(concurrency)
    heapq.heapify(pending)
    issued = len(reqs)

    queue: deque[Request] = deque()
    records: list[RequestRecord] = []
    batches: list[BatchRecord] = []
    now = 0.0
    with _bar(progress, total=n_requests, desc=f"{engine.name} {scenario}={level:g}",
              unit="req", leave=False) as bar:  # fmt: skip
        while len(records) < n_requests:
            while pending and pending[0][0] <= now:
                queue.append(reqs[heapq.heappop(pending)[1]])
            if not queue:  # idle: jump to the next arrival instead of sleeping
                now = pending[0][0]
                continue
            batch = [queue.popleft() for _ in range(min(max_batch, len(queue)))]
            ids = tuple(r.prompt.input_ids for r in batch)
            key = (engine.name, ids)
            reused = service_cache is not None and key in service_cache
            served = service_cache[key] if reused else engine(ids)
            if service_cache is not None and not reused:
                service_cache[key] = served
            if len(served.new_tokens) != len(batch):
                raise RuntimeError(
                    f"engine {engine.name!r} returned {len(served.new_tokens)} rows "
                    f"for a batch of {len(batch)}"
                )
            b = len(batches)
            rows = zip(batch, served.token_times, served.new_tokens, strict=True)
            for r, times, toks in rows:
                rec = RequestRecord(
                    r.id,
                    r.prompt.prompt_id,
                    r.prompt.category,
                    r.client,
                    r.arrival,
                    now,
                    tuple(now + t for t in times),
                    b,
                    len(batch),
                    toks,
                )
                records.append(rec)
                if r.client is not None and issued < n_requests:  # closed loop: next request
                    nxt = Request(issued, rec.finish + think_time, lp[order[issued]], r.client)
                    reqs[issued] = nxt
                    heapq.heappush(pending, (nxt.arrival, issued))
                    issued += 1
            kv = sum(len(p) for p in ids) + sum(len(s) for s in served.new_tokens)
            batches.append(
                BatchRecord(
                    b,
                    now,
                    served.service_time,
                    tuple(r.id for r in batch),
                    served.target_calls,
                    served.accepted,
                    served.drafted,
                    kv,
                    served.row_calls,
                    reused,
                )
            )
            now += served.service_time
            bar.update(len(batch))
    records.sort(key=lambda r: r.request_id)
    return LoadResult(
        engine.name,
        engine.speculative,
        scenario,
        level,
        max_batch,
        tuple(records),
        tuple(batches),
    )


# -- sweeps and the crossover -------------------------------------------------------------------


@dataclass(frozen=True)
class Crossover:
    """Where speculation stops paying for one metric, found on measured points.

    ``status``: ``"crosses"`` (``level`` is interpolated where the speed-up falls through
    1), ``"never_pays"`` (speed-up < 1 at every tested level), ``"always_pays"`` (>= 1 at
    every tested level: the crossover, if any, is beyond the range), or ``"pays_above"``
    (speed-up rises through 1: speculation loses at low load, wins at high load).
    """

    metric: str
    scenario: str
    status: str
    level: float | None
    levels: tuple[float, ...]
    speedups: tuple[float, ...]  # > 1: speculation better on this metric
    sign_changes: int  # > 1 means the measured curve is noisy around 1

    def describe(self) -> str:
        unit = "requests/s" if self.scenario == "rate" else "concurrent clients"
        lo, hi = min(self.levels), max(self.levels)
        best = max(self.speedups)
        if self.status == "crosses":
            s = f"speculation stops paying on {self.metric} at about {self.level:.3g} {unit}"
        elif self.status == "never_pays":
            s = (
                f"speculation never paid on {self.metric} between {lo:g} and {hi:g} {unit} "
                f"(best speed-up {best:.2f}x)"
            )
        elif self.status == "always_pays":
            s = f"speculation paid on {self.metric} at every level from {lo:g} to {hi:g} {unit}"
        else:
            s = f"speculation starts paying on {self.metric} above about {self.level:.3g} {unit}"
        if self.sign_changes > 1:
            s += f" ({self.sign_changes} crossings: noisy near 1x)"
        return s


def find_crossover(
    levels: Sequence[float], speedups: Sequence[float], *, metric: str = "", scenario: str = ""
) -> Crossover:
    """The load where the speed-up first falls through 1, interpolated (linearly in
    log(level) when all levels are positive, the natural axis of a rate sweep).

    >>> find_crossover([1, 2, 4, 8], [1.5, 1.2, 0.9, 0.7], metric="throughput_tok_s").level
    3.17...
    """
    if len(levels) != len(speedups) or not levels:
        raise ValueError("levels and speedups must be non-empty and of equal length")
    pairs = sorted(
        (float(x), float(s)) for x, s in zip(levels, speedups, strict=True) if not math.isnan(s)
    )
    if not pairs:
        raise ValueError("every speed-up is NaN: nothing to compare")
    xs, ss = [p[0] for p in pairs], [p[1] for p in pairs]
    above = [s >= 1.0 for s in ss]
    changes = sum(a != b for a, b in zip(above, above[1:], strict=False))
    logx = all(x > 0 for x in xs)

    def cross(i: int) -> float:  # between xs[i] and xs[i+1]
        x0, x1 = (math.log(xs[i]), math.log(xs[i + 1])) if logx else (xs[i], xs[i + 1])
        f = (ss[i] - 1.0) / (ss[i] - ss[i + 1]) if ss[i] != ss[i + 1] else 0.5
        x = x0 + f * (x1 - x0)
        return math.exp(x) if logx else x

    down = next((i for i in range(len(xs) - 1) if above[i] and not above[i + 1]), None)
    if down is not None:
        status, level = "crosses", cross(down)
    elif all(above):
        status, level = "always_pays", None
    elif not any(above):
        status, level = "never_pays", None
    else:
        up = next(i for i in range(len(xs) - 1) if not above[i] and above[i + 1])
        status, level = "pays_above", cross(up)
    return Crossover(metric, scenario, status, level, tuple(xs), tuple(ss), changes)


@dataclass(frozen=True)
class LoadSweep:
    """A sweep over load levels, both modes: ``table`` has one row per (mode, level)."""

    table: Any = field(repr=False)  # pandas.DataFrame of LoadResult.summary() rows
    results: tuple[LoadResult, ...] = field(repr=False)
    scenario: str

    def _pick(self, mode: str, engine: str | None) -> Any:
        rows = self.table[self.table["mode"] == mode]
        names = list(dict.fromkeys(rows["engine"]))
        if engine is not None and mode == "speculative":
            if engine not in names:
                raise ValueError(f"no speculative engine {engine!r}; the sweep has {names}")
            return rows[rows["engine"] == engine]
        if not names:
            raise ValueError(f"the sweep has no {mode} runs; the speed-up needs both modes")
        if len(names) > 1:
            raise ValueError(f"the sweep has several {mode} engines {names}; pass engine=...")
        return rows

    def speedups(self, metric: str, *, engine: str | None = None) -> Any:
        """Per level: plain and speculative values of ``metric`` and the speed-up (> 1 means
        speculation is better: higher throughput, or lower latency). ``engine`` names the
        speculative engine when the sweep ran several."""
        if metric not in self.table.columns:
            raise ValueError(f"unknown metric {metric!r}; choose from {list(self.table.columns)}")
        plain = self._pick("plain", None).set_index("level")[metric]
        spec = self._pick("speculative", engine).set_index("level")[metric]
        wide = _side_by_side({"plain": plain, "speculative": spec}).dropna()
        if metric in LOWER_IS_BETTER:
            wide["speedup"] = wide["plain"] / wide["speculative"]
        else:
            wide["speedup"] = wide["speculative"] / wide["plain"]
        return wide.sort_index().rename_axis("level").reset_index()

    def crossover(
        self, metric: str = "throughput_tok_s", *, engine: str | None = None
    ) -> Crossover:
        sp = self.speedups(metric, engine=engine)
        return find_crossover(
            sp["level"].tolist(), sp["speedup"].tolist(), metric=metric, scenario=self.scenario
        )


def load_sweep(
    target: Any,
    draft: Any,
    prompts: Sequence[Any],
    *,
    rates: Sequence[float] | None = None,
    concurrencies: Sequence[int] | None = None,
    n_requests: int,
    max_batch: int,
    max_new_tokens: int,
    gamma: Any = 4,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    eos_token_id: int | Sequence[int] | None = None,
    verifier: str = "lossless",
    engines: Sequence[BatchEngine] | None = None,
    reuse_service: bool = True,
    warmup: bool = True,
    progress: bool = True,
) -> LoadSweep:
    """Serve the same workload at every load level with speculation off and on.

    ``prompts``: :class:`LoadPrompt` or token-id lists. Exactly one of ``rates`` (open loop)
    or ``concurrencies`` (closed loop). ``engines`` replaces the two default engines (plain
    and speculative, built with :func:`make_engine` from the sampling arguments). Each engine
    is warmed up once on one prompt first (not recorded), and identical batches are measured
    once and reused (``reuse_service``; at saturation every level forms the same batches).

    >>> from specviz.load import fixed_engine, load_sweep
    >>> fast_alone = fixed_engine(tokens=8, step_time=0.05, per_row_time=0.04,
    ...                           name="spec", speculative=True)
    >>> plain = fixed_engine(tokens=8, step_time=0.1, per_row_time=0.01, name="plain")
    >>> sw = load_sweep(None, None, [[1, 2]], concurrencies=[1, 2, 4, 8], n_requests=8,
    ...                 max_batch=8, max_new_tokens=8, engines=[plain, fast_alone],
    ...                 progress=False)
    >>> sw.crossover("throughput_tok_s").status
    'crosses'
    """
    if (rates is None) == (concurrencies is None):
        raise ValueError("give exactly one of rates (open loop) or concurrencies (closed loop)")
    levels = list(rates if rates is not None else concurrencies)  # type: ignore[arg-type]
    if not levels:
        raise ValueError("the sweep needs at least one load level")
    scenario = "rate" if rates is not None else "concurrency"
    lp = _as_load_prompts(prompts)
    if engines is None:
        engines = _plain_and_speculative(
            target,
            draft,
            verifier,
            max_new_tokens=max_new_tokens,
            gamma=gamma,
            do_sample=do_sample,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            eos_token_id=eos_token_id,
        )
    names = [e.name for e in engines]
    if len(set(names)) != len(names):
        raise ValueError(f"engine names must be distinct, got {names}")
    cache: dict[Any, ServedBatch] | None = {} if reuse_service else None
    results = []
    with _bar(progress, total=len(levels) * len(engines), desc="load sweep", unit="run") as bar:
        for eng in engines:
            if warmup:
                eng([lp[0].input_ids])
            for level in levels:
                kw2: dict[str, Any] = (
                    {"rate": level} if scenario == "rate" else {"concurrency": level}
                )
                results.append(
                    serve(
                        eng,
                        lp,
                        n_requests=n_requests,
                        max_batch=max_batch,
                        seed=seed,
                        service_cache=cache,
                        progress=progress,
                        **kw2,
                    )
                )
                bar.update(1)
    import pandas as pd

    table = pd.DataFrame([r.summary() for r in results])
    return LoadSweep(table, tuple(results), scenario)


def _plain_and_speculative(target: Any, draft: Any, verifier: str, **kw: Any) -> list:
    """The two engines every sweep compares: speculation off, then on."""
    return [
        make_engine(target, None, speculative=False, **kw),
        make_engine(target, draft, speculative=True, verifier=verifier, **kw),
    ]


# -- batch-size sweep ----------------------------------------------------------------------------


def batch_sweep(
    target: Any,
    draft: Any,
    prompts: Sequence[Any],
    *,
    batch_sizes: Sequence[int],
    max_new_tokens: int,
    gamma: Any = 4,
    repeats: int = 1,
    do_sample: bool = False,
    temperature: float = 1.0,
    seed: int = 0,
    eos_token_id: int | Sequence[int] | None = None,
    verifier: str = "lossless",
    engines: Sequence[BatchEngine] | None = None,
    progress: bool = True,
    clock: Callable[[], float] = time.perf_counter,
) -> Any:
    """Tokens/s of plain vs speculative batched decoding at each batch size (rows take the
    prompts in order, cycled). Modes alternate within each repeat to cancel drift; the
    median time is kept. Returns a DataFrame: one row per (batch_size, mode) with
    ``tokens_per_s`` and ``speedup`` (speculative / plain tokens/s, same batch size, prompt
    prefill included), and ``decode_tokens_per_s`` / ``decode_speedup``: tokens after each
    row's first over the time after the batch's first token (of the last repeat), i.e. the
    decoding phase without the prefill. ``tokens_per_target_call`` counts calls per row.

    ``kv_tokens`` counts prompt + generated tokens of all rows (logical KV tokens; the
    physical cache also holds padding and rejected-draft holes). ``same_tokens_as_plain``
    says whether an engine generated exactly the plain engine's tokens (expected under
    greedy decoding with a lossless verifier, up to floating-point near ties).
    """
    import pandas as pd

    lp = _as_load_prompts(prompts)
    sizes = [_check_int("batch size", b, 1) for b in batch_sizes]
    if not sizes:
        raise ValueError("batch_sizes is empty")
    repeats = _check_int("repeats", repeats, 1)
    if max(sizes) > len({p.input_ids for p in lp}):
        warnings.warn(
            f"batch size {max(sizes)} exceeds the {len({p.input_ids for p in lp})} distinct "
            "prompts: rows repeat prompts, and identical rows can share work in the batched "
            "engine (flattering it); pass at least as many prompts (see mixed_prompts)",
            stacklevel=2,
        )
    if engines is None:
        engines = _plain_and_speculative(
            target,
            draft,
            verifier,
            max_new_tokens=max_new_tokens,
            gamma=gamma,
            do_sample=do_sample,
            temperature=temperature,
            seed=seed,
            eos_token_id=eos_token_id,
        )
    for eng in engines:  # warm-up, not recorded
        eng([lp[0].input_ids])
    rows = []
    with _bar(progress, total=len(sizes) * repeats * len(engines), desc="batch sweep") as bar:
        for b in sizes:
            ids = tuple(lp[i % len(lp)].input_ids for i in range(b))
            walls: dict[str, list[float]] = {e.name: [] for e in engines}
            last: dict[str, ServedBatch] = {}
            for _ in range(repeats):
                for eng in engines:
                    t0 = clock()
                    last[eng.name] = eng(ids)
                    walls[eng.name].append(clock() - t0)
                    bar.update(1)
            ref = next((last[e.name] for e in engines if not e.speculative), None)
            for eng in engines:
                s = last[eng.name]
                tokens = sum(len(t) for t in s.new_tokens)
                secs = statistics.median(walls[eng.name])
                decode_s = s.service_time - s.prefill_time
                decode_tokens = tokens - sum(1 for t in s.new_tokens if t)
                rows.append(
                    dict(
                        batch_size=b,
                        engine=eng.name,
                        mode="speculative" if eng.speculative else "plain",
                        tokens=tokens,
                        seconds=secs,
                        tokens_per_s=tokens / secs if secs > 0 else math.nan,
                        first_token_s=s.prefill_time,
                        decode_seconds=decode_s,
                        decode_tokens_per_s=decode_tokens / decode_s if decode_s > 0 else math.nan,
                        target_calls=s.target_calls,
                        tokens_per_target_call=tokens / s.row_calls if s.row_calls else math.nan,
                        acceptance_rate=s.accepted / s.drafted if s.drafted else math.nan,
                        kv_tokens=sum(len(p) for p in ids) + tokens,
                        same_tokens_as_plain=(
                            s.new_tokens == ref.new_tokens if ref is not None else None
                        ),
                        repeats=repeats,
                    )
                )
    df = pd.DataFrame(rows)
    for col, out in (("tokens_per_s", "speedup"), ("decode_tokens_per_s", "decode_speedup")):
        plain = df[df["mode"] == "plain"].set_index("batch_size")[col]
        df[out] = [getattr(r, col) / plain.get(r.batch_size, math.nan) for r in df.itertuples()]
    return df
