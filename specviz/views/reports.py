"""Figures and HTML of the two reports (``ConsistencyReport``, ``AuditReport``): the report
objects hold data; this is how they look.

What a drawing reads is stated once, as the protocols :class:`ComparisonReport` (any report of a
two-sample comparison) and :class:`AuditPage` (the audit's page); both report classes satisfy
them (``tests/test_report_protocols.py``), and views sit above the checks and the audits in the
import contract, so nothing here guesses at a report with ``getattr(..., default)``."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .labels import Tokenizer, _labels, count_axis
from .palette import PALETTE

__all__ = [
    "AuditPage",
    "ComparisonReport",
    "audit_figures",
    "audit_html",
    "consistency_figures",
    "first_token_names",
]


@runtime_checkable
class ComparisonReport(Protocol):
    """What the figures read from a report of a two-sample comparison
    (:class:`~specviz.checks.ConsistencyReport`, :class:`~specviz.audit.AuditReport`)."""

    verdict: str
    n_samples: int
    min_detectable_tv: float
    tests: Any  # DataFrame: one row per test, with pvalue, holm, bh, reject ...
    first_token_counts: tuple  # (labels, counts in one arm, counts in the other)

    @property
    def outcome(self) -> str:
        """The verdict with its power: "inconclusive" when these samples could not see much."""
        ...


@runtime_checkable
class AuditPage(ComparisonReport, Protocol):
    """What :func:`audit_html` and :func:`audit_figures` read (:class:`~specviz.audit.AuditReport`)."""

    endpoints: tuple  # (A: speculation off, B: on), each with name, base_url, model
    power_statement: str
    logprob_note: str | None
    tv: Any  # DataFrame or None: TV per prompt and position, with a bootstrap interval
    load: Any  # DataFrame or None: the load sweep
    greedy: Any  # GreedyConsistencyResult or None
    greedy_logprob_gap: tuple
    config: Any  # AuditConfig
    preflight: dict
    seconds: float

    @property
    def verdict_line(self) -> str: ...

    @property
    def greedy_verdict(self) -> str | None: ...

    @property
    def crossovers(self) -> tuple: ...

    def summary(self) -> str: ...

    def power_rows(self) -> list[dict[str, Any]]: ...

    def first_token_line(self) -> str | None: ...

    def identity_line(self) -> str | None: ...

    def failure_line(self) -> str | None: ...

    def acceptance_rows(self) -> list[dict[str, Any]]: ...


def first_token_names(labels: Sequence[Any], tokenizer: Tokenizer = None) -> list[str]:
    """Bar labels of first-token outcomes: token text (whitespace made visible, ``#id``
    appended where two ids decode alike) for token ids when a tokenizer is known, ``#id``
    without one; other outcomes (pooled bins, text pieces) as they print.

    >>> first_token_names([5, 7], ["a", "b", "c", "d", "e", " x", "y", "z"])
    ['·x', 'z']
    >>> first_token_names([5, 7])
    ['#5', '#7']
    """
    ids = [i for i in labels if isinstance(i, (int, np.integer)) and not isinstance(i, bool)]
    text = dict(zip(ids, _labels([int(i) for i in ids], tokenizer), strict=True))
    return [text[i] if i in text else str(i) for i in labels]


def _power_line(report: ComparisonReport) -> str:
    """The outcome with its power, for a figure title (e.g. "inconclusive: could not see
    TV < 0.606")."""
    outcome, mdt = report.outcome, report.min_detectable_tv
    n = f"{report.n_samples} samples per arm"
    if outcome == "inconclusive":
        return f"{n}; inconclusive: could not see TV < {mdt:.3g}"
    if outcome == "consistent" and np.isfinite(mdt):
        return f"{n}; consistent: a TV of {mdt:.3g} or more would have been seen"
    return f"{n}; {outcome}"


def consistency_figures(report: ComparisonReport, *, tokenizer: Tokenizer = None) -> dict[str, Any]:
    """Observed-vs-reference bars (first token; token text with ``tokenizer``, else ``#id``;
    the title states the outcome with its power), p-value QQ plot, PIT histogram."""
    import plotly.graph_objects as go

    labels, spec, std = report.first_token_counts
    order = np.argsort(-(np.asarray(std) + np.asarray(spec)))[:25]
    every = first_token_names(labels, tokenizer)
    names = [every[i] for i in order]
    bars = go.Figure(
        [
            go.Bar(
                name="speculative",
                x=names,
                y=[spec[i] for i in order],
                marker_color=PALETTE["speculative"],
            ),
            go.Bar(
                name="standard", x=names, y=[std[i] for i in order], marker_color=PALETTE["plain"]
            ),
        ]
    )
    bars.update_layout(
        title=f"First token: speculative vs standard sampling<br><sup>{_power_line(report)}</sup>",
        barmode="group",
        xaxis=dict(title="token" if tokenizer is not None else "token id", type="category"),
        yaxis=dict(title="count", **count_axis(max([*spec, *std], default=1))),  # whole ticks
    )
    p = np.sort(report.tests.pvalue.to_numpy())
    expected = (np.arange(1, len(p) + 1) - 0.5) / len(p)
    qq = go.Figure(
        [
            go.Scatter(
                x=expected, y=p, mode="markers", name="tests", marker_color=PALETTE["speculative"]
            ),
            go.Scatter(
                x=[0, 1],
                y=[0, 1],
                mode="lines",
                name="uniform",
                line={"dash": "dash", "color": PALETTE["theory"]},
            ),
        ]
    )
    qq.update_layout(
        title="p-values vs uniform (QQ)", xaxis_title="expected", yaxis_title="observed"
    )
    pit = go.Figure(
        [
            go.Histogram(
                x=report.pit,
                xbins={"start": 0, "end": 1, "size": 0.05},
                marker_color=PALETTE["speculative"],
            )
        ]
    )
    pit.update_layout(
        title="Randomized PIT of speculative tokens (uniform if lossless)",
        xaxis_title="PIT value",
        yaxis=dict(title="count", **count_axis(_pit_peak(report.pit))),
    )
    return {"first_token": bars, "pvalue_qq": qq, "pit": pit}


def _pit_peak(pit: Any) -> int:
    """The tallest bar of the PIT histogram (bins of 0.05 on [0, 1])."""
    values = np.asarray(pit, dtype=float)
    return int(np.histogram(values, bins=20, range=(0.0, 1.0))[0].max(initial=0))


def audit_figures(report: AuditPage) -> dict[str, Any]:
    """Plotly figures: first-token bars, p-value QQ, TV per position, load curves."""
    import plotly.graph_objects as go

    a, b = report.endpoints
    figs: dict[str, Any] = {}
    labels, ca, cb = report.first_token_counts
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
    p = np.sort(report.tests.pvalue.to_numpy())
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
    if report.tv is not None and len(report.tv):
        tv_fig = go.Figure()
        for prompt, g in report.tv.groupby("prompt"):
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
    if report.load is not None and len(report.load):
        figs["load"] = _load_figure(report)
    return figs


def _load_figure(report: AuditPage) -> Any:
    """Load curves of both configurations (one dash style per load temperature), the speed-up
    of B over A (the crossover is where it falls through 1) and tokens per verification step
    seen from the client."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    a, b = report.endpoints
    table = report.load
    if "temperature" not in table:
        table = table.assign(temperature=report.config.load_temperatures[0])
    panels = [
        ("ttft_p50", "TTFT p50 (s)"),
        ("itl_p50", "inter-token latency p50 (s)"),
        ("completion_p50", "completion time p50 (s)"),
        ("tokens_per_s", "throughput (tokens/s)"),
        (None, "speed-up of B over A (1 = break-even)"),
        ("tokens_per_step", "tokens per verification step (client-side)"),
    ]
    fig = make_subplots(rows=3, cols=2, subplot_titles=[t for _, t in panels])
    dashes = ["solid", "dash", "dot", "dashdot"]
    temps = sorted(set(table.temperature))
    for ti, t in enumerate(temps):
        dash = dashes[ti % len(dashes)]
        at = f" T={t:g}" if len(temps) > 1 else ""
        for arm, ep, color in (("a", a, PALETTE["plain"]), ("b", b, PALETTE["speculative"])):
            g = table[(table.arm == arm) & (table.temperature == t)].sort_values("concurrency")
            for i, (col, _) in enumerate(panels):
                if col is None:
                    continue
                fig.add_trace(
                    go.Scatter(
                        x=g.concurrency,
                        y=g[col],
                        mode="lines+markers",
                        name=f"{ep.name} ({'off' if arm == 'a' else 'on'}){at}",
                        legendgroup=f"{arm}{t}",
                        showlegend=i == 0,
                        line={"color": color, "dash": dash},
                    ),
                    row=i // 2 + 1,
                    col=i % 2 + 1,
                )
    for c in report.crossovers:
        dash = dashes[temps.index(c.temperature) % len(dashes)] if c.temperature in temps else None
        fig.add_trace(
            go.Scatter(
                x=list(c.levels),
                y=list(c.speedups),
                mode="lines+markers",
                name=f"speed-up, {c.metric}" + (f" T={c.temperature:g}" if len(temps) > 1 else ""),
                line={"dash": dash, "color": "#2ca02c" if "throughput" in c.metric else "#9467bd"},
            ),
            row=3,
            col=1,
        )
    fig.add_hline(y=1.0, line={"dash": "dot", "color": "gray"}, row=3, col=1)
    fig.update_xaxes(title_text="concurrent requests", type="log")
    fig.update_layout(title="Load sweep (streaming)", height=1000)
    return fig


def audit_html(report: AuditPage, path: str | Path) -> Path:
    """A self-contained page (plotly.js inlined once)."""
    import html

    a, b = report.endpoints
    default = "(server default)"
    # the outcome with its power: an underpowered pass is "inconclusive", never green
    color = {"consistent": "#2e7d32", "inconclusive": "#b26a00"}.get(report.outcome, "#c62828")
    headline = report.verdict_line
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
        f"<h2 style='color:{color}'>Verdict: {html.escape(headline)}</h2>",
        f"<pre>{html.escape(report.summary())}</pre>",
        f"<p><b>Power.</b> {html.escape(report.power_statement)}</p>",
    ]
    power_rows = report.power_rows()
    if power_rows:
        import pandas as pd

        parts.append(
            "<h2>Power per position</h2><p>Smallest TV of the law of the first t tokens "
            "(position t) detected with 90% probability, per prompt; position 1 is the first "
            "token.</p>"
        )
        table = pd.DataFrame(power_rows).pivot(
            index="prompt", columns="position", values="min_detectable_tv"
        )
        parts.append(table.to_html(float_format="%.3f"))
    for line in (
        report.first_token_line(),
        report.identity_line(),
        report.failure_line(),
    ):
        if line:
            parts.append(
                f"<p><b>{html.escape(line.split(':', 1)[0])}:</b>"
                f"{html.escape(line.split(':', 1)[1])}</p>"
            )
    if report.logprob_note:
        parts.append(f"<p><b>Reported logprobs.</b> {html.escape(report.logprob_note)}</p>")
    crossovers = report.crossovers
    if crossovers:
        parts.append("<h2>Crossover: where speculation stops paying</h2><ul>")
        parts += [f"<li>{html.escape(c.statement())}</li>" for c in crossovers]
        parts.append("</ul>")
    rows = report.acceptance_rows()
    if rows:
        import pandas as pd

        parts.append(
            "<h2>Engine counters vs the audit's own measurements</h2><p>Engine: the "
            "difference of the server's <code>/metrics</code> before and after each phase. "
            "Responses: the audit's sum of per-response draft counts (llama.cpp "
            "<code>timings.draft_n</code>). Tokens per verification step over a load phase: "
            "implied by the engine's counters (tokens / (tokens - accepted)) and measured by "
            "the client (tokens / bursts of streamed chunks). The mean acceptance length "
            "(1 + accepted / drafts) counts only the steps that had a draft.</p>"
        )
        cols = ["arm", "phase", "engine", "engine_drafts", "engine_accept_rate"]
        cols += ["engine_accept_length", "engine_per_position", "response_draft_tokens"]
        cols += ["response_accept_rate", "engine_tokens_per_step", "client_tokens_per_step"]
        parts.append(pd.DataFrame(rows)[cols].to_html(index=False, float_format="%.3f"))
        parts.append(
            "<ul>"
            + "".join(f"<li>{html.escape(r['engine_statement'] or '')}</li>" for r in rows)
            + "</ul>"
        )
    figs = audit_figures(report)
    first = True
    for fig in figs.values():
        parts.append(fig.to_html(full_html=False, include_plotlyjs="inline" if first else False))
        first = False
    parts.append("<h2>Tests (sorted by Holm-adjusted p)</h2>")
    cols = ["prompt", "test", "statistic", "pvalue", "dof", "holm", "bh", "reject", "method"]
    parts.append(report.tests.sort_values("holm")[cols].to_html(index=False, float_format="%.4g"))
    if report.greedy is not None:
        import pandas as pd

        g = pd.DataFrame(
            {
                "prompt": range(report.greedy.n),
                "first_divergence": report.greedy.first_divergence,
                "margin": report.greedy.margins,
                "verdict": report.greedy.verdicts,
                "max |logprob A - B| before it": report.greedy_logprob_gap or None,
            }
        )
        parts.append(
            f"<h2>Greedy identity (T=0, {report.config.greedy_max_tokens} tokens): "
            f"{report.greedy_verdict}</h2>"
        )
        parts.append(g.to_html(index=False))
    if report.load is not None and len(report.load):
        parts.append("<h2>Load sweep</h2>")
        parts.append(report.load.to_html(index=False, float_format="%.4g"))
    conf = {k: v for k, v in asdict(report.config).items() if k != "prompts"}
    parts.append("<h2>Configuration</h2><pre>")
    parts.append(html.escape(json.dumps(conf, indent=1, default=str)))
    parts.append("\nprompts:\n" + html.escape("\n".join(repr(p) for p in report.config.prompts)))
    parts.append(f"\npreflight: {html.escape(json.dumps(report.preflight, default=str))}")
    parts.append(f"\nwall time: {report.seconds:.1f} s</pre></body></html>")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text("\n".join(parts), encoding="utf-8")
    os.replace(tmp, out)  # a reader never sees half a page
    return out
