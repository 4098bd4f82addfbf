"""Figures of the bug zoo's shipped mistakes: predicted vs measured damage, and what it takes to
see it (notebook 04)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .palette import PALETTE, VERDICT_COLORS

__all__ = ["predicted_vs_measured_figure"]


def predicted_vs_measured_figure(
    names: Sequence[str],
    predicted: Sequence[float],
    measured: Sequence[float],
    n_to_detect: Sequence[float],
    n: int,
    *,
    outcomes: Sequence[str] | None = None,
) -> go.Figure:
    """Left: per member, the predicted TV of its stated outcome (exact or simulated law; the
    theory's colour) next to the TV measured on ``n`` draws through its code (speculative
    decoding's colour; a plug-in estimate, biased upward by ~0.4 sqrt(K/n)). Right: the samples
    a test at alpha = 0.01 needs for 90% power (log scale), the dashed line at ``n``; with
    ``outcomes`` (keys of :data:`~specviz.views.palette.VERDICT_COLORS`: caught, cannot tell,
    missed, passed, false alarm) those bars take the colour of what the check did, as in
    notebook 04's first figure."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TV to the target law", "samples to detect (90% power)"))  # fmt: skip
    names = list(names)
    fig.add_trace(go.Bar(name="predicted (law)", x=names, y=list(predicted), marker_color=PALETTE["theory"],
                         hovertemplate="%{x}: predicted TV %{y:.4f}<extra></extra>"), row=1, col=1)  # fmt: skip
    fig.add_trace(go.Bar(name=f"measured ({n} draws)", x=names, y=list(measured), marker_color=PALETTE["speculative"],
                         hovertemplate="%{x}: measured TV %{y:.4f}<extra></extra>"), row=1, col=1)  # fmt: skip
    verdict = list(outcomes) if outcomes is not None else [None] * len(names)
    finite = [(x, v, o) for x, v, o in zip(names, n_to_detect, verdict, strict=True) if math.isfinite(v)]  # fmt: skip
    fig.add_trace(go.Bar(name="n to detect", x=[x for x, _, _ in finite], y=[v for _, v, _ in finite],
                         marker_color=[VERDICT_COLORS.get(o, PALETTE["inconclusive"]) for _, _, o in finite],
                         customdata=[o or "" for _, _, o in finite], showlegend=False,
                         hovertemplate="%{x}: %{y:,.0f} draws %{customdata}<extra></extra>"), row=1, col=2)  # fmt: skip
    for o in dict.fromkeys(o for _, _, o in finite if o):  # a legend entry per verdict shown
        fig.add_trace(go.Bar(name=o, x=[None], y=[None], marker_color=VERDICT_COLORS[o]), row=1, col=2)  # fmt: skip
    fig.add_hline(y=n, line_dash="dash", line_color=PALETTE["theory"], row=1, col=2)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_layout(title=f"Shipped mistakes: predicted vs measured damage ({n} draws each)",
                      barmode="group", height=440, margin=dict(t=90, b=120), legend=dict(orientation="h", y=1.12))  # fmt: skip
    return fig
