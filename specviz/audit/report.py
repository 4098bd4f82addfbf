"""The audit's result: data (tests, TV, greedy, load), JSON; figures and HTML are views."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .. import stats
from ..checks.sequences import LogprobNumerics
from .client import Endpoint
from .config import AuditConfig

__all__ = ["AuditReport"]


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
    def greedy_verdict(self) -> str | None:
        if self.greedy is None:
            return None
        if "bug" in self.greedy.verdicts:
            return "bug"
        return "numerics" if "numerics" in self.greedy.verdicts else "identical"

    def summary(self) -> str:
        a, b = self.endpoints
        worst = self.tests.sort_values("holm").iloc[0]
        lines = [
            f"verdict: {self.verdict} (Holm at alpha={self.alpha}, {len(self.tests)} tests, "
            f"{self.n_samples} samples per arm and prompt, {len(self.config.prompts)} prompts); "
            f"smallest adjusted p = {worst.holm:.3g} ({worst.test}, prompt {worst.prompt}).",
            self.power_statement,
        ]
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
        if self.load is not None and len(self.load):
            for lvl, g in self.load.groupby("concurrency"):
                r = {row.arm: row for row in g.itertuples()}
                if "a" in r and "b" in r and r["a"].tokens_per_s > 0:
                    lines.append(
                        f"load c={lvl}: throughput {a.name} {r['a'].tokens_per_s:.1f} tok/s, "
                        f"{b.name} {r['b'].tokens_per_s:.1f} tok/s "
                        f"(x{r['b'].tokens_per_s / r['a'].tokens_per_s:.2f}); median TTFT "
                        f"{r['a'].ttft_p50 * 1e3:.0f} / {r['b'].ttft_p50 * 1e3:.0f} ms"
                    )
        return "\n".join(lines)

    def figures(self) -> dict[str, Any]:
        """Plotly figures: first-token bars, p-value QQ, TV per position, load curves."""
        from ..views.reports import audit_figures

        return audit_figures(self)

    def to_html(self, path: str | Path) -> Path:
        """A self-contained page (plotly.js inlined once), written atomically."""
        from ..views.reports import audit_html

        return audit_html(self, path)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "alpha": self.alpha,
            "n_samples": self.n_samples,
            "n_tests": int(len(self.tests)),
            "min_holm": float(self.tests.holm.min()),
            "min_detectable_tv": self.min_detectable_tv,
            "power_statement": self.power_statement,
            "numerics": self.numerics_statement,
            "greedy_verdict": self.greedy_verdict,
            "greedy_exact_match_rate": None
            if self.greedy is None
            else self.greedy.exact_match_rate,
            "load": [] if self.load is None else self.load.to_dict(orient="records"),
            "endpoints": [asdict(e) | {"api_key": None} for e in self.endpoints],
            "seconds": self.seconds,
        }
