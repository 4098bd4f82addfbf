"""``specviz audit --sequential``: the audit's sampled comparison batch by batch, stopping at
the first of reject / equivalent within a TV tolerance / the cap (``n_samples``).

Each batch asks both servers for the next ``batch`` completions per prompt -- the very requests
of the fixed-n audit (same seeds, same ``raw.jsonl`` records, sampled by
:mod:`specviz.audit.run`) -- and feeds them to :class:`specviz.checks.sequential.SequentialRun`.
An interrupted run resumes from ``raw.jsonl``: the stored batches are replayed (the same
decisions) before anything new is requested, and a fixed-n audit's raw file serves a sequential
one (and back). Greedy identity and the load sweep are not part of it (run the plain audit).

**In-process engines** (``--a openvino:...``, :mod:`specviz.audit.engines`) run the same loop
(:func:`run_sequential_engine_audit`, Python face :func:`engine_audit_sequential`): the same
requests and seeds as the fixed-n engine audit, the same raw file (either one resumes the
other), failed requests as outcomes of their own. By default each arm's engine is loaded for
its batch and freed before the other arm's (as the fixed-n engine audit does: two Qwen-size
models need not fit side by side); ``keep_loaded=True`` (``--keep-loaded``) keeps both loaded
between batches, which saves a model load per arm and batch where memory allows.

**The identity probe** (``--identity-probe``: B is A's engine with the target as its own
draft) works sequentially with in-process engines whose drafts are sampled from the draft's
law (every adapter here): a lossless engine then accepts every drafted token when sampling
too, so after each batch B's own draft / accept counts are checked, and the first rejected
token ends the run *inconsistent* -- an exact finding, no e-value needed; the law is tested
sequentially as usual. With HTTP servers it stays refused: there the probe's acceptance check
runs at temperature 0 (the greedy phase), which a sequential audit does not run.

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

__all__ = [
    "audit_sequential",
    "engine_audit_sequential",
    "identity_refusal",
    "run_sequential_audit",
    "run_sequential_engine_audit",
]

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
    _write(report, cfg, out)
    return report


def _write(report: SequentialReport, cfg: AuditConfig, out: Path | None) -> None:
    if out is None:
        return
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


def _acceptance(raw: _Raw, n_prompts: int, n: int) -> tuple[int, int] | None:
    """B's drafted and accepted tokens over the first ``n`` samples of every prompt, from the
    engine's own counts (None: it reports none)."""
    drafted = accepted = 0
    seen = False
    for pi in range(n_prompts):
        for j in range(n):
            rec = raw.samples[("b", pi, j)]
            if rec.get("draft_n") is not None and rec.get("draft_n_accepted") is not None:
                seen = True
                drafted += int(rec["draft_n"])
                accepted += int(rec["draft_n_accepted"])
    return (drafted, accepted) if seen else None


def identity_refusal(b: Any) -> str | None:
    """Why the sequential identity probe cannot run on engine ``b`` (None: it can)."""
    if b.sampled_draft is True:
        return None
    return (
        f"--identity-probe with --sequential needs an engine that samples its drafts from the "
        f"draft's law (then a draft equal to the target is always accepted, also when "
        f"sampling); {b.name} does not say it does: run the identity probe without "
        f"--sequential (its greedy phase checks the acceptance at temperature 0)"
    )


