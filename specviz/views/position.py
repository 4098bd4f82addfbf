"""Figures of one drafted position of a trace: p_target vs q_draft, the accept test with its
uniform draw, the residual law, and the acceptance scatter over every position."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from ..core.trace import DraftPosition, Step, Trace
from . import palette
from .labels import Tokenizer, _fmt, _labels, token_label
from .palette import P_COLOR, PALETTE, Q_COLOR, RESIDUAL_COLOR, THEORY_COLOR

__all__ = [
    "accept_scatter_figure",
    "accept_test_figure",
    "default_row",
    "greedy_matching",
    "law_meaning",
    "laws_figure",
    "pq_figure",
    "residual_figure",
]


# -------------------------------------------------------------------------------------------
# one drafted position: p vs q, the uniform draw, the residual
# -------------------------------------------------------------------------------------------


def _where(s: Step, j: int) -> str:
    """Row ``j`` of step ``s`` in the words of every title: draft position ``j + 1`` (1 = the
    first drafted token), or the bonus token after all drafts were accepted."""
    if s.positions[j].draft_token >= 0:
        return f"draft position {j + 1}"
    if s.drafted:
        return f"bonus token (after all {s.drafted} drafts were accepted)"
    return "nothing drafted (the target's own token)"


def default_row(step: Step) -> int:
    """The row a step opens on (0-based: draft position ``row + 1``): its rejection if it had
    one, else its first test (draft position 1) -- a fully accepted step opens on a real
    decision, not on the bonus slot. A step that drafted nothing has only its bonus slot, row 0.
    The same rule as the TraceExplorer's :func:`specviz.views.explorers.opening_row`."""
    for j, r in enumerate(step.positions):
        if r.draft_token >= 0 and r.evaluated and not r.accepted:
            return j
    return 0


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


def greedy_matching(trace: Trace) -> bool:
    """Whether ``trace`` was verified by greedy matching (the draft kept iff it is the
    target's argmax). Such a run has no uniform draw and no residual law -- the target's
    argmax replaces a rejected draft -- so a residual panel would only ever be empty."""
    return trace.meta.get("verifier") == "greedy" or not trace.meta.get("params", {}).get(
        "do_sample", True
    )


def _is_bonus(r: DraftPosition) -> bool:
    return r.draft_token < 0


def _never_tested(s: Step) -> str:
    return f"never tested: draft position {s.accepted + 1} was rejected first"


def _decision(r: DraftPosition, s: Step) -> str:
    if _is_bonus(r):
        if not s.drafted:
            return "nothing drafted: the target's own token, sampled from p"
        return f"bonus token: all {s.drafted} drafts accepted, token sampled from p"
    if not r.evaluated:
        return _never_tested(s)
    verdict = "accept" if r.accepted else "reject"
    a = r.accept_prob
    if math.isnan(r.u):
        return f"no uniform draw: the rule decided deterministically (accept prob {_fmt(a)}) -> {verdict}"
    sign = "<" if r.u < a else ">="
    return f"u = {r.u:.3f} {sign} min(1, p/q) = {a:.3f} -> {verdict}"


#: Below this in both p and q a token is top-k padding, not drawn by :func:`pq_figure`.
PQ_FLOOR = 1e-6


