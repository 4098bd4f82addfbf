"""``specviz audit`` on in-process engines (:mod:`specviz.audit.engines`): the same raw file,
resume, tests, report and exit statuses as for two HTTP endpoints.

What differs from the HTTP path, and why:

* the arms run one after the other, each engine loaded, sampled and freed in turn (two copies
  of a Qwen-size target would not fit next to each other within the memory budget), one request
  at a time (or in the engine's own batches);
* outcomes are token ids; engines report no logprobs, so the logprob tests are skipped and
  a greedy divergence carries no margin ("diverged", not "bug");
* per-request draft / accept counts come from the engine itself (OpenVINO's
  ``extended_perf_metrics``, onnxruntime-genai's ``get_speculative_stats``) or from counting
  forward passes (transformers);
* **a failed request is a finding**: it is saved in the raw file with its message, counted per
  arm in the report (rate, first message) and enters the token tests as an outcome of its own
  (token id -1, shown as ``<failed>``), so an engine that crashes in one arm only differs from
  the other. Only when ``max_consecutive_failures`` requests in a row fail does the audit stop,
  with an :class:`~specviz.audit.engines.EngineError` that names the engine and the cause and
  says how many finished samples are saved (a rerun resumes).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ..views.reports import audit_html
from .config import _SEED_ARM, _SEED_PROMPT, ARMS, AuditConfig
from .engines import FAILED, Engine, EngineError, Sampling, engine_from_spec, identity_spec
from .engines.base import check_same_numerics
from .report import AuditReport
from .sampling import _Counters, _Raw
from .statistics import _greedy, _tests

__all__ = ["engine_audit", "identity_probe", "run_engine_audit"]

_CHUNK = 16  # requests per call to the engine between raw-file writes


def _record(kind: str, arm: str, prompt: int, index: int, seed: int | None, s: Any) -> dict:
    return {
        "kind": kind,
        "arm": arm,
        "prompt": prompt,
        "index": index,
        "seed": seed,
        "tokens": list(s.tokens) if s.ok else [FAILED],
        "logprobs": [],
        "top": [] if kind == "greedy" else None,
        "finish_reason": "error" if not s.ok else "length",
        "seconds": round(s.seconds, 5),
        "draft_n": s.draft_tokens,
        "draft_n_accepted": s.draft_accepted,
        "unreported": 0,
        "error": s.error,
    }


def _sample_arm(
    cfg: AuditConfig,
    arm: str,
    engine: Engine,
    raw: _Raw,
    counters: _Counters,
    progress: bool,
    max_consecutive_failures: int,
) -> None:
    sampling = Sampling(cfg.max_tokens, cfg.temperature, cfg.top_p, cfg.top_k)
    todo = [
        (pi, j)
        for pi in range(len(cfg.prompts))
        for j in range(cfg.n_samples)
        if (arm, pi, j) not in raw.samples
    ]
    phase = f"samples T={cfg.temperature:g}"
    for rec in raw.samples.values():  # resumed samples count in the acceptance too
        if rec["arm"] == arm:
            counters.note(arm, phase, (rec.get("draft_n"), rec.get("draft_n_accepted")))
    for rec in raw.greedy.values():
        if rec["arm"] == arm:
            counters.note(arm, "greedy T=0", (rec.get("draft_n"), rec.get("draft_n_accepted")))
    greedy_todo = [pi for pi in range(len(cfg.prompts)) if (arm, pi) not in raw.greedy]
    if not todo and not (cfg.greedy and greedy_todo):
        return
    engine.ensure_loaded()
    bar = tqdm(total=len(todo), desc=f"sampling {engine.name}", disable=not progress, leave=False)
    streak, first_error = 0, None
    total = len(cfg.prompts) * cfg.n_samples
    try:
        for start in range(0, len(todo), _CHUNK):
            chunk = todo[start : start + _CHUNK]
            for pi in sorted({c[0] for c in chunk}):
                idx = [j for p, j in chunk if p == pi]
                seeds = [
                    cfg.seed + ARMS.index(arm) * _SEED_ARM + pi * _SEED_PROMPT + j for j in idx
                ]
                for j, seed, s in zip(
                    idx, seeds, engine.sample(cfg.prompts[pi], sampling, seeds), strict=True
                ):
                    raw.add(_record("sample", arm, pi, j, seed, s))
                    counters.note(arm, phase, (s.draft_tokens, s.draft_accepted))
                    streak = 0 if s.ok else streak + 1
                    first_error = first_error or s.error
                    if streak >= max_consecutive_failures:
                        have = sum(
                            1 for k, r in raw.samples.items() if k[0] == arm and not r.get("error")
                        )
                        raise EngineError(
                            f"{engine.engine} ({engine.name}) failed {streak} requests in a "
                            f"row; last error: {s.error}\n({have} of {total} samples from "
                            f"{engine.name} are complete and saved in {raw.path}; failed "
                            "requests are saved as findings; rerun the same command to resume)"
                        )
            bar.update(len(chunk))
        if cfg.greedy:
            greedy = Sampling(cfg.greedy_max_tokens, 0.0)
            for pi in greedy_todo:
                s = engine.sample(cfg.prompts[pi], greedy, [cfg.seed])[0]
                raw.add(_record("greedy", arm, pi, 0, None, s))
                counters.note(arm, "greedy T=0", (s.draft_tokens, s.draft_accepted))
    finally:
        bar.close()


def _failures(raw: _Raw) -> dict[str, dict[str, Any]]:
    out = {}
    for arm in ARMS:
        recs = [r for k, r in sorted(raw.samples.items()) if k[0] == arm]
        failed = [r for r in recs if r.get("error")]
        out[arm] = {
            "requests": len(recs),
            "failed": len(failed),
            "first": failed[0]["error"] if failed else None,
        }
    return out


def _first_token_pvalues(cfg: AuditConfig, raw: _Raw) -> tuple[float, ...]:
    """Per prompt: the first token's homogeneity p over completed requests (the control
    must not fail because one arm's requests fail: those have no first token)."""
    from .. import stats

    out = []
    for pi in range(len(cfg.prompts)):
        first = {
            arm: [
                r["tokens"][0]
                for k, r in raw.samples.items()
                if k[0] == arm and k[1] == pi and not r.get("error") and r["tokens"]
            ]
            for arm in ARMS
        }
        labels, ca, cb = stats.counts_from_samples(first["a"], first["b"])
        out.append(float(stats.homogeneity(ca, cb).pvalue) if len(labels) > 1 else 1.0)
    return tuple(out)


