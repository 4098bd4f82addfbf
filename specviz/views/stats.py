"""Figures of statistical checks: observed vs expected, p-values, power, logit margins."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..stats import Pooled
from .labels import _fmt, count_axis
from .palette import (
    KIND_COLORS,
    THEORY_COLOR,
    VERDICT_COLORS,
    color,
)
from .palette import series as palette_series

__all__ = [
    "gof_figure",
    "gof_residuals_figure",
    "verifier_report_figure",
    "pvalue_uniformity_figure",
    "power_curve_figure",
    "margin_figure",
    "sequential_figure",
    "sequential_figures",
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


def gof_residuals_figure(
    result: Any,
    *,
    title: str | None = None,
    label: Callable[[Any], str] | None = None,
    top: int = 20,
    level: float = 0.05,
) -> go.Figure:
    """Standardized residuals ``(O - E) / sqrt(E)`` of a goodness-of-fit result: one bar per
    outcome for the ``top`` most expected outcomes, then one bar for all the others (and the
    test's own pooled bins) merged, against the band that holds every shown bar with
    probability ``1 - level`` under the law (Bonferroni: a bar past it is a real departure,
    not noise). Readable where :func:`gof_figure`'s hundred count bars are not.

    >>> from types import SimpleNamespace as R
    >>> r = R(observed=[60, 25, 15], expected=[50.0, 30.0, 20.0], labels=["a", "b", "c"],
    ...       method="chi-square", statistic=4.08, dof=2, pvalue=0.13, n=100)
    >>> [round(v, 2) for v in gof_residuals_figure(r, top=2).data[0].y]
    [1.41, -0.91, -1.12]
    """
    from scipy.stats import norm

    fmt = label or str
    obs = np.asarray(result.observed, dtype=float)
    exp = np.asarray(result.expected, dtype=float)
    pooled = np.array([isinstance(lab, Pooled) for lab in result.labels])
    order = [i for i in np.argsort(-exp, kind="stable") if not pooled[i] and exp[i] > 0][:top]
    rest = np.setdiff1d(np.arange(len(exp)), order)
    names = [fmt(result.labels[i]) for i in order]
    o, e = obs[order].tolist(), exp[order].tolist()
    if rest.size:
        names.append(f"the other {rest.size} bin(s)")
        o.append(float(obs[rest].sum()))
        e.append(float(exp[rest].sum()))
    o_, e_ = np.asarray(o), np.asarray(e)
    z = np.where(e_ > 0, (o_ - e_) / np.sqrt(np.maximum(e_, 1e-300)), np.inf)
    band = float(norm.ppf(1 - level / (2 * max(len(z), 1))))
    fig = go.Figure(
        go.Bar(
            name="sampled vs the law",
            x=names,
            y=np.clip(z, -50, 50).tolist(),
            marker_color=color("speculative"),  # the samples under test
            customdata=np.column_stack([o_, e_]).tolist(),
            hovertemplate="%{x}: observed %{customdata[0]:.0f}, expected %{customdata[1]:.1f}"
            "<br>residual %{y:.2f}<extra></extra>",
        )
    )
    for y in (band, -band):
        fig.add_hline(y=y, line_dash="dash", line_color=THEORY_COLOR)
    head = title + "<br><sup>" if title else ""
    fig.update_layout(
        title=f"{head}{result.method}: statistic {_fmt(result.statistic, 4)}, dof {result.dof}, "
        f"p = {_fmt(result.pvalue)}, n = {result.n}; dashed: the {1 - level:.0%} band of "
        f"{len(z)} bars (+-{band:.2f})" + ("</sup>" if title else ""),
        xaxis=dict(
            title=f"outcome (the {len(order)} most expected"
            + (", then the rest)" if rest.size else ": every outcome)"),
            type="category",
        ),
        yaxis=dict(title="standardized residual (O - E) / sqrt(E)", zeroline=True),
        showlegend=False,
        height=400,
    )
    return fig


def verifier_report_figure(
    names: Sequence[str],
    pvalues: Sequence[float],
    tvs: Sequence[float],
    *,
    alpha: float = 1e-3,
    lossless: Sequence[bool] | None = None,
    outcomes: Sequence[str] | None = None,
) -> go.Figure:
    """Per verifier: ``-log10 p`` of the goodness-of-fit test (left; the dashed line is the
    test level) and the exact TV between its output law and the target's (right). A broken rule
    with a small TV can pass a test that lacks the samples to see it -- both numbers matter.
    ``outcomes`` (what the test did with each rule, keys of
    :data:`~specviz.views.palette.VERDICT_COLORS`: caught, cannot tell, missed, passed, false
    alarm) colours the bars by verdict, with a legend; without it, by the lossless label."""
    ok = list(lossless) if lossless is not None else [n == "lossless" for n in names]
    if outcomes is not None:
        colors = [VERDICT_COLORS[o] for o in outcomes]
    else:
        colors = [KIND_COLORS["accepted"] if o else THEORY_COLOR for o in ok]
    logp = [min(16.0, -math.log10(max(p, 1e-16))) for p in pvalues]
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(
            f"evidence: -log10 p (capped at 16); dashed: alpha = {alpha:g}",
            "exact TV to the target law",
        ),
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
    fig.add_hline(y=-math.log10(alpha), line_dash="dash", line_color="black", row=1, col=1)
    for outcome in dict.fromkeys(outcomes or ()):  # a legend entry per verdict shown
        fig.add_trace(
            go.Bar(name=outcome, x=[None], y=[None], marker_color=VERDICT_COLORS[outcome]),
            row=1,
            col=1,
        )
    fig.update_layout(
        title="Which verifiers keep the target's law?"
        + (" (colour: the test's verdict)" if outcomes else ""),
        height=420,
        showlegend=outcomes is not None,
    )
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
    rejection rate). The series are categories (rules), so they take distinct
    :data:`~specviz.views.palette.SERIES` hues: not black, the uniform line's (theory) colour."""
    fig = go.Figure()
    colors = palette_series(pvalues)
    for label, pv in pvalues.items():
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
                marker=dict(color=colors[str(label)], size=6),
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
    colors = (
        palette_series(curves)
        if len(curves) > 1
        else {str(k): color("speculative") for k in curves}
    )
    for label, ys in curves.items():
        fig.add_trace(
            go.Scatter(
                name=str(label),
                x=[int(n) for n in ns],
                y=[float(y) for y in ys],
                mode="lines+markers",
                line=dict(color=colors[str(label)]),
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
    """Where greedy outputs part: the top-1/top-2 logit margin of every greedy decision, one
    histogram panel per dtype side by side (log-x, shared axes, whole-number counts) and, as
    markers in the panel of their dtype, the margin at each first divergence (dicts with
    ``label``, ``margin`` and optionally ``dtype``; else the label's first word names the
    panel). Divergences sitting at the far left are near ties -- numerics, not bugs. Exact
    ties (margin 0: the argmax is decided by tie-breaking alone, claim 7's case) are drawn
    in the leftmost bin, at ``1e-4``, and counted in the legend and in the labels."""
    floor, width = 1e-4, 0.2
    names = list(background) or ["margins"]
    colors = palette_series(names)
    fig = make_subplots(rows=1, cols=len(names), shared_yaxes=True, shared_xaxes=True,
                        subplot_titles=names, horizontal_spacing=0.04)  # fmt: skip
    all_m = np.concatenate([np.asarray(v, dtype=float) for v in background.values()] or [[1.0]])
    hi = float(np.log10(max(all_m.max(initial=1.0), 1.0))) + 0.1
    edges = np.arange(math.log10(floor), hi + width, width)
    ymax = 1
    for col, label in enumerate(names, 1):
        raw = np.asarray(background.get(label, []), dtype=float)
        v = np.maximum(raw, floor)
        ties = int(np.sum(raw == 0))
        tie_note = f", {ties} exact ties (margin 0, drawn at {floor:g})" if ties else ""
        x = np.log10(v).tolist()
        ymax = max(ymax, int(np.histogram(x, bins=edges)[0].max(initial=0)))
        fig.add_trace(
            go.Histogram(
                name=f"{label}: {v.size} greedy steps{tie_note}",
                x=x,
                xbins=dict(start=math.log10(floor), end=hi, size=width),
                marker_color=colors[label],
                hovertemplate="log10 margin %{x}: %{y} steps<extra>" + str(label) + "</extra>",
            ),
            row=1, col=col,
        )  # fmt: skip
        if label in (near_tie or {}):
            fig.add_vline(x=math.log10(near_tie[label]), line_dash="dash", line_color="grey",
                          annotation_text=f"near tie {label}", row=1, col=col)  # fmt: skip
    pts = [d for d in divergences if d.get("margin") is not None]
    for col, label in enumerate(names, 1):
        mine = [d for d in pts if _panel(d, names) == label]
        if not mine:
            continue
        # one cross per histogram bin, labelled with its count: sixteen divergences at a few
        # margins printed their labels over each other; the hover lists every one
        groups: dict[int, list[Mapping[str, Any]]] = {}
        for d in mine:
            x = math.log10(max(float(d["margin"]), floor))
            groups.setdefault(int((x - math.log10(floor)) // width), []).append(d)
        rows = sorted(groups.items())
        fig.add_trace(
            go.Scatter(
                name=f"first divergences, {label} ({len(mine)})",
                x=[math.log10(max(float(g[0]["margin"]), floor)) for _, g in rows],
                y=[ymax * (0.35 + 0.6 * (i % 5) / 5) for i in range(len(rows))],
                mode="markers+text",
                text=[_divergence_text(g) for _, g in rows],
                textposition="top right",  # the left edge is where ties sit: no clipping
                marker=dict(symbol="x", size=12, color="black"),
                hovertext=[
                    "<br>".join(f"{d.get('label', '')}: margin {float(d['margin']):.4f}" for d in g)
                    for _, g in rows
                ],
                hovertemplate="%{hovertext}<extra></extra>",
            ),
            row=1, col=col,
        )  # fmt: skip
    fig.update_xaxes(title_text="log10(top-1 logit - top-2 logit)",
                     range=[math.log10(floor) - 0.2, hi + 0.2])  # fmt: skip
    fig.update_yaxes(title_text="greedy steps", row=1, col=1)
    fig.update_yaxes(**count_axis(ymax))
    fig.update_layout(title=title, height=420, bargap=0.05)
    return fig


def _divergence_text(group: Sequence[Mapping[str, Any]]) -> str:
    """A bin's label: the divergence's own for one, the count for several (exact ties named)."""
    ties = sum(float(d["margin"]) == 0 for d in group)
    if len(group) == 1:
        return str(group[0].get("label", "")) + (" (exact tie)" if ties else "")
    return f"{len(group)} divergences" + (
        " (exact ties)" if ties == len(group) else f" ({ties} exact ties)" if ties else ""
    )


def _panel(d: Mapping[str, Any], names: Sequence[str]) -> str:
    """The panel (dtype) a divergence belongs to."""
    dt = d.get("dtype")
    if dt in names:
        return str(dt)
    first = str(d.get("label", "")).split(" ")[0]
    return first if first in names else names[0]


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
    symbols = ("circle", "square", "diamond", "triangle-up", "x")
    runs = {k: np.asarray(getattr(v, "values", v), dtype=float).reshape(-1, 3)
            for k, v in trajectories.items()}  # fmt: skip
    # the e-value axis spans the decision, not the extremes: a broken rule's e-value runs to
    # 1e90 and a lossless run's towards 0, which flattened every curve against 1/alpha; points
    # beyond the axis sit on its edge and their hover gives the value
    lo, hi = _e_axis([r[:, 1] for r in runs.values()], alpha)
    for i, (label, arr) in enumerate(runs.items()):
        verdict = (outcomes or {}).get(label, "inconclusive").split()[0]
        style = dict(color=color(verdict), dash=dashes[i % len(dashes)])
        for row, fmt in ((1, "e-value %{customdata:.3g}"), (2, "TV < %{y:.3f}")):
            fig.add_trace(
                go.Scatter(
                    name=f"{label} ({verdict})",
                    legendgroup=str(label),
                    showlegend=row == 1,
                    x=arr[:, 0],
                    y=np.clip(arr[:, 1], lo, hi) if row == 1 else arr[:, 2],
                    customdata=arr[:, 1],
                    mode="lines+markers",
                    line=style,
                    marker=dict(symbol=symbols[i % len(symbols)], size=7),
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
        annotation_position="bottom left",
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
            x=fixed_n,
            y=1.0,
            yref="paper",
            yanchor="bottom",
            xanchor="left",
            text=f" fixed-n design: {fixed_n:,.0f}",
            showarrow=False,
        )
    fig.update_yaxes(
        title_text="e-value", type="log", range=[np.log10(lo), np.log10(hi)], row=1, col=1
    )
    fig.update_yaxes(title_text="TV upper end", range=[0, 1.02], row=2, col=1)
    fig.update_xaxes(title_text="samples per arm", row=2, col=1)
    fig.update_layout(title=title, height=560)
    return fig


def _e_axis(evalues: Sequence[np.ndarray], alpha: float) -> tuple[float, float]:
    """The e-value axis: the data's range clipped to [1e-3, 1e4], always showing 1 and a
    decade above 1/alpha.

    >>> _e_axis([np.array([1.0, 2.5e3, 1e92])], 0.01)
    (1.0, 10000.0)
    >>> _e_axis([np.array([1.0, 0.2, 0.0])], 0.01)
    (0.001, 1000.0)
    """
    e = np.concatenate([np.asarray(x, dtype=float) for x in evalues] or [np.ones(1)])
    e = e[np.isfinite(e)]
    lo = max(float(e.min()) if e.size else 1.0, 1e-3)
    hi = min(float(e.max()) if e.size else 1.0, 1e4)
    return min(lo, 1.0), max(hi, 10 / alpha)


def sequential_figures(report: Any) -> dict[str, Any]:
    """A :class:`~specviz.checks.sequential.SequentialReport`'s figures: ``{"e_value": ...}``,
    the e-value and TV upper end after every batch (:func:`sequential_figure` of its one run)."""
    return {
        "e_value": sequential_figure(
            {report.compared: report.trajectory},
            alpha=report.alpha,
            tv_tolerance=report.tv_tolerance,
            fixed_n=report.fixed_n,
            outcomes={report.compared: report.decision},
        )
    }


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
