"""Figures of acceptance: per position, rejection histograms, tokens per target call."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..core.trace import Trace, TraceSummary
from ..perf.acceptance import PositionCounts, alpha_counts, fit_alpha, wilson_interval
from ..perf.theory import expected_tokens_per_call, truncated_geometric_law
from .labels import _fmt
from .palette import color, hues
from .perf import ALL_ACCEPTED, acceptance_colors, rejection_position_label, series_colors

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


_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "triangle-down", "star", "hexagon")
#: where a "never reached" mark sits: below 0, outside every rate, so it never reads as 0%
NEVER_REACHED_Y = -0.06


def _field(d: object, name: str) -> object:
    if isinstance(d, Mapping) or hasattr(d, "index") and hasattr(d, "get"):
        return d.get(name)  # type: ignore[union-attr]
    return getattr(d, name, None)


def _position_counts(d: object) -> tuple[np.ndarray, PositionCounts | None]:
    """(rate, counts or None) of one series of :func:`per_position_acceptance_figure`."""
    if isinstance(d, PositionCounts):
        return d.rate, d
    if isinstance(d, Trace) or (
        isinstance(d, (list, tuple)) and d and all(isinstance(t, Trace) for t in d)
    ):
        c = PositionCounts.from_trace(d)  # type: ignore[arg-type]
        return c.rate, c
    if isinstance(d, TraceSummary):
        return np.array(d.per_position_acceptance, dtype=float), None
    plain = isinstance(d, (str, bytes, list, np.ndarray)) or (
        isinstance(d, tuple) and not hasattr(d, "_fields")  # a namedtuple row is a cell
    )
    if not plain:
        acc, rej = _field(d, "accepted_hist"), _field(d, "rejection_hist")
        if acc is not None and rej is not None:  # a grid cell (run_grid row)
            c = PositionCounts.from_histograms(acc, rej)  # type: ignore[arg-type]
            return c.rate, c
    return np.asarray(d, dtype=float).ravel(), None


def _rate_hover(
    pos: int, rate: float, k: int | None, n: int | None, lo: float, hi: float, level: float
) -> str:
    if n is None:
        if math.isnan(rate):
            return f"position {pos}: no rate (never reached)"
        return f"position {pos}: {rate:.3f} (counts not given: no interval)"
    if n == 0:
        return f"position {pos}: never reached (0 steps): no rate"
    return (
        f"position {pos}: {rate:.3f}<br>{k} of {n} steps that reached it accepted"
        f"<br>{level:.0%} Wilson interval {lo:.3f} to {hi:.3f}"
    )


def per_position_acceptance_figure(
    data: Trace
    | Mapping[str, Trace | Sequence[Trace] | PositionCounts | TraceSummary | Sequence[float]],
    *,
    alpha: float | None = None,
    title: str = "Acceptance per draft position",
    confidence: float = 0.95,
) -> go.Figure:
    """P(accept at draft position i | reached i), one line per label. Under i.i.d. acceptance
    the line is flat at alpha (drawn dashed when given); a dip at position 1 means the drafter
    misses early -- the case where a shorter gamma or another drafter helps.

    Each series is a :class:`~specviz.Trace` (or a list of them, pooled), a
    :class:`~specviz.perf.acceptance.PositionCounts`, a grid cell (a :func:`run_grid` row with
    ``accepted_hist`` and ``rejection_hist``), or bare rates (a
    :class:`~specviz.core.trace.TraceSummary` or a list). Where the counts are known, every
    point has an error bar -- the Wilson interval at ``confidence`` over the steps that
    reached the position -- and its hover says "k of n"; bare rates get neither. A position
    no step reached has no point (never a 0%): a grey x below the axis marks it "never
    reached".

    >>> fig = per_position_acceptance_figure(PositionCounts((3, 0, 0), (4, 3, 0)))
    >>> fig.data[0].y
    (0.75, 0.0, None)
    >>> print(fig.data[0].text[1].replace("<br>", "; "))
    position 2: 0.000; 0 of 3 steps that reached it accepted; 95% Wilson interval 0.000 to 0.561
    >>> fig.data[1].name, fig.data[1].x
    ('never reached (no rate)', (3,))
    """
    series = {"trace": data} if isinstance(data, (Trace, PositionCounts)) else dict(data)
    # one rate: the "accepted" green; several (categories, prompts): a distinct hue each
    colors = series_colors(list(series), "accepted")
    fig = go.Figure()
    gmax, any_counts = 0, False
    never: dict[int, list[str]] = {}
    for j, (label, d) in enumerate(series.items()):
        rate, counts = _position_counts(d)
        if counts is not None:
            any_counts = True
            lo, hi = counts.interval(confidence)
            ks, ns = list(counts.kept), list(counts.reached)
        else:
            lo = hi = np.full(rate.size, np.nan)
            ks, ns = [None] * rate.size, [None] * rate.size
        gmax = max(gmax, rate.size)
        xs = list(range(1, rate.size + 1))
        y = [None if math.isnan(v) else float(v) for v in rate]
        for x, v in zip(xs, y, strict=True):
            if v is None:
                never.setdefault(x, []).append(str(label))
        col = colors[str(label)]
        fig.add_trace(
            go.Scatter(
                name=str(label),
                x=xs,
                y=y,
                mode="lines+markers",
                line=dict(color=col),
                marker=dict(color=col, symbol=_SYMBOLS[j % len(_SYMBOLS)], size=8),
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=[None if math.isnan(h) else h - v for h, v in zip(hi, rate, strict=True)],
                    arrayminus=[
                        None if math.isnan(lw) else v - lw for lw, v in zip(lo, rate, strict=True)
                    ],
                    color=col,
                    thickness=1.5,
                    width=5,
                    visible=counts is not None,
                ),
                customdata=[
                    [k, n, None if math.isnan(a) else a, None if math.isnan(b) else b]
                    for k, n, a, b in zip(ks, ns, lo, hi, strict=True)
                ],
                text=[
                    _rate_hover(x, float(r), k, n, float(a), float(b), confidence)
                    for x, r, k, n, a, b in zip(xs, rate, ks, ns, lo, hi, strict=True)
                ],
                hovertemplate="%{text}<extra>" + str(label) + "</extra>",
            )
        )
    if never:
        xs = sorted(never)
        fig.add_trace(
            go.Scatter(
                name="never reached (no rate)",
                x=xs,
                y=[NEVER_REACHED_Y] * len(xs),
                mode="markers",
                marker=dict(color=color("unvisited"), symbol="x-thin-open", size=11, line_width=2),
                text=[f"position {x}: never reached by " + ", ".join(never[x]) for x in xs],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    if alpha is not None and gmax:
        fig.add_trace(
            go.Scatter(
                name=f"i.i.d. alpha = {alpha:.3f}",
                x=[1, gmax],
                y=[alpha, alpha],
                mode="lines",
                line=dict(dash="dash", color=color("theory")),
            )
        )
    sub = (
        f"<br><sup>error bars: {confidence:.0%} Wilson intervals over the steps that reached "
        "each position</sup>"
        if any_counts
        else ""
    )
    fig.update_layout(
        title=title + sub,
        xaxis=dict(title="draft position (1 = the first drafted token)", dtick=1),
        yaxis=dict(
            title="P(accept | reached)",
            range=[2 * NEVER_REACHED_Y if never else 0, 1.02],
            tickvals=[0, 0.2, 0.4, 0.6, 0.8, 1.0],
        ),
        height=380 if sub else 360,
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
            # the palette's meanings: wine = rejected at that position, green = every draft kept
            marker_color=[color("rejected")] * gamma + [color("accepted")],
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
            line=dict(color=color("theory")),
            hovertemplate="first rejection at %{x}: %{y:.3f}<extra>alpha^n (1 - alpha)</extra>",
            showlegend=showlegend,
            legendgroup="theory",
        ),
    ]
    return traces, a, n


def _alpha_text(accepted: Sequence[int], gamma: int, alpha: float | None, short: bool) -> str:
    """alpha with its counts and 95% Wilson interval when it is fitted from ``accepted`` (a
    given ``alpha`` is a number, not a measurement: no interval)."""
    if alpha is not None:
        return f"alpha = {_fmt(float(alpha))} (given)"
    k, m = alpha_counts(accepted, gamma)
    if not m:
        return "alpha = n/a (no draft tested)"
    lo, hi = wilson_interval(k, m)
    if short:
        return f"alpha={_fmt(k / m)} [{lo:.2f}, {hi:.2f}] ({k} of {m})"
    return (
        f"alpha = {_fmt(k / m)}, 95% Wilson interval {lo:.3f} to {hi:.3f}: {k} of {m} tested "
        "drafts accepted"
    )


def rejection_histogram_figure(
    accepted: Sequence[int],
    gamma: int,
    *,
    alpha: float | None = None,
    title: str | None = None,
    of_steps: int | None = None,
) -> go.Figure:
    """Where drafts stop: the share of steps whose first rejection was at draft position
    ``n + 1 = 1..gamma`` (1 = the first drafted token; ``n`` drafts accepted before it), or that
    accepted all ``gamma`` drafts, against the truncated-geometric law, with ``alpha`` fitted
    by maximum likelihood unless given (a fitted alpha is stated with its counts -- accepted
    of tested drafts -- and 95% Wilson interval). Steps must all have drafted ``gamma``
    tokens (see :func:`accepted_counts`; shorter drafts are counted by
    :class:`~specviz.views.perf.StepOutcomes`); ``of_steps``, the run's step count, makes the
    title say how many steps that left out, so the counts add up against the run's own."""
    traces, a, n = _rejection_traces(accepted, gamma, alpha, True)
    fig = go.Figure(traces)
    which = (
        f"n = {n} steps"
        if of_steps is None
        else f"the {n} of {of_steps} steps that drafted all {gamma} tokens"
    )
    fig.update_layout(
        title=title
        or f"Accepted drafts per step, gamma = {gamma} ({which})<br><sup>"
        + _alpha_text(accepted, gamma, alpha, False)
        + "</sup>",
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
    categories, columns = gamma), each against its own fitted truncated-geometric law; each
    panel's title gives the fitted alpha, its 95% Wilson interval and the counts behind it
    (accepted of tested drafts)."""
    groups = list(dict.fromkeys(g for g, _ in cells))
    gammas = sorted({k for _, k in cells})
    titles = []
    for g in groups:
        for k in gammas:
            acc = cells.get((g, k))
            titles.append(  # two lines: three columns of one-line titles run into each other
                f"<b>{g}, gamma={k}</b><br>{_alpha_text(acc, k, None, True)}, n={len(acc)} steps"
                if acc is not None and len(acc)
                else f"<b>{g}, gamma={k}</b><br>no steps"
            )
    height = 140 + 260 * len(groups)
    fig = make_subplots(
        rows=len(groups),
        cols=len(gammas),
        subplot_titles=titles,
        vertical_spacing=min(0.3, 80 / height) if len(groups) > 1 else 0.1,  # ~80 px
        horizontal_spacing=0.06,
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
    fig.update_xaxes(title_text="first rejected draft position", row=len(groups))
    fig.update_yaxes(title_text="share of steps", col=1)
    fig.update_layout(title=title, height=height, showlegend=True)
    return fig


@dataclass(frozen=True)
class SimPoint:
    """A measured tokens-per-target-call value with its standard error. ``accepted`` and
    ``tested`` are the counts behind ``alpha`` when it was measured (e.g.
    :func:`~specviz.perf.acceptance.alpha_counts`): with them,
    :func:`tokens_per_call_vs_alpha_figure` draws alpha's 95% Wilson interval."""

    alpha: float
    gamma: int
    mean: float
    se: float = 0.0
    label: str = "simulated"
    accepted: int | None = None
    tested: int | None = None

    def alpha_interval(self, confidence: float = 0.95) -> tuple[float, float] | None:
        """Wilson interval of alpha from ``accepted`` of ``tested``; None without counts."""
        if self.accepted is None or not self.tested:
            return None
        return wilson_interval(int(self.accepted), int(self.tested), confidence)

    def alpha_hover(self) -> str:
        ci = self.alpha_interval()
        if ci is None:
            return f"alpha {self.alpha:.3f} (counts not given: no interval)"
        return (
            f"alpha {self.alpha:.3f}: {self.accepted} of {self.tested} tested drafts accepted, "
            f"95% Wilson interval {ci[0]:.3f} to {ci[1]:.3f}"
        )


