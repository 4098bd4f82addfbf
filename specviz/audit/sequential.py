"""``specviz audit --sequential``: the audit's sampled comparison batch by batch, stopping at
the first of reject / equivalent within a TV tolerance / the cap (``n_samples``).

Each batch asks both servers for the next ``batch`` completions per prompt -- the very requests
of the fixed-n audit (same seeds, same ``raw.jsonl`` records, sampled by
:mod:`specviz.audit.run`) -- and feeds them to :class:`specviz.checks.sequential.SequentialRun`.
An interrupted run resumes from ``raw.jsonl``: the stored batches are replayed (the same
decisions) before anything new is requested, and a fixed-n audit's raw file serves a sequential
one (and back). Greedy identity and the load sweep are not part of it (run the plain audit).

Example::

    from specviz.audit.sequential import audit_sequential
    report = audit_sequential("http://127.0.0.1:8080", "http://127.0.0.1:8081",
                              ["Once upon a time"], tv_tolerance=0.05, max_tokens=4,
                              out_dir="audit-out")
    print(report.summary())  # inconsistent / equivalent within 0.05 / inconclusive
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from .. import stats
from ..checks.sequential import SequentialReport, SequentialRun
from .client import Endpoint, preflight
from .config import AuditConfig
from .run import _as_endpoint
from .sampling import _Counters, _Raw, _sample

__all__ = ["audit_sequential", "run_sequential_audit"]

DEFAULT_BATCH = 50  # completions per prompt and arm between two checks


async def run_sequential_audit(
    a: Endpoint,
    b: Endpoint,
    cfg: AuditConfig,
    *,
    tv_tolerance: float = 0.05,
    batch: int = DEFAULT_BATCH,
    cap: int | None = None,
    out_dir: str | Path | None = None,
    progress: bool = True,
) -> SequentialReport:
    """The async core of :func:`audit_sequential`; ``cap`` None: 1.5x the fixed-n design."""
    stats.check_sequential_settings(
        alpha=cfg.alpha, tv_tolerance=tv_tolerance, cap=cap, batch=batch
    )
    t0 = time.perf_counter()
    if a.name == b.name:
        b = Endpoint(**{**asdict(b), "label": b.name + " (B)"})
    await preflight(a, b, cfg.prompts[0], need_logprobs=cfg.outcome == "tokens", api=cfg.api)
    out = Path(out_dir) if out_dir is not None else None
    raw = _Raw.open(out / "raw.jsonl" if out else None, cfg.sampling_key(a, b))
    run = SequentialRun(
        len(cfg.prompts),
        cfg.max_tokens,
        alpha=cfg.alpha,
        tv_tolerance=tv_tolerance,
        batch=batch,
        cap=cap,
    )
    counters = _Counters()
    while (m := run.next_size) > 0:
        end = run.n + m
        # the fixed-n audit's requests up to ``end``: only the missing ones are sent
        upto = replace(cfg, n_samples=end, greedy=False)
        await _sample(upto, {"a": a, "b": b}, raw, progress, False, counters)

        def tokens(arm: str, pi: int, start: int = run.n, end: int = end) -> list:
            return [tuple(raw.samples[(arm, pi, j)]["tokens"]) for j in range(start, end)]

        run.feed([(tokens("a", pi), tokens("b", pi)) for pi in range(len(cfg.prompts))])
    report = run.report(seconds=time.perf_counter() - t0, compared=f"{b.name} vs {a.name}")
    if out is not None:
        from ..views.stats import sequential_html

        details = json.dumps(
            {k: v for k, v in asdict(cfg).items() if k != "n_samples"}, indent=1, default=str
        )
        sequential_html(
            report, out / "report.html", title="specviz audit --sequential", details=details
        )
        summary = report.to_json() | {"prompts": list(cfg.prompts)}
        tmp = out / ".summary.json.tmp"
        tmp.write_text(json.dumps(summary, indent=1, default=str), encoding="utf-8")
        tmp.replace(out / "summary.json")
    return report


def audit_sequential(
    a: Endpoint | str,
    b: Endpoint | str,
    prompts: Sequence[str],
    *,
    tv_tolerance: float = 0.05,
    batch: int = DEFAULT_BATCH,
    n_samples: int | None = None,
    out_dir: str | Path | None = None,
    progress: bool = True,
    **settings: Any,
) -> SequentialReport:
    """Sequential audit of ``b`` (speculation on) against ``a`` (off); see the module
    docstring. ``n_samples`` is the cap per prompt and arm (None: 1.5x the fixed-n design for
    ``tv_tolerance``); ``settings`` are the other :class:`AuditConfig` fields."""
    stats.check_sequential_settings(
        alpha=settings.get("alpha", 0.01), tv_tolerance=tv_tolerance, cap=n_samples, batch=batch
    )
    cfg = AuditConfig(prompts=prompts, n_samples=n_samples or max(2, batch), **settings)
    ea, eb = _as_endpoint(a, "A"), _as_endpoint(b, "B")
    coro = run_sequential_audit(
        ea,
        eb,
        cfg,
        tv_tolerance=tv_tolerance,
        batch=batch,
        cap=n_samples,
        out_dir=out_dir,
        progress=progress,
    )
    return asyncio.run(coro)
