"""The audit's result: data (tests, TV, greedy, load), JSON; figures and HTML are views."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

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
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        a, b = self.endpoints
        figs: dict[str, Any] = {}
        labels, ca, cb = self.first_token_counts
        if len(labels):
            order = np.argsort(-(np.asarray(ca) + np.asarray(cb)))[:25]
            names = [repr(labels[i]) for i in order]
            figs["first_token"] = go.Figure(
                [
                    go.Bar(name=f"{a.name} (off)", x=names, y=[int(ca[i]) for i in order]),
                    go.Bar(name=f"{b.name} (on)", x=names, y=[int(cb[i]) for i in order]),
                ]
            ).update_layout(
                title="Prompt 0, first token: counts in both configurations",
                barmode="group",
                xaxis_title="token piece",
                yaxis_title="count",
            )
        p = np.sort(self.tests.pvalue.to_numpy())
        exp = (np.arange(1, len(p) + 1) - 0.5) / max(1, len(p))
        figs["pvalue_qq"] = go.Figure(
            [
                go.Scatter(x=exp, y=p, mode="markers", name="tests"),
                go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="uniform", line={"dash": "dash"}),
            ]
        ).update_layout(
            title="p-values vs uniform (QQ): on the diagonal if speculation is lossless",
            xaxis_title="expected",
            yaxis_title="observed",
        )
        if self.tv is not None and len(self.tv):
            tv_fig = go.Figure()
            for prompt, g in self.tv.groupby("prompt"):
                tv_fig.add_trace(
                    go.Scatter(
                        x=g.position,
                        y=g.estimate,
                        mode="lines+markers",
                        name=f"prompt {prompt}",
                        error_y={
                            "type": "data",
                            "symmetric": False,
                            "array": (g.high - g.estimate).tolist(),
                            "arrayminus": (g.estimate - g.low).tolist(),
                        },
                    )
                )
            tv_fig.update_layout(
                title="Estimated TV(off, on) of the token at each position (bootstrap interval;"
                " plug-in estimates are biased upwards by sampling noise)",
                xaxis_title="position",
                yaxis_title="TV",
            )
            figs["tv"] = tv_fig
        if self.load is not None and len(self.load):
            panels = [
                ("ttft_p50", "TTFT p50 (s)"),
                ("itl_p50", "inter-token latency p50 (s)"),
                ("completion_p50", "completion time p50 (s)"),
                ("tokens_per_s", "throughput (tokens/s)"),
            ]
            load = make_subplots(rows=2, cols=2, subplot_titles=[t for _, t in panels])
            for arm, ep, color in (("a", a, "#1f77b4"), ("b", b, "#d62728")):
                g = self.load[self.load.arm == arm].sort_values("concurrency")
                for i, (col, _) in enumerate(panels):
                    load.add_trace(
                        go.Scatter(
                            x=g.concurrency,
                            y=g[col],
                            mode="lines+markers",
                            name=f"{ep.name} ({'off' if arm == 'a' else 'on'})",
                            legendgroup=arm,
                            showlegend=i == 0,
                            line={"color": color},
                        ),
                        row=i // 2 + 1,
                        col=i % 2 + 1,
                    )
            load.update_xaxes(title_text="concurrent requests", type="log")
            load.update_layout(title="Load sweep (streaming)", height=700)
            figs["load"] = load
        return figs

    def to_html(self, path: str | Path) -> Path:
        """A self-contained page (plotly.js inlined once)."""
        import html

        a, b = self.endpoints
        default = "(server default)"
        color = "#2e7d32" if self.verdict == "consistent" else "#c62828"
        parts = [
            "<!doctype html><html><head><meta charset='utf-8'>",
            "<title>specviz audit</title><style>body{font-family:sans-serif;max-width:1100px;"
            "margin:auto;padding:1em} table{border-collapse:collapse;font-size:12px} "
            "td,th{border:1px solid #ccc;padding:2px 6px} pre{background:#f5f5f5;padding:8px;"
            "white-space:pre-wrap}</style></head><body>",
            "<h1>specviz audit: speculative decoding over the API</h1>",
            f"<p><b>A (speculation off, reference):</b> {html.escape(a.name)} "
            f"<code>{html.escape(a.base_url)}</code> model {html.escape(a.model or default)}<br>"
            f"<b>B (speculation on):</b> {html.escape(b.name)} "
            f"<code>{html.escape(b.base_url)}</code> model {html.escape(b.model or default)}</p>",
            f"<h2 style='color:{color}'>Verdict: {self.verdict}</h2>",
            f"<pre>{html.escape(self.summary())}</pre>",
            f"<p><b>Power.</b> {html.escape(self.power_statement)}</p>",
        ]
        figs = self.figures()
        first = True
        for fig in figs.values():
            parts.append(
                fig.to_html(full_html=False, include_plotlyjs="inline" if first else False)
            )
            first = False
        parts.append("<h2>Tests (sorted by Holm-adjusted p)</h2>")
        cols = ["prompt", "test", "statistic", "pvalue", "dof", "holm", "bh", "reject", "method"]
        parts.append(self.tests.sort_values("holm")[cols].to_html(index=False, float_format="%.4g"))
        if self.greedy is not None:
            import pandas as pd

            g = pd.DataFrame(
                {
                    "prompt": range(self.greedy.n),
                    "first_divergence": self.greedy.first_divergence,
                    "margin": self.greedy.margins,
                    "verdict": self.greedy.verdicts,
                    "max |logprob A - B| before it": self.greedy_logprob_gap or None,
                }
            )
            parts.append(
                f"<h2>Greedy identity (T=0, {self.config.greedy_max_tokens} tokens): "
                f"{self.greedy_verdict}</h2>"
            )
            parts.append(g.to_html(index=False))
        if self.load is not None and len(self.load):
            parts.append("<h2>Load sweep</h2>")
            parts.append(self.load.to_html(index=False, float_format="%.4g"))
        conf = {k: v for k, v in asdict(self.config).items() if k != "prompts"}
        parts.append("<h2>Configuration</h2><pre>")
        parts.append(html.escape(json.dumps(conf, indent=1, default=str)))
        parts.append("\nprompts:\n" + html.escape("\n".join(repr(p) for p in self.config.prompts)))
        parts.append(f"\npreflight: {html.escape(json.dumps(self.preflight, default=str))}")
        parts.append(f"\nwall time: {self.seconds:.1f} s</pre></body></html>")
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n".join(parts), encoding="utf-8")
        return out

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