def pq_figure(
    trace: Trace, step: int, row: int | None = None, tokenizer: Tokenizer = None
) -> go.Figure:
    """Target p vs draft q at one drafted position (top-k of each, from the trace rows), the
    drafted token outlined.

    Only the top-k of p and q are stored in a trace, so a token that is in one list but not the
    other has an unknown value in the other; its bar is left out rather than drawn as 0 (a point
    -mass proposal -- prompt lookup, greedy -- is known exactly: q = 1 at the drafted token).
    Tokens under :data:`PQ_FLOOR` in both laws (the zero-probability padding of a greedy,
    one-hot p's top-k) are left out; the drafted and emitted tokens are always drawn.
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
    mark = r.emitted_token if _is_bonus(r) else r.draft_token
    # a greedy p is one-hot: its top-k is padded with tokens at p = 0 (special tokens, with q
    # ~1e-8 or unknown); they carry nothing, so only tokens with visible mass in p or q (and
    # the drafted and emitted ones) are drawn
    ids = [
        i
        for i in set(p) | set(q)
        if i in (mark, r.emitted_token) or max(p.get(i) or 0.0, q.get(i) or 0.0) >= PQ_FLOOR
    ]
    ids.sort(key=lambda i: (-p.get(i, -1.0), -q.get(i, -1.0)))
    labels = _labels(ids, tokenizer)
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
        f"token {token_label(r.emitted_token, tokenizer)!r}"
        if _is_bonus(r)
        else f"draft {token_label(r.draft_token, tokenizer)!r}: p={_fmt(r.p_target)}, "
        f"q={_fmt(r.q_draft)}"
    )
    fig.update_layout(
        title=f"step {s.step}, {_where(s, j)}: {what}<br><sup>{_decision(r, s)}</sup>",
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
    reject above (wine), the drawn ``u`` as a black diamond. It makes visible that a draft with
    p < q is still accepted with probability p/q -- the step that keeps sampling lossless.
    The bonus token or a draft after the first rejection (never tested) had no test: empty
    bars and a note saying which."""
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
            marker_color=PALETTE["accepted"],
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
            marker_color=PALETTE["rejected"],
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
    if not tested:  # bonus token / never-tested draft: no test took place
        fig.add_annotation(
            text=(
                "no acceptance test of the bonus token"
                if _is_bonus(r)
                else _never_tested(s)
                if not r.evaluated
                else "no acceptance test at this position"
            ),
            showarrow=False,
            x=0.5,
            y=0.5,
            xref="paper",
            yref="paper",
        )
    fig.update_layout(
        title=f"step {s.step}, {_where(s, j)}: {_decision(r, s)}",
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
        if not _is_bonus(r) and not r.evaluated:
            why = (
                f"{_never_tested(s)}; the residual of this step is at draft position "
                f"{s.accepted + 1}"
            )
        elif r.accepted or _is_bonus(r):
            why = "no rejection at this position"
        elif greedy_matching(trace):
            # greedy matching has no residual law: the target's argmax replaces the draft
            why = (
                f"greedy matching: the draft {token_label(r.draft_token, tokenizer)!r} was not "
                f"the target's top token, so the target's top token "
                f"{token_label(r.emitted_token, tokenizer)!r} was emitted instead -- no residual "
                "law to draw (with sampling, the correction is drawn from norm(max(0, p - q)))"
            )
        else:
            why = "no residual recorded (a rule without one)"
        fig.add_annotation(text=why, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
        fig.update_layout(
            title=f"step {s.step}, {_where(s, j)}: residual",
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


#: How a law's name reads, in the order tried (first match wins): the palette meaning of a law
#: named like the notebooks name them. "corrected path (1 - alpha) * residual" is the corrected
#: path (purple), "accepted path min(p, q)" the accepted one (green).
_LAW_WORDS: tuple[tuple[str, str], ...] = (
    ("accepted", "accepted"),
    ("corrected", "corrected"),
    ("residual", "residual"),
    ("bonus", "bonus"),
    ("min(p", "overlap"),
    ("overlap", "overlap"),
    ("draft", "q"),
    ("target", "p"),
)


def law_meaning(name: str) -> str | None:
    """The palette meaning (a key of :data:`~specviz.views.palette.PALETTE`) of a law named
    ``name`` in :func:`laws_figure`: by its words (:data:`_LAW_WORDS`), else a name that is just
    ``p`` or ``q`` (optionally followed by a space or a bracket); ``None`` if it reads as none.

    >>> [law_meaning(n) for n in ("p (target)", "q", "min(p, q)", "accepted path min(p, q)",
    ...                           "corrected path (1 - alpha) * residual", "counts")]
    ['p', 'q', 'overlap', 'accepted', 'corrected', None]
    """
    low = name.lower()
    for word, meaning in _LAW_WORDS:
        if word in low:
            return meaning
    head = low.split(" ", 1)[0].split("(", 1)[0]
    return head if head in ("p", "q") else None


def laws_figure(
    laws: Mapping[str, Sequence[float]],
    tokenizer: Tokenizer = None,
    *,
    stacked: Sequence[str] = (),
    title: str = "Next-token laws",
    meanings: Mapping[str, str] | None = None,
) -> go.Figure:
    """Whole distributions over a small vocabulary (toy models), one bar trace per law.
    Laws named in ``stacked`` are stacked on each other (e.g. the accepted-path mass
    ``min(p, q)`` plus the corrected-path mass ``(1 - beta) * residual``, which add up to p)
    and drawn next to the others.

    Each law takes the palette colour of its meaning, so p is blue and q orange in every
    figure whatever the order of the laws: ``meanings`` maps a law's name to a key of the
    palette, else :func:`law_meaning` reads it from the name. A law with no meaning takes a
    palette colour no other law of the figure uses.

    >>> fig = laws_figure({"accepted path min(p, q)": [0.2, 0.3], "p (target)": [0.4, 0.6]})
    >>> [t.marker.color for t in fig.data] == [PALETTE["accepted"], PALETTE["p"]]
    True
    """
    names = list(laws)
    size = len(next(iter(laws.values()))) if laws else 0
    labels = _labels(list(range(size)), tokenizer)
    given = dict(meanings or {})
    colors = {n: palette.color(given[n]) if n in given else None for n in names}
    for n in names:
        if colors[n] is None and (m := law_meaning(n)) is not None:
            colors[n] = palette.color(m)
    spare = [c for c in dict.fromkeys(PALETTE.values()) if c not in colors.values()]
    for n in names:
        if colors[n] is None:
            colors[n] = spare.pop(0) if spare else THEORY_COLOR
    fig = go.Figure()
    for name in names:
        vals = np.asarray(laws[name], dtype=float)
        if vals.size != size:
            raise ValueError(f"law {name!r} has {vals.size} entries, expected {size}")
        fig.add_trace(
            go.Bar(
                name=name,
                x=labels,
                y=vals.tolist(),
                marker_color=colors[name],
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
        (s.step, j, r)
        for s in trace.steps
        for j, r in enumerate(s.positions)
        if r.evaluated and r.draft_token >= 0 and not math.isnan(r.u)
    ]
    fig = go.Figure()
    for ok, name, color in (
        (True, "accepted", PALETTE["accepted"]),
        (False, "rejected", PALETTE["rejected"]),
    ):
        sel = [(st, j, r) for st, j, r in rows if r.accepted == ok]
        fig.add_trace(
            go.Scatter(
                name=f"{name} ({len(sel)})",
                x=[r.accept_prob for _, _, r in sel],
                y=[r.u for _, _, r in sel],
                mode="markers",
                marker=dict(color=color, size=8),
                customdata=[[st, j + 1, r.p_target, r.q_draft] for st, j, r in sel],
                hovertemplate="step %{customdata[0]}, draft position %{customdata[1]}<br>"
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
            line=dict(color=THEORY_COLOR, dash="dash"),
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
