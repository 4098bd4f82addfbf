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
    """One box per task category of ``cov`` (columns ``category``, ``coverage``: one row per
    decided position, as :func:`specviz.drafting.cross_vocab.coverage_by_category` returns),
    every position drawn, each category in its own series hue."""
    cats = list(dict.fromkeys(str(c) for c in cov["category"]))
    hue = series(cats)
    fig = go.Figure()
    for cat, part in cov.groupby("category", sort=False):
        fig.add_trace(go.Box(y=list(part["coverage"]), name=str(cat), marker_color=hue[str(cat)],
                             boxpoints="all", jitter=0.4))  # fmt: skip
    fig.update_layout(
        title=title or "target mass on tokens the draft can propose, per decided position (T = 1)",
        yaxis_title="coverage",
        yaxis_range=[0, 1.02],
        showlegend=False,
        height=380,
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
