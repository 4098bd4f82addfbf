"""Figures of statistical checks: observed vs expected, p-values, power, logit margins."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..stats import Pooled
from .labels import _fmt
from .palette import KIND_COLORS, P_COLOR, Q_COLOR, RESIDUAL_COLOR, THEORY_COLOR, color

__all__ = [
    "gof_figure",
    "verifier_report_figure",
    "pvalue_uniformity_figure",
    "power_curve_figure",
    "margin_figure",
    "sequential_figure",
]


# -------------------------------------------------------------------------------------------
# statistics results
# -------------------------------------------------------------------------------------------


def gof_figure(
    result: Any, *, title: str | None = None, label: Callable[[Any], str] | None = None
) -> go.Figure:
    """Observed vs expected counts of a goodness-of-fit result (``specviz.stats`` results carry
    ``observed``/``expected``/``labels`` of the bins actually tested, after pooling), with the
    statistic and p-value in the title: the bars show *which* outcomes drive a rejection.
    ``label`` formats an outcome (pooled bins are labelled by the test itself)."""
    fmt = label or str
    # pooled bins (sparse outcomes merged by the test) keep their own "<pooled: k outcomes>"
    x = [str(lab) if isinstance(lab, Pooled) else fmt(lab) for lab in result.labels]
    fig = go.Figure(
        [
            go.Bar(
                name="observed",
                x=x,
                y=np.asarray(result.observed, dtype=float).tolist(),
                marker_color=color("speculative"),  # the samples under test
            ),
            go.Bar(
                name="expected",
                x=x,
                y=np.asarray(result.expected, dtype=float).tolist(),
                marker_color=THEORY_COLOR,
                opacity=0.7,
            ),
        ]
    )
    head = title + "<br><sup>" if title else ""
    fig.update_layout(
        title=f"{head}{result.method}: statistic {_fmt(result.statistic, 4)}, dof {result.dof}, "
        f"p = {_fmt(result.pvalue)}, n = {result.n}" + ("</sup>" if title else ""),
        barmode="group",
        xaxis=dict(title="outcome", type="category"),
        yaxis=dict(title="count"),
        height=380,
    )
    return fig


def verifier_report_figure(
    names: Sequence[str],
    pvalues: Sequence[float],
    tvs: Sequence[float],
    *,
    alpha: float = 1e-3,
    lossless: Sequence[bool] | None = None,
) -> go.Figure:
    """Per verifier: ``-log10 p`` of the goodness-of-fit test (left; the dashed line is the
    test level) and the exact TV between its output law and the target's (right). A broken rule
    with a small TV can pass a test that lacks the samples to see it -- both numbers matter."""
    ok = list(lossless) if lossless is not None else [n == "lossless" for n in names]
    colors = [KIND_COLORS["accepted"] if o else THEORY_COLOR for o in ok]
    logp = [min(16.0, -math.log10(max(p, 1e-16))) for p in pvalues]
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("evidence: -log10 p (capped at 16)", "exact TV to the target law"),
    )
    fig.add_trace(
        go.Bar(
            name="-log10 p",
            x=list(names),
            y=logp,
            marker_color=colors,
            customdata=list(pvalues),
            hovertemplate="%{x}: p = %{customdata:.3g}<extra></extra>",
            showlegend=False,
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Bar(
            name="TV",
            x=list(names),
            y=list(tvs),
            marker_color=colors,
            hovertemplate="%{x}: TV = %{y:.4f}<extra></extra>",
            showlegend=False,
        ),
        row=1,
        col=2,
    )
    fig.add_hline(
        y=-math.log10(alpha),
        line_dash="dash",
        line_color="black",
        row=1,
        col=1,
        annotation_text=f"alpha = {alpha:g}",
    )
    fig.update_layout(title="Which verifiers keep the target's law?", height=420)
    return fig


# -------------------------------------------------------------------------------------------
# lossless statistics: calibration, power, greedy margins
# -------------------------------------------------------------------------------------------


def pvalue_uniformity_figure(
    pvalues: Mapping[str, Sequence[float]], *, alpha: float = 0.05, title: str | None = None
) -> go.Figure:
    """Sorted p-values against uniform quantiles (QQ), one series per label: a calibrated
    test on a true null lies on the diagonal; a broken rule bends the curve towards 0. The
    dashed horizontal line is the test level (the share of points below it is the
    rejection rate)."""
    fig = go.Figure()
    palette = [KIND_COLORS["accepted"], THEORY_COLOR, P_COLOR, Q_COLOR, RESIDUAL_COLOR]
    for i, (label, pv) in enumerate(pvalues.items()):
        p = np.sort(np.asarray(pv, dtype=float))
        if p.size == 0:
            continue
        expected = (np.arange(1, p.size + 1) - 0.5) / p.size
        rate = float(np.mean(p < alpha))
        fig.add_trace(
            go.Scatter(
                name=f"{label}: {rate:.0%} below {alpha:g}",
                x=expected.tolist(),
                y=p.tolist(),
                mode="markers",
                marker=dict(color=palette[i % len(palette)], size=6),
                hovertemplate="uniform quantile %{x:.3f}: p = %{y:.3g}<extra>"
                + str(label)
                + "</extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            name="uniform", x=[0, 1], y=[0, 1], mode="lines", line=dict(color="black", dash="dash")
        )
    )
    fig.add_hline(y=alpha, line_dash="dot", line_color="grey")
    n = max((len(v) for v in pvalues.values()), default=0)
    fig.update_layout(
        title=title or f"Calibration: p-values of {n} null replicates vs uniform",
        xaxis=dict(title="uniform quantile", range=[0, 1]),
        yaxis=dict(title="sorted p-value", range=[0, 1]),
        height=420,
        width=560,
    )
    return fig


def power_curve_figure(
    ns: Sequence[int],
    curves: Mapping[str, Sequence[float]],
    *,
    power: float = 0.9,
    marks: Mapping[str, float] | None = None,
    title: str = "Power of the first-token test vs sample size",
) -> go.Figure:
    """Power (probability of a rejection) against the sample size, one curve per alternative,
    log-x; the dotted line is the target ``power`` and ``marks`` are vertical lines at named
    sample sizes (e.g. the samples a notebook actually drew)."""
    fig = go.Figure()
    for label, ys in curves.items():
        fig.add_trace(
            go.Scatter(
                name=str(label),
                x=[int(n) for n in ns],
                y=[float(y) for y in ys],
                mode="lines+markers",
                hovertemplate="n = %{x}: power %{y:.3f}<extra>" + str(label) + "</extra>",
            )
        )
    fig.add_hline(y=power, line_dash="dot", line_color="black", annotation_text=f"{power:.0%}")
    for label, n in (marks or {}).items():
        if np.isfinite(n) and n > 0:  # a trace, not a shape: shapes on log axes take log10(x)
            fig.add_trace(
                go.Scatter(
                    name=str(label),
                    x=[float(n), float(n)],
                    y=[0.0, 1.0],
                    mode="lines",
                    line=dict(color="grey", dash="dash"),
                    hovertemplate=f"{label}<extra></extra>",
                )
            )
    fig.update_layout(
        title=title,
        xaxis=dict(title="samples (per arm)", type="log"),
        yaxis=dict(title="power", range=[0, 1.02]),
        height=400,
    )
    return fig


def margin_figure(
    background: Mapping[str, Sequence[float]],
    divergences: Sequence[Mapping[str, Any]],
    *,
    near_tie: Mapping[str, float] | None = None,
    title: str = "Top-1 minus top-2 logit: every greedy step vs the divergences",
) -> go.Figure:
    """Where greedy outputs part: the top-1/top-2 logit margin of every greedy decision
    (histogram per dtype, log-x) and, as markers on top, the margin at each first divergence
    (dicts with ``label``, ``margin`` and optionally ``dtype``). Divergences sitting at the far
    left of the histogram are near ties -- numerics, not bugs. Exact ties (margin 0: the
    argmax is decided by tie-breaking alone, claim 7's case) are drawn in the leftmost bin, at
    ``1e-4``, and counted in the legend and in the divergence labels."""
    fig = go.Figure()
    floor = 1e-4
    all_m = np.concatenate([np.asarray(v, dtype=float) for v in background.values()] or [[1.0]])
    hi = float(np.log10(max(all_m.max(initial=1.0), 1.0))) + 0.1
    for label, vals in background.items():
        raw = np.asarray(vals, dtype=float)
        v = np.maximum(raw, floor)
        ties = int(np.sum(raw == 0))
        tie_note = f", {ties} exact ties (margin 0, drawn at {floor:g})" if ties else ""
        fig.add_trace(
            go.Histogram(
                name=f"{label}: {v.size} greedy steps{tie_note}",
                x=np.log10(v).tolist(),
                xbins=dict(start=math.log10(floor), end=hi, size=0.2),
                opacity=0.55,
                hovertemplate="log10 margin %{x}: %{y} steps<extra>" + str(label) + "</extra>",
            )
        )
    ymax = 1.0
    for tr in fig.data:
        ymax = max(ymax, float(np.histogram(tr.x, bins=30)[0].max()) if len(tr.x) else 1.0)
    pts = [d for d in divergences if d.get("margin") is not None]
    if pts:
        fig.add_trace(
            go.Scatter(
                name=f"first divergences ({len(pts)})",
                x=[math.log10(max(float(d["margin"]), floor)) for d in pts],
                y=[ymax * (0.35 + 0.6 * (i % 5) / 5) for i in range(len(pts))],
                mode="markers+text",
                text=[
                    str(d.get("label", "")) + (" (exact tie)" if float(d["margin"]) == 0 else "")
                    for d in pts
                ],
                textposition="top center",
                marker=dict(symbol="x", size=12, color="black"),
                customdata=[float(d["margin"]) for d in pts],
                hovertemplate="%{text}<br>margin %{customdata:.4f}<extra></extra>",
            )
        )
    for label, t in (near_tie or {}).items():
        fig.add_vline(
            x=math.log10(t),
            line_dash="dash",
            line_color="grey",
            annotation_text=f"near tie {label}",
        )
    fig.update_layout(
        title=title,
        barmode="overlay",
        xaxis=dict(title="log10(top-1 logit - top-2 logit)"),
        yaxis=dict(title="greedy steps"),
        height=420,
    )
    return fig


def sequential_figure(
    trajectories: Mapping[str, Any],
    *,
    alpha: float,
    tv_tolerance: float | None = None,
    fixed_n: float | None = None,
    outcomes: Mapping[str, str] | None = None,
    title: str = "Anytime-valid verdicts: evidence after every batch",
) -> go.Figure:
    """One curve per run: the e-value (top, log-y; a rejection once it reaches 1/alpha) and
    the upper end of the TV confidence sequence (bottom; "equivalent" once it is below
    ``tv_tolerance``) against the samples per arm. ``trajectories`` map a label to rows of
    (samples per arm, e-value, TV upper end) -- an array or a DataFrame with those columns;
    ``outcomes`` colour each run by its verdict (inconsistent, equivalent, inconclusive) and
    ``fixed_n`` marks what a fixed-n design would have drawn."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    dashes = ("solid", "dash", "dot", "dashdot", "longdash")
    for i, (label, rows) in enumerate(trajectories.items()):
        arr = np.asarray(getattr(rows, "values", rows), dtype=float).reshape(-1, 3)
        verdict = (outcomes or {}).get(label, "inconclusive").split()[0]
        style = dict(color=color(verdict), dash=dashes[i % len(dashes)])
        for row, fmt in ((1, "e-value %{y:.3g}"), (2, "TV < %{y:.3f}")):
            fig.add_trace(
                go.Scatter(
                    name=f"{label} ({verdict})",
                    legendgroup=str(label),
                    showlegend=row == 1,
                    x=arr[:, 0],
                    y=np.maximum(arr[:, 1], 1e-300) if row == 1 else arr[:, 2],
                    mode="lines+markers",
                    line=style,
                    hovertemplate=f"n = %{{x}}: {fmt}<extra>{label}</extra>",
                ),
                row=row,
                col=1,
            )
    fig.add_hline(
        y=1 / alpha,
        row=1,
        col=1,
        line_dash="dash",
        line_color=THEORY_COLOR,
        annotation_text=f"reject: 1/alpha = {1 / alpha:g}",
    )
    if tv_tolerance is not None:
        fig.add_hline(
            y=tv_tolerance,
            row=2,
            col=1,
            line_dash="dash",
            line_color=THEORY_COLOR,
            annotation_text=f"equivalent below TV {tv_tolerance:g}",
        )
    if fixed_n:
        for row in (1, 2):
            fig.add_vline(x=fixed_n, row=row, col=1, line_dash="dot", line_color="grey")
        fig.add_annotation(
            x=fixed_n, y=1, yref="paper", text=f"fixed-n design: {fixed_n:,.0f}", showarrow=False
        )
    fig.update_yaxes(title_text="e-value", type="log", row=1, col=1)
    fig.update_yaxes(title_text="TV upper end", range=[0, 1.02], row=2, col=1)
    fig.update_xaxes(title_text="samples per arm", row=2, col=1)
    fig.update_layout(title=title, height=560)
    return fig


def sequential_html(report: Any, path: Any, *, title: str, details: str = "") -> Any:
    """A self-contained page for a sequential verdict (its summary, the e-value / TV figure
    with plotly.js inlined, the per-view table), written atomically."""
    import html
    import os
    from pathlib import Path

    fig = report.figures()["e_value"]
    parts = [
        f"<html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<h2>Verdict: {html.escape(report.outcome)}</h2><p>{html.escape(report.summary())}</p>",
        fig.to_html(full_html=False, include_plotlyjs="inline"),
        "<h2>Per prompt and view</h2>",
        report.views.to_html(index=False, float_format="%.4g"),
        f"<p>{html.escape(report.method)}</p><pre>{html.escape(details)}</pre></body></html>",
    ]
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text("\n".join(parts), encoding="utf-8")
    os.replace(tmp, out)  # a reader never sees half a page
    return out
