"""The records a step produces for the trace: per drafted position of a chain, per node of a
tree, and the rank statistics of emitted tokens (log-probabilities and the randomized PIT).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..core.trace import DraftPosition, TreeNode
from ..drafting.base import Draft
from ..verification.base import Verdict
from .state import DraftGroup

__all__ = ["TOP_K_TRACE", "rank_stats"]


TOP_K_TRACE = 10


def _tree_nodes(start: int, dg: DraftGroup, p_nodes: torch.Tensor, v: Any) -> tuple[TreeNode, ...]:
    """The trace rows of a tree step: every node with what the verifier did with it."""
    tree = dg.tree
    tokens, parents, depths = tree.tokens.tolist(), tree.parents.tolist(), tree.depths()
    q = tree.q_draft
    decided = {d.node: d for d in v.decisions}
    on_path = set(v.path)
    kk = min(TOP_K_TRACE, p_nodes.shape[-1])
    nan = float("nan")
    rows = []
    for i, tok in enumerate(tokens):
        d = decided.get(i)
        status = "accepted" if i in on_path else "rejected" if d is not None else "unvisited"
        r_ids: tuple[int, ...] = ()
        r_probs: tuple[float, ...] = ()
        if d is not None and d.residual is not None and not d.accepted:
            top = torch.topk(d.residual, kk)
            r_ids, r_probs = tuple(top.indices.tolist()), tuple(top.values.tolist())
        rows.append(
            TreeNode(
                node=i,
                token=tok,
                parent=parents[i],
                depth=depths[i],
                position=start + depths[i] - 1,
                q_draft=float(q[i, tok]) if q is not None else nan,
                p_target=float(p_nodes[parents[i] + 1, tok]),
                accept_prob=d.accept_prob if d is not None else nan,
                u=d.u if d is not None else nan,
                status=status,
                residual_ids=r_ids,
                residual_probs=r_probs,
            )
        )
    return tuple(rows)


def rank_stats(probs: torch.Tensor, tokens: torch.Tensor) -> tuple[list[float], list[float]]:
    """probs [c, V], tokens [c] -> (p(token), mass of tokens ranked above it), where the
    ranking is by probability, ties broken by id (the order of randomized_pit)."""
    tok = tokens.to(probs.device).view(-1, 1)
    px = probs.gather(1, tok)  # [c, 1]
    ids = torch.arange(probs.shape[1], device=probs.device).view(1, -1)
    above = (probs > px) | ((probs == px) & (ids < tok))
    return px.view(-1).tolist(), (probs * above).sum(1).tolist()


def _source(draft: Draft | None, i: int) -> dict[str, Any]:
    """The draft-side id and string of drafted token ``i`` (cross-vocabulary drafters)."""
    if draft is None:
        return {}
    out: dict[str, Any] = {}
    if draft.source_ids is not None:
        out["source_id"] = int(draft.source_ids[i])
    if draft.source_pieces is not None:
        out["source_piece"] = str(draft.source_pieces[i])
    return out


def _positions(
    start: int,
    dg: DraftGroup,
    p_target: torch.Tensor,
    v: Verdict,
    committed: Sequence[int],
) -> tuple[DraftPosition, ...]:
    """The per-position trace rows of one step of one row (one host transfer for all)."""
    k = dg.tokens.numel()
    n = v.num_accepted
    dev = p_target.device
    tok = dg.tokens.to(dev)
    q_draft = None if dg.q_draft is None else dg.q_draft.to(dev)
    idx = torch.arange(k, device=dev)
    kk = min(TOP_K_TRACE, p_target.shape[-1])
    top_p = torch.topk(p_target[: k + 1], kk, dim=-1)  # [k+1, kk]
    host: dict[str, Any] = {
        "p_x": p_target[idx, tok],
        "q_x": q_draft[idx, tok] if q_draft is not None else torch.ones(k, device=dev),
        "acc": v.accept_prob,
        "u": v.u,
        "tp_i": top_p.indices,
        "tp_v": top_p.values,
    }
    if q_draft is not None and k:
        top_q = torch.topk(q_draft, kk, dim=-1)
        host["tq_i"], host["tq_v"] = top_q.indices, top_q.values
    if v.residual is not None:
        top_r = torch.topk(v.residual, kk)
        host["r_i"], host["r_v"] = top_r.indices, top_r.values
    h = {key: val.tolist() for key, val in host.items()}

    rows = []
    for i in range(k):
        kind = "accepted" if i < n else "corrected" if i == n else "discarded"
        # EOS or max_new_tokens can cut a step short: only committed tokens count as emitted.
        emitted = committed[i] if i < len(committed) else -1
        rej = i == n
        rows.append(
            DraftPosition(
                position=start + i,
                draft_token=int(dg.tokens[i]),
                q_draft=h["q_x"][i],
                p_target=h["p_x"][i],
                accept_prob=h["acc"][i],
                u=h["u"][i],
                accepted=i < n,
                evaluated=i <= n,
                emitted_token=emitted,
                emitted_kind=kind,
                top_p_ids=tuple(h["tp_i"][i]),
                top_p_probs=tuple(h["tp_v"][i]),
                top_q_ids=tuple(h["tq_i"][i]) if "tq_i" in h else (),
                top_q_probs=tuple(h["tq_v"][i]) if "tq_v" in h else (),
                residual_ids=tuple(h["r_i"]) if rej and "r_i" in h else (),
                residual_probs=tuple(h["r_v"]) if rej and "r_v" in h else (),
                **_source(dg.source, i),
            )
        )
    if n == k:
        nan = float("nan")
        rows.append(
            DraftPosition(
                position=start + k,
                draft_token=-1,
                q_draft=nan,
                p_target=nan,
                accept_prob=nan,
                u=nan,
                accepted=False,
                evaluated=True,
                emitted_token=committed[k] if len(committed) > k else -1,
                emitted_kind="bonus",
                top_p_ids=tuple(h["tp_i"][k]),
                top_p_probs=tuple(h["tp_v"][k]),
            )
        )
    return tuple(rows)
