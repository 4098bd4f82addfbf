"""The audit's result: data (tests, TV, greedy, load, engine counters, crossover), JSON;
figures and HTML are views."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import stats
from ..checks.report import outcome_phrase, power_outcome
from ..checks.sequences import LogprobNumerics
from ..core.drawing import view
from .client import Endpoint
from .config import AuditConfig
from .counters import EngineCounters

__all__ = ["AuditCrossover", "AuditReport", "crossover"]

_METRICS = {  # load-table column -> (name, speed-up of B over A is this ratio)
    "tokens_per_s": ("throughput", "b/a"),
    "completion_p50": ("median completion time", "a/b"),
}


def crossover(levels: Sequence[float], speedups: Sequence[float]) -> tuple[str, float | None]:
    """Where the speed-up falls through 1 as the concurrency grows, interpolated linearly in
    log(concurrency): ``("crosses", level)``, ``("always_pays", None)``, ``("never_pays",
    None)`` or ``("pays_above", level)`` -- the rule of :func:`specviz.load.find_crossover`
    (which the audit may not import: the two layers are independent) -- and ``("mixed",
    None)`` when the speed-up crosses 1 more than once: no single crossover (noise around
    break-even, or a curve that is not monotone).

    >>> crossover([1, 2, 4, 8], [1.5, 1.2, 0.9, 0.7])
    ('crosses', 3.17...)
    >>> crossover([1, 2], [0.8, 0.9])
    ('never_pays', None)
    >>> crossover([1, 2, 4, 8], [0.9, 1.1, 0.95, 1.2])
    ('mixed', None)
    """
    pairs = sorted(
        (float(x), float(v))
        for x, v in zip(levels, speedups, strict=True)
        if v == v and x > 0  # drop NaN
    )
    if not pairs:
        raise ValueError("no finite speed-up to look at")
    xs, ss = [p[0] for p in pairs], [p[1] for p in pairs]
    above = [v >= 1.0 for v in ss]
    if sum(x != y for x, y in zip(above, above[1:], strict=False)) > 1:
        return "mixed", None

    def cross(i: int) -> float:
        x0, x1 = math.log(xs[i]), math.log(xs[i + 1])
        f = (ss[i] - 1.0) / (ss[i] - ss[i + 1]) if ss[i] != ss[i + 1] else 0.5
        return math.exp(x0 + f * (x1 - x0))

    down = next((i for i in range(len(xs) - 1) if above[i] and not above[i + 1]), None)
    if down is not None:
        return "crosses", cross(down)
    if all(above):
        return "always_pays", None
    if not any(above):
        return "never_pays", None
    up = next(i for i in range(len(xs) - 1) if not above[i] and above[i + 1])
    return "pays_above", cross(up)


@dataclass(frozen=True)
class AuditCrossover:
    """Where speculation stops paying in one load sweep (one temperature, one metric)."""

    temperature: float
    metric: str
    status: str  # crosses | always_pays | never_pays | pays_above | mixed
    level: float | None
    levels: tuple[int, ...]
    speedups: tuple[float, ...]

    def statement(self) -> str:
        pts = ", ".join(
            f"x{v:.2f} at c={c}" for c, v in zip(self.levels, self.speedups, strict=True)
        )
        head = f"T={self.temperature:g}, {self.metric}: "
        lo, hi = self.levels[0], self.levels[-1]
        if self.status == "crosses":
            what = f"speculation pays up to c~{self.level:.1f} and stops paying above"
        elif self.status == "always_pays":
            what = f"speculation pays at every level tested (c={lo}-{hi})"
        elif self.status == "never_pays":
            what = f"speculation never pays (c={lo}-{hi})"
        elif self.status == "mixed":
            what = "no single crossover: the speed-up crosses 1 more than once"
        else:
            what = f"speculation pays only above c~{self.level:.1f}"
        return f"{head}{what} ({pts})"

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"statement": self.statement()}


@dataclass(frozen=True, eq=False)
class AuditReport:
    verdict: str  # "consistent" | "inconsistent"
    alpha: float
    n_samples: int
    tests: Any  # DataFrame: prompt, test, statistic, pvalue, dof, method, holm, bh, reject
    tv: Any  # DataFrame: prompt, position, estimate, low, high
    min_detectable_tv: float
    power_statement: str
    greedy: stats.GreedyConsistencyResult | None
    # per prompt: largest |logprob_A - logprob_B| of the same token on the shared greedy prefix
    # (0 for exact arithmetic; batched verification in the speculative engine moves it)
    greedy_logprob_gap: tuple[float | None, ...]
    load: Any  # DataFrame: arm, concurrency, requests, ok, ttft_*, itl_*, completion_*, tok/s
    first_token_counts: tuple  # (labels, counts a, counts b) of prompt 0
    endpoints: tuple[Endpoint, Endpoint]
    config: AuditConfig
    preflight: dict[str, Any]
    seconds: float
    out_dir: str | None = None
    # per prompt: how far the two configurations' logprobs of the same sampled continuation
    # differ (the tests use one value per continuation, so this drift cannot fail them)
    numerics: tuple[LogprobNumerics | None, ...] = ()
    # the engines' own speculation counters per arm and phase ("samples T=..", "greedy T=0",
    # "load T=.."): differences of /metrics snapshots over the requests of this run
    engine_counters: dict[str, dict[str, EngineCounters]] = field(default_factory=dict)
    # the audit's sums of per-response draft counts (llama.cpp timings) per arm and phase
    response_counters: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    shared_server: bool = False  # A and B are one server: its counters cover both
    # why the logprob tests were skipped (a server reported logprobs it did not compute)
    logprob_note: str | None = None
    # per prompt and position (1-based): samples per arm, smallest TV seen with 90% power
    position_power: tuple[dict[str, Any], ...] = ()
    # True: the engine samples the first token from the target alone, so token@0 is the
    # harness's negative control; False: it is speculated too; None: not known
    first_token_control: bool | None = None
    # per arm: requests, failed, first error (in-process engines: a failure is an outcome)
    failures: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the identity-draft probe (B = A with the target as its own draft): acceptance must be 1
    identity_probe: bool = False
    sampled_draft: bool | None = None  # B drafts by sampling q (then sampled acceptance is 1 too)
    greedy_margins_known: bool = True  # False: no logprobs, a greedy divergence is unexplained
    speeds: dict[str, float] = field(default_factory=dict)  # per arm: tokens/s (in-process)
    lossy: bool = False  # B is a deliberately lossy mode (it must be caught)
    # per prompt: the first token's homogeneity p over completed requests only (a failed
    # request has no first token; in-process audits, where failures are outcomes)
    first_token_pvalues: tuple[float, ...] = ()

    @property
    def crossovers(self) -> tuple[AuditCrossover, ...]:
        """Per load temperature: where speculation stops paying in throughput and in median
        completion time (speed-up = B's throughput / A's, A's completion time / B's)."""
        if self.load is None or not len(self.load):
            return ()
        out = []
        temps = (
            sorted(set(self.load.temperature))
            if "temperature" in self.load
            else [self.config.load_temperatures[0]]
        )
        for t in temps:
            g = self.load[self.load.temperature == t] if "temperature" in self.load else self.load
            a = g[g.arm == "a"].set_index("concurrency")
            b = g[g.arm == "b"].set_index("concurrency")
            levels = sorted(set(a.index) & set(b.index))
            if not levels:
                continue
            for col, (name, way) in _METRICS.items():
                sp = []
                for c in levels:
                    va, vb = float(a.loc[c, col]), float(b.loc[c, col])
                    num, den = (vb, va) if way == "b/a" else (va, vb)
                    sp.append(num / den if den > 0 else math.nan)
                try:
                    status, level = crossover(levels, sp)
                except ValueError:
                    continue
                out.append(AuditCrossover(float(t), name, status, level, tuple(levels), tuple(sp)))
        return tuple(out)

    def acceptance_rows(self) -> list[dict[str, Any]]:
        """One row per arm and phase: the engine's counters next to the audit's own per-response
        counts and, for load phases, tokens per verification step two ways -- implied by the
        engine's counters (T / (T - accepted) over the T tokens the phase streamed: every step
        yields one target token) and measured by the client (T / bursts of chunks). Unlike the
        mean acceptance length (1 + accepted / drafts, per step *with* a draft), both count the
        steps where nothing was drafted too."""
        rows = []
        arms = sorted(set(self.engine_counters) | set(self.response_counters))
        for arm in arms:
            phases = list(self.engine_counters.get(arm, {}))
            phases += [p for p in self.response_counters.get(arm, {}) if p not in phases]
            for phase in phases:
                eng = self.engine_counters.get(arm, {}).get(phase)
                own = self.response_counters.get(arm, {}).get(phase, {})
                row: dict[str, Any] = {
                    "arm": arm,
                    "phase": phase,
                    "engine": eng.engine if eng is not None else None,
                    "engine_drafts": None if eng is None else eng.drafts,
                    "engine_accept_rate": None if eng is None else eng.acceptance_rate,
                    "engine_accept_length": None if eng is None else eng.mean_acceptance_length,
                    "engine_per_position": None
                    if eng is None
                    else [round(v, 3) for v in eng.per_position],
                    "engine_statement": None if eng is None else eng.statement(),
                    "response_draft_tokens": own.get("draft_tokens"),
                    "response_accept_rate": own.get("acceptance_rate"),
                    "engine_tokens_per_step": None,
                    "client_tokens_per_step": None,
                }
                if phase.startswith("load T=") and self.load is not None and len(self.load):
                    t = float(phase.split("=", 1)[1])
                    g = self.load[(self.load.arm == arm) & (self.load.temperature == t)]
                    tokens = float(g.tokens.sum())
                    bursts = float((g.tokens / g.tokens_per_step).sum())
                    if tokens > 0 and bursts > 0:
                        row["client_tokens_per_step"] = tokens / bursts
                    if eng is not None and eng.accepted is not None and tokens > eng.accepted:
                        row["engine_tokens_per_step"] = tokens / (tokens - eng.accepted)
                rows.append(row)
        return rows

    @property
    def numerics_statement(self) -> str | None:
        known = [n for n in self.numerics if n is not None]
        if not known:
            return None
        shared = [n for n in known if n.shared]
        if not shared:
            return str(LogprobNumerics(math.nan, 0, "configurations"))
        worst = max(shared, key=lambda n: n.max_gap)
        total = sum(n.shared for n in shared)
        return str(LogprobNumerics(worst.max_gap, total, "configurations"))

    @property
    def tv_threshold(self) -> float:
        return self.config.tv_threshold

    @property
    def outcome(self) -> str:
        """``verdict`` with its power, as :attr:`ConsistencyReport.outcome`: "inconsistent" (a
        test rejected, or the identity probe's acceptance is not 1), "consistent" (none did, and
        a TV of ``tv_threshold`` at position 2 -- where speculation acts -- would have been seen
        with 90% probability) or "inconclusive" (none did, but these samples could only see a
        larger TV: no evidence that B keeps A's law)."""
        if self.identity_probe and self.identity_outcome == "fail":
            return "inconsistent"
        return power_outcome(self.verdict, self.min_detectable_tv, self.config.tv_threshold)

    @property
    def verdict_line(self) -> str:
        """The outcome as a phrase, e.g. "inconclusive (could not see TV < 0.261)"."""
        if (
            self.identity_probe
            and self.identity_outcome == "fail"
            and self.verdict != "inconsistent"
        ):
            return "inconsistent (identity probe: a draft equal to the target was rejected)"
        phrase = outcome_phrase(self)
        if any(row["position"] == 2 for row in self.position_power):
            phrase = phrase.replace("a first-token TV", "a position-2 TV")
        return phrase

    @property
    def greedy_verdict(self) -> str | None:
        if self.greedy is None:
            return None
        if "bug" in self.greedy.verdicts:
            return "bug" if self.greedy_margins_known else "diverged"
        return "numerics" if "numerics" in self.greedy.verdicts else "identical"

    # ---------------------------------------------------------------- positions, controls
    def first_token_line(self) -> str | None:
        """The first token's test (token@0) as the harness's negative control."""
        rows = self.tests[self.tests.test == "token@0"] if len(self.tests) else self.tests
        if not len(rows):
            return None
        p = float(rows.pvalue.min())
        worst = int(rows.loc[rows.pvalue.idxmin(), "prompt"])
        completed = ""
        if self.first_token_pvalues and any(f.get("failed") for f in self.failures.values()):
            p = min(self.first_token_pvalues)
            worst = self.first_token_pvalues.index(p)
            completed = ", completed requests only"
        if self.first_token_control:
            ok = p >= self.alpha / len(rows)
            state = "passed" if ok else "FAILED"
            why = (
                "it must be consistent: the engine samples the first token from the target alone"
                if ok
                else "the two arms differ before speculation acts: check that they run the same "
                "model, weights, tokenizer and sampling settings"
            )
            return (
                f"first-token control (position 1, token@0): {state}, smallest p = {p:.3g} "
                f"(prompt {worst}, {len(rows)} prompts, Bonferroni at alpha={self.alpha}"
                f"{completed}); {why}"
            )
        how = "is speculated too" if self.first_token_control is False else "may be speculated"
        return f"first token (position 1, token@0): smallest p = {p:.3g}; it {how} in this engine"

    def failure_line(self) -> str | None:
        """Failed requests per arm (counted as an outcome of their own in the tests)."""
        parts = []
        for arm, f in sorted(self.failures.items()):
            if not f.get("failed"):
                continue
            rate = f["failed"] / max(1, f["requests"])
            parts.append(
                f"{arm.upper()} {f['failed']} of {f['requests']} requests ({rate:.1%}); first: "
                f"{f['first']}"
            )
        if not parts:
            if self.failures:
                return "failures: none (every request completed)"
            return None
        return "failures (each counted as an outcome '<failed>' in the token tests): " + "; ".join(
            parts
        )

    def identity_rows(self) -> list[dict[str, Any]]:
        """B's acceptance per phase with what a lossless engine must show when the draft is
        the target: 1 at T=0 always; 1 when sampling too, where drafts are sampled from q."""
        rows = []
        phases = set(self.response_counters.get("b", {})) | set(self.engine_counters.get("b", {}))
        for phase in sorted(phases):
            if phase.startswith("load"):
                continue
            own = self.response_counters.get("b", {}).get(phase, {})
            eng = self.engine_counters.get("b", {}).get(phase)
            if own.get("draft_tokens"):
                drafted, accepted, where = own["draft_tokens"], own["accepted"], "responses"
            elif eng is not None and eng.draft_tokens:
                drafted, accepted, where = eng.draft_tokens, eng.accepted, "engine /metrics"
            else:
                continue
            greedy = phase.startswith("greedy")
            expect = 1.0 if greedy or self.sampled_draft else None
            rate = accepted / drafted if drafted else math.nan
            rows.append(
                dict(
                    phase=phase,
                    drafted=drafted,
                    accepted=accepted,
                    rate=rate,
                    expected=expect,
                    ok=None if expect is None else accepted == drafted,
                    source=where,
                )
            )
        return rows

    @property
    def identity_outcome(self) -> str | None:
        """'pass' / 'fail' / 'no counters' for the identity probe (None when not a probe)."""
        if not self.identity_probe:
            return None
        checked = [r for r in self.identity_rows() if r["ok"] is not None]
        if not checked:
            return "no counters"
        return "pass" if all(r["ok"] for r in checked) else "fail"

    def identity_line(self) -> str | None:
        if not self.identity_probe:
            return None
        bits = []
        for r in self.identity_rows():
            need = "" if r["expected"] is None else " (must be 1)"
            bits.append(
                f"{r['phase']}: {r['accepted']}/{r['drafted']} = {r['rate']:.3f}{need} "
                f"[{r['source']}]"
            )
        head = {
            "pass": "passed: every drafted token was accepted and the law is tested above",
            "fail": "FAILED: a lossless engine accepts every token of a draft equal to the target",
            "no counters": "no acceptance counts (the engine reports none); the law is tested above",
        }[self.identity_outcome or "no counters"]
        return f"identity probe (draft = target): {head}" + (
            "; acceptance " + "; ".join(bits) if bits else ""
        )

    def power_rows(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.position_power]

    def summary(self) -> str:
        a, b = self.endpoints
        worst = self.tests.sort_values("holm").iloc[0]
        lines = [
            f"verdict: {self.verdict_line} [Holm at alpha={self.alpha}, {len(self.tests)} tests, "
            f"{self.n_samples} samples per arm and prompt, {len(self.config.prompts)} prompts]; "
            f"smallest adjusted p = {worst.holm:.3g} ({worst.test}, prompt {worst.prompt}).",
            self.power_statement,
        ]
        lines += [
            x for x in (self.first_token_line(), self.identity_line(), self.failure_line()) if x
        ]
        if self.lossy:
            lines.append(
                "B is a deliberately lossy mode: an honest audit must flag it (a lossy control)"
            )
        for arm, speed in sorted(self.speeds.items()):
            lines.append(f"speed {arm.upper()}: {speed:.1f} tokens/s (sampled tokens / seconds)")
        if self.greedy is not None:
            lines.append(
                f"greedy (T=0): {self.greedy_verdict}; exact match {self.greedy.exact_match_rate:.0%}"
                f" of {self.greedy.n} prompts; verdicts {list(self.greedy.verdicts)}; margins at "
                f"the divergence {[None if m is None else round(m, 3) for m in self.greedy.margins]}"
            )
            gaps = [g for g in self.greedy_logprob_gap if g is not None]
            if gaps:
                lines.append(
                    f"largest |logprob A - logprob B| of the same token on a shared greedy "
                    f"prefix: {max(gaps):.3g} nats (0 with exact arithmetic)"
                )
        if self.numerics_statement is not None:
            lines.append(f"{self.numerics_statement} (sampled; 0 with identical arithmetic)")
        if self.logprob_note:
            lines.append(f"reported logprobs: {self.logprob_note}")
        if self.load is not None and len(self.load):
            keys = ["temperature", "concurrency"] if "temperature" in self.load else ["concurrency"]
            for key, g in self.load.groupby(keys):
                t, lvl = (
                    key if len(keys) == 2 else (None, key[0] if isinstance(key, tuple) else key)
                )
                r = {row.arm: row for row in g.itertuples()}
                if "a" in r and "b" in r and r["a"].tokens_per_s > 0:
                    at = "" if t is None else f"T={t:g} "
                    lines.append(
                        f"load {at}c={lvl}: throughput {a.name} {r['a'].tokens_per_s:.1f} tok/s, "
                        f"{b.name} {r['b'].tokens_per_s:.1f} tok/s "
                        f"(x{r['b'].tokens_per_s / r['a'].tokens_per_s:.2f}); median TTFT "
                        f"{r['a'].ttft_p50 * 1e3:.0f} / {r['b'].ttft_p50 * 1e3:.0f} ms"
                    )
            for c in self.crossovers:
                lines.append(f"crossover: {c.statement()}")
        lines += self.counter_lines()
        return "\n".join(lines)

    def counter_lines(self) -> list[str]:
        """What the engines say about their speculation, next to the audit's own counts."""
        lines = []
        names = {"a": self.endpoints[0].name, "b": self.endpoints[1].name}
        if self.shared_server and self.engine_counters:
            lines.append("A and B are one server: its counters below cover both arms' requests")
        for row in self.acceptance_rows():
            text = f"{names.get(row['arm'], row['arm'])}, {row['phase']}: "
            text += row["engine_statement"] or "engine counters: not read"
            if row["response_draft_tokens"] is not None:
                text += (
                    f"; the audit's responses (timings): {row['response_draft_tokens']} draft "
                    f"tokens, acceptance rate {row['response_accept_rate']:.3f}"
                )
            if row["client_tokens_per_step"] is not None:
                implied = row["engine_tokens_per_step"]
                text += (
                    "; tokens per verification step: "
                    + ("" if implied is None else f"{implied:.2f} implied by the counters, ")
                    + f"{row['client_tokens_per_step']:.2f} measured by the client (stream "
                    "bursts)"
                )
            lines.append(text)
        return lines

    def figures(self) -> dict[str, Any]:
        """Plotly figures: first-token bars, p-value QQ, TV per position, load curves."""
        # a view: drawn by specviz.views.reports.audit_figures (core/drawing.py says why)
        return view("reports.audit_figures")(self)

    def to_html(self, path: str | Path) -> Path:
        """A self-contained page (plotly.js inlined once), written atomically."""
        # a view: written by specviz.views.reports.audit_html (core/drawing.py says why)
        return view("reports.audit_html")(self, path)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "outcome": self.outcome,
            "tv_threshold": self.config.tv_threshold,
            "alpha": self.alpha,
            "n_samples": self.n_samples,
            "n_prompts": len(self.config.prompts),
            "temperature": self.config.temperature,
            "top_p": self.config.top_p,
            "n_tests": int(len(self.tests)),
            "min_holm": float(self.tests.holm.min()),
            "min_detectable_tv": self.min_detectable_tv,
            "power_statement": self.power_statement,
            "numerics": self.numerics_statement,
            "logprob_note": self.logprob_note,
            "greedy_verdict": self.greedy_verdict,
            "greedy_exact_match_rate": None
            if self.greedy is None
            else self.greedy.exact_match_rate,
            "load": [] if self.load is None else self.load.to_dict(orient="records"),
            "crossovers": [c.to_json() for c in self.crossovers],
            "engine_counters": {
                arm: {phase: c.to_json() for phase, c in phases.items()}
                for arm, phases in self.engine_counters.items()
            },
            "response_counters": self.response_counters,
            "acceptance": self.acceptance_rows(),
            "position_power": self.power_rows(),
            "first_token_control": self.first_token_control,
            "first_token": self.first_token_line(),
            "failures": self.failures,
            "identity_probe": self.identity_probe,
            "identity_outcome": self.identity_outcome,
            "identity": self.identity_rows(),
            "speeds": self.speeds,
            "lossy": self.lossy,
            "api": self.config.api,
            "endpoints": [asdict(e) | {"api_key": None} for e in self.endpoints],
            "seconds": self.seconds,
        }
