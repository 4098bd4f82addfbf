"""Figures of measured performance: how steps ended (rejection positions), metric bars, cost
vs benefit; the gamma trade-off (predicted and measured) is :mod:`.speedup`.

One convention for rejection positions in every figure: draft positions count from 1 ("the
first drafted token" = position 1), and the outcomes of the steps add up to the number of steps
(:class:`StepOutcomes`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..perf.acceptance import wilson_interval
from . import palette
from .palette import PALETTE
from .speedup import (  # noqa: F401  (their former home; the gamma trade-off moved)
    _best_mark,
    _check_c,
    _mix,
    acceptance_colors,
    measured_speedup_figure,
    predicted_speedup_figure,
    series_colors,
)

__all__ = [
    "StepOutcomes",
    "rejection_position_label",
    "rejection_positions_figure",
    "rejection_positions_by_group_figure",
    "metric_bars_figure",
    "cost_benefit_figure",
    "acceptance_colors",
    "series_colors",
    "predicted_speedup_figure",
    "measured_speedup_figure",
]

#: Draft positions are numbered from this (1: "the first drafted token" is position 1).
FIRST_POSITION = 1


def rejection_position_label(accepted: int) -> str:
    """The position of the first rejection of a step that accepted ``accepted`` drafts before
    it, in the one convention of every figure: ``"1"`` = the first drafted token was rejected."""
    return str(int(accepted) + FIRST_POSITION)


# -------------------------------------------------------------------------------------------
# how steps ended
# -------------------------------------------------------------------------------------------

ALL_ACCEPTED = "none: all accepted"
CUT_SHORT = "none: all accepted (cut short)"
EMPTY = "nothing drafted"


@dataclass(frozen=True)
class StepOutcomes:
    """How every step (target call) of a run or a pool of runs ended, ``gamma`` drafts asked:

    * ``rejected[i]``: steps whose first rejection was at draft position ``i + 1``
      (position 1 = the first drafted token);
    * ``all_accepted``: steps that kept every token of a full ``gamma``-token draft;
    * ``cut_short``: steps that kept every token of a draft *shorter* than gamma -- the last
      draft cut by ``max_new_tokens``, or a lookup that found fewer tokens;
    * ``empty``: steps that drafted nothing (a lookup with no match).

    The four add up to :attr:`steps`, the number of target calls: no step is counted nowhere.
    """

    gamma: int
    rejected: tuple[int, ...]
    all_accepted: int = 0
    cut_short: int = 0
    empty: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "rejected", tuple(int(x) for x in self.rejected))
        counts = (*self.rejected, self.all_accepted, self.cut_short, self.empty)
        if any(c < 0 for c in counts):
            raise ValueError(f"step counts must be >= 0, got {counts}")

    @classmethod
    def from_counts(
        cls, accepted: Sequence[int], drafted: Sequence[int], gamma: int | None = None
    ) -> StepOutcomes:
        """From per-step accepted and drafted counts (``GenerationResult.accepted_counts`` and
        ``drafted_counts``, or a trace's steps); ``gamma`` defaults to the longest draft."""
        acc, dra = [int(a) for a in accepted], [int(d) for d in drafted]
        if len(acc) != len(dra):
            raise ValueError("accepted and drafted counts differ in length")
        g = max(dra, default=0) if gamma is None else int(gamma)
        rejected, full, cut, empty = [0] * max(g, max(dra, default=0)), 0, 0, 0
        for n, d in zip(acc, dra, strict=True):
            if not 0 <= n <= d:
                raise ValueError(f"a step accepted {n} of {d} drafts")
            if d == 0:
                empty += 1
            elif n < d:
                rejected[n] += 1
            elif d >= g:
                full += 1
            else:
                cut += 1
        return cls(g, tuple(rejected), full, cut, empty)

    @classmethod
    def from_trace(cls, trace: Any, gamma: int | None = None) -> StepOutcomes:
        """From a :class:`~specviz.Trace` (or several, pooled: pass a list)."""
        traces = trace if isinstance(trace, (list, tuple)) else [trace]
        steps = [s for t in traces for s in t.steps]
        return cls.from_counts([s.accepted for s in steps], [s.drafted for s in steps], gamma)

    @classmethod
    def from_histograms(
        cls, accepted_hist: Sequence[int], rejection_hist: Sequence[int], empty: int = 0
    ) -> StepOutcomes:
        """From a grid cell's histograms (:func:`specviz.analysis.run_grid`): ``accepted_hist[n]``
        counts every step that accepted ``n`` drafts (rejections, full and cut-short drafts,
        empty drafts alike), ``rejection_hist[n]`` the steps rejected after ``n`` accepted.
        What is left once rejections, full drafts and empty drafts are taken out are the
        fully accepted drafts cut short."""
        acc = [int(x) for x in accepted_hist]
        rej = [int(x) for x in rejection_hist]
        gamma = len(acc) - 1
        if gamma < 0:
            return cls(0, (), 0, 0, int(empty))
        full = acc[gamma] if gamma > 0 else 0
        cut = sum(acc) - sum(rej) - full - int(empty)
        if cut < 0:
            raise ValueError("histograms inconsistent: more rejections and empty drafts than steps")
        return cls(gamma, tuple(rej), full, cut, int(empty))

    @property
    def steps(self) -> int:
        """Every step: rejections + full drafts kept + cut-short drafts kept + empty drafts."""
        return sum(self.rejected) + self.all_accepted + self.cut_short + self.empty

    @property
    def drafting_steps(self) -> int:
        """Steps that drafted at least one token."""
        return self.steps - self.empty

    @property
    def first_rejections(self) -> int:
        """Steps whose first drafted token (position 1) was rejected."""
        return self.rejected[0] if self.rejected else 0

    @property
    def first_rejection_share(self) -> float:
        """first rejections / drafting steps (NaN without a drafting step)."""
        n = self.drafting_steps
        return self.first_rejections / n if n else math.nan

    @property
    def fully_accepted(self) -> int:
        """Steps that kept their whole draft, full or cut short."""
        return self.all_accepted + self.cut_short

    def counts(
        self, *, with_empty: bool | None = None, with_cut_short: bool = True
    ) -> dict[str, int]:
        """Outcome label -> steps, in figure order (positions 1..gamma first); the empty-draft
        entry appears when there is one (or ``with_empty``)."""
        out = {rejection_position_label(i): c for i, c in enumerate(self.rejected)}
        out[ALL_ACCEPTED] = self.all_accepted
        if with_cut_short:
            out[CUT_SHORT] = self.cut_short
        if with_empty or (with_empty is None and self.empty):
            out[EMPTY] = self.empty
        return out

    def __add__(self, other: StepOutcomes) -> StepOutcomes:
        if not isinstance(other, StepOutcomes):
            return NotImplemented
        n = max(len(self.rejected), len(other.rejected))
        rej = [0] * n
        for r in (self.rejected, other.rejected):
            for i, c in enumerate(r):
                rej[i] += c
        return StepOutcomes(
            max(self.gamma, other.gamma),
            tuple(rej),
            self.all_accepted + other.all_accepted,
            self.cut_short + other.cut_short,
            self.empty + other.empty,
        )

    def describe(self) -> str:
        """One sentence with every count, adding up to the steps."""
        s = self.steps
        share = self.first_rejection_share
        return (
            f"of {s} steps, {self.first_rejections} rejected the first drafted token"
            + (f" ({share:.0%} of {self.drafting_steps} drafting steps)" if s else "")
            + f", {sum(self.rejected) - self.first_rejections} a later one, "
            f"{self.all_accepted} kept all {self.gamma} drafts, {self.cut_short} kept a draft "
            f"cut short" + (f", {self.empty} drafted nothing" if self.empty else "")
        )


def _outcome_colors(labels: Sequence[str]) -> tuple[list[str], list[str]]:
    colors, patterns = [], []
    for lab in labels:
        if lab == EMPTY:
            colors.append(PALETTE["unvisited"])
        elif lab in (ALL_ACCEPTED, CUT_SHORT):
            colors.append(PALETTE["accepted"])
        else:
            colors.append(PALETTE["rejected"])
        patterns.append("/" if lab == CUT_SHORT else "")
    return colors, patterns


def _outcome_bar(
    o: StepOutcomes, *, name: str = "", showlegend: bool = False, cut_known: bool = True
) -> go.Bar:
    counts = o.counts(with_cut_short=cut_known)
    total = o.steps
    share = [c / total if total else 0.0 for c in counts.values()]
    colors, patterns = _outcome_colors(list(counts))
    return go.Bar(
        name=name,
        x=list(counts),
        y=share,
        marker=dict(color=colors, pattern=dict(shape=patterns)),
        customdata=list(counts.values()),
        hovertemplate="%{x}: %{y:.1%} of steps (%{customdata})<extra>" + name + "</extra>",
        showlegend=showlegend,
    )


def _as_outcomes(
    rejection_hist: Sequence[int] | StepOutcomes,
    all_accepted: int | None,
    empty: int,
    cut_short: int | None,
) -> tuple[StepOutcomes, bool]:
    if isinstance(rejection_hist, StepOutcomes):
        return rejection_hist, True
    rej = tuple(int(x) for x in np.asarray(rejection_hist, dtype=int).ravel())
    o = StepOutcomes(len(rej), rej, int(all_accepted or 0), int(cut_short or 0), int(empty))
    return o, cut_short is not None


def rejection_positions_figure(
    rejection_hist: Sequence[int] | StepOutcomes,
    all_accepted: int | None = None,
    *,
    empty: int = 0,
    cut_short: int | None = None,
    title: str | None = None,
) -> go.Figure:
    """How a drafter's steps ended: the share of *all* steps whose first rejection was at draft
    position 1..gamma (1 = the first drafted token), that kept a full draft, that kept a draft
    cut short (by ``max_new_tokens``, or a lookup that found fewer tokens), and that drafted
    nothing (``empty``, shown when there are any). The bars add up to every step. A tall first
    bar says: shorten gamma or change the drafter.

    Give a :class:`StepOutcomes` (complete by construction), or the rejection histogram
    (index ``i`` = position ``i + 1``) with the other counts; without ``cut_short`` those steps
    are unknown, so no bar claims a count for them and the title says they are missing."""
    o, cut_known = _as_outcomes(rejection_hist, all_accepted, empty, cut_short)
    fig = go.Figure(_outcome_bar(o, cut_known=cut_known))
    head = title + "<br><sup>" if title else ""
    fig.update_layout(
        title=f"{head}how {o.steps} steps ended: first rejected draft position, or none"
        + (f"; {o.empty} drafted nothing" if o.empty else "")
        + ("" if cut_known else "; drafts cut short and kept: not counted")
        + ("</sup>" if title else ""),
        xaxis=dict(title="first rejected draft position (1 = the first drafted token)"),
        yaxis=dict(title="share of steps", range=[0, 1.02]),
        height=380,
    )
    fig.update_xaxes(type="category")
    return fig


def rejection_positions_by_group_figure(
    outcomes: Mapping[str, StepOutcomes], *, title: str = "How steps ended", cols: int = 4
) -> go.Figure:
    """:func:`rejection_positions_figure` for several groups (task categories), one panel
    each, the same colours in every panel (wine: rejected at that position, green: every
    draft kept, hatched green: a draft cut short and kept, grey: nothing drafted)."""
    names = list(outcomes)
    if not names:
        raise ValueError("no groups to draw")
    ncols = min(cols, len(names))
    nrows = math.ceil(len(names) / ncols)
    fig = make_subplots(
        rows=nrows,
        cols=ncols,
        subplot_titles=[f"{n}: {outcomes[n].steps} steps" for n in names],
        shared_yaxes=True,
    )
    for i, n in enumerate(names):
        fig.add_trace(_outcome_bar(outcomes[n], name=str(n)), row=i // ncols + 1, col=i % ncols + 1)
    fig.update_xaxes(type="category")
    fig.update_yaxes(range=[0, 1.02])
    fig.update_yaxes(title_text="share of steps", col=1)
    fig.update_layout(
        title=f"{title}<br><sup>first rejected draft position (1 = the first drafted token), "
        "or none</sup>",
        height=260 + 160 * nrows,
    )
    return fig


#: metrics that are a proportion of counts: metric -> (successes column, trials column)
RATE_COUNTS: dict[str, tuple[str, str]] = {"acceptance_rate": ("accepted", "drafted")}
#: where a "never reached" mark sits in a rate's bar chart: below 0, never read as 0%
NEVER_REACHED_Y = -0.04


def _pooled_counts(
    summary: Any, cells: Any, x: str, color: str, k_col: str, n_col: str
) -> tuple[dict[tuple[Any, Any], tuple[int, int]], str]:
    """(successes, trials) per ``(color value, x value)`` of ``summary``: its own columns,
    or ``cells`` (the grid rows it was summarized from) pooled the way
    :func:`specviz.analysis.summarize` pools them. Returns ``({}, why)`` when unknown."""
    if k_col in summary.columns and n_col in summary.columns:
        return {
            (c, v): (int(k), int(n))
            for c, v, k, n in zip(
                summary[color], summary[x], summary[k_col], summary[n_col], strict=True
            )
        }, ""
    if cells is None:
        return {}, f"counts not given (pass cells= or {k_col!r}/{n_col!r} columns): no interval"
    if k_col not in cells.columns or n_col not in cells.columns:
        raise KeyError(f"cells need columns {k_col!r} and {n_col!r}")
    # the summary rows are one gamma, one mode...: take the cells of that slice only
    for col in summary.columns:
        if col in (x, color) or col not in cells.columns:
            continue
        vals = list(dict.fromkeys(summary[col]))
        if len(vals) == 1 and col in ("gamma", "mode", "model", "history"):
            cells = cells[cells[col] == vals[0]]
    out: dict[tuple[Any, Any], tuple[int, int]] = {}
    for c, v in zip(summary[color], summary[x], strict=True):
        sub = cells[cells[color] == c]
        if v != "all" or "all" in set(cells[x]):
            sub = sub[sub[x] == v]
        out[(c, v)] = (int(sub[k_col].sum()), int(sub[n_col].sum()))
    return out, ""


def metric_bars_figure(
    summary: Any,
    metric: str,
    *,
    x: str = "category",
    color: str = "drafter",
    title: str | None = None,
    cells: Any = None,
    counts: tuple[str, str] | None = None,
    confidence: float = 0.95,
    intervals: Mapping[tuple[str, str], tuple[float, float]] | None = None,
) -> go.Figure:
    """One grouped bar per ``x`` value (task category), one colour per ``color`` value
    (drafter), height ``metric`` -- rows of :func:`specviz.analysis.summarize` already
    filtered to one gamma and mode.

    A rate (``acceptance_rate``, or any metric given ``counts=(successes, trials)`` column
    names) shows the counts behind each bar: from the summary's ``accepted`` / ``drafted``
    columns when it has them, else from ``cells`` -- the :func:`run_grid` rows the summary
    was made from, pooled per bar (the slice of one gamma / mode is taken from the summary;
    category ``all`` pools every category). Each bar then has a 95% Wilson error bar and
    its hover says "k of n"; the interval treats drafted tokens as independent, so it is a
    lower bound on the uncertainty across prompts. A bar with nothing drafted is not drawn
    (never a 0%): a grey x below the axis says "never reached". Pooled counts must give the
    summary's rate, or this raises (cells of another slice). Any other metric can carry error
    bars from ``intervals``, ``(color value, x value) -> (low, high)`` (e.g. a bootstrap over
    prompts of the mean accepted length).

    >>> import pandas as pd
    >>> s = pd.DataFrame(dict(drafter=["a", "a"], category=["x", "y"],
    ...                       acceptance_rate=[0.5, 0.0], accepted=[5, 0], drafted=[10, 0]))
    >>> fig = metric_bars_figure(s, "acceptance_rate")
    >>> fig.data[0].y, fig.data[0].hovertext[0].split("<br>")[1]
    ((0.5, None), '5 of 10 accepted')
    >>> fig.data[1].name, fig.data[1].x
    ('never reached (no rate)', ('y',))
    """
    if metric not in summary.columns:
        raise KeyError(f"no column {metric!r}; have {list(summary.columns)}")
    cols = counts or RATE_COUNTS.get(metric)
    known: dict[tuple[Any, Any], tuple[int, int]] = {}
    why, noun = "", ""
    if cols is not None:
        known, why = _pooled_counts(summary, cells, x, color, *cols)
        noun = "accepted" if cols == RATE_COUNTS["acceptance_rate"] else str(cols[0])
    xs = list(dict.fromkeys(summary[x]))
    names = list(dict.fromkeys(summary[color]))
    meaning = "accepted" if "accept" in metric else "speculative"
    colors = series_colors([str(n) for n in names], meaning)
    fig = go.Figure()
    never: list[tuple[str, str]] = []
    for name in names:
        sub = summary[summary[color] == name].set_index(x)
        y = [float(sub[metric].get(v, np.nan)) if v in sub.index else None for v in xs]
        y = [None if v is None or math.isnan(v) else v for v in y]
        col = colors[str(name)]
        hover = [
            f"{v}: {yy:.3f}" if yy is not None else f"{v}: no value"
            for v, yy in zip(xs, y, strict=True)
        ]
        lo, hi = [None] * len(xs), [None] * len(xs)
        kn: list[Any] = [None] * len(xs)
        if known:
            for i, v in enumerate(xs):
                if v not in sub.index:
                    continue
                k, n = known[(name, v)]
                kn[i] = [k, n]
                if n == 0:
                    y[i] = None
                    hover[i] = f"{v}: never reached (nothing drafted): no rate"
                    never.append((str(name), str(v)))
                    continue
                rate = float(sub[metric].get(v))
                if not math.isclose(rate, k / n, rel_tol=1e-9, abs_tol=1e-12):
                    raise ValueError(
                        f"{name}, {v}: {cols[0]}/{cols[1]} = {k}/{n} is not the summary's "
                        f"{metric} {rate:.6g}: are the cells the summary's slice?"
                    )
                a, b = wilson_interval(k, n, confidence)
                lo[i], hi[i] = a, b
                hover[i] = (
                    f"{v}: {rate:.3f}<br>{k} of {n} {noun}<br>{confidence:.0%} Wilson interval "
                    f"{a:.3f} to {b:.3f}"
                )
        elif why:
            hover = [h + f"<br>{why}" for h in hover]
        for i, v in enumerate(xs):  # given intervals (a metric without counts)
            ci = (intervals or {}).get((str(name), str(v)))
            if ci is not None and y[i] is not None and not known:
                lo[i], hi[i] = ci
                hover[i] += f"<br>{confidence:.0%} interval {ci[0]:.3f} to {ci[1]:.3f}"
        fig.add_trace(
            go.Bar(
                name=str(name),
                x=[str(v) for v in xs],
                y=y,
                # a lighter fill, so the interval (the series' own colour) shows inside the bar
                marker=dict(
                    color=col, opacity=0.55 if known or intervals else 1.0, line=dict(color=col)
                ),
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=[None if h is None else h - v for h, v in zip(hi, y, strict=True)],
                    arrayminus=[None if a is None else v - a for a, v in zip(lo, y, strict=True)],
                    color=col,
                    thickness=2,
                    visible=bool(known or intervals),
                ),
                customdata=[
                    None if c is None else [*c, a, b] for c, a, b in zip(kn, lo, hi, strict=True)
                ],
                hovertext=hover,
                hovertemplate="%{hovertext}<extra>" + str(name) + "</extra>",
            )
        )
    if never:
        fig.add_trace(
            go.Scatter(
                name="never reached (no rate)",
                x=[v for _, v in never],
                y=[NEVER_REACHED_Y] * len(never),
                mode="markers",
                marker=dict(
                    color=palette.color("unvisited"), symbol="x-thin-open", size=11, line_width=2
                ),
                hovertext=[f"{n}, {v}: never reached (nothing drafted)" for n, v in never],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    label = metric.replace("_", " ")
    sub_title = (
        f"<br><sup>error bars: {confidence:.0%} Wilson intervals over drafted tokens</sup>"
        if known
        else ""
    )
    fig.update_layout(
        title=(title or label) + sub_title,
        barmode="group",
        xaxis=dict(title=x, type="category"),
        yaxis=dict(title=label),
        height=400,
    )
    if cols is not None:
        fig.update_yaxes(
            range=[2 * NEVER_REACHED_Y if never else 0, 1.02], tickvals=[0, 0.2, 0.4, 0.6, 0.8, 1]
        )
    return fig


def cost_benefit_figure(summary: Any, *, title: str | None = None) -> go.Figure:
    """Draft cost against what it buys: share of the wall time spent drafting (x) vs mean
    accepted length (tokens per target call, y), one marker per (drafter, category) row of
    :func:`specviz.analysis.summarize` (category ``all`` drawn large). Up-left is cheap and
    strong; a strong drafter that eats the time it saves sits up-right. The pooled markers
    are labelled with the drafter's measured speedup over plain decoding (the engineer's
    question); each drafter keeps the colour it has in :func:`metric_bars_figure`."""
    fig = go.Figure()
    names = list(dict.fromkeys(summary["drafter"]))
    colors = series_colors([str(n) for n in names], "speculative")
    for i, name in enumerate(names):
        sub = summary[summary["drafter"] == name]
        big = (sub["category"] == "all").to_numpy()
        sp = sub["speedup"].astype(float).tolist()
        fig.add_trace(
            go.Scatter(
                name=str(name),
                x=sub["draft_time_share"].astype(float).tolist(),
                y=sub["mean_accepted_length"].astype(float).tolist(),
                mode="markers+text",
                marker=dict(size=[16 if b else 8 for b in big], color=colors[str(name)]),
                text=[f"{name}: {v:.2f}x" if b else "" for b, v in zip(big, sp, strict=True)],
                textposition="top right" if i % 2 == 0 else "bottom right",
                cliponaxis=False,
                customdata=list(zip(sub["category"].astype(str), sp, strict=True)),
                hovertemplate="%{customdata[0]}: draft share %{x:.1%}, %{y:.2f} tokens/call, "
                "speedup %{customdata[1]:.2f}x<extra>" + str(name) + "</extra>",
            )
        )
    fig.update_layout(
        title=title or "Draft cost vs mean accepted length (labels: speedup over plain)",
        xaxis=dict(title="draft time / total time", tickformat=".0%", rangemode="tozero"),
        yaxis=dict(title="mean accepted length (tokens per target call)", rangemode="tozero"),
        height=420,
    )
    return fig
