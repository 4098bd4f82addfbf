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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from .. import stats
from ..checks.positions import position_power_statement, position_tests
from ..checks.report import result_row
from ..checks.report import verdict as report_verdict
from ..checks.sequences import LogprobNumerics, sequence_tests
from .client import AuditError, Completion, Endpoint, complete, preflight, stream
from .config import _SEED_ARM, _SEED_PROMPT, ARMS, AuditConfig
from .counters import EngineCounters, EngineSnapshot, counter_delta, fetch_snapshot
from .counters import response_counters as _response_counters
from .rawfile import load_raw
from .report import AuditReport

__all__ = ["AuditConfig", "AuditReport", "AuditError", "Endpoint", "audit", "run_audit"]


# ------------------------------------------------------------------------------ raw results


@dataclass
class _Raw:
    """The resumable JSONL file: one header line, then one line per complete result."""

    path: Path | None
    samples: dict[tuple[str, int, int], dict[str, Any]] = field(default_factory=dict)
    greedy: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path | None, key: str, cfg: AuditConfig | None = None) -> _Raw:
        raw = cls(path)
        if path is None:
            return raw
        if path.exists() and path.stat().st_size:
            for rec in load_raw(path, key, cfg):  # damaged lines are set aside and redone
                raw._index(rec)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"kind": "header", "key": key}) + "\n", encoding="utf-8")
        return raw

    def _index(self, rec: dict[str, Any]) -> None:
        if rec["kind"] == "sample":
            self.samples[(rec["arm"], rec["prompt"], rec["index"])] = rec
        elif rec["kind"] == "greedy":
            self.greedy[(rec["arm"], rec["prompt"])] = rec

    def add(self, rec: dict[str, Any]) -> None:
        self._index(rec)
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(rec) + "\n")


def _record(kind: str, arm: str, prompt: int, index: int, seed: int | None, c: Completion):
    return {
        "kind": kind,
        "arm": arm,
        "prompt": prompt,
        "index": index,
        "seed": seed,
        "tokens": list(c.tokens),
        "logprobs": list(c.logprobs),
        "top": list(c.top) if kind == "greedy" else None,
        "finish_reason": c.finish_reason,
        "seconds": round(c.seconds, 5),
        "draft_n": c.draft_tokens,
        "draft_n_accepted": c.draft_accepted,
        "completion_tokens": c.completion_tokens,
        # tokens whose logprob came without the requested alternatives: the server did not
        # compute it (llama.cpp's speculative path reports 0.0 for them)
        "unreported": sum(1 for t in c.top if not t) if c.logprobs else 0,
    }


@dataclass
class _Counters:
    """Engine counters (snapshot differences) and the audit's own per-response draft counts,
    per arm and phase, for the requests this run sent."""

    engine: dict[str, dict[str, EngineCounters]] = field(default_factory=dict)
    own: dict[str, dict[str, list[tuple[int | None, int | None]]]] = field(default_factory=dict)

    def put(self, arm: str, phase: str, before: EngineSnapshot, after: EngineSnapshot) -> None:
        self.engine.setdefault(arm, {})[phase] = counter_delta(before, after)

    def note(self, arm: str, phase: str, draft: tuple[int | None, int | None]) -> None:
        self.own.setdefault(arm, {}).setdefault(phase, []).append(draft)

    def own_summary(self) -> dict[str, dict[str, dict[str, Any]]]:
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for arm, phases in self.own.items():
            for phase, pairs in phases.items():
                summary = _response_counters([p[0] for p in pairs], [p[1] for p in pairs])
                if summary:
                    out.setdefault(arm, {})[phase] = summary
        return out


async def _snapshot(ep: Endpoint) -> EngineSnapshot:
    async with ep.client(concurrency=1) as client:
        return await fetch_snapshot(client, ep.metrics_endpoint())


async def _gather_bounded(jobs: list, concurrency: int, desc: str, progress: bool) -> None:
    """Run coroutine factories ``concurrency`` at a time; the first failure cancels the rest
    (what finished is already on disk)."""
    if not jobs:
        return
    queue: asyncio.Queue = asyncio.Queue()
    for j in jobs:
        queue.put_nowait(j)
    bar = tqdm(total=len(jobs), desc=desc, unit="req", disable=not progress, leave=False)

    async def worker() -> None:
        while not queue.empty():
            job = queue.get_nowait()
            await job()
            bar.update(1)

    tasks = [asyncio.create_task(worker()) for _ in range(min(concurrency, len(jobs)))]
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for t in pending:
            t.cancel()
        for t in done:
            if t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
    finally:
        for t in tasks:
            t.cancel()
        bar.close()


