"""The server loop: arrivals, batching, one engine step at a time."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from typing import Any

from .engines import BatchEngine, ServedBatch
from .records import BatchRecord, LoadResult, RequestRecord
from .workload import Request, _as_load_prompts, _check_int, _prompt_order, poisson_arrivals

__all__ = ["serve"]


# -- the server loop ---------------------------------------------------------------------------


def _bar(enabled: bool, **kw: Any):
    from tqdm.auto import tqdm

    return tqdm(disable=not enabled, **kw)


def _config_key(engine: BatchEngine, ids: tuple[tuple[int, ...], ...]) -> str:
    """What a measurement of this batch is filed under: the configuration the engine really
    runs for it (engines may say, e.g. a fallback policy below its threshold runs its
    constant gamma), else the engine's name."""
    key = getattr(engine, "config_key", None)
    return key(ids) if callable(key) else engine.name


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
    identical (its seed derives from its prompts), only its timing noise would differ. The
    key is the configuration the batch really runs (``engine.config_key(prompts)`` when the
    engine has one), so two engines that run the same configuration share one measurement.
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
            key = (_config_key(engine, ids), ids)
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
                    served.prefill_seconds,
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
