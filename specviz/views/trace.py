"""Figures of one generation's trace: the token strip and acceptance rates in words; one drafted
position (p vs q, the accept test, the residual) is :mod:`.position`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import plotly.graph_objects as go

from ..core.trace import Step, Trace
from ..perf.acceptance import wilson_interval
from .labels import Tokenizer, _fmt, token_label
from .palette import PALETTE
from .position import (  # noqa: F401  (their former home)
    _decision,
    _is_bonus,
    _never_tested,
    _row_at,
    _where,
    accept_scatter_figure,
    accept_test_figure,
    default_row,
    law_meaning,
    laws_figure,
    pq_figure,
    residual_figure,
)

__all__ = [
    "STRIP_COLORS",
    "Slot",
    "token_slots",
    "token_strip_figure",
    "default_row",
    "pq_figure",
    "accept_test_figure",
    "residual_figure",
    "laws_figure",
    "accept_scatter_figure",
    "acceptance_interval",
    "acceptance_text",
    "law_meaning",
]


# -------------------------------------------------------------------------------------------
# token strip
# -------------------------------------------------------------------------------------------


#: One colour per fate of a token-strip cell, from the palette: a draft kept (green), the
#: draft tested and rejected (wine), the token corrected from the residual (purple), the bonus
#: token (sky blue), drafts never tested or cut by EOS / max_new_tokens (grey), plain decoding
#: (black).
STRIP_COLORS: dict[str, str] = {
    k: PALETTE[k] for k in ("accepted", "rejected", "corrected", "bonus", "discarded", "target")
}


@dataclass(frozen=True)
class Slot:
    """One cell of the token strip: a generated token, or a drafted token that was not kept
    (``rejected`` by its test, or ``discarded``: never tested, or cut by EOS / length)."""

    step: int
    kind: str  # a key of STRIP_COLORS
    token: int
    position: int  # 0-based index among generated tokens (drafts not kept: where proposed)
    index_in_step: int  # the row in the step: draft position index_in_step + 1 (or the bonus)
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
        # the rejected draft (tested), drafts after it (never tested), and accepted drafts cut
        # by EOS / max_new_tokens
        kind = "rejected" if r.evaluated and not r.accepted else "discarded"
        dropped.append(Slot(s.step, kind, r.draft_token, r.position, j, **num))
        if r.emitted_kind == "corrected" and r.emitted_token >= 0:
            final.append(Slot(s.step, "corrected", r.emitted_token, r.position, j, **num))
    return kept + dropped + final


def token_slots(trace: Trace) -> list[Slot]:
    """The trace in reading order: per step the accepted drafts, then the drafts not kept
    (the rejected one first, then those never tested), then the target's own token (corrected
    or bonus). Reading the strip left to right reads "draft proposed ..., target kept ...,
    then wrote ...".
    """
    return [slot for s in trace.steps for slot in _step_slots(s)]


def _slot_text(s: Step, slot: Slot, n_new: int, tokenizer: Tokenizer) -> str:
    """The hover of one strip cell: its fate, its 1-based draft position, the numbers of its
    decision, and (for a token of the output) which generated token it is."""
    head = f"<b>{slot.kind}</b> {token_label(slot.token, tokenizer)!r} (id {slot.token})"
    out = f"generated token {slot.position + 1} of {n_new}"
    if not s.positions:
        return f"{head}<br>step {s.step}, plain decoding<br>{out}"
    j = slot.index_in_step
    r = s.positions[j]
    if r.draft_token < 0:
        return f"{head}<br>step {s.step}, {_where(s, j)}: drawn from p<br>{out}"
    nums = f"<br>p={_fmt(slot.p)} q={_fmt(slot.q)}"
    if slot.kind == "corrected":
        return (
            f"{head}<br>step {s.step}, draft position {j + 1}: drawn from the residual after "
            f"draft {token_label(r.draft_token, tokenizer)!r} was rejected<br>{out}"
        )
    if slot.kind == "discarded":
        fate = (
            f"never tested (draft position {s.accepted + 1} was rejected first)"
            if not r.evaluated
            else "accepted, then cut by EOS / max_new_tokens"
        )
        return f"{head}<br>step {s.step}, draft position {j + 1}: {fate}" + (
            "" if not r.evaluated else nums
        )
    return (
        f"{head}<br>step {s.step}, draft position {j + 1}: {slot.kind}{nums}<br>"
        f"{_decision(r, s)}" + (f"<br>{out}" if slot.kind == "accepted" else "")
    )


def token_strip_figure(
    trace: Trace,
    tokenizer: Tokenizer = None,
    *,
    highlight_step: int | None = None,
    per_row: int = 16,
    title: str | None = None,
) -> go.Figure:
    """The generated text as coloured cells, one bar trace per kind (accepted / rejected /
    corrected / bonus / discarded / target, coloured as in :data:`STRIP_COLORS`), wrapped at
    ``per_row`` cells per line. ``highlight_step`` outlines the cells of one step (the
    explorer's scrubber moves it). Hovers name draft positions 1-based (1 = the first drafted
    token); ``customdata`` starts with (step, row in the step), row ``j`` = draft position
    ``j + 1``.
    """
    slots = token_slots(trace)
    n_new = sum(len(s.emitted) for s in trace.steps)
    fig = go.Figure()
    for kind, color in STRIP_COLORS.items():
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
                    [
                        s.step,
                        s.index_in_step,
                        s.token,
                        s.p,
                        s.q,
                        s.accept_prob,
                        s.u,
                        _slot_text(trace.steps[s.step], s, n_new, tokenizer),
                    ]
                    for s in sl
                ],
                hovertemplate="%{customdata[7]}<extra></extra>",
            )
        )
    rows = max(1, math.ceil(len(slots) / per_row))
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
# acceptance rates in words: count, share and 95% interval
# -------------------------------------------------------------------------------------------


def acceptance_interval(
    accepted: int, tested: int, *, confidence: float = 0.95
) -> tuple[float, float]:
    """The Wilson interval of an acceptance rate ``accepted / tested``
    (:func:`specviz.perf.acceptance.wilson_interval`, the one the acceptance figures draw);
    ``(nan, nan)`` when nothing was tested.

    >>> [round(v, 3) for v in acceptance_interval(45, 60)]
    [0.628, 0.842]
    """
    lo, hi = wilson_interval(int(accepted), int(tested), confidence)
    return float(lo), float(hi)


def acceptance_text(
    accepted: int, tested: int, *, what: str = "accepted", confidence: float = 0.95
) -> str:
    """An acceptance rate as every notebook prints it: the count, the share and its Wilson
    interval (:func:`acceptance_interval`).

    >>> acceptance_text(45, 60)
    '45 of 60 accepted (75.0%, 95% CI 62.8-84.2%)'
    >>> acceptance_text(0, 0, what="drafted tokens accepted")
    '0 of 0 drafted tokens accepted (nothing was tested)'
    """
    if tested <= 0:
        return f"{accepted} of {tested} {what} (nothing was tested)"
    lo, hi = acceptance_interval(accepted, tested, confidence=confidence)
    return (
        f"{accepted} of {tested} {what} ({accepted / tested:.1%}, {confidence:.0%} CI "
        f"{100 * lo:.1f}-{100 * hi:.1f}%)"
    )