async def _sample_arm(
    cfg: AuditConfig,
    arm: str,
    ep: Endpoint,
    raw: _Raw,
    progress: bool,
    greedy_lp: bool,
    counters: _Counters,
) -> None:
    lp = 1 if cfg.outcome == "tokens" else None
    samples_phase = f"samples T={cfg.temperature:g}"
    async with ep.client(concurrency=cfg.concurrency) as client:
        jobs = []
        for pi, prompt in enumerate(cfg.prompts):
            for j in range(cfg.n_samples):
                if (arm, pi, j) in raw.samples:
                    continue
                seed = cfg.seed + ARMS.index(arm) * _SEED_ARM + pi * _SEED_PROMPT + j

                async def job(pi=pi, prompt=prompt, j=j, seed=seed) -> None:
                    c = await complete(
                        client,
                        ep,
                        prompt,
                        max_tokens=cfg.max_tokens,
                        temperature=cfg.temperature,
                        top_p=cfg.top_p,
                        top_k=cfg.top_k,
                        seed=seed,
                        logprobs=lp,
                        retries=cfg.retries,
                        api=cfg.api,
                    )
                    raw.add(_record("sample", arm, pi, j, seed, c))
                    counters.note(arm, samples_phase, (c.draft_tokens, c.draft_accepted))

                jobs.append(job)
        resumed = len(cfg.prompts) * cfg.n_samples - len(jobs)
        before = await _snapshot(ep)
        try:
            await _gather_bounded(jobs, cfg.concurrency, f"sampling {ep.name}", progress)
        except AuditError as err:
            have = sum(1 for k in raw.samples if k[0] == arm)
            raise AuditError(
                f"{err}\n({have} of {len(cfg.prompts) * cfg.n_samples} samples from "
                f"{ep.name} are complete and saved in {raw.path}; incomplete ones were not "
                f"counted; rerun the same command to resume ({resumed} were resumed this time))"
            ) from err
        after = await _snapshot(ep)
        if jobs:
            counters.put(arm, samples_phase, before, after)
        if not cfg.greedy:
            return
        gjobs = []
        for pi, prompt in enumerate(cfg.prompts):
            if (arm, pi) in raw.greedy:
                continue

            async def gjob(pi=pi, prompt=prompt) -> None:
                c = await complete(
                    client,
                    ep,
                    prompt,
                    max_tokens=cfg.greedy_max_tokens,
                    temperature=0.0,
                    seed=cfg.seed,
                    logprobs=2 if greedy_lp else None,
                    retries=cfg.retries,
                    api=cfg.api,
                )
                raw.add(_record("greedy", arm, pi, 0, None, c))
                counters.note(arm, "greedy T=0", (c.draft_tokens, c.draft_accepted))

            gjobs.append(gjob)
        await _gather_bounded(gjobs, cfg.concurrency, f"greedy {ep.name}", progress)
        if gjobs:
            counters.put(arm, "greedy T=0", after, await _snapshot(ep))


async def _sample(
    cfg: AuditConfig,
    eps: dict[str, Endpoint],
    raw: _Raw,
    progress: bool,
    greedy_lp: bool,
    counters: _Counters,
) -> None:
    """Both arms at once (interleaved in time, so slow drift of a shared machine hits both
    alike); the first failure stops both, what finished is on disk."""
    await asyncio.gather(
        *(_sample_arm(cfg, arm, eps[arm], raw, progress, greedy_lp, counters) for arm in ARMS)
    )


# ------------------------------------------------------------------------------ statistics


