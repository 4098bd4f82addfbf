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

from .client import AuditError, Endpoint
from .config import ARMS, AuditConfig
from .counters import EngineCounters
from .report import AuditCrossover, AuditReport
from .run import audit, run_audit

__all__ = [
    "ARMS",
    "AuditConfig",
    "AuditCrossover",
    "AuditError",
    "AuditReport",
    "EngineCounters",
    "Endpoint",
    "audit",
    "run_audit",
]
