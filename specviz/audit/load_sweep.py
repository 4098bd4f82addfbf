"""The audit's load sweep (:mod:`specviz.audit.run`, step 5): streaming requests at several
concurrency levels (and temperatures) against both configurations, with the engines' counters."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from .client import AuditError, Endpoint, stream
from .config import ARMS, AuditConfig
from .counters import counter_delta
from .counters import response_counters as _response_counters
from .sampling import _Counters, _snapshot

# ------------------------------------------------------------------------------ load sweep


async def _load_level(
    ep: Endpoint, cfg: AuditConfig, level: int, prompts: Sequence[str], temperature: float
):
    n = max(cfg.load_requests, level)
    sampled = temperature > 0
    timings: list[Any] = []
    async with ep.client(concurrency=level) as client:
        sem = asyncio.Semaphore(level)

        async def one(i: int):
            async with sem:
                return await stream(
                    client,
                    ep,
                    prompts[i % len(prompts)],
                    max_tokens=cfg.load_max_tokens,
                    temperature=temperature,
                    top_p=cfg.top_p if sampled else None,
                    top_k=cfg.top_k if sampled else None,
                    seed=cfg.seed + i,
                    retries=0,
                    api=cfg.api,
                )

        before = await _snapshot(ep)
        t0 = time.perf_counter()
        results = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
        wall = time.perf_counter() - t0
        engine = counter_delta(before, await _snapshot(ep))
    errors = [r for r in results if isinstance(r, BaseException)]
    timings = [r for r in results if not isinstance(r, BaseException)]
    ttft = np.array([t.ttft for t in timings]) if timings else np.array([np.nan])
    itl = np.concatenate(
        [np.diff(t.chunk_times) / max(1.0, t.tokens / len(t.chunk_times)) for t in timings]
        or [np.array([np.nan])]
    )
    if itl.size == 0:
        itl = np.array([np.nan])
    total = np.array([t.total for t in timings]) if timings else np.array([np.nan])
    tokens = sum(t.tokens for t in timings)
    bursts = sum(t.bursts() for t in timings)
    own = _response_counters([t.draft_tokens for t in timings], [t.draft_accepted for t in timings])
    row = dict(
        temperature=temperature,
        concurrency=level,
        requests=n,
        ok=len(timings),
        failed=len(errors),
        ttft_p50=float(np.median(ttft)),
        ttft_p90=float(np.quantile(ttft, 0.9)),
        itl_p50=float(np.median(itl)),
        itl_p90=float(np.quantile(itl, 0.9)),
        completion_p50=float(np.median(total)),
        completion_p90=float(np.quantile(total, 0.9)),
        tokens=tokens,
        tokens_per_s=tokens / wall if timings else 0.0,
        requests_per_s=len(timings) / wall,
        wall_s=wall,
        # client-side: tokens per burst of chunks (one verification step); 1 without speculation
        tokens_per_step=tokens / bursts if bursts else np.nan,
        engine_accept_rate=_nan(engine.acceptance_rate),
        engine_accept_length=_nan(engine.mean_acceptance_length),
        response_accept_rate=own.get("acceptance_rate", np.nan),
    )
    return row, errors, timings


def _nan(x: float | None) -> float:
    return np.nan if x is None else float(x)


async def _load_sweep(
    cfg: AuditConfig, eps: dict[str, Endpoint], progress: bool, counters: _Counters
):
    import pandas as pd

    prompts = cfg.load_prompts or cfg.prompts
    rows = []
    temps = cfg.load_temperatures
    total = 2 * len(cfg.load_levels) * len(temps)
    bar = tqdm(total=total, desc="load sweep", disable=not progress, leave=False)
    for temperature in temps:
        phase = f"load T={temperature:g}"
        for arm in ARMS:
            ep = eps[arm]
            # one warm-up request so the first level does not pay for cold caches
            async with ep.client(concurrency=1) as client:
                await stream(
                    client,
                    ep,
                    prompts[0],
                    max_tokens=4,
                    temperature=temperature,
                    retries=2,
                    api=cfg.api,
                )
            start = await _snapshot(ep)
            for level in cfg.load_levels:
                row, errors, timings = await _load_level(ep, cfg, level, prompts, temperature)
                for t in timings:
                    counters.note(arm, phase, (t.draft_tokens, t.draft_accepted))
                if errors and not row["ok"]:
                    raise AuditError(
                        f"load sweep: every request to {ep.name} at concurrency {level} failed; "
                        f"first error: {errors[0]}"
                    )
                row["arm"] = arm
                row["endpoint"] = ep.name
                row["first_error"] = str(errors[0])[:200] if errors else ""
                rows.append(row)
                bar.update(1)
            counters.put(arm, phase, start, await _snapshot(ep))
    bar.close()
    return pd.DataFrame(rows)
