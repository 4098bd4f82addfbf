"""Figures of speculative decoding: plain data in, plotly figure out.

Every function here takes a :class:`~specviz.trace.Trace` (or the rows of one, a statistics
result, plain numbers) and returns a ``plotly.graph_objects.Figure``. Nothing runs a model and
nothing displays anything, so the same function feeds a static report (``fig.show()`` /
nbconvert HTML), an interactive explorer (:mod:`specviz.widgets` copies the figure into a
``FigureWidget``) and a headless test (which just reads ``fig.data``).

Token ids become text through the optional ``tokenizer`` argument: a Hugging Face tokenizer
(anything with ``decode``), a sequence or mapping of names (handy for toy vocabularies), a
callable ``id -> str``, or ``None`` (ids shown as ``#17``).

The small pieces of theory the figures draw against live here too, as plain functions
(:func:`truncated_geometric_law`, :func:`expected_tokens_per_call`, :func:`fit_alpha`), because
a figure that compares an observation with the law must compute that law; they follow the field
notes (Leviathan et al. 2023): with i.i.d. per-position acceptance ``alpha`` the accepted count
``N`` of a ``gamma``-token draft has ``P(N = n) = alpha**n (1 - alpha)`` for ``n < gamma`` and
``P(N = gamma) = alpha**gamma``, and a target call yields ``(1 - alpha**(gamma + 1)) / (1 - alpha)``
tokens on average.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .stats import Pooled
from .trace import DraftPosition, Step, Trace, TraceSummary

__all__ = [
    "KIND_COLORS",
    "Slot",
    "SimPoint",
    "accept_scatter_figure",
    "accept_test_figure",
    "cost_benefit_figure",
    "margin_figure",
    "metric_bars_figure",
    "power_curve_figure",
    "pvalue_uniformity_figure",
    "rejection_positions_figure",
    "accepted_counts",
    "default_row",
    "expected_tokens_per_call",
    "fit_alpha",
    "gof_figure",
    "laws_figure",
    "per_position_acceptance",
    "per_position_acceptance_figure",
    "pq_figure",
    "rejection_grid_figure",
    "rejection_histogram_figure",
    "residual_figure",
    "token_label",
    "token_slots",
    "token_strip_figure",
    "tokens_per_call_vs_alpha_figure",
    "tokens_per_call_vs_gamma_figure",
    "truncated_geometric_law",
    "verifier_report_figure",
]

#: One colour per fate of a token slot; used by every figure so the legend means the same thing.
KIND_COLORS: dict[str, str] = {
    "accepted": "#2ca02c",  # draft token kept
    "corrected": "#ff7f0e",  # target token sampled from the residual after a rejection
    "bonus": "#1f77b4",  # target token after all drafts were accepted
    "discarded": "#c7c7c7",  # drafted but thrown away (rejected, after a rejection, or cut)
    "target": "#7f7f7f",  # plain autoregressive decoding
}
P_COLOR = "#1f77b4"
Q_COLOR = "#ff7f0e"
RESIDUAL_COLOR = "#9467bd"
THEORY_COLOR = "#d62728"

Tokenizer = Any  # HF tokenizer | Sequence[str] | Mapping[int, str] | Callable[[int], str] | None

_VISIBLE = str.maketrans({" ": "·", "\n": "↵", "\t": "⇥", "\r": "␍"})


# -------------------------------------------------------------------------------------------
# tokens
# -------------------------------------------------------------------------------------------


def _decoder(tokenizer: Tokenizer) -> Callable[[int], str]:
    if tokenizer is None:
        return lambda i: f"#{i}"
    if hasattr(tokenizer, "decode"):
        return lambda i: tokenizer.decode([int(i)])
    if isinstance(tokenizer, Mapping):
        return lambda i: str(tokenizer.get(int(i), f"#{i}"))
    if isinstance(tokenizer, Sequence):  # list of names, or a str of one-letter names
        return lambda i: str(tokenizer[int(i)]) if 0 <= int(i) < len(tokenizer) else f"#{i}"
    if callable(tokenizer):
        return lambda i: str(tokenizer(int(i)))
    raise TypeError(
        "tokenizer must have decode(), be a sequence/mapping of names, a callable or None; "
        f"got {type(tokenizer).__name__}"
    )


def token_label(token_id: int, tokenizer: Tokenizer = None) -> str:
    """Readable text of one token, with whitespace made visible (``·`` space, ``↵`` newline),
    because most tokens of real text start with a space or are one, and a blank label hides
    exactly the tokens a reader needs to see."""
    if token_id < 0:
        return "∅"
    text = _decoder(tokenizer)(token_id)
    return text.translate(_VISIBLE) if text else "∅"


def _labels(ids: Sequence[int], tokenizer: Tokenizer) -> list[str]:
    """Labels for bar categories: decoded text, made unique by appending the id on collisions
    (two ids can decode to the same string, and plotly would merge their bars)."""
    texts = [token_label(i, tokenizer) for i in ids]
    seen: dict[str, int] = {}
    for t in texts:
        seen[t] = seen.get(t, 0) + 1
    return [f"{t} #{i}" if seen[t] > 1 else t for t, i in zip(texts, ids, strict=True)]


def _fmt(x: float, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}g}"


# -------------------------------------------------------------------------------------------
# theory behind the figures
# -------------------------------------------------------------------------------------------


def truncated_geometric_law(alpha: float, gamma: int) -> np.ndarray:
    """``P(N = n)`` for ``n = 0..gamma`` accepted drafts under i.i.d. acceptance ``alpha``.

    The exact law for a context-free toy model and the reference every observed rejection
    histogram is compared with: a real drafter deviates from it where acceptance is not i.i.d.
    (e.g. the first drafted token is rejected more often than the law predicts).
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    if gamma < 1:
        raise ValueError(f"gamma must be >= 1, got {gamma!r}")
    n = np.arange(gamma + 1)
    law = alpha**n * (1.0 - alpha)
    law[gamma] = alpha**gamma
    return law