def tokens_per_call_vs_gamma_figure(
    alphas: Sequence[float],
    gamma_max: int,
    points: Iterable[SimPoint] = (),
    *,
    labels: Sequence[str] | None = None,
    points_name: str = "simulated",
) -> go.Figure:
    """Theory ``(1 - a^(g+1)) / (1 - a)`` against gamma for each alpha, simulated (or measured:
    ``points_name``) points with error bars on top. The curves flatten: past a point, longer
    drafts buy little, since each extra draft token survives only with probability alpha^gamma.
    ``labels`` names each curve (e.g. a task category); a point whose ``label`` names a curve
    takes that curve's colour. The curves start at gamma 0 (plain decoding: one token per
    call), the baseline every gain is read against; with named curves, each curve's points are
    nudged sideways (hover gives the exact gamma) so curves close together keep their markers
    apart."""
    g = np.arange(0, gamma_max + 1)
    fig = go.Figure()
    if labels is not None and len(labels) != len(alphas):
        raise ValueError(f"labels: {len(labels)} names for {len(alphas)} curves")
    if labels is None:  # one colour per acceptance rate, as in every figure
        colors = acceptance_colors(alphas)
        curve_color: dict[str, str] = {}
        line_colors = [colors[float(a)] for a in alphas]
    else:  # named curves (categories, draft qualities): distinct hues
        curve_color = hues(list(labels))
        line_colors = [curve_color[str(lab)] for lab in labels]
    for i, a in enumerate(alphas):
        fig.add_trace(
            go.Scatter(
                name=f"theory, alpha={a:.3f}"
                if labels is None
                else f"theory, {labels[i]} (alpha {a:.2f})",
                x=g.tolist(),
                y=[expected_tokens_per_call(a, int(k)) for k in g],
                mode="lines",
                line=dict(color=line_colors[i]),
                legendgroup=f"a{i}",
            )
        )
    pts = list(points)
    if pts:
        marker_colors = [curve_color.get(p.label, color("speculative")) for p in pts]
        order = list(curve_color)
        nudge = {lab: 0.08 * (i - (len(order) - 1) / 2) for i, lab in enumerate(order)}
        fig.add_trace(
            go.Scatter(
                name=points_name + (" (colour: its curve)" if curve_color else ""),
                x=[p.gamma + nudge.get(p.label, 0.0) for p in pts],
                y=[p.mean for p in pts],
                error_y=dict(
                    type="data",
                    array=[1.96 * p.se for p in pts],
                    visible=True,
                    color=color("speculative") if not curve_color else color("discarded"),
                ),
                mode="markers",
                marker=dict(color=marker_colors, size=8, symbol="x"),
                customdata=[[p.alpha, p.label, p.gamma] for p in pts],
                text=[p.alpha_hover() for p in pts],
                hovertemplate="gamma %{customdata[2]}: %{y:.3f} tokens/call<br>%{text}"
                " %{customdata[1]}<extra></extra>",
            )
        )
    fig.add_annotation(x=0, y=1, text="plain decoding", showarrow=True, ax=40, ay=25,
                       font=dict(size=11))  # fmt: skip
    fig.update_layout(
        title=f"Tokens per target call: theory vs {points_name if pts else 'theory'}",
        xaxis=dict(title="gamma (draft length)", dtick=1),
        yaxis=dict(title="tokens per target call", rangemode="tozero"),
        height=400,
    )
    return fig