def run_sequential_engine_audit(
    a: Any,
    b: Any,
    cfg: AuditConfig,
    *,
    tv_tolerance: float = 0.05,
    batch: int = DEFAULT_BATCH,
    cap: int | None = None,
    out_dir: str | Path | None = None,
    progress: bool = True,
    identity: bool = False,
    keep_loaded: bool = False,
    max_consecutive_failures: int = 20,
) -> SequentialReport:
    """The sequential audit of in-process engine ``b`` against ``a``
    (:class:`~specviz.audit.engines.Engine` objects; see the module docstring). ``identity``:
    ``b`` is ``a`` with the target as its own draft, so every drafted token must be accepted
    (checked after each batch where ``b`` samples its drafts and reports its counts)."""
    from .inprocess import _open_engine_raw, _sample_arm

    stats.check_sequential_settings(
        alpha=cfg.alpha, tv_tolerance=tv_tolerance, cap=cap, batch=batch
    )
    if identity and (why := identity_refusal(b)):
        raise ValueError(why)
    t0 = time.perf_counter()
    _refs, out, raw = _open_engine_raw(a, b, cfg, out_dir)
    run = SequentialRun(
        len(cfg.prompts),
        cfg.max_tokens,
        alpha=cfg.alpha,
        tv_tolerance=tv_tolerance,
        batch=batch,
        cap=cap,
    )
    finding, counts = "", None
    try:
        while not finding and (m := run.next_size) > 0:
            end = run.n + m
            upto = replace(cfg, n_samples=end, greedy=False)
            for arm, engine in (("a", a), ("b", b)):
                try:
                    _sample_arm(
                        upto, arm, engine, raw, _Counters(), progress, max_consecutive_failures
                    )
                finally:
                    if not keep_loaded:
                        engine.close()  # one arm's models in memory at a time

            def tokens(arm: str, pi: int, start: int = run.n, end: int = end) -> list:
                return [tuple(raw.samples[(arm, pi, j)]["tokens"]) for j in range(start, end)]

            run.feed([(tokens("a", pi), tokens("b", pi)) for pi in range(len(cfg.prompts))])
            if identity:
                counts = _acceptance(raw, len(cfg.prompts), run.n)
                if counts is not None and counts[1] < counts[0]:
                    finding = (
                        f"identity probe: a draft equal to the target was rejected, "
                        f"{counts[1]}/{counts[0]} drafted tokens accepted"
                    )
    finally:
        a.close()
        b.close()
    compared = f"{b.name} vs {a.name}"
    if identity:
        compared += (
            "; identity probe: no acceptance counts (the engine reports none)"
            if counts is None
            else f"; identity probe: {counts[1]}/{counts[0]} drafted tokens accepted"
        )
    report = run.report(seconds=time.perf_counter() - t0, compared=compared, finding=finding)
    _write(report, cfg, out)
    return report


def engine_audit_sequential(
    a: Any,
    b: Any,
    prompts: Sequence[str],
    *,
    tv_tolerance: float = 0.05,
    batch: int = DEFAULT_BATCH,
    n_samples: int | None = None,
    out_dir: str | Path | None = None,
    progress: bool = True,
    identity: bool = False,
    keep_loaded: bool = False,
    **settings: Any,
) -> SequentialReport:
    """Sequential audit of in-process engine ``b`` against ``a`` (Engine objects or specs such
    as ``"openvino:smollm2-135m"``); ``n_samples`` is the cap (None: 1.5x the fixed-n design).

    >>> engine_audit_sequential("specviz:toy,speculate=0", "specviz:toy,verifier=always_accept",
    ...                         ["ab"], tv_tolerance=0.1, max_tokens=3, progress=False).decision
    'inconsistent'
    """
    from .engines import engine_from_spec

    stats.check_sequential_settings(
        alpha=settings.get("alpha", 0.01), tv_tolerance=tv_tolerance, cap=n_samples, batch=batch
    )
    settings = {"load_levels": (), **settings}
    cfg = AuditConfig(prompts=prompts, n_samples=n_samples or max(2, batch), **settings)
    ea = engine_from_spec(a, "A") if isinstance(a, str) else a
    eb = engine_from_spec(b, "B") if isinstance(b, str) else b
    return run_sequential_engine_audit(
        ea,
        eb,
        cfg,
        tv_tolerance=tv_tolerance,
        batch=batch,
        cap=n_samples,
        out_dir=out_dir,
        progress=progress,
        identity=identity,
        keep_loaded=keep_loaded,
    )


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