def expected_tokens_per_call(alpha: float | np.ndarray, gamma: int) -> float | np.ndarray:
    """``(1 - alpha**(gamma+1)) / (1 - alpha)``: tokens one target call yields on average
    (the accepted drafts plus the corrected or bonus token); ``gamma + 1`` at ``alpha = 1``."""
    a = np.asarray(alpha, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(np.isclose(a, 1.0), gamma + 1.0, (1.0 - a ** (gamma + 1)) / (1.0 - a))
    return float(out) if out.ndim == 0 else out


def fit_alpha(accepted: Sequence[int], gamma: int) -> float:
    """Maximum-likelihood ``alpha`` of the truncated-geometric law from accepted counts of
    ``gamma``-token drafts: accepted tokens / tokens the verifier looked at (every step looks
    at ``n + 1`` drafts, or ``gamma`` when all were accepted)."""
    acc = np.asarray(accepted, dtype=int)
    if acc.size == 0:
        return math.nan
    if acc.min() < 0 or acc.max() > gamma:
        raise ValueError(f"accepted counts must lie in [0, {gamma}]")
    looked = np.minimum(acc + 1, gamma).sum()
    return float(acc.sum() / looked) if looked else math.nan


def accepted_counts(trace: Trace, gamma: int | None = None) -> list[int]:
    """Accepted count of every step that drafted exactly ``gamma`` tokens (default: the
    trace's gamma). Shorter drafts -- the last steps before ``max_new_tokens``, or a prompt
    lookup that found little -- follow a different law and are left out."""
    if gamma is None:
        gamma = int(trace.meta.get("gamma") or max((s.drafted for s in trace.steps), default=0))
    return [s.accepted for s in trace.steps if s.drafted == gamma and gamma > 0]


def per_position_acceptance(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """``(rate, reached)`` per draft position ``i = 0..gamma-1``: P(accept at i | the verifier
    reached i), and how many steps reached it (the rate's sample size)."""
    gamma = max((s.drafted for s in trace.steps), default=0)
    reached = np.zeros(gamma, dtype=int)
    kept = np.zeros(gamma, dtype=int)
    for s in trace.steps:
        for i in range(min(s.drafted, s.accepted + 1)):
            reached[i] += 1
            kept[i] += i < s.accepted
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(reached > 0, kept / np.maximum(reached, 1), np.nan)
    return rate, reached


# -------------------------------------------------------------------------------------------
# token strip
# -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """One cell of the token strip: a generated token or a drafted-and-discarded one."""

    step: int
    kind: str  # a key of KIND_COLORS
    token: int
    position: int  # index among generated tokens (discarded drafts: where they were proposed)
    index_in_step: int
    p: float = math.nan
    q: float = math.nan
    accept_prob: float = math.nan
    u: float = math.nan


def _step_slots(s: Step) -> list[Slot]:
    if not s.positions:  # plain decoding: one target token per step
        return [Slot(s.step, "target", t, s.position + j, j) for j, t in enumerate(s.emitted)]
    kept: list[Slot] = []
    dropped: list[Slot] = []
    final: list[Slot] = []
    for j, r in enumerate(s.positions):
        num = dict(p=r.p_target, q=r.q_draft, accept_prob=r.accept_prob, u=r.u)
        if r.emitted_kind == "bonus":
            if r.emitted_token >= 0:
                final.append(Slot(s.step, "bonus", r.emitted_token, r.position, j, p=math.nan))
            continue
        if r.emitted_kind == "accepted" and r.emitted_token >= 0:
            kept.append(Slot(s.step, "accepted", r.draft_token, r.position, j, **num))
            continue
        # the rejected draft, drafts after it, and accepted drafts cut by EOS/max_new_tokens
        dropped.append(Slot(s.step, "discarded", r.draft_token, r.position, j, **num))
        if r.emitted_kind == "corrected" and r.emitted_token >= 0:
            final.append(Slot(s.step, "corrected", r.emitted_token, r.position, j, **num))
    return kept + dropped + final


def token_slots(trace: Trace) -> list[Slot]:
    """The trace in reading order: per step the accepted drafts, then the discarded drafts
    (the rejected one first), then the target's own token (corrected or bonus). Reading the
    strip left to right reads "draft proposed ..., target kept ..., then wrote ...".
    """
    return [slot for s in trace.steps for slot in _step_slots(s)]


def token_strip_figure(
    trace: Trace,
    tokenizer: Tokenizer = None,
    *,
    highlight_step: int | None = None,
    per_row: int = 16,
    title: str | None = None,
) -> go.Figure:
    """The generated text as coloured cells, one bar trace per kind (accepted / discarded /
    corrected / bonus / target), wrapped at ``per_row`` cells per line. ``highlight_step``
    outlines the cells of one step (the explorer's scrubber moves it).
    """
    slots = token_slots(trace)
    fig = go.Figure()
    for kind, color in KIND_COLORS.items():
        idx = [i for i, s in enumerate(slots) if s.kind == kind]
        if not idx and kind == "target":
            continue
        sl = [slots[i] for i in idx]
        hl = [s.step == highlight_step for s in sl]
        fig.add_trace(
            go.Bar(
                name=kind,
                orientation="h",
                x=[0.96] * len(sl),
                base=[i % per_row for i in idx],
                y=[i // per_row for i in idx],
                width=0.86,
                text=[token_label(s.token, tokenizer) for s in sl],
                textposition="inside",
                insidetextanchor="middle",
                textangle=0,
                marker=dict(
                    color=color,
                    line=dict(color="black", width=[3 if h else 0 for h in hl]),
                    opacity=[1.0 if (highlight_step is None or h) else 0.55 for h in hl],
                ),
                customdata=[
                    [s.step, s.position, s.token, s.p, s.q, s.accept_prob, s.u] for s in sl
                ],
                hovertemplate=(
                    f"<b>{kind}</b> %{{text}} (id %{{customdata[2]}})<br>step %{{customdata[0]}},"
                    " position %{customdata[1]}<br>p=%{customdata[3]:.3f} q=%{customdata[4]:.3f}"
                    "<br>min(1,p/q)=%{customdata[5]:.3f} u=%{customdata[6]:.3f}<extra></extra>"
                ),
            )
        )
    rows = max(1, math.ceil(len(slots) / per_row))
    n_new = sum(len(s.emitted) for s in trace.steps)
    fig.update_layout(
        title=title or f"{n_new} generated tokens in {len(trace.steps)} target calls",
        barmode="overlay",
        height=110 + 34 * rows,
        margin=dict(l=40, r=20, t=60, b=30),
        xaxis=dict(visible=False, range=[-0.1, per_row]),
        yaxis=dict(range=[rows - 0.5, -0.5], dtick=1, title="line", showgrid=False, zeroline=False),
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=1, xanchor="right"),
        plot_bgcolor="white",
        uniformtext=dict(minsize=8, mode="show"),
    )
    return fig


# -------------------------------------------------------------------------------------------
# one drafted position: p vs q, the uniform draw, the residual
# -------------------------------------------------------------------------------------------


def default_row(step: Step) -> int:
    """The row of a step most worth looking at: the rejection if there was one, else the
    last row (the bonus slot, or the last draft when EOS cut the step)."""
    for j, r in enumerate(step.positions):
        if r.emitted_kind == "corrected" or (r.evaluated and not r.accepted and r.draft_token >= 0):
            return j
    return max(0, len(step.positions) - 1)


def _row_at(trace: Trace, step: int, row: int | None) -> tuple[Step, DraftPosition, int]:
    if not 0 <= step < len(trace.steps):
        raise IndexError(f"step {step} out of range [0, {len(trace.steps)})")
    s = trace.steps[step]
    if not s.positions:
        raise ValueError(f"step {step} has no drafted positions (plain decoding trace?)")
    j = default_row(s) if row is None else row
    if not 0 <= j < len(s.positions):
        raise IndexError(f"row {j} out of range [0, {len(s.positions)}) in step {step}")
    return s, s.positions[j], j


def _is_bonus(r: DraftPosition) -> bool:
    return r.draft_token < 0


def _decision(r: DraftPosition) -> str:
    if _is_bonus(r):
        return "bonus slot: every draft accepted, token sampled from p"
    if not r.evaluated:
        return "never evaluated: an earlier draft was rejected"
    verdict = "accept" if r.accepted else "reject"
    a = r.accept_prob
    if math.isnan(r.u):
        return f"no uniform draw: the rule decided deterministically (accept prob {_fmt(a)}) -> {verdict}"
    sign = "<" if r.u < a else ">="
    return f"u = {r.u:.3f} {sign} min(1, p/q) = {a:.3f} -> {verdict}"


def pq_figure(
    trace: Trace, step: int, row: int | None = None, tokenizer: Tokenizer = None
) -> go.Figure:
    """Target p vs draft q at one drafted position (top-k of each, from the trace rows), the
    drafted token outlined.

    Only the top-k of p and q are stored in a trace, so a token that is in one list but not the
    other has an unknown value in the other; its bar is left out rather than drawn as 0 (a point
    -mass proposal -- prompt lookup, greedy -- is known exactly: q = 1 at the drafted token).
    """
    s, r, j = _row_at(trace, step, row)
    p = dict(zip(r.top_p_ids, r.top_p_probs, strict=True))
    if _is_bonus(r):
        q: dict[int, float] = {}
        point_mass = False
    else:
        p.setdefault(r.draft_token, r.p_target)
        point_mass = not r.top_q_ids
        q = (
            {r.draft_token: 1.0}
            if point_mass
            else dict(zip(r.top_q_ids, r.top_q_probs, strict=True))
        )
        q.setdefault(r.draft_token, r.q_draft)
    ids = sorted(set(p) | set(q), key=lambda i: (-p.get(i, -1.0), -q.get(i, -1.0)))
    labels = _labels(ids, tokenizer)
    mark = r.emitted_token if _is_bonus(r) else r.draft_token
    outline = [3 if i == mark else 0 for i in ids]
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            name="p (target)",
            x=labels,
            y=[p.get(i) for i in ids],
            marker=dict(color=P_COLOR, line=dict(color="black", width=outline)),
            customdata=ids,
            hovertemplate="%{x} (id %{customdata})<br>p = %{y:.4f}<extra></extra>",
        )
    )
    qy = [q.get(i, 0.0 if point_mass else None) for i in ids]
    fig.add_trace(
        go.Bar(
            name="q (draft)" + (" point mass" if point_mass else ""),
            x=labels,
            y=qy,
            marker=dict(color=Q_COLOR, line=dict(color="black", width=outline)),
            customdata=ids,
            hovertemplate="%{x} (id %{customdata})<br>q = %{y:.4f}<extra></extra>",
        )
    )
    what = (
        f"bonus token {token_label(r.emitted_token, tokenizer)!r}"
        if _is_bonus(r)
        else f"draft {token_label(r.draft_token, tokenizer)!r}: p={_fmt(r.p_target)}, "
        f"q={_fmt(r.q_draft)}"
    )
    fig.update_layout(
        title=f"step {s.step}, draft position {j + 1}: {what}<br><sup>{_decision(r)}</sup>",
        barmode="group",
        yaxis=dict(title="probability", range=[0, 1.05]),
        xaxis=dict(title="token (outlined: drafted / emitted)", type="category"),
        height=380,
        margin=dict(l=50, r=20, t=80, b=60),
        legend=dict(orientation="h", y=1.0, yanchor="bottom", x=1, xanchor="right"),
    )
    return fig