def _tests(
    cfg: AuditConfig, raw: _Raw, rng: np.random.Generator, first_token_control: bool | None = True
):
    import pandas as pd

    rows: list[dict[str, Any]] = []
    tv_rows: list[dict[str, Any]] = []
    power: list = []
    numerics: list[LogprobNumerics | None] = []
    first: tuple = ((), np.zeros(0), np.zeros(0))
    logprob_note = None
    # in-process engines report no logprobs: nothing to compare
    use_logprobs = cfg.outcome == "tokens" and all(r["logprobs"] for r in raw.samples.values())
    if use_logprobs:
        bad = []
        for arm in ARMS:
            recs = [r for k, r in raw.samples.items() if k[0] == arm]
            n_tok = sum(len(r["tokens"]) for r in recs)
            n_bad = sum(r.get("unreported", 0) for r in recs)
            if n_bad:
                bad.append(
                    f"{arm.upper()} reported no logprob for {n_bad} of its {n_tok} sampled tokens"
                )
        if bad:
            use_logprobs = False
            logprob_note = (
                "; ".join(bad) + " (logprob 0.0 without the requested alternatives: the server "
                "did not compute them -- llama.cpp does this for tokens of its speculative "
                "path). The logprob KS/AD tests compare reported numbers, so they are skipped; "
                "the token tests are unaffected."
            )

    for pi in range(len(cfg.prompts)):
        arms = {arm: [raw.samples[(arm, pi, j)] for j in range(cfg.n_samples)] for arm in ARMS}
        seq = {arm: [tuple(r["tokens"]) for r in recs] for arm, recs in arms.items()}

        def add(test: str, res: Any, pi: int = pi) -> None:
            rows.append(result_row(pi, test, res))

        lp = {arm: [sum(r["logprobs"]) for r in recs] for arm, recs in arms.items()}
        seq_tests = sequence_tests(
            seq["a"],
            seq["b"],
            cfg.max_tokens,
            alpha=cfg.alpha,
            rng=rng,
            n_boot=cfg.n_boot,
            logprobs=(lp["a"], lp["b"]) if use_logprobs else None,
            between="configurations",
        )
        numerics.append(seq_tests.numerics)
        for name, res in seq_tests.results:
            add(name, res)
        tv_rows += [dict(prompt=pi, **row) for row in seq_tests.tv]
        # where speculation acts: positions 2.. (the joint law of the first t tokens, token t
        # given its prefix) and the power at every position
        skip = {cfg.max_tokens} | ({2} if cfg.max_tokens > 2 else set())
        pos_results, pos_power = position_tests(
            seq["a"], seq["b"], cfg.max_tokens, alpha=cfg.alpha, skip_joint=tuple(skip)
        )
        for name, res in pos_results:
            add(name, res)
        power.append(pos_power)
        if pi == 0:
            first = seq_tests.first_counts

    tests = pd.DataFrame(rows)
    if tests.empty:
        raise AuditError(
            "nothing to test: every prompt produced a single outcome in both arms "
            "(raise the temperature or max_tokens, or use prompts with an uncertain next token)"
        )
    verdict = report_verdict(tests, cfg.alpha)
    mdt, statement = position_power_statement(
        power,
        cfg.n_samples,
        cfg.alpha,
        len(tests),
        per="configuration and prompt",
        first_token_control=first_token_control,
    )
    power_rows = [dict(prompt=pi, **vars(row)) for pi, rows in enumerate(power) for row in rows]
    return (
        verdict,
        tests,
        pd.DataFrame(tv_rows),
        mdt,
        statement,
        first,
        tuple(numerics),
        logprob_note,
        power_rows,
    )


def _greedy(cfg: AuditConfig, raw: _Raw) -> stats.GreedyConsistencyResult:
    refs, cands, margins, gaps = [], [], [], []
    for pi in range(len(cfg.prompts)):
        ra, rb = raw.greedy[("a", pi)], raw.greedy[("b", pi)]
        ta, tb = ra["tokens"], rb["tokens"]
        d = next((i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y), None)
        if d is None and len(ta) != len(tb):
            d = min(len(ta), len(tb))
        margin = None
        if d is not None and ra["top"] and d < len(ra["top"]):
            # logprob differences equal logit differences: log-softmax shifts all by one constant
            top = sorted(ra["top"][d].values(), reverse=True)
            if len(top) >= 2:
                margin = top[0] - top[1]
        refs.append(ta)
        cands.append(tb)
        margins.append(margin)
        shared = len(ta) if d is None else d
        la, lb = ra["logprobs"][:shared], rb["logprobs"][:shared]
        # positions whose logprob came without alternatives were not computed: leave them out
        ok = [
            i
            for i in range(min(len(la), len(lb)))
            if (not ra["top"] or ra["top"][i]) and (not rb["top"] or rb["top"][i])
        ]
        gaps.append(max((abs(la[i] - lb[i]) for i in ok), default=None) if la and lb else None)
    result = stats.greedy_consistency(refs, cands, margins, near_tie=cfg.near_tie)
    return result, tuple(gaps)


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
        report.to_html(out / "report.html")
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