def tokens_per_call_vs_alpha_figure(gamma: int, points: Iterable[SimPoint] = ()) -> go.Figure:
    """Theory curve against alpha for one gamma (plain decoding = 1 drawn dotted), simulated
    points on top (with alpha's 95% Wilson interval where a :class:`SimPoint` carries its
    counts): the toy explorer's main panel."""
    a = np.linspace(0.0, 0.995, 200)
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            name=f"theory, gamma={gamma}",
            x=a.tolist(),
            y=expected_tokens_per_call(a, gamma).tolist(),
            mode="lines",
            line=dict(color=color("theory")),
        )
    )
    fig.add_trace(
        go.Scatter(
            name="plain decoding",
            x=[0.0, 1.0],
            y=[1.0, 1.0],
            mode="lines",
            line=dict(color=color("plain"), dash="dot"),
        )
    )
    pts = list(points)
    cis = [p.alpha_interval() for p in pts]
    col = color("speculative")
    fig.add_trace(
        go.Scatter(
            name="simulated",
            x=[p.alpha for p in pts],
            y=[p.mean for p in pts],
            error_y=dict(type="data", array=[1.96 * p.se for p in pts], visible=True, color=col),
            # alpha's 95% Wilson interval, where the point carries its counts
            error_x=dict(
                type="data",
                symmetric=False,
                array=[
                    None if c is None else c[1] - p.alpha for c, p in zip(cis, pts, strict=True)
                ],
                arrayminus=[
                    None if c is None else p.alpha - c[0] for c, p in zip(cis, pts, strict=True)
                ],
                visible=any(c is not None for c in cis),
                color=col,
            ),
            mode="markers",
            marker=dict(color=col, size=10, symbol="x"),
            text=[p.alpha_hover() for p in pts],
            hovertemplate="%{y:.3f} tokens/call<br>%{text}<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"Tokens per target call, gamma = {gamma}",
        xaxis=dict(title="alpha = E[sum_x min(p, q)] = 1 - TV(p, q)", range=[0, 1]),
        yaxis=dict(title="tokens per target call", range=[0, gamma + 1.2]),
        height=380,
    )
    return fig
