"""Figures of throughput, latency and load: plain results in, plotly figure out.

Companions of :mod:`specviz.load`: each function takes a batch-sweep DataFrame, a
:class:`~specviz.load.LoadSweep` or a :class:`~specviz.load.LoadResult` and returns a
``plotly.graph_objects.Figure``; nothing runs a model.

>>> from specviz.load import fixed_engine, serve
>>> res = serve(fixed_engine(tokens=3, step_time=0.1), [[1]], rate=5.0, n_requests=4,
...             max_batch=2, progress=False)
>>> len(timeline_figure(res).data) > 0
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..perf.metrics import LOWER_IS_BETTER
from .palette import PALETTE, SERIES

if TYPE_CHECKING:
    from ..load.records import LoadResult
    from ..load.sweeps import LoadSweep

__all__ = [
    "MODE_COLORS",
    "METRIC_LABELS",
    "batch_sweep_figure",
    "call_split_figure",
    "latency_tradeoff_figure",
    "load_sweep_figure",
    "speedup_figure",
    "timeline_figure",
]

MODE_COLORS = {"plain": PALETTE["plain"], "speculative": PALETTE["speculative"]}
# a third engine, or one line per metric: categories, not meanings (distinct palette hues)
_EXTRA = list(SERIES)
_SYMBOLS = ["circle", "square", "diamond", "triangle-up", "x", "star"]
_DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]

METRIC_LABELS = {
    "throughput_tok_s": "throughput (tokens/s)",
    "tokens_per_s": "tokens/s",
    "ttft_p50": "TTFT p50 (s)",
    "ttft_p90": "TTFT p90 (s)",
    "ttft_p99": "TTFT p99 (s)",
    "itl_p50": "inter-token gap p50 (s)",
    "itl_p90": "inter-token gap p90 (s)",
    "itl_p99": "inter-token gap p99 (s)",
    "tpot_p50": "time per output token p50 (s)",
    "tpot_mean": "time per output token, mean (s)",
    "completion_p50": "completion time p50 (s)",
    "completion_p90": "completion time p90 (s)",
    "queue_p50": "queueing p50 (s)",
    "utilization": "server busy share",
    "kv_tokens_peak": "KV tokens held, peak",
}


def _label(metric: str) -> str:
    return METRIC_LABELS.get(metric, metric)


def _level_title(scenario: str) -> str:
    return "arrival rate (requests/s)" if scenario == "rate" else "concurrent clients"


def _color(mode: str, i: int) -> str:
    # a third engine (the fallback policy) takes the series colours from the end, metrics
    # (speedup_figure) from the start: one page never draws an engine and a metric in one hue
    return MODE_COLORS.get(mode, _EXTRA[-1 - i % len(_EXTRA)])


def _level_axis(fig: go.Figure, levels: Any, scenario: str, **where: Any) -> None:
    """A log axis whose ticks are the measured levels: whole numbers for batch sizes and
    clients (no "2.5 clients" ticks), three significant digits for arrival rates."""
    vals = sorted({float(v) for v in levels})
    positive = all(v > 0 for v in vals)
    if scenario == "rate":
        text = [f"{v:.3g}" for v in vals]
    else:
        text = [f"{int(round(v))}" for v in vals]
    fig.update_xaxes(
        type="log" if positive else "linear",
        tickmode="array",
        tickvals=vals,
        ticktext=text,
        **where,
    )


def _noise_band(fig: go.Figure, floor: float, what: str = "", **where: Any) -> None:
    """A grey band of +/-``floor`` around a speed-up of 1 (a speed-up inside it decides
    nothing), labelled with the floor and ``what`` it is the floor of; none without a floor."""
    if math.isfinite(floor) and floor > 0:
        fig.add_hrect(
            y0=max(0.0, 1.0 - floor),
            y1=1.0 + floor,
            fillcolor=PALETTE["queued"],  # grey: undecided
            opacity=0.25,
            line_width=0,
            annotation_text=f"noise floor +/-{floor:.0%}{what}",
            annotation_position="top left",
            **where,
        )


def batch_sweep_figure(df: Any, *, title: str = "Batch size: plain vs speculative") -> go.Figure:
    """Left: tokens/s against batch size per engine; right: speculative / plain speed-up
    (the dashed line at 1 is break-even), with the sweep's noise floor -- the widest
    ``relative_range`` of its repeats, the floor its verdicts read against -- as a grey band
    around 1 when the table has that column."""
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("tokens/s", "speed-up over plain (same batch size)")
    )
    for i, (name, sub) in enumerate(df.groupby("engine", sort=False)):
        sub = sub.sort_values("batch_size")
        mode = sub["mode"].iloc[0]
        color = _color(mode, i)
        fig.add_trace(
            go.Scatter(
                x=sub["batch_size"],
                y=sub["tokens_per_s"],
                mode="lines+markers",
                name=str(name),
                line=dict(color=color),
                legendgroup=str(name),
            ),
            row=1,
            col=1,
        )
        if mode != "plain":
            fig.add_trace(
                go.Scatter(
                    x=sub["batch_size"],
                    y=sub["speedup"],
                    mode="lines+markers",
                    name=f"{name} / plain",
                    line=dict(color=color, dash="dot"),
                    legendgroup=str(name),
                    showlegend=False,
                ),
                row=1,
                col=2,
            )
    fig.add_hline(y=1.0, line_dash="dash", line_color="black", row=1, col=2)
    floor = float(df["relative_range"].max()) if "relative_range" in df else math.nan
    _noise_band(fig, floor, row=1, col=2)
    for c in (1, 2):
        _level_axis(fig, df["batch_size"], "batch", row=1, col=c)
        fig.update_xaxes(title_text="batch size (rows)", row=1, col=c)
    fig.update_layout(title=title, height=380, legend=dict(orientation="h", y=-0.2))
    return fig


def load_sweep_figure(
    sweep: LoadSweep,
    metrics: Sequence[str] = ("throughput_tok_s", "ttft_p50", "tpot_p50", "completion_p90"),
    *,
    title: str | None = None,
) -> go.Figure:
    """One panel per metric against the load level, one line per engine."""
    n = len(metrics)
    cols = 2 if n > 1 else 1
    rows = math.ceil(n / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[_label(m) for m in metrics])
    t = sweep.table
    seen: set[str] = set()
    for i, (name, sub) in enumerate(t.groupby("engine", sort=False)):
        sub = sub.sort_values("level")
        mode = sub["mode"].iloc[0]
        # a second engine of the same mode (e.g. a fallback policy) gets its own colour
        color = _color(mode if mode not in seen else "", i)
        seen.add(mode)
        for j, m in enumerate(metrics):
            fig.add_trace(
                go.Scatter(
                    x=sub["level"],
                    y=sub[m],
                    mode="lines+markers",
                    name=str(name),
                    legendgroup=str(name),
                    showlegend=j == 0,
                    line=dict(color=color),
                ),
                row=j // cols + 1,
                col=j % cols + 1,
            )
    for j in range(n):
        where = dict(row=j // cols + 1, col=j % cols + 1)
        _level_axis(fig, t["level"], sweep.scenario, **where)
        fig.update_xaxes(title_text=_level_title(sweep.scenario), **where)
    fig.update_layout(title=title or f"Load sweep ({sweep.scenario})", height=330 * rows)
    return fig


def speedup_figure(
    sweep: LoadSweep,
    metrics: Sequence[str] = ("throughput_tok_s", "ttft_p50", "tpot_p50", "completion_p50"),
    *,
    title: str | None = None,
    engine: str | None = None,
) -> go.Figure:
    """Speculation's speed-up per metric against load (> 1: speculation better; latencies
    are inverted so up is always better), with each crossover marked -- only one measured
    beyond the noise floor (:attr:`~specviz.load.Crossover.clear`), since a crossing
    interpolated between two levels inside it is where the noise crossed 1 -- and the floor
    of the first metric drawn as a grey band around 1. ``engine`` names the speculative
    engine when the sweep ran several."""
    fig = go.Figure()
    for i, m in enumerate(metrics):
        sp = sweep.speedups(m, engine=engine)
        color = _EXTRA[i % len(_EXTRA)]
        # a marker and a dash per metric too: equal speed-ups must not hide one line
        fig.add_trace(
            go.Scatter(
                x=sp["level"],
                y=sp["speedup"],
                mode="lines+markers",
                name=_label(m) + (" (inverted)" if m in LOWER_IS_BETTER else ""),
                line=dict(color=color, dash=_DASHES[i % len(_DASHES)], width=2 + 1.5 * (i == 0)),
                marker=dict(symbol=_SYMBOLS[i % len(_SYMBOLS)], size=9),
            )
        )
        x = sweep.crossover(m, engine=engine)
        if x.level is not None and x.clear:  # not a crossing of two levels inside the floor
            what = "stops paying" if x.status == "crosses" else "starts paying"
            unit = "req/s" if sweep.scenario == "rate" else "clients"
            fig.add_trace(
                go.Scatter(
                    x=[x.level],
                    y=[1.0],
                    mode="markers",
                    marker=dict(symbol="x", size=13, color=color, line=dict(width=2)),
                    name=f"{_label(m).split(' (')[0]} {what} at {x.level:.3g} {unit}",
                    hovertemplate=f"{_label(m)}: {what} at %{{x:.3g}} {unit}<extra></extra>",
                )
            )
    floor = sweep.noise_floor(metrics[0]) if metrics else math.nan
    _noise_band(fig, floor, f" ({_label(metrics[0]).split(' (')[0]})" if metrics else "")
    fig.add_hline(
        y=1.0,
        line_dash="dash",
        line_color="black",
        annotation_text="break-even",
        annotation_position="bottom right",
    )
    _level_axis(fig, sweep.table["level"], sweep.scenario)
    fig.update_xaxes(title_text=_level_title(sweep.scenario))
    fig.update_yaxes(title_text="speed-up of speculation (x; > 1: speculation better)")
    fig.update_layout(
        title=title or "Where speculation stops paying",
        height=460,
        legend=dict(orientation="h", y=-0.25),
    )
    return fig


def call_split_figure(bs: Any, *, title: str = "What one target call costs") -> go.Figure:
    """Claim 1 as stacked bars: milliseconds of one decoding step (one target call) per
    engine and batch size, split into drafting and the verify call (``draft_seconds`` /
    ``verify_seconds`` of a batch sweep over its ``target_calls``), with the target calls
    per generated token written on each bar. Plain decoding drafts nothing; speculation
    makes fewer calls, each one dearer."""
    fig = go.Figure()
    d = bs.sort_values(["batch_size"]).copy()
    per = 1000.0 / d["target_calls"].clip(lower=1)
    d["draft_ms"] = d["draft_seconds"] * per
    d["verify_ms"] = d["verify_seconds"] * per
    x = [d["batch_size"].astype(int).astype(str).map(lambda b: f"batch {b}"), d["engine"]]
    calls = (1.0 / d["tokens_per_target_call"]).map(lambda v: f"{v:.2f} calls/token")
    fig.add_trace(
        go.Bar(x=x, y=d["verify_ms"], name="verify call (target)", marker_color=PALETTE["p"])
    )
    fig.add_trace(
        go.Bar(
            x=x,
            y=d["draft_ms"],
            name="drafting",
            marker_color=PALETTE["q"],
            text=calls,
            textposition="outside",
        )
    )
    fig.update_layout(
        barmode="stack",
        title=title,
        yaxis_title="ms per target call",
        height=440,
        # right of the bars: below them it covered the two-line engine / batch labels
        legend=dict(orientation="v", x=1.02, xanchor="left", y=1.0, yanchor="top"),
        margin=dict(b=120),
    )
    return fig


def latency_tradeoff_figure(
    sweep: LoadSweep, *, title: str = "Time to first token vs time per output token"
) -> go.Figure:
    """Claim 5: each engine's TTFT p50 against its time per output token p50 at every load
    level (a point per level, labelled with it, joined in load order). Down and left is
    better; a mode can win on one axis and lose on the other."""
    fig = go.Figure()
    unit = "req/s" if sweep.scenario == "rate" else "clients"
    seen: set[str] = set()
    for i, (name, sub) in enumerate(sweep.table.groupby("engine", sort=False)):
        sub = sub.sort_values("level")
        mode = sub["mode"].iloc[0]
        color = _color(mode if mode not in seen else "", i)
        seen.add(mode)
        labels = [
            f"{v:.3g}" if sweep.scenario == "rate" else f"{int(round(v))}" for v in sub["level"]
        ]
        fig.add_trace(
            go.Scatter(
                x=1000 * sub["tpot_p50"],
                y=sub["ttft_p50"],
                mode="lines+markers+text",
                text=labels,
                textposition="top center",
                name=str(name),
                line=dict(color=color),
                hovertemplate=f"{name}<br>%{{text}} {unit}<br>TPOT p50 %{{x:.0f}} ms<br>"
                "TTFT p50 %{y:.2f} s<extra></extra>",
            )
        )
    fig.update_xaxes(title_text="time per output token p50 (ms)")
    fig.update_yaxes(title_text="time to first token p50 (s)")
    fig.update_layout(
        title=f"{title} (labels: {unit})", height=420, legend=dict(orientation="h", y=-0.25)
    )
    return fig


def timeline_figure(result: LoadResult, *, title: str | None = None) -> go.Figure:
    """One line per request on the virtual clock: queueing (grey, arrival -> batch start),
    waiting for the first token (sand: the batch's prefill and first step), streaming (teal,
    first -> last token) -- the palette's load-timeline colours, none of them p or q."""
    fig = go.Figure()
    segs = {k: ([], [], PALETTE[k]) for k in ("queued", "to first token", "streaming")}
    for r in result.requests:
        y = r.request_id
        first = r.token_times[0] if r.token_times else r.start
        for name, (a, b) in (
            ("queued", (r.arrival, r.start)),
            ("to first token", (r.start, first)),
            ("streaming", (first, r.finish)),
        ):
            xs, ys, _ = segs[name]
            xs += [a, b, None]
            ys += [y, y, None]
    for name, (xs, ys, color) in segs.items():
        fig.add_trace(
            go.Scatter(x=xs, y=ys, mode="lines", name=name, line=dict(color=color, width=6))
        )
    fig.add_trace(
        go.Scatter(
            x=[r.arrival for r in result.requests],
            y=[r.request_id for r in result.requests],
            mode="markers",
            marker=dict(symbol="triangle-right", color="black", size=7),
            name="arrival",
        )
    )
    for b in result.batches:
        fig.add_vline(x=b.start, line_width=1, line_dash="dot", line_color="#999999")
    # the axis runs to the last request's last token: autorange once cut the longest bar off
    ends = [r.finish for r in result.requests] + [b.start for b in result.batches]
    starts = [r.arrival for r in result.requests]
    xr = None
    if ends and starts:
        lo, hi = min(0.0, min(starts)), max(ends)
        xr = [lo, hi + 0.03 * max(hi - lo, 1e-9)]
    fig.update_xaxes(title_text="virtual time (s): arrivals simulated, service measured",
                     range=xr)  # fmt: skip
    n = len(result.requests)
    fig.update_yaxes(title_text="request", autorange="reversed", tickformat="d",
                     dtick=max(1, math.ceil(n / 16)))  # fmt: skip
    what = "req/s" if result.scenario == "rate" else "clients"
    fig.update_layout(
        title=title or f"{result.engine}: {result.level:.3g} {what}, max batch {result.max_batch}",
        height=max(300, 14 * len(result.requests) + 120),
    )
    return fig