def accept_test_figure(trace: Trace, step: int, row: int | None = None) -> go.Figure:
    """The acceptance test as a line from 0 to 1: accept where ``u < min(1, p/q)`` (green),
    reject above (red), the drawn ``u`` as a black diamond. It makes visible that a draft with
    p < q is still accepted with probability p/q -- the step that keeps sampling lossless.
    A bonus slot or a draft after the first rejection had no test: empty bars and a note."""
    s, r, j = _row_at(trace, step, row)
    tested = not _is_bonus(r) and r.evaluated and not math.isnan(r.accept_prob)
    a = float(r.accept_prob) if tested else 0.0
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            name="accept: u < min(1, p/q)",
            orientation="h",
            x=[a],
            base=[0.0],
            y=["u"],
            marker_color=KIND_COLORS["accepted"],
            hovertemplate="accept region [0, %{x:.3f})<extra></extra>",
        )
    )
    fig.add_trace(
        go.Bar(
            name="reject",
            orientation="h",
            x=[1.0 - a if tested else 0.0],
            base=[a],
            y=["u"],
            marker_color=THEORY_COLOR,
            opacity=0.6,
            hovertemplate="reject region<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            name="u (uniform draw)",
            x=[] if math.isnan(r.u) else [r.u],
            y=[] if math.isnan(r.u) else ["u"],
            mode="markers",
            marker=dict(symbol="diamond", size=16, color="black"),
            hovertemplate="u = %{x:.4f}<extra></extra>",
        )
    )
    if not tested:  # bonus slot / never-evaluated draft: no test took place
        fig.add_annotation(
            text="no acceptance test at this position",
            showarrow=False,
            x=0.5,
            y=0.5,
            xref="paper",
            yref="paper",
        )
    fig.update_layout(
        title=f"step {s.step}, draft position {j + 1}: {_decision(r)}",
        barmode="overlay",
        xaxis=dict(range=[0, 1], title="u ~ U(0, 1)"),
        yaxis=dict(visible=False),
        height=200,
        margin=dict(l=20, r=20, t=60, b=40),
        legend=dict(orientation="h", y=-0.6, yanchor="top"),
    )
    return fig


