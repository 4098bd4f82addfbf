"""Audit a serving engine over its OpenAI-compatible API -- or in-process (OpenVINO GenAI,
onnxruntime-genai, transformers: :mod:`specviz.audit.engines`) -- does speculation change the
output law, and at which load does it stop paying?

:func:`audit` compares two endpoints (or two configurations of one server): ``a`` with
speculative decoding off (the reference) and ``b`` with it on. What it does, step by step,
and what the outcomes are: :mod:`specviz.audit.run`. The client is :mod:`specviz.audit.client`,
the engines' own counters :mod:`specviz.audit.counters`, the report
:mod:`specviz.audit.report`, and a deliberately broken test server
:mod:`specviz.audit.broken_server`.

Example (two llama.cpp servers, n-gram lookup off / on)::

    from specviz.audit import audit
    report = audit("http://127.0.0.1:8080", "http://127.0.0.1:8081",
                   ["Once upon a time"], n_samples=300, max_tokens=4, out_dir="audit-out")
"""

from __future__ import annotations

from .client import AuditError, Endpoint
from .config import ARMS, AuditConfig
from .counters import EngineCounters
from .engines import Engine, EngineError, engine_from_spec
from .inprocess import engine_audit, identity_probe
from .report import AuditCrossover, AuditReport
from .run import audit, run_audit

__all__ = [
    "ARMS",
    "AuditConfig",
    "AuditCrossover",
    "AuditError",
    "AuditReport",
    "Engine",
    "EngineCounters",
    "EngineError",
    "Endpoint",
    "audit",
    "engine_audit",
    "engine_from_spec",
    "identity_probe",
    "run_audit",
]
