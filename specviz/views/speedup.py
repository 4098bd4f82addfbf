"""Figures of the gamma trade-off: the speed-up theory predicts for each draft length and
acceptance, and the one measured, with the colours that tell acceptances and series apart."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..perf.theory import VerifyCost, search_optimal_gamma, speedup
from . import palette
from .palette import PALETTE, THEORY_COLOR

__all__ = [
    "acceptance_colors",
    "measured_speedup_figure",
    "predicted_speedup_figure",
    "series_colors",
]


# -------------------------------------------------------------------------------------------
# the gamma trade-off
# -------------------------------------------------------------------------------------------


def _mix(hex_color: str, white: float) -> str:
    """``hex_color`` mixed with ``white`` (0 = the colour, 1 = white)."""
    rgb = [int(hex_color[i : i + 2], 16) for i in (1, 3, 5)]
    mixed = [round(c + (255 - c) * white) for c in rgb]
    return "#" + "".join(f"{c:02X}" for c in mixed)


def acceptance_colors(acceptances: Sequence[float]) -> dict[float, str]:
    """One colour per acceptance rate, every one a shade of the palette's "accepted" green
    (lighter = lower acceptance), so an acceptance rate keeps its colour in all its lines and
    no two rates share one."""
    rates = sorted({float(a) for a in acceptances})
    if len(rates) == 1:
        return {rates[0]: PALETTE["accepted"]}
    return {
        a: _mix(PALETTE["accepted"], 0.6 * (1 - i / (len(rates) - 1))) for i, a in enumerate(rates)
    }


def series_colors(labels: Sequence[str], meaning: str = "accepted") -> dict[str, str]:
    """One colour per series label: a single series takes the palette's ``meaning`` colour;
    several (drafters, categories) take distinct hues (:data:`specviz.views.palette.SERIES`),
    never shades of one meaning colour, which a reader cannot tell apart.

    >>> series_colors(["a"]) == {"a": palette.color("accepted")}
    True
    >>> series_colors(["a", "b"]) == palette.series(["a", "b"])
    True
    """
    names = list(dict.fromkeys(str(n) for n in labels))
    if len(names) <= 1:
        return {n: palette.color(meaning) for n in names}
    return palette.series(names)


def _check_c(c: Any) -> float:
    if c is None or not math.isfinite(float(c)) or float(c) < 0:
        raise ValueError(f"the theory needs the measured draft cost ratio c, got {c!r}")
    return float(c)


def predicted_speedup_figure(
    acceptances: Sequence[float],
    c: float,
    verify_cost: VerifyCost | None = None,
    *,
    max_gamma: int = 8,
    title: str | None = None,
) -> go.Figure:
    """Predicted speedup against gamma = 0..max_gamma (0 = plain decoding) for each acceptance
    rate, at the *measured* draft cost ratio ``c``, in two panels: left Leviathan's formula
    (verification free), right the same charging the measured verify cost ``v(gamma + 1)``
    (with ``verify_cost``). One hue per acceptance rate in both panels. Where ``gamma + 1``
    is past the largest measured ``n`` the verify cost is extrapolated: those points are
    dotted with open markers. Black markers: the best gamma of each curve (open when it
    sits on an extrapolated point; none where it lies past ``max_gamma``: the edge of the
    axis is not the optimum)."""
    c = _check_c(c)
    gs = list(range(0, int(max_gamma) + 1))
    colors = palette.series([f"a={a}" for a in acceptances])
    measured_n = verify_cost.tokens[-1] if verify_cost is not None else math.inf
    panels = ["verification free (Leviathan)"]
    if verify_cost is not None:
        panels.append(f"+ measured verify cost v(gamma + 1), measured up to n = {measured_n}")
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=panels, shared_yaxes=True,
                        horizontal_spacing=0.05)  # fmt: skip
    for a in acceptances:
        grp = f"a={a}"
        col = colors[grp]
        lev = [speedup(a, g, c) for g in gs]
        fig.add_trace(go.Scatter(x=gs, y=lev, name=grp, legendgroup=grp, mode="lines+markers",
                                 line=dict(color=col)), row=1, col=1)  # fmt: skip
        _best_mark(fig, grp, search_optimal_gamma(a, c).gamma, lev, False, 1)
        if verify_cost is None:
            continue
        ver = [speedup(a, g, c, verify_cost.ratio(g + 1)) for g in gs]
        inside = [g for g in gs if g + 1 <= measured_n]
        past = [g for g in gs if g + 1 > measured_n]
        fig.add_trace(go.Scatter(x=inside, y=[ver[g] for g in inside], name=grp, legendgroup=grp,
                                 showlegend=False, mode="lines+markers", line=dict(color=col)),
                      row=1, col=2)  # fmt: skip
        if past:
            xs = ([inside[-1]] if inside else []) + past
            fig.add_trace(
                go.Scatter(x=xs, y=[ver[g] for g in xs], legendgroup=grp, showlegend=False,
                           name=f"{grp}, v(n) extrapolated past n={measured_n}",
                           line=dict(color=col, dash="dot"), mode="lines+markers",
                           marker=dict(symbol="circle-open", size=8), customdata=[g + 1 for g in xs],
                           hovertemplate="gamma %{x}: %{y:.2f}x (v(%{customdata}) extrapolated)"
                           "<extra></extra>"),
                row=1, col=2,
            )  # fmt: skip
        b2 = search_optimal_gamma(a, c, verify_cost=verify_cost).gamma
        _best_mark(fig, grp, b2, ver, b2 + 1 > measured_n, 2)
    for k in range(1, len(panels) + 1):
        fig.add_hline(y=1.0, line_dash="dot", line_color=PALETTE["plain"], row=1, col=k)
    fig.update_xaxes(title_text="gamma (0 = plain decoding)", dtick=1)
    fig.update_yaxes(title_text="speedup over plain decoding", row=1, col=1)
    fig.update_layout(
        title=title
        or f"Predicted speedup vs gamma (measured c = {c:.3f}; black: best gamma, if on the axis)",
        height=420,
        legend=dict(orientation="h", y=-0.2),
    )
    return fig


def _best_mark(
    fig: go.Figure, grp: str, g: int, ys: Sequence[float], open_: bool, col: int
) -> None:
    if g >= len(ys):  # the best gamma lies past the axis: no marker at its edge
        return
    fig.add_trace(
        go.Scatter(x=[g], y=[ys[g]], mode="markers", showlegend=False, legendgroup=grp,
                   marker=dict(size=11, color=THEORY_COLOR,
                               symbol="circle-open" if open_ else "circle"),
                   hovertemplate="best gamma %{x}: %{y:.2f}x<extra>" + grp + "</extra>"),
        row=1, col=col,
    )  # fmt: skip


def measured_speedup_figure(
    sweep: Any,
    *,
    best: Mapping[str, int] | None = None,
    title: str = "Speedup vs gamma per category",
    cols: int = 4,
) -> go.Figure:
    """One panel per category of ``sweep`` (rows: ``category``, ``gamma``, ``measured``,
    ``predicted_leviathan``, ``predicted_with_verify``): the measured speedup (vermillion) with
    plain decoding at gamma 0 (black, 1 by definition), Leviathan's prediction (dotted) and
    with the verify cost (dashed; each step charged what it verified,
    :func:`specviz.perf.theory.predicted_vs_measured`), one colour per meaning in every panel. ``best`` (category
    -> gamma, 0 for plain) rings the best measured gamma."""
    cats = list(dict.fromkeys(sweep["category"]))
    ncols = min(cols, len(cats))
    nrows = math.ceil(len(cats) / ncols)
    fig = make_subplots(rows=nrows, cols=ncols, subplot_titles=cats, shared_yaxes=True)
    for i, cat in enumerate(cats):
        s = sweep[sweep["category"] == cat].sort_values("gamma")
        at = dict(row=i // ncols + 1, col=i % ncols + 1)
        first = i == 0
        gs = [0] + [int(g) for g in s["gamma"]]
        fig.add_trace(
            go.Scatter(
                x=gs,
                y=[1.0] + s["measured"].astype(float).tolist(),
                name="measured",
                legendgroup="measured",
                showlegend=first,
                mode="lines+markers",
                line=dict(color=PALETTE["speculative"]),
            ),
            **at,
        )
        for col, name, dash in (
            ("predicted_leviathan", "Leviathan", "dot"),
            ("predicted_with_verify", "+ verify cost", "dash"),
        ):
            fig.add_trace(
                go.Scatter(
                    x=s["gamma"].tolist(),
                    y=s[col].astype(float).tolist(),
                    name=name,
                    legendgroup=name,
                    showlegend=first,
                    mode="lines",
                    line=dict(color=THEORY_COLOR, dash=dash),
                ),
                **at,
            )
        fig.add_trace(
            go.Scatter(
                x=[0],
                y=[1.0],
                name="plain decoding (gamma 0)",
                legendgroup="plain",
                showlegend=first,
                mode="markers",
                marker=dict(color=PALETTE["plain"], size=9),
            ),
            **at,
        )
        if best is not None and cat in best:
            g = int(best[cat])
            y = 1.0 if g == 0 else float(s.set_index("gamma")["measured"].get(g, np.nan))
            fig.add_trace(
                go.Scatter(
                    x=[g],
                    y=[y],
                    name="best measured gamma",
                    legendgroup="best",
                    showlegend=first,
                    mode="markers",
                    marker=dict(symbol="circle-open", size=16, color=PALETTE["speculative"]),
                ),
                **at,
            )
        fig.add_hline(y=1.0, line_dash="dot", line_color=PALETTE["plain"], **at)
    fig.update_xaxes(title_text="gamma (0 = plain)", dtick=1)
    fig.update_yaxes(title_text="speedup over plain", col=1)
    fig.update_layout(title=title, height=300 + 170 * nrows)
    return fig
