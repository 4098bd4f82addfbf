"""Notebook 12's figures: coverage per task category, and the first-token law of the lossless
intersection beside the vocabulary-mapping shortcuts'.

Colours follow :mod:`specviz.views.palette`, one per meaning: the target's p is blue; the law
the lossless rule produces keeps p, so it takes the "equivalent" green (the colour of "shown to
keep the law"), never the vermillion of an arm that reads as q's orange beside p; shortcuts
and task categories are categories, so they take :data:`~specviz.views.palette.SERIES` hues,
none of which means "accepted" (the coverage boxes were all in the accepted green).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from .palette import color, series

__all__ = ["coverage_figure", "first_token_laws_figure"]


def coverage_figure(cov: Any, *, title: str | None = None) -> go.Figure:
    """A strip per task category of ``cov`` (columns ``category``, ``coverage``: one row per
    decided position, as :func:`specviz.drafting.cross_vocab.coverage_by_category` returns):
    every position a jittered dot in its category's series hue, the category's mean a black
    bar, and the axis label says how many positions sit at full coverage. Coverage is bimodal
    (most positions at 1.0, a few far below), so a box collapsed into a line at 1.0 and
    showed only its outliers."""
    cats = list(dict.fromkeys(str(c) for c in cov["category"]))
    hue = series(cats)
    fig = go.Figure()
    labels, means = [], []
    for cat, part in cov.groupby("category", sort=False):
        y = [float(v) for v in part["coverage"]]
        full = sum(v >= 0.99 for v in y)
        label = f"{cat}<br>{full}/{len(y)} at >= 0.99"
        labels.append(label)
        means.append(sum(y) / len(y))
        # a box with no box: plotly's strip (px.strip draws the same), points jittered sideways
        fig.add_trace(go.Box(y=y, x=[label] * len(y), name=str(cat), boxpoints="all", jitter=0.6,
                             pointpos=0, fillcolor="rgba(0,0,0,0)", line_color="rgba(0,0,0,0)",
                             marker=dict(color=hue[str(cat)], size=5, opacity=0.6),
                             hoveron="points"))  # fmt: skip
    fig.add_trace(go.Scatter(x=labels, y=means, mode="markers", name="mean of its positions",
                             marker=dict(symbol="line-ew-open", size=34, color="black",
                                         line=dict(width=3, color="black")),
                             hovertemplate="mean %{y:.3f}<extra></extra>"))  # fmt: skip
    fig.update_layout(
        title=title or "target mass on tokens the draft can propose, per decided position (T = 1)",
        yaxis_title="coverage",
        yaxis_range=[0, 1.04],
        showlegend=False,
        height=400,
    )
    return fig


def first_token_laws_figure(
    tokens: Sequence[str],
    p: Sequence[float],
    laws: Mapping[str, Sequence[float]],
    tvs: Mapping[str, float],
    *,
    lossless: str = "lossless",
    title: str = "law of the first emitted token",
) -> go.Figure:
    """Grouped bars over ``tokens``: the target's ``p``, then each rule's law of the first
    emitted token (``laws``, name -> law; ``tvs``, its TV from p, printed in the legend).
    The rule named ``lossless`` keeps p and is drawn in the "equivalent" green; every other
    rule is a shortcut, one series hue each."""
    hue = series([n for n in laws if n != lossless])
    fig = go.Figure(go.Bar(x=list(tokens), y=list(p), name="target p", marker_color=color("p")))
    for name, law in laws.items():
        shade = color("equivalent") if name == lossless else hue[name]
        fig.add_trace(go.Bar(x=list(tokens), y=list(law), name=f"{name} (TV {tvs[name]:.3f})",
                             marker_color=shade))  # fmt: skip
    fig.update_layout(barmode="group", title=title, yaxis_title="probability", height=380)
    return fig
