"""Figures of token trees: one tree step (every candidate and what the verifier did with it)
and the recursive residual of one sibling group (p -> norm(max(0, p - q_1)) -> ...)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from ..core.trace import Step
from .labels import Tokenizer, _fmt, _labels, token_label
from .palette import KIND_COLORS, P_COLOR, PALETTE, Q_COLOR, RESIDUAL_COLOR

__all__ = ["STATUS_COLORS", "recursive_residual_figure", "tree_figure"]

#: Screen pixels between two rows of a tree figure: a 26 px marker, its label (~16 px) above it
#: and a gap, so no label touches the marker of the row above (issue 27 re-review of 11).
ROW_PX = 58

#: A tree node's fate: kept on the accepted path, tried and rejected, never looked at.
STATUS_COLORS = {k: PALETTE[k] for k in ("accepted", "rejected", "unvisited")}


def _layout(step: Step) -> dict[int, tuple[float, float]]:
    """x = depth, y = leaf order (parents centred over their children)."""
    kids: dict[int, list[int]] = {}
    for t in step.tree:
        kids.setdefault(t.parent, []).append(t.node)
    pos: dict[int, tuple[float, float]] = {}
    next_leaf = [0.0]

    def place(node: int, depth: int) -> float:
        children = kids.get(node, [])
        if not children:
            y = next_leaf[0]
            next_leaf[0] += 1.0
        else:
            ys = [place(c, depth + 1) for c in children]
            y = sum(ys) / len(ys)
        pos[node] = (depth, -y)
        return y

    place(-1, 0)
    return pos


def tree_figure(
    step: Step, tokenizer: Tokenizer = None, *, title: str | None = None, context: str | None = None
) -> go.Figure:
    """One tree step: the committed text's end on the left (labelled with ``context``, the
    text the tree continues, when given), every candidate by depth, coloured accepted /
    rejected / unvisited; the emitted corrected or bonus token after the path, on a row of
    its own below the tree so it hides no candidate's label. Hover shows p, q, the
    acceptance probability, the uniform draw and, after a rejection, the top of the law left
    for the next sibling."""
    fig = go.Figure()
    if not step.tree:
        fig.add_annotation(text="not a tree step", showarrow=False, x=0.5, y=0.5,
                           xref="paper", yref="paper")  # fmt: skip
        return fig.update_layout(height=300, xaxis=dict(visible=False), yaxis=dict(visible=False))
    pos = _layout(step)
    ex, ey = [], []
    for t in step.tree:
        (x0, y0), (x1, y1) = pos[t.parent], pos[t.node]
        ex += [x0, x1, None]
        ey += [y0, y1, None]
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", line=dict(color=PALETTE["unvisited"]),
                             hoverinfo="skip", showlegend=False))  # fmt: skip
    for status, color in STATUS_COLORS.items():
        nodes = [t for t in step.tree if t.status == status]
        if not nodes:
            continue
        hover = []
        for t in nodes:
            res = ""
            if t.residual_ids:
                top = ", ".join(
                    f"{token_label(i, tokenizer)!r} {_fmt(v)}"
                    for i, v in zip(t.residual_ids[:5], t.residual_probs[:5], strict=True)
                )
                res = f"<br>left after rejection: {top}"
            hover.append(
                f"node {t.node} (depth {t.depth}) {token_label(t.token, tokenizer)!r}<br>"
                f"p = {_fmt(t.p_target)}, q = {_fmt(t.q_draft)}<br>accept prob "
                f"{_fmt(t.accept_prob)}, u = {_fmt(t.u)}{res}"
            )
        fig.add_trace(
            go.Scatter(
                x=[pos[t.node][0] for t in nodes],
                y=[pos[t.node][1] for t in nodes],
                mode="markers+text",
                marker=dict(size=26, color=color, line=dict(color="black", width=1)),
                text=_labels([t.token for t in nodes], tokenizer),
                textposition="top center",
                hovertext=hover,
                hoverinfo="text",
                name=status,
            )
        )
    # the token the step emitted after its path: corrected (a rejection) or bonus (a leaf)
    last = step.path[-1] if step.path else -1
    n_path = len(step.path)
    if len(step.emitted) > n_path:
        x, y0 = pos[last]
        y = min(p[1] for p in pos.values()) - 1  # its own row: no candidate underneath
        kind = step.final_kind if step.final_kind in KIND_COLORS else "corrected"
        fig.add_trace(go.Scatter(x=[x, x + 1], y=[y0, y], mode="lines", hoverinfo="skip",
                                 line=dict(color=KIND_COLORS[kind], dash="dot"),
                                 showlegend=False))  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=[x + 1], y=[y], mode="markers+text",
                marker=dict(size=26, symbol="diamond", color=KIND_COLORS[kind],
                            line=dict(color="black", width=1)),
                text=_labels([step.emitted[n_path]], tokenizer), textposition="top center",
                name=f"{kind} token", hovertext=[f"{kind}: {token_label(step.emitted[n_path], tokenizer)!r}"],
                hoverinfo="text",
            )
        )  # fmt: skip
    tail = None if context is None else "…" + context[-24:].replace("\n", "↵")
    fig.add_trace(go.Scatter(x=[0], y=[pos[-1][1]], mode="markers+text" if tail else "markers",
                             marker=dict(size=14, color="black", symbol="square"),
                             text=[tail] if tail else None, textposition="bottom right",
                             name="committed text", hovertext=[context or "committed text"],
                             hoverinfo="text"))  # fmt: skip
    accepted = len(step.path)
    # rows ROW_PX apart on screen: a label sits above its marker and must clear the marker of
    # the row above (leaf labels touched it at 60 px of figure height per leaf, margins included)
    ys = [y for tr in fig.data for y in (tr.y or ()) if y is not None]
    lo, hi = min(ys) - 0.5, max(ys) + 0.7  # room for the top row's label
    top, bottom = 110, 60  # title and legend above, the depth axis below
    fig.update_layout(
        margin=dict(t=top, b=bottom),
        height=max(320, round(top + bottom + ROW_PX * (hi - lo))),
        yaxis=dict(visible=False, range=[lo, hi]),
        title=title or (
            f"step {step.step}: a tree of {len(step.tree)} candidates, {accepted} accepted, "
            f"then a {step.final_kind} token ({len(step.emitted)} emitted by one target call)"
        ),
        xaxis=dict(title="depth (tokens after the committed text)", dtick=1),
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=1, xanchor="right"),
    )  # fmt: skip
    return fig


def recursive_residual_figure(
    walk: Any, tokenizer: Tokenizer = None, *, top: int = 8, title: str | None = None
) -> go.Figure:
    """The laws a sibling rule tests its candidates against, one panel per rejection
    (:func:`specviz.verification.trees.sibling_walk`): p, then norm(max(0, p - q_1)), ... --
    each rejected candidate's mass (the part the draft could already have proposed) removed
    from what the next one and the final correction are drawn from."""
    from plotly.subplots import make_subplots

    laws: Sequence = walk.laws
    ids = sorted(range(laws[0].numel()), key=lambda i: -float(laws[0][i]))[:top]
    ids = sorted(set(ids) | set(walk.tokens), key=lambda i: -float(laws[0][i]))
    labels = _labels(ids, tokenizer)
    titles = ["target p"] + [
        f"after rejecting {token_label(t, tokenizer)!r}<br>(accept prob. {_fmt(a)})"
        for t, a in zip(walk.tokens, walk.accept_probs, strict=True)
    ]
    fig = make_subplots(rows=1, cols=len(laws), subplot_titles=titles, shared_yaxes=True)
    for j, law in enumerate(laws):
        color = P_COLOR if j == 0 else RESIDUAL_COLOR
        outline = [3 if j < len(walk.tokens) and i == walk.tokens[j] else 0 for i in ids]
        fig.add_trace(
            go.Bar(x=labels, y=[float(law[i]) for i in ids], name="p" if j == 0 else "residual",
                   marker=dict(color=color, line=dict(color="black", width=outline)),
                   showlegend=j <= 1),
            row=1, col=j + 1,
        )  # fmt: skip
        q = walk.draft_laws[j] if j < len(walk.draft_laws) else None
        if q is not None:
            fig.add_trace(
                go.Scatter(x=labels, y=[float(q[i]) for i in ids], mode="markers", name="q",
                           marker=dict(color=Q_COLOR, symbol="line-ew-open", size=18,
                                       line=dict(width=3)), showlegend=j == 0),
                row=1, col=j + 1,
            )  # fmt: skip
    fig.update_yaxes(title_text="probability", range=[0, 1.05], row=1, col=1)
    fig.update_xaxes(type="category")
    fig.update_layout(
        title=title or "The recursive residual: each rejected candidate's draft mass leaves p",
        height=400, bargap=0.2, margin=dict(t=110),
    )  # fmt: skip
    return fig
