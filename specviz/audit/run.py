"""Audit a serving engine over its OpenAI-compatible API: does speculation change the output
law, and at which load does it stop paying?

Given two endpoints (or two configurations of one server) -- ``a`` with speculative decoding
off (the reference) and ``b`` with it on -- :func:`audit`

1. checks both servers (reachable, TLS, model served, logprobs present, *same* model: the
   first-token logprobs on a probe prompt must agree);
2. samples ``n_samples`` completions per prompt from each (distinct seeds per request,
   concurrent, retried with backoff, a progress bar), appending every *complete* result to
   ``out_dir/raw.jsonl`` so that an interrupted audit resumes where it stopped;
3. runs the statistics module's two-sample tests per prompt: the token at each position
   (Pearson homogeneity, sparse tokens pooled), the first bigram and the whole continuation
   (tail bin), and KS / Anderson-Darling on the sequence log-probability the server reports;
   Holm at ``alpha`` gives the verdict, Benjamini-Hochberg is reported for exploration, and a
   power statement says which first-token TV these samples would have caught;
4. a greedy identity report at temperature 0 (first divergence and the reference's top-1/top-2
   logprob margin there: a near tie is "numerics", a clear margin a "bug");
5. a load sweep with streaming at several concurrency levels (and one or more
   temperatures): TTFT, inter-token latency, completion time, throughput, client-side tokens
   per verification step for both configurations, and the crossover -- the concurrency where
   speculation stops paying;
6. reads each server's own speculation counters (Prometheus ``/metrics``: vLLM, SGLang,
   llama.cpp names, :mod:`specviz.audit.counters`) before and after each phase and reports
   the difference -- acceptance rate, mean acceptance length, per-position acceptance --
   next to the audit's own measurements ("engine counters: not published" when a server has
   none);
7. writes ``out_dir/report.html`` (self-contained: plotly.js inlined) and
   ``out_dir/summary.json``.

Outcomes are the token *pieces* the server reports in its logprobs (an API exposes no ids).
Pieces that several ids share are merged identically in both arms, which keeps the tests
valid (a function of the outcome) at a small loss of power. With ``outcome="text"`` the
sampled requests ask for no logprobs and positions are client-side pieces of the text
(:func:`specviz.audit_client.split_text`) -- any function of the output text is a valid
outcome, and servers whose logprobs are expensive or missing can be audited; the logprob KS/AD
tests are then skipped (as they are when a server reports logprobs it did not compute). A randomized PIT test needs the
whole next-token law and is not possible over this API.

Example (two llama.cpp servers, n-gram lookup off / on; ``api="chat"`` for
``/v1/chat/completions``)::

    from specviz.audit import audit
    report = audit("http://127.0.0.1:8080", "http://127.0.0.1:8081",
                   ["Once upon a time"], n_samples=300, max_tokens=4, out_dir="audit-out")
    print(report.summary())
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ..views.reports import audit_html
from .client import AuditError, Endpoint, preflight
from .config import AuditConfig
from .load_sweep import _load_level, _load_sweep, _nan  # noqa: F401  (their former home)
from .report import AuditReport
from .sampling import (  # noqa: F401  (their former home)
    _Counters,
    _gather_bounded,
    _Raw,
    _record,
    _sample,
    _sample_arm,
    _snapshot,
)
from .statistics import _greedy, _tests  # noqa: F401  (their former home)

__all__ = ["AuditConfig", "AuditReport", "AuditError", "Endpoint", "audit", "run_audit"]


# ------------------------------------------------------------------------------ entry points


def _as_endpoint(x: Endpoint | str, label: str) -> Endpoint:
    if isinstance(x, Endpoint):
        return x
    if not isinstance(x, str) or not x.startswith(("http://", "https://")):
        raise ValueError(f"endpoint {label} must be an http(s) URL or an Endpoint, got {x!r}")
    return Endpoint(x, label=label)


async def run_audit(
    a: Endpoint,
    b: Endpoint,
    cfg: AuditConfig,
    *,
    out_dir: str | Path | None,
    progress: bool,
    identity_probe: bool = False,
) -> AuditReport:
    """The async core of :func:`audit` (for callers that already run an event loop).
    ``identity_probe``: B serves the target as its own draft (llama-server ``-md`` equal to
    ``-m``), so its greedy acceptance must be exactly 1."""
    t0 = time.perf_counter()
    if a.name == b.name:
        b = Endpoint(**{**asdict(b), "label": b.name + " (B)"})
    eps = {"a": a, "b": b}
    info = await preflight(a, b, cfg.prompts[0], need_logprobs=cfg.outcome == "tokens", api=cfg.api)
    out = Path(out_dir) if out_dir is not None else None
    raw = _Raw.open(out / "raw.jsonl" if out else None, cfg.sampling_key(a, b), cfg)
    # Greedy margins need top-2 logprobs; ask for them whenever both servers give them.
    greedy_lp = all("probe_top" in info[e.name] for e in (a, b))
    counters = _Counters()
    await _sample(cfg, eps, raw, progress, greedy_lp, counters)
    rng = np.random.default_rng(cfg.seed)
    verdict, tests, tv, mdt, statement, first, numerics, logprob_note, power = _tests(cfg, raw, rng)
    greedy, gaps = _greedy(cfg, raw) if cfg.greedy else (None, ())
    load = await _load_sweep(cfg, eps, progress, counters) if cfg.load_levels else None
    report = AuditReport(
        verdict=verdict,
        alpha=cfg.alpha,
        n_samples=cfg.n_samples,
        tests=tests,
        tv=tv,
        min_detectable_tv=mdt,
        power_statement=statement,
        greedy=greedy,
        greedy_logprob_gap=gaps,
        load=load,
        first_token_counts=first,
        endpoints=(a, b),
        config=cfg,
        preflight=info,
        seconds=time.perf_counter() - t0,
        out_dir=None if out is None else str(out),
        numerics=numerics,
        engine_counters=counters.engine,
        response_counters=counters.own_summary(),
        shared_server=a.metrics_endpoint() == b.metrics_endpoint(),
        logprob_note=logprob_note,
        position_power=tuple(power),
        first_token_control=True,
        identity_probe=identity_probe,
    )
    if out is not None:
        audit_html(report, out / "report.html")
        (out / "summary.json").write_text(
            json.dumps(report.to_json(), indent=1, default=str), encoding="utf-8"
        )
    return report


def audit(
    a: Endpoint | str,
    b: Endpoint | str,
    prompts: Sequence[str],
    *,
    out_dir: str | Path | None = None,
    progress: bool = True,
    **settings: Any,
) -> AuditReport:
    """Audit ``b`` (speculation on) against ``a`` (speculation off); see the module docstring.

    ``a`` and ``b`` may also be in-process engines (:mod:`specviz.audit.engines`: an
    ``Engine`` or a spec such as ``"openvino:smollm2-135m,draft=target"``); see
    :func:`specviz.audit.inprocess.engine_audit`.

    ``settings`` are :class:`AuditConfig` fields (``n_samples``, ``max_tokens``,
    ``temperature``, ``alpha``, ``concurrency``, ``load_levels`` ...). With ``out_dir`` the raw
    results go to ``out_dir/raw.jsonl`` (an interrupted run resumes from it) and the report to
    ``out_dir/report.html``.

    >>> report = audit("http://127.0.0.1:8080", "http://127.0.0.1:8081",
    ...                ["Once upon a time"], n_samples=300)  # doctest: +SKIP
    >>> report.verdict  # doctest: +SKIP
    'consistent'
    """
    from .engines import Engine, is_engine_spec

    if any(isinstance(x, Engine) or (isinstance(x, str) and is_engine_spec(x)) for x in (a, b)):
        from .inprocess import engine_audit  # in-process engines: the same report design

        return engine_audit(a, b, prompts, out_dir=out_dir, progress=progress, **settings)
    cfg = AuditConfig(prompts=prompts, **settings)  # a str is one prompt, not its characters
    ea, eb = _as_endpoint(a, "A"), _as_endpoint(b, "B")
    return asyncio.run(run_audit(ea, eb, cfg, out_dir=out_dir, progress=progress))
