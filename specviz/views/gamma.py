"""Figures of the gamma trade-off and its decisions (notebooks 08 and 10): what a verify pass
costs, what each policy bought, and the speed-up per task category -- palette colours, the
numbers as labels, intervals where the run has them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from .palette import PALETTE, THEORY_COLOR, color, series

__all__ = ["verify_cost_figure", "policy_speedup_figure", "category_speedup_figure", "bars_note"]


def verify_cost_figure(
    curves: dict[str, Any], *, context: int | None = None, title: str | None = None
) -> go.Figure:
    """``v(n)``, the time of one target call fed ``n`` tokens over one decode step, for each
    measured :class:`~specviz.perf.theory.VerifyCost` in ``curves`` (label -> cost, e.g.
    packed and stock kernels: one hue each), against the textbook ``v = 1`` (dashed black).
    Every measured point is labelled with its value; where the measurements decrease somewhere
    (timing noise: a call fed more tokens cannot cost less), the non-decreasing fit that the
    predictions use (:class:`~specviz.perf.theory.VerifyCost`) is drawn as a dotted line of the
    same hue."""
    fig = go.Figure()
    cols = series(curves)
    ns: list[int] = []
    top = 1.0
    # at each n the higher curve's label goes above its point and a lower one's below, in the
    # curve's own colour: labels placed by curve order sat beside the other curve's point
    # wherever the curves crossed
    leader: dict[int, tuple[float, str]] = {}  # n -> (highest value, its curve; first on ties)
    for lab, vc in curves.items():
        for n in vc.tokens:
            y = vc.measured_ratio(n)
            if n not in leader or y > leader[n][0]:
                leader[n] = (y, lab)
    for label, vc in curves.items():
        xs = list(vc.tokens)
        raw = [vc.measured_ratio(n) for n in xs]
        fit = [vc.ratio(n) for n in xs]
        ns = sorted(set(ns) | set(xs))
        top = max(top, *raw, *fit)
        monotone = all(abs(a - b) < 1e-9 for a, b in zip(raw, fit, strict=True))
        fig.add_trace(
            go.Scatter(x=xs, y=raw, name=f"measured v(n), {label}",
                       mode="lines+markers+text" if monotone else "markers+text",
                       text=[f"{y:.2f}" for y in raw],
                       textposition=["top center" if leader[n][1] == label else "bottom center"
                                     for n in xs],
                       textfont=dict(color=cols[label]),
                       line=dict(color=cols[label]), marker=dict(color=cols[label])),
        )  # fmt: skip
        if not monotone:
            fig.add_trace(
                go.Scatter(x=xs, y=fit, name=f"non-decreasing fit used by the predictions, "
                           f"{label}", mode="lines", line=dict(color=cols[label], dash="dot")),
            )  # fmt: skip
    fig.add_trace(
        go.Scatter(x=ns, y=[1.0] * len(ns), name="textbook (free)", mode="lines",
                   line=dict(color=THEORY_COLOR, dash="dash")),
    )  # fmt: skip
    ctx = f", context {context}" if context is not None else ""
    fig.update_layout(
        title=title or f"Verify pass cost vs tokens fed{ctx}",
        xaxis=dict(title="tokens fed to the target (gamma + 1)", dtick=1),
        # headroom above the highest point so that its label is not clipped
        yaxis=dict(title="time / one decode step", range=[0, top * 1.15]),
        height=360,
    )
    return fig


def policy_speedup_figure(lab: Any, *, title: str | None = None) -> go.Figure:
    """Replayed speedup per policy (rows of :func:`specviz.lab.policy_lab.compare_policies`:
    ``policy``, ``speedup``, ``tokens_per_call``): vermillion bars (speculative decoding),
    labelled inside at their foot with the speedup and tokens per call (the plain-decoding
    line at 1 crosses no label of a bar taller than about a third); the dotted line is plain
    decoding, named in the legend (a label on the line would sit on a bar)."""
    ys = [float(v) for v in lab["speedup"]]
    fig = go.Figure(
        go.Bar(x=list(lab["policy"]), y=ys, marker_color=color("speculative"),
               text=[f"{y:.2f}x<br>{t:.2f} tok/call" for y, t in zip(ys, lab["tokens_per_call"],
                                                                      strict=True)],
               textposition="inside", insidetextanchor="start", textfont=dict(color="white"),
               name="replayed"),
    )  # fmt: skip
    fig.add_hline(y=1.0, line_dash="dot", line_color=PALETTE["plain"])
    fig.add_trace(
        go.Scatter(x=[None], y=[None], mode="lines", name="plain decoding (1x)",
                   line=dict(color=PALETTE["plain"], dash="dot")),
    )  # fmt: skip
    top = max([1.0, *[y for y in ys if math.isfinite(y)]])
    fig.update_layout(
        title=title or "Replayed speedup per policy (labels: speedup, tokens per call)",
        yaxis=dict(title="predicted speedup", range=[0, top * 1.15]),
        height=420,
        margin=dict(t=80),
    )
    return fig


def category_speedup_figure(
    table: Any, *, gammas: Sequence[int] | None = None, title: str | None = None
) -> go.Figure:
    """Speed-up over plain decoding per task category (rows of
    :func:`specviz.checklist.category_table`), one bar per gamma (one hue each), with the
    interval over prompts as error bars when the table has ``speedup_ci_low`` /
    ``speedup_ci_high``; the dashed line is break-even. The title says what the bars are
    (:func:`bars_note`): a 95% interval over prompts, or with fewer than 3 prompts per bar
    their range (two prompts give no 95% interval). The value labels sit at the base of
    each bar, clear of the error bars at its top."""
    gs = list(gammas) if gammas is not None else sorted(g for g in set(table.gamma) if g > 0)
    cols = series([f"gamma {g}" for g in gs])
    fig = go.Figure()
    has_err = {"speedup_ci_low", "speedup_ci_high"} <= set(table.columns)
    for g in gs:
        sub = table[table.gamma == g]
        y = sub.speedup.astype(float).tolist()
        err = None
        if {"speedup_ci_low", "speedup_ci_high"} <= set(sub.columns):
            hi = [h - v if math.isfinite(h) else None for h, v in zip(sub.speedup_ci_high, y,
                                                                     strict=True)]  # fmt: skip
            lo = [v - low if math.isfinite(low) else None for low, v in zip(sub.speedup_ci_low, y,
                                                                           strict=True)]  # fmt: skip
            err = dict(type="data", array=hi, arrayminus=lo, visible=True, color="black")
        fig.add_trace(
            go.Bar(x=list(sub.category), y=y, name=f"gamma {g}", marker_color=cols[f"gamma {g}"],
                   error_y=err, text=[f"{v:.2f}x" for v in y], textposition="inside",
                   insidetextanchor="start"),
        )  # fmt: skip
    fig.add_hline(y=1.0, line_dash="dash", line_color=PALETTE["plain"],
                  annotation_text="plain decoding")  # fmt: skip
    fig.update_layout(
        title=(title or "Speed-up over plain decoding by task")
        + (f" ({bars_note(table)})" if has_err and "bars:" not in (title or "") else ""),
        barmode="group",
        yaxis_title="speed-up (x)",
        height=420,
    )
    return fig


def bars_note(table: Any) -> str:
    """What the error bars of :func:`category_speedup_figure` are, from the table's
    ``prompts`` column: "bars: 95% interval over prompts", or with fewer than
    :data:`specviz.stats.MIN_UNITS_FOR_CI` prompts in some bar "bars: range over 2
    prompts (too few for a 95% interval)" -- the words the printed speed-up lines use."""
    from ..stats import MIN_UNITS_FOR_CI

    sub = table[table.gamma > 0] if "gamma" in table.columns else table
    n = [int(x) for x in sub["prompts"]] if "prompts" in sub.columns else []
    if n and min(n) < MIN_UNITS_FOR_CI:
        k = f"{min(n)}" if min(n) == max(n) else f"{min(n)}-{max(n)}"
        return f"bars: range over {k} prompts, too few for a 95% interval"
    return "bars: 95% interval over prompts"