def residual_figure(
    trace: Trace, step: int, row: int | None = None, tokenizer: Tokenizer = None
) -> go.Figure:
    """At a rejection: p, q and the residual ``norm(max(0, p - q))`` the corrected token is
    drawn from (top-k from the trace), the corrected token outlined. The residual removes the
    mass the draft already had its chance to propose, which is why the overall law is p."""
    s, r, j = _row_at(trace, step, row)
    fig = go.Figure()
    if not r.residual_ids:
        why = (
            "no rejection at this position"
            if r.accepted or _is_bonus(r)
            else "no residual recorded (greedy matching or a rule without one)"
        )
        fig.add_annotation(text=why, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
        fig.update_layout(
            title=f"step {s.step}, draft position {j + 1}: residual",
            height=320,
            xaxis=dict(visible=False),
            yaxis=dict(visible=False),
        )
        return fig
    p = dict(zip(r.top_p_ids, r.top_p_probs, strict=True))
    p.setdefault(r.draft_token, r.p_target)
    point_mass = not r.top_q_ids
    q = {r.draft_token: 1.0} if point_mass else dict(zip(r.top_q_ids, r.top_q_probs, strict=True))
    q.setdefault(r.draft_token, r.q_draft)
    res = dict(zip(r.residual_ids, r.residual_probs, strict=True))
    ids = sorted(set(res) | {r.draft_token}, key=lambda i: -res.get(i, 0.0))
    labels = _labels(ids, tokenizer)
    outline = [3 if i == r.emitted_token else 0 for i in ids]
    for name, vals, color in (
        ("p (target)", p, P_COLOR),
        ("q (draft)", q, Q_COLOR),
        ("residual norm(max(0, p - q))", res, RESIDUAL_COLOR),
    ):
        default = 0.0 if (vals is q and point_mass) or vals is res else None
        fig.add_trace(
            go.Bar(
                name=name,
                x=labels,
                y=[vals.get(i, default) for i in ids],
                marker=dict(color=color, line=dict(color="black", width=outline)),
                customdata=ids,
                hovertemplate="%{x} (id %{customdata})<br>%{y:.4f}<extra>" + name + "</extra>",
            )
        )
    fig.update_layout(
        title=(
            f"step {s.step}, draft position {j + 1}: draft {token_label(r.draft_token, tokenizer)!r}"
            f" rejected, corrected to {token_label(r.emitted_token, tokenizer)!r}"
        ),
        barmode="group",
        yaxis=dict(title="probability", range=[0, 1.05]),
        xaxis=dict(title="token (outlined: the corrected token)", type="category"),
        height=380,
        margin=dict(l=50, r=20, t=60, b=60),
        legend=dict(orientation="h", y=1.0, yanchor="bottom", x=1, xanchor="right"),
    )
    return fig


def laws_figure(
    laws: Mapping[str, Sequence[float]],
    tokenizer: Tokenizer = None,
    *,
    stacked: Sequence[str] = (),
    title: str = "Next-token laws",
) -> go.Figure:
    """Whole distributions over a small vocabulary (toy models), one bar trace per law.
    Laws named in ``stacked`` are stacked on each other (e.g. the accepted-path mass
    ``min(p, q)`` plus the corrected-path mass ``(1 - beta) * residual``, which add up to p)
    and drawn next to the others."""
    names = list(laws)
    size = len(next(iter(laws.values()))) if laws else 0
    labels = _labels(list(range(size)), tokenizer)
    fig = go.Figure()
    palette = [P_COLOR, Q_COLOR, KIND_COLORS["accepted"], RESIDUAL_COLOR, "#8c564b", "#17becf"]
    for i, name in enumerate(names):
        vals = np.asarray(laws[name], dtype=float)
        if vals.size != size:
            raise ValueError(f"law {name!r} has {vals.size} entries, expected {size}")
        fig.add_trace(
            go.Bar(
                name=name,
                x=labels,
                y=vals.tolist(),
                marker_color=palette[i % len(palette)],
                offsetgroup="stack" if name in stacked else name,
                hovertemplate="%{x}: %{y:.4f}<extra>" + name + "</extra>",
            )
        )
    # plotly stacks bars that share an offsetgroup only through `base`; set it explicitly.
    base = np.zeros(size)
    for tr in fig.data:
        if tr.name in stacked:
            tr.base = base.tolist()
            base = base + np.asarray(tr.y, dtype=float)
    fig.update_layout(
        title=title,
        barmode="group",
        xaxis=dict(title="token", type="category"),
        yaxis=dict(title="probability"),
        height=360,
    )
    return fig


def accept_scatter_figure(trace: Trace, *, title: str | None = None) -> go.Figure:
    """Every evaluated draft as a point (min(1, p/q), u), green if accepted: the lossless rule
    accepts exactly the points below the diagonal u = min(1, p/q). Rows without a uniform
    draw (greedy matching, deterministic rules) are left out."""
    rows = [
        (s.step, r)
        for s in trace.steps
        for r in s.positions
        if r.evaluated and r.draft_token >= 0 and not math.isnan(r.u)
    ]
    fig = go.Figure()
    for ok, name, color in (
        (True, "accepted", KIND_COLORS["accepted"]),
        (False, "rejected", THEORY_COLOR),
    ):
        sel = [(st, r) for st, r in rows if r.accepted == ok]
        fig.add_trace(
            go.Scatter(
                name=f"{name} ({len(sel)})",
                x=[r.accept_prob for _, r in sel],
                y=[r.u for _, r in sel],
                mode="markers",
                marker=dict(color=color, size=8),
                customdata=[[st, r.position, r.p_target, r.q_draft] for st, r in sel],
                hovertemplate="step %{customdata[0]}, position %{customdata[1]}<br>"
                "p=%{customdata[2]:.3f} q=%{customdata[3]:.3f}<br>min(1,p/q)=%{x:.3f}"
                " u=%{y:.3f}<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            name="u = min(1, p/q)",
            x=[0, 1],
            y=[0, 1],
            mode="lines",
            line=dict(color="black", dash="dash"),
        )
    )
    fig.update_layout(
        title=title or f"Acceptance test of {len(rows)} evaluated drafts",
        xaxis=dict(title="min(1, p/q)", range=[-0.02, 1.02]),
        yaxis=dict(title="u", range=[-0.02, 1.02], scaleanchor="x"),
        height=420,
        width=520,
    )
    return fig


# -------------------------------------------------------------------------------------------
# acceptance across positions, rejection points, tokens per call
# -------------------------------------------------------------------------------------------


def per_position_acceptance_figure(
    data: Trace | Mapping[str, Trace | TraceSummary | Sequence[float]],
    *,
    alpha: float | None = None,
    title: str = "Acceptance per draft position",
) -> go.Figure:
    """P(accept at draft position i | reached i), one line per label. Under i.i.d. acceptance
    the line is flat at alpha (drawn dashed when given); a dip at position 1 means the drafter
    misses early -- the case where a shorter gamma or another drafter helps."""
    series = {"trace": data} if isinstance(data, Trace) else dict(data)
    fig = go.Figure()
    gmax = 0
    for label, d in series.items():
        if isinstance(d, Trace):
            rate, reached = per_position_acceptance(d)
        elif isinstance(d, TraceSummary):
            rate, reached = np.array(d.per_position_acceptance, dtype=float), None
        else:
            rate, reached = np.asarray(d, dtype=float), None
        gmax = max(gmax, rate.size)
        fig.add_trace(
            go.Scatter(
                name=str(label),
                x=list(range(1, rate.size + 1)),
                y=[None if np.isnan(v) else float(v) for v in rate],
                mode="lines+markers",
                customdata=None if reached is None else reached.tolist(),
                hovertemplate="position %{x}: %{y:.3f}"
                + ("<br>reached %{customdata} times" if reached is not None else "")
                + "<extra>"
                + str(label)
                + "</extra>",
            )
        )
    if alpha is not None and gmax:
        fig.add_trace(
            go.Scatter(
                name=f"i.i.d. alpha = {alpha:.3f}",
                x=[1, gmax],
                y=[alpha, alpha],
                mode="lines",
                line=dict(dash="dash", color=THEORY_COLOR),
            )
        )
    fig.update_layout(
        title=title,
        xaxis=dict(title="draft position (1 = first drafted token)", dtick=1),
        yaxis=dict(title="P(accept | reached)", range=[0, 1.02]),
        height=360,
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
    x = [str(k) for k in range(gamma)] + [f"{gamma} (all)"]
    obs = counts / n if n else np.zeros(gamma + 1)
    traces = [
        go.Bar(
            name="observed",
            x=x,
            y=obs.tolist(),
            marker_color="#4c78a8",
            customdata=counts.tolist(),
            hovertemplate="%{x} accepted: %{y:.3f} (%{customdata} steps)<extra>observed</extra>",
            showlegend=showlegend,
            legendgroup="observed",
        ),
        go.Scatter(
            name="truncated geometric",
            x=x,
            y=law.tolist(),
            mode="lines+markers",
            line=dict(color=THEORY_COLOR),
            hovertemplate="%{x} accepted: %{y:.3f}<extra>alpha^n (1 - alpha)</extra>",
            showlegend=showlegend,
            legendgroup="theory",
        ),
    ]
    return traces, a, n


def rejection_histogram_figure(
    accepted: Sequence[int], gamma: int, *, alpha: float | None = None, title: str | None = None
) -> go.Figure:
    """Where drafts stop: the share of steps that accepted ``n = 0..gamma`` drafts (``n`` is
    also the position of the first rejection) against the truncated-geometric law, with
    ``alpha`` fitted by maximum likelihood unless given. Steps must all have drafted ``gamma``
    tokens (see :func:`accepted_counts`)."""
    traces, a, n = _rejection_traces(accepted, gamma, alpha, True)
    fig = go.Figure(traces)
    fig.update_layout(
        title=title
        or f"Accepted drafts per step, gamma = {gamma} (n = {n} steps, alpha = {_fmt(a)})",
        xaxis=dict(title="accepted drafts n (= first rejected position)", type="category"),
        yaxis=dict(title="share of steps", range=[0, 1.02]),
        height=360,
    )
    return fig


def rejection_grid_figure(
    cells: Mapping[tuple[str, int], Sequence[int]], *, title: str = "Rejection points"
) -> go.Figure:
    """One rejection histogram per ``(group, gamma)`` cell (rows = groups such as task
    categories, columns = gamma), each against its own fitted truncated-geometric law."""
    groups = list(dict.fromkeys(g for g, _ in cells))
    gammas = sorted({k for _, k in cells})
    titles = []
    for g in groups:
        for k in gammas:
            acc = cells.get((g, k))
            titles.append(
                f"{g}, gamma={k}: alpha={_fmt(fit_alpha(acc, k))}, n={len(acc)}"
                if acc is not None and len(acc)
                else f"{g}, gamma={k}: no steps"
            )
    fig = make_subplots(
        rows=len(groups),
        cols=len(gammas),
        subplot_titles=titles,
        vertical_spacing=0.12 / max(1, len(groups) - 1) if len(groups) > 1 else 0.1,
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
    fig.update_layout(title=title, height=140 + 230 * len(groups), showlegend=True)
    return fig


@dataclass(frozen=True)
class SimPoint:
    """A measured tokens-per-target-call value with its standard error."""

    alpha: float
    gamma: int
    mean: float
    se: float = 0.0
    label: str = "simulated"


def tokens_per_call_vs_gamma_figure(
    alphas: Sequence[float], gamma_max: int, points: Iterable[SimPoint] = ()
) -> go.Figure:
    """Theory ``(1 - a^(g+1)) / (1 - a)`` against gamma for each alpha, simulated points with
    error bars on top. The curves flatten: past a point, longer drafts buy little, since each
    extra draft token survives only with probability alpha^gamma."""
    g = np.arange(1, gamma_max + 1)
    fig = go.Figure()
    palette = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
    for i, a in enumerate(alphas):
        fig.add_trace(
            go.Scatter(
                name=f"theory, alpha={a:.3f}",
                x=g.tolist(),
                y=[expected_tokens_per_call(a, int(k)) for k in g],
                mode="lines",
                line=dict(color=palette[i % len(palette)]),
                legendgroup=f"a{i}",
            )
        )
    pts = list(points)
    if pts:
        fig.add_trace(
            go.Scatter(
                name="simulated",
                x=[p.gamma for p in pts],
                y=[p.mean for p in pts],
                error_y=dict(type="data", array=[1.96 * p.se for p in pts], visible=True),
                mode="markers",
                marker=dict(color="black", size=8, symbol="x"),
                customdata=[[p.alpha, p.label] for p in pts],
                hovertemplate="gamma %{x}: %{y:.3f} tokens/call<br>alpha %{customdata[0]:.3f}"
                " %{customdata[1]}<extra></extra>",
            )
        )
    fig.update_layout(
        title="Tokens per target call: theory vs simulation",
        xaxis=dict(title="gamma (draft length)", dtick=1),
        yaxis=dict(title="tokens per target call", rangemode="tozero"),
        height=400,
    )
    return fig


def tokens_per_call_vs_alpha_figure(gamma: int, points: Iterable[SimPoint] = ()) -> go.Figure:
    """Theory curve against alpha for one gamma (plain decoding = 1 drawn dashed), simulated
    points on top: the toy explorer's main panel."""
    a = np.linspace(0.0, 0.995, 200)
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            name=f"theory, gamma={gamma}",
            x=a.tolist(),
            y=expected_tokens_per_call(a, gamma).tolist(),
            mode="lines",
            line=dict(color=THEORY_COLOR),
        )
    )
    fig.add_trace(
        go.Scatter(
            name="plain decoding",
            x=[0.0, 1.0],
            y=[1.0, 1.0],
            mode="lines",
            line=dict(color="grey", dash="dash"),
        )
    )
    pts = list(points)
    fig.add_trace(
        go.Scatter(
            name="simulated",
            x=[p.alpha for p in pts],
            y=[p.mean for p in pts],
            error_y=dict(type="data", array=[1.96 * p.se for p in pts], visible=True),
            mode="markers",
            marker=dict(color="black", size=10, symbol="x"),
            hovertemplate="alpha %{x:.3f}: %{y:.3f} tokens/call<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"Tokens per target call, gamma = {gamma}",
        xaxis=dict(title="alpha = E[sum_x min(p, q)] = 1 - TV(p, q)", range=[0, 1]),
        yaxis=dict(title="tokens per target call", range=[0, gamma + 1.2]),
        height=380,
    )
    return fig


# -------------------------------------------------------------------------------------------
# statistics results
# -------------------------------------------------------------------------------------------


def gof_figure(
    result: Any, *, title: str | None = None, label: Callable[[Any], str] | None = None
) -> go.Figure:
    """Observed vs expected counts of a goodness-of-fit result (``specviz.stats`` results carry
    ``observed``/``expected``/``labels`` of the bins actually tested, after pooling), with the
    statistic and p-value in the title: the bars show *which* outcomes drive a rejection.
    ``label`` formats an outcome (pooled bins are labelled by the test itself)."""
    fmt = label or str
    # pooled bins (sparse outcomes merged by the test) keep their own "<pooled: k outcomes>"
    x = [str(lab) if isinstance(lab, Pooled) else fmt(lab) for lab in result.labels]
    fig = go.Figure(
        [
            go.Bar(
                name="observed",
                x=x,
                y=np.asarray(result.observed, dtype=float).tolist(),
                marker_color="#4c78a8",
            ),
            go.Bar(
                name="expected",
                x=x,
                y=np.asarray(result.expected, dtype=float).tolist(),
                marker_color=THEORY_COLOR,
                opacity=0.7,
            ),
        ]
    )
    head = title + "<br><sup>" if title else ""
    fig.update_layout(
        title=f"{head}{result.method}: statistic {_fmt(result.statistic, 4)}, dof {result.dof}, "
        f"p = {_fmt(result.pvalue)}, n = {result.n}" + ("</sup>" if title else ""),
        barmode="group",
        xaxis=dict(title="outcome", type="category"),
        yaxis=dict(title="count"),
        height=380,
    )
    return fig


def verifier_report_figure(
    names: Sequence[str],
    pvalues: Sequence[float],
    tvs: Sequence[float],
    *,
    alpha: float = 1e-3,
    lossless: Sequence[bool] | None = None,
) -> go.Figure:
    """Per verifier: ``-log10 p`` of the goodness-of-fit test (left; the dashed line is the
    test level) and the exact TV between its output law and the target's (right). A broken rule
    with a small TV can pass a test that lacks the samples to see it -- both numbers matter."""
    ok = list(lossless) if lossless is not None else [n == "lossless" for n in names]
    colors = [KIND_COLORS["accepted"] if o else THEORY_COLOR for o in ok]
    logp = [min(16.0, -math.log10(max(p, 1e-16))) for p in pvalues]
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("evidence: -log10 p (capped at 16)", "exact TV to the target law"),
    )
    fig.add_trace(
        go.Bar(
            name="-log10 p",
            x=list(names),
            y=logp,
            marker_color=colors,
            customdata=list(pvalues),
            hovertemplate="%{x}: p = %{customdata:.3g}<extra></extra>",
            showlegend=False,
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Bar(
            name="TV",
            x=list(names),
            y=list(tvs),
            marker_color=colors,
            hovertemplate="%{x}: TV = %{y:.4f}<extra></extra>",
            showlegend=False,
        ),
        row=1,
        col=2,
    )
    fig.add_hline(
        y=-math.log10(alpha),
        line_dash="dash",
        line_color="black",
        row=1,
        col=1,
        annotation_text=f"alpha = {alpha:g}",
    )
    fig.update_layout(title="Which verifiers keep the target's law?", height=420)
    return fig


# -------------------------------------------------------------------------------------------
# lossless statistics: calibration, power, greedy margins
# -------------------------------------------------------------------------------------------


def pvalue_uniformity_figure(
    pvalues: Mapping[str, Sequence[float]], *, alpha: float = 0.05, title: str | None = None
) -> go.Figure:
    """Sorted p-values against uniform quantiles (QQ), one series per label: a calibrated
    test on a true null lies on the diagonal; a broken rule bends the curve towards 0. The
    dashed horizontal line is the test level (the share of points below it is the
    rejection rate)."""
    fig = go.Figure()
    palette = [KIND_COLORS["accepted"], THEORY_COLOR, P_COLOR, Q_COLOR, RESIDUAL_COLOR]
    for i, (label, pv) in enumerate(pvalues.items()):
        p = np.sort(np.asarray(pv, dtype=float))
        if p.size == 0:
            continue
        expected = (np.arange(1, p.size + 1) - 0.5) / p.size
        rate = float(np.mean(p < alpha))
        fig.add_trace(
            go.Scatter(
                name=f"{label}: {rate:.0%} below {alpha:g}",
                x=expected.tolist(),
                y=p.tolist(),
                mode="markers",
                marker=dict(color=palette[i % len(palette)], size=6),
                hovertemplate="uniform quantile %{x:.3f}: p = %{y:.3g}<extra>"
                + str(label)
                + "</extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            name="uniform", x=[0, 1], y=[0, 1], mode="lines", line=dict(color="black", dash="dash")
        )
    )
    fig.add_hline(y=alpha, line_dash="dot", line_color="grey")
    n = max((len(v) for v in pvalues.values()), default=0)
    fig.update_layout(
        title=title or f"Calibration: p-values of {n} null replicates vs uniform",
        xaxis=dict(title="uniform quantile", range=[0, 1]),
        yaxis=dict(title="sorted p-value", range=[0, 1]),
        height=420,
        width=560,
    )
    return fig


def power_curve_figure(
    ns: Sequence[int],
    curves: Mapping[str, Sequence[float]],
    *,
    power: float = 0.9,
    marks: Mapping[str, float] | None = None,
    title: str = "Power of the first-token test vs sample size",
) -> go.Figure:
    """Power (probability of a rejection) against the sample size, one curve per alternative,
    log-x; the dotted line is the target ``power`` and ``marks`` are vertical lines at named
    sample sizes (e.g. the samples a notebook actually drew)."""
    fig = go.Figure()
    for label, ys in curves.items():
        fig.add_trace(
            go.Scatter(
                name=str(label),
                x=[int(n) for n in ns],
                y=[float(y) for y in ys],
                mode="lines+markers",
                hovertemplate="n = %{x}: power %{y:.3f}<extra>" + str(label) + "</extra>",
            )
        )
    fig.add_hline(y=power, line_dash="dot", line_color="black", annotation_text=f"{power:.0%}")
    for label, n in (marks or {}).items():
        if np.isfinite(n) and n > 0:  # a trace, not a shape: shapes on log axes take log10(x)
            fig.add_trace(
                go.Scatter(
                    name=str(label),
                    x=[float(n), float(n)],
                    y=[0.0, 1.0],
                    mode="lines",
                    line=dict(color="grey", dash="dash"),
                    hovertemplate=f"{label}<extra></extra>",
                )
            )
    fig.update_layout(
        title=title,
        xaxis=dict(title="samples (per arm)", type="log"),
        yaxis=dict(title="power", range=[0, 1.02]),
        height=400,
    )
    return fig


def margin_figure(
    background: Mapping[str, Sequence[float]],
    divergences: Sequence[Mapping[str, Any]],
    *,
    near_tie: Mapping[str, float] | None = None,
    title: str = "Top-1 minus top-2 logit: every greedy step vs the divergences",
) -> go.Figure:
    """Where greedy outputs part: the top-1/top-2 logit margin of every greedy decision
    (histogram per dtype, log-x) and, as markers on top, the margin at each first divergence
    (dicts with ``label``, ``margin`` and optionally ``dtype``). Divergences sitting at the far
    left of the histogram are near ties -- numerics, not bugs."""
    fig = go.Figure()
    floor = 1e-4
    all_m = np.concatenate([np.asarray(v, dtype=float) for v in background.values()] or [[1.0]])
    hi = float(np.log10(max(all_m.max(initial=1.0), 1.0))) + 0.1
    for label, vals in background.items():
        v = np.maximum(np.asarray(vals, dtype=float), floor)
        fig.add_trace(
            go.Histogram(
                name=f"{label}: {v.size} greedy steps",
                x=np.log10(v).tolist(),
                xbins=dict(start=math.log10(floor), end=hi, size=0.2),
                opacity=0.55,
                hovertemplate="log10 margin %{x}: %{y} steps<extra>" + str(label) + "</extra>",
            )
        )
    ymax = 1.0
    for tr in fig.data:
        ymax = max(ymax, float(np.histogram(tr.x, bins=30)[0].max()) if len(tr.x) else 1.0)
    pts = [d for d in divergences if d.get("margin") is not None]
    if pts:
        fig.add_trace(
            go.Scatter(
                name=f"first divergences ({len(pts)})",
                x=[math.log10(max(float(d["margin"]), floor)) for d in pts],
                y=[ymax * (0.35 + 0.6 * (i % 5) / 5) for i in range(len(pts))],
                mode="markers+text",
                text=[str(d.get("label", "")) for d in pts],
                textposition="top center",
                marker=dict(symbol="x", size=12, color="black"),
                customdata=[float(d["margin"]) for d in pts],
                hovertemplate="%{text}<br>margin %{customdata:.4f}<extra></extra>",
            )
        )
    for label, t in (near_tie or {}).items():
        fig.add_vline(
            x=math.log10(t),
            line_dash="dash",
            line_color="grey",
            annotation_text=f"near tie {label}",
        )
    fig.update_layout(
        title=title,
        barmode="overlay",
        xaxis=dict(title="log10(top-1 logit - top-2 logit)"),
        yaxis=dict(title="greedy steps"),
        height=420,
    )
    return fig


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
