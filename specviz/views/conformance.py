"""Figures of the bug zoo's shipped mistakes: predicted vs measured damage, and what it takes to
see it (notebook 04)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .palette import PALETTE, SERIES, VERDICT_COLORS

__all__ = ["predicted_vs_measured_figure"]

# Not plain black and speculative vermillion: those mean "plain decoding" and "speculative
# decoding" on every other page, and here the bars are a law and a measurement of it; nor
# a verdict colour (the right panel's bars take those).
PREDICTED_COLOR, MEASURED_COLOR, EXPECTED_COLOR = SERIES[5], SERIES[3], SERIES[4]


def predicted_vs_measured_figure(
    names: Sequence[str],
    predicted: Sequence[float],
    measured: Sequence[float],
    n_to_detect: Sequence[float],
    n: int,
    *,
    outcomes: Sequence[str] | None = None,
    expected: Sequence[float] | None = None,
    expected_range: tuple[Sequence[float], Sequence[float]] | None = None,
) -> go.Figure:
    """Left: per member, the predicted TV of its stated outcome (exact or simulated law; the
    theory's colour) next to the TV measured on ``n`` draws through its code (speculative
    decoding's colour; a plug-in estimate, biased upward by ~0.4 sqrt(K/n)). Right: the samples
    a test at alpha = 0.01 needs for 90% power (log scale), the dashed line at ``n``; with
    ``outcomes`` (keys of :data:`~specviz.views.palette.VERDICT_COLORS`: caught, cannot tell,
    missed, passed, false alarm) those bars take the colour of what the check did, as in
    notebook 04's first figure. With ``expected`` (the mean plug-in TV of ``n`` draws under the
    predicted law, :func:`specviz.effects.shipped.expected_plugin_tv`) a marker on each
    measured bar shows what the prediction says the measurement will be, so a bar above its
    prediction reads as the plug-in's bias, not as a wrong law; ``expected_range`` (low and
    high per member, :func:`specviz.effects.shipped.plugin_tv_range`) draws a whisker on that
    marker over the values 90% of such runs give, so a measurement off its mark can be told
    from sampling noise. The right panel's log axis ticks at decades. The legend sits right
    of the panels, clear of their titles and bars."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TV to the target law", "samples to detect (90% power)"))  # fmt: skip
    names = list(names)
    # the left panel on numeric x (one slot per member, ticks named): the bars sit at fixed
    # offsets, so the expected marker lands on its measured bar, not between the two
    slot = list(range(len(names)))
    fig.add_trace(go.Bar(name="predicted (law)", x=[i - 0.2 for i in slot], y=list(predicted), width=0.4,
                         marker_color=PREDICTED_COLOR, customdata=names,
                         hovertemplate="%{customdata}: predicted TV %{y:.4f}<extra></extra>"), row=1, col=1)  # fmt: skip
    fig.add_trace(go.Bar(name=f"measured ({n} draws, plug-in)", x=[i + 0.2 for i in slot], y=list(measured),
                         width=0.4, marker_color=MEASURED_COLOR, customdata=names,
                         hovertemplate="%{customdata}: measured TV %{y:.4f} (plug-in)<extra></extra>"), row=1, col=1)  # fmt: skip
    if expected is not None:  # on the measured bars: the bias a correct prediction still shows
        whisker, label = None, f"expected plug-in at {n} draws"
        if expected_range is not None:
            low, high = (list(v) for v in expected_range)
            whisker = dict(type="data", symmetric=False, color=EXPECTED_COLOR, thickness=2, width=6,
                           array=[h - e for h, e in zip(high, expected, strict=True)],
                           arrayminus=[e - lo for lo, e in zip(low, expected, strict=True)])  # fmt: skip
            label += " (whisker: 90% of runs)"
        fig.add_trace(go.Scatter(name=label, x=[i + 0.2 for i in slot], y=list(expected),
                                 mode="markers", customdata=names, error_y=whisker,
                                 marker=dict(symbol="line-ew", size=16, color=EXPECTED_COLOR, line=dict(width=3, color=EXPECTED_COLOR)),
                                 hovertemplate="%{customdata}: expected plug-in TV %{y:.4f} under the predicted law<extra></extra>"),
                      row=1, col=1)  # fmt: skip
    fig.update_xaxes(tickmode="array", tickvals=slot, ticktext=names, range=[-0.6, len(names) - 0.4], row=1, col=1)  # fmt: skip
    verdict = list(outcomes) if outcomes is not None else [None] * len(names)
    finite = [(x, v, o) for x, v, o in zip(names, n_to_detect, verdict, strict=True) if math.isfinite(v)]  # fmt: skip
    fig.add_trace(go.Bar(name="n to detect", x=[x for x, _, _ in finite], y=[v for _, v, _ in finite],
                         marker_color=[VERDICT_COLORS.get(o, PALETTE["inconclusive"]) for _, _, o in finite],
                         customdata=[o or "" for _, _, o in finite], showlegend=False,
                         hovertemplate="%{x}: %{y:,.0f} draws %{customdata}<extra></extra>"), row=1, col=2)  # fmt: skip
    for o in dict.fromkeys(o for _, _, o in finite if o):  # a legend entry per verdict shown
        fig.add_trace(go.Bar(name=o, x=[None], y=[None], marker_color=VERDICT_COLORS[o]), row=1, col=2)  # fmt: skip
    fig.add_hline(y=n, line_dash="dash", line_color=PALETTE["theory"], row=1, col=2)
    # on a log axis an annotation's y is log10 of the value (add_hline's own label would sit
    # at 10^n, off the panel)
    fig.add_annotation(text=f"{n:,} draws (this run)", x=0, xref="x2 domain", xanchor="left",
                       y=math.log10(n), yref="y2", yanchor="bottom", showarrow=False)  # fmt: skip
    fig.update_yaxes(type="log", dtick=1, row=1, col=2)  # decades: 10, 100, 1000, ...
    fig.update_layout(title=f"Shipped mistakes: predicted vs measured damage ({n} draws each)",
                      barmode="overlay", height=440, margin=dict(t=90, b=120, r=20),
                      legend=dict(orientation="v", x=1.02, xanchor="left", y=1.0, yanchor="top"))  # fmt: skip
    return fig