def _speeds(raw: _Raw) -> dict[str, float]:
    out = {}
    for arm in ARMS:
        ok = [r for k, r in raw.samples.items() if k[0] == arm and not r.get("error")]
        secs = sum(r["seconds"] for r in ok)
        if secs > 0:
            out[arm] = sum(len(r["tokens"]) for r in ok) / secs
    return out


def _open_engine_raw(
    a: Engine, b: Engine, cfg: AuditConfig, out_dir: str | Path | None
) -> tuple[tuple[Any, Any], Path | None, _Raw]:
    """The two arms' references (B labelled apart when both are the same engine), the output
    folder and the raw file under the sampling key: one for the fixed-n and the sequential
    engine audits, so either one resumes the other. Arms of one engine at different
    precisions are refused here, before any model loads."""
    check_same_numerics(a, b)
    refs = (a.ref(), b.ref())
    if refs[0].name == refs[1].name:
        b.label = b.name + " (B)"
        refs = (a.ref(), b.ref())
    out = Path(out_dir) if out_dir is not None else None
    return refs, out, _Raw.open(out / "raw.jsonl" if out else None, cfg.sampling_key(*refs))


def run_engine_audit(
    a: Engine,
    b: Engine,
    cfg: AuditConfig,
    *,
    out_dir: str | Path | None = None,
    progress: bool = True,
    identity: bool = False,
    max_consecutive_failures: int = 20,
) -> AuditReport:
    """Audit in-process engine ``b`` against ``a`` (see the module docstring). ``identity``:
    ``b`` is ``a`` with the target as its own draft, so its acceptance must be exactly 1."""
    t0 = time.perf_counter()
    refs, out, raw = _open_engine_raw(a, b, cfg, out_dir)
    counters = _Counters()
    for arm, engine in zip(ARMS, (a, b), strict=True):
        try:
            _sample_arm(cfg, arm, engine, raw, counters, progress, max_consecutive_failures)
        finally:
            engine.close()  # one arm's models in memory at a time
    rng = np.random.default_rng(cfg.seed)
    control = a.first_token_from_target and b.first_token_from_target
    if a.first_token_from_target is False or b.first_token_from_target is False:
        control = False
    verdict, tests, tv, mdt, statement, first, numerics, note, power = _tests(
        cfg, raw, rng, first_token_control=control
    )
    greedy, gaps = _greedy(cfg, raw) if cfg.greedy else (None, ())
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
        load=None,
        first_token_counts=first,
        endpoints=refs,
        config=cfg,
        preflight={"engines": {e.name: {"engine": e.engine, "spec": e.spec} for e in (a, b)}},
        seconds=time.perf_counter() - t0,
        out_dir=None if out is None else str(out),
        numerics=(),
        response_counters=counters.own_summary(),
        logprob_note=note,
        position_power=tuple(power),
        first_token_control=control,
        failures=_failures(raw),
        identity_probe=identity,
        sampled_draft=b.sampled_draft,
        greedy_margins_known=False,
        speeds=_speeds(raw),
        lossy=b.lossy,
        first_token_pvalues=_first_token_pvalues(cfg, raw),
    )
    if out is not None:
        audit_html(report, out / "report.html")
        tmp = out / "summary.json.tmp"
        tmp.write_text(json.dumps(report.to_json(), indent=1, default=str), encoding="utf-8")
        tmp.replace(out / "summary.json")
    return report


