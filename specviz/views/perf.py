"""Figures of measured performance: rejection positions, metric bars, cost vs benefit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from .palette import KIND_COLORS, THEORY_COLOR

__all__ = ["rejection_positions_figure", "metric_bars_figure", "cost_benefit_figure"]


# -------------------------------------------------------------------------------------------
# drafters x task categories
# -------------------------------------------------------------------------------------------


def rejection_positions_figure(
    rejection_hist: Sequence[int],
    all_accepted: int,
    *,
    empty: int = 0,
    title: str | None = None,
) -> go.Figure:
    """Where a drafter's steps ended: share of steps whose first rejection was at draft
    position 1..gamma, and of steps that accepted every draft (``all_accepted``). Steps with
    an empty draft (nothing to propose: a lookup with no match) are counted in the title, not
    as rejections. A tall first bar says: shorten gamma or change the drafter."""
    rej = np.asarray(rejection_hist, dtype=int)
    total = int(rej.sum()) + int(all_accepted)
    x = [str(i + 1) for i in range(rej.size)] + ["none (all accepted)"]
    counts = rej.tolist() + [int(all_accepted)]
    share = [c / total if total else 0.0 for c in counts]
    colors = [THEORY_COLOR] * rej.size + [KIND_COLORS["accepted"]]
    fig = go.Figure(
        go.Bar(
            x=x,
            y=share,
            marker_color=colors,
            customdata=counts,
            hovertemplate="%{x}: %{y:.1%} of steps (%{customdata})<extra></extra>",
            showlegend=False,
        )
    )
    head = title + "<br><sup>" if title else ""
    fig.update_layout(
        title=f"{head}first rejected position over {total} drafting steps"
        + (f"; {empty} empty drafts" if empty else "")
        + ("</sup>" if title else ""),
        xaxis=dict(title="first rejected draft position", type="category"),
        yaxis=dict(title="share of steps", range=[0, 1.02]),
        height=380,
    )
    return fig


def metric_bars_figure(
    summary: Any,
    metric: str,
    *,
    x: str = "category",
    color: str = "drafter",
    title: str | None = None,
) -> go.Figure:
    """One grouped bar per ``x`` value (task category), one colour per ``color`` value
    (drafter), height ``metric`` -- rows of :func:`specviz.analysis.summarize` already
    filtered to one gamma and mode."""
    if metric not in summary.columns:
        raise KeyError(f"no column {metric!r}; have {list(summary.columns)}")
    xs = list(dict.fromkeys(summary[x]))
    fig = go.Figure()
    for name in dict.fromkeys(summary[color]):
        sub = summary[summary[color] == name].set_index(x)
        fig.add_trace(
            go.Bar(
                name=str(name),
                x=[str(v) for v in xs],
                y=[float(sub[metric].get(v, np.nan)) if v in sub.index else None for v in xs],
                hovertemplate="%{x}: %{y:.3f}<extra>" + str(name) + "</extra>",
            )
        )
    fig.update_layout(
        title=title or metric.replace("_", " "),
        barmode="group",
        xaxis=dict(title=x, type="category"),
        yaxis=dict(title=metric.replace("_", " ")),
        height=400,
    )
    return fig


def cost_benefit_figure(summary: Any, *, title: str | None = None) -> go.Figure:
    """Draft cost against what it buys: share of the wall time spent drafting (x) vs mean
    accepted length (tokens per target call, y), one marker per (drafter, category) row of
    :func:`specviz.analysis.summarize` (category ``all`` drawn large). Up-left is cheap and
    strong; a strong drafter that eats the time it saves sits up-right."""
    fig = go.Figure()
    for name in dict.fromkeys(summary["drafter"]):
        sub = summary[summary["drafter"] == name]
        big = (sub["category"] == "all").to_numpy()
        fig.add_trace(
            go.Scatter(
                name=str(name),
                x=sub["draft_time_share"].astype(float).tolist(),
                y=sub["mean_accepted_length"].astype(float).tolist(),
                mode="markers",
                marker=dict(size=[16 if b else 8 for b in big]),
                text=sub["category"].astype(str).tolist(),
                customdata=sub["speedup"].astype(float).tolist(),
                hovertemplate="%{text}: draft share %{x:.1%}, %{y:.2f} tokens/call, speedup "
                "%{customdata:.2f}x<extra>" + str(name) + "</extra>",
            )
        )
    fig.update_layout(
        title=title or "Draft cost vs mean accepted length",
        xaxis=dict(title="draft time / total time", tickformat=".0%", rangemode="tozero"),
        yaxis=dict(title="mean accepted length (tokens per target call)", rangemode="tozero"),
        height=420,
    )
    return fig
