"""Figures of acceptance: per position, rejection histograms, tokens per target call."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..core.trace import Trace, TraceSummary
from ..perf.acceptance import fit_alpha, per_position_acceptance
from ..perf.theory import expected_tokens_per_call, truncated_geometric_law
from .labels import _fmt
from .palette import THEORY_COLOR
from .perf import ALL_ACCEPTED, acceptance_colors, rejection_position_label

__all__ = [
    "per_position_acceptance_figure",
    "rejection_histogram_figure",
    "rejection_grid_figure",
    "SimPoint",
    "tokens_per_call_vs_gamma_figure",
    "tokens_per_call_vs_alpha_figure",
]


# -------------------------------------------------------------------------------------------
# acceptance across positions, rejection points, tokens per call
# -------------------------------------------------------------------------------------------


def per_position_acceptance_figure(
    data: Trace | Mapping[str, Trace | TraceSummary | Sequence[float]],
    *,
    alpha: float | None = None,
    title: str = "Acceptance per draft position",
) -> go.Figure:
    """P(accept at draft position i | reached i), one line per label. Under i.i.d. acceptance
    the line is flat at alpha (drawn dashed when given); a dip at position 1 means the drafter
    misses early -- the case where a shorter gamma or another drafter helps."""
    series = {"trace": data} if isinstance(data, Trace) else dict(data)
    fig = go.Figure()
    gmax = 0
    for label, d in series.items():
        if isinstance(d, Trace):
            rate, reached = per_position_acceptance(d)
        elif isinstance(d, TraceSummary):
            rate, reached = np.array(d.per_position_acceptance, dtype=float), None
        else:
            rate, reached = np.asarray(d, dtype=float), None
        gmax = max(gmax, rate.size)
        fig.add_trace(
            go.Scatter(
                name=str(label),
                x=list(range(1, rate.size + 1)),
                y=[None if np.isnan(v) else float(v) for v in rate],
                mode="lines+markers",
                customdata=None if reached is None else reached.tolist(),
                hovertemplate="position %{x}: %{y:.3f}"
                + ("<br>reached %{customdata} times" if reached is not None else "")
                + "<extra>"
                + str(label)
                + "</extra>",
            )
        )
    if alpha is not None and gmax:
        fig.add_trace(
            go.Scatter(
                name=f"i.i.d. alpha = {alpha:.3f}",
                x=[1, gmax],
                y=[alpha, alpha],
                mode="lines",
                line=dict(dash="dash", color=THEORY_COLOR),
            )
        )
    fig.update_layout(
        title=title,
        xaxis=dict(title="draft position (1 = first drafted token)", dtick=1),
        yaxis=dict(title="P(accept | reached)", range=[0, 1.02]),
        height=360,
    )
    return fig


def _rejection_traces(
    accepted: Sequence[int], gamma: int, alpha: float | None, showlegend: bool
) -> tuple[list[go.BaseTraceType], float, int]:
    acc = np.asarray(accepted, dtype=int)
    n = int(acc.size)
    a = fit_alpha(acc, gamma) if alpha is None else float(alpha)
    counts = np.bincount(acc, minlength=gamma + 1)[: gamma + 1] if n else np.zeros(gamma + 1)
    law = truncated_geometric_law(a, gamma) if not math.isnan(a) else np.full(gamma + 1, np.nan)
    # one convention in every figure: the first drafted token is position 1
    x = [rejection_position_label(k) for k in range(gamma)] + [ALL_ACCEPTED]
    obs = counts / n if n else np.zeros(gamma + 1)
    traces = [
        go.Bar(
            name="observed",
            x=x,
            y=obs.tolist(),
            marker_color="#4c78a8",
            customdata=counts.tolist(),
            hovertemplate="first rejection at %{x}: %{y:.3f} (%{customdata} steps)"
            "<extra>observed</extra>",
            showlegend=showlegend,
            legendgroup="observed",
        ),
        go.Scatter(
            name="truncated geometric",
            x=x,
            y=law.tolist(),
            mode="lines+markers",
            line=dict(color=THEORY_COLOR),
            hovertemplate="first rejection at %{x}: %{y:.3f}<extra>alpha^n (1 - alpha)</extra>",
            showlegend=showlegend,
            legendgroup="theory",
        ),
    ]
    return traces, a, n


def rejection_histogram_figure(
    accepted: Sequence[int], gamma: int, *, alpha: float | None = None, title: str | None = None
) -> go.Figure:
    """Where drafts stop: the share of steps whose first rejection was at draft position
    ``n + 1 = 1..gamma`` (1 = the first drafted token; ``n`` drafts accepted before it), or that
    accepted all ``gamma`` drafts, against the truncated-geometric law, with ``alpha`` fitted
    by maximum likelihood unless given. Steps must all have drafted ``gamma`` tokens (see
    :func:`accepted_counts`; shorter drafts are counted by
    :class:`~specviz.views.perf.StepOutcomes`)."""
    traces, a, n = _rejection_traces(accepted, gamma, alpha, True)
    fig = go.Figure(traces)
    fig.update_layout(
        title=title
        or f"Accepted drafts per step, gamma = {gamma} (n = {n} steps, alpha = {_fmt(a)})",
        xaxis=dict(
            title="first rejected draft position (1 = the first drafted token)", type="category"
        ),
        yaxis=dict(title="share of steps", range=[0, 1.02]),
        height=360,
    )
    return fig


def rejection_grid_figure(
    cells: Mapping[tuple[str, int], Sequence[int]], *, title: str = "Rejection points"
) -> go.Figure:
    """One rejection histogram per ``(group, gamma)`` cell (rows = groups such as task
    categories, columns = gamma), each against its own fitted truncated-geometric law."""
    groups = list(dict.fromkeys(g for g, _ in cells))
    gammas = sorted({k for _, k in cells})
    titles = []
    for g in groups:
        for k in gammas:
            acc = cells.get((g, k))
            titles.append(
                f"{g}, gamma={k}: alpha={_fmt(fit_alpha(acc, k))}, n={len(acc)}"
                if acc is not None and len(acc)
                else f"{g}, gamma={k}: no steps"
            )
    fig = make_subplots(
        rows=len(groups),
        cols=len(gammas),
        subplot_titles=titles,
        vertical_spacing=0.12 / max(1, len(groups) - 1) if len(groups) > 1 else 0.1,
    )
    first = True
    for r, g in enumerate(groups, start=1):
        for c, k in enumerate(gammas, start=1):
            acc = cells.get((g, k))
            if acc is None or not len(acc):
                continue
            traces, _, _ = _rejection_traces(acc, k, None, first)
            first = False
            for t in traces:
                fig.add_trace(t, row=r, col=c)
            fig.update_yaxes(range=[0, 1.02], row=r, col=c)
    fig.update_annotations(font_size=11)
    fig.update_layout(title=title, height=140 + 230 * len(groups), showlegend=True)
    return fig


@dataclass(frozen=True)
class SimPoint:
    """A measured tokens-per-target-call value with its standard error."""

    alpha: float
    gamma: int
    mean: float
    se: float = 0.0
    label: str = "simulated"


def tokens_per_call_vs_gamma_figure(
    alphas: Sequence[float], gamma_max: int, points: Iterable[SimPoint] = ()
) -> go.Figure:
    """Theory ``(1 - a^(g+1)) / (1 - a)`` against gamma for each alpha, simulated points with
    error bars on top. The curves flatten: past a point, longer drafts buy little, since each
    extra draft token survives only with probability alpha^gamma."""
    g = np.arange(1, gamma_max + 1)
    fig = go.Figure()
    colors = acceptance_colors(alphas)  # one colour per acceptance rate, as in every figure
    for i, a in enumerate(alphas):
        fig.add_trace(
            go.Scatter(
                name=f"theory, alpha={a:.3f}",
                x=g.tolist(),
                y=[expected_tokens_per_call(a, int(k)) for k in g],
                mode="lines",
                line=dict(color=colors[float(a)]),
                legendgroup=f"a{i}",
            )
        )
    pts = list(points)
    if pts:
        fig.add_trace(
            go.Scatter(
                name="simulated",
                x=[p.gamma for p in pts],
                y=[p.mean for p in pts],
                error_y=dict(type="data", array=[1.96 * p.se for p in pts], visible=True),
                mode="markers",
                marker=dict(color="black", size=8, symbol="x"),
                customdata=[[p.alpha, p.label] for p in pts],
                hovertemplate="gamma %{x}: %{y:.3f} tokens/call<br>alpha %{customdata[0]:.3f}"
                " %{customdata[1]}<extra></extra>",
            )
        )
    fig.update_layout(
        title="Tokens per target call: theory vs simulation",
        xaxis=dict(title="gamma (draft length)", dtick=1),
        yaxis=dict(title="tokens per target call", rangemode="tozero"),
        height=400,
    )
    return fig


def tokens_per_call_vs_alpha_figure(gamma: int, points: Iterable[SimPoint] = ()) -> go.Figure:
    """Theory curve against alpha for one gamma (plain decoding = 1 drawn dashed), simulated
    points on top: the toy explorer's main panel."""
    a = np.linspace(0.0, 0.995, 200)
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            name=f"theory, gamma={gamma}",
            x=a.tolist(),
            y=expected_tokens_per_call(a, gamma).tolist(),
            mode="lines",
            line=dict(color=THEORY_COLOR),
        )
    )
    fig.add_trace(
        go.Scatter(
            name="plain decoding",
            x=[0.0, 1.0],
            y=[1.0, 1.0],
            mode="lines",
            line=dict(color="grey", dash="dash"),
        )
    )
    pts = list(points)
    fig.add_trace(
        go.Scatter(
            name="simulated",
            x=[p.alpha for p in pts],
            y=[p.mean for p in pts],
            error_y=dict(type="data", array=[1.96 * p.se for p in pts], visible=True),
            mode="markers",
            marker=dict(color="black", size=10, symbol="x"),
            hovertemplate="alpha %{x:.3f}: %{y:.3f} tokens/call<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"Tokens per target call, gamma = {gamma}",
        xaxis=dict(title="alpha = E[sum_x min(p, q)] = 1 - TV(p, q)", range=[0, 1]),
        yaxis=dict(title="tokens per target call", range=[0, gamma + 1.2]),
        height=380,
    )
    return fig