def _settings(settings: dict[str, Any]) -> dict[str, Any]:
    # in-process engines have no load sweep (one request at a time)
    return {"load_levels": (), **settings}


def engine_audit(
    a: Engine | str,
    b: Engine | str,
    prompts: Sequence[str] | str,
    *,
    out_dir: str | Path | None = None,
    progress: bool = True,
    identity: bool = False,
    **settings: Any,
) -> AuditReport:
    """:func:`specviz.audit.audit` for in-process engines: ``a`` and ``b`` are
    :class:`~specviz.audit.engines.Engine` objects or specs such as
    ``"openvino:smollm2-135m"`` / ``"openvino:smollm2-135m,draft=target"``.

    >>> report = engine_audit("openvino:smollm2-135m", "openvino:smollm2-135m,draft=target",
    ...                       ["Once upon a time"], n_samples=300)  # doctest: +SKIP
    """
    cfg = AuditConfig(prompts=prompts, **_settings(settings))
    ea = engine_from_spec(a, "A") if isinstance(a, str) else a
    eb = engine_from_spec(b, "B") if isinstance(b, str) else b
    return run_engine_audit(ea, eb, cfg, out_dir=out_dir, progress=progress, identity=identity)


def identity_probe(
    engine: str,
    prompts: Sequence[str] | str,
    *,
    out_dir: str | Path | None = None,
    progress: bool = True,
    **settings: Any,
) -> AuditReport:
    """The identity-draft probe, one call: ``engine`` (a spec, e.g.
    ``"openvino:qwen2.5-coder-0.5b"``) without speculation against the same engine with the
    target as its own draft. A lossless engine accepts every drafted token (acceptance exactly
    1, from its own counters) and keeps the plain law; the report's outcome is "inconsistent"
    when either fails.

    >>> identity_probe("openvino:smollm2-135m", ["Once upon a time"])  # doctest: +SKIP
    """
    return engine_audit(
        engine,
        identity_spec(engine),
        prompts,
        out_dir=out_dir,
        progress=progress,
        identity=True,
        **settings,
    )
