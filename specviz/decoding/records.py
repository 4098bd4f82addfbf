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
    # Three cheap float passes over d = p - p(token) instead of a masked copy and two
    # boolean counts (bool sums go through int64: 2x slower at 1,000 x 49,152):
    # sum_{p > px} p = sum relu(d) + px * #{d > 0}; #{d > 0} and #{d == 0} from the sums of
    # sign(d) and |sign(d)| (small integers, exact in float32).
    d = probs - px  # [c, V]
    mass_over = torch.relu(d).sum(1)  # sum of (p - px) over p > px
    sign = d.sign_()
    net, nonzero = sign.sum(1), sign.abs_().sum(1)  # gt - lt, gt + lt
    gt = (net + nonzero) / 2
    mass = mass_over + px.view(-1) * gt  # [c]
    ties = (probs.shape[1] - nonzero) > 1  # another token with exactly p(token): rare
    if bool(ties.any()):  # ties ranked by id: those before the token count as above it
        rows = ties.nonzero().view(-1)
        ids = torch.arange(probs.shape[1], device=probs.device).view(1, -1)
        before = (probs[rows] == px[rows]) & (ids < tok[rows])
        mass[rows] += (probs[rows] * before).sum(1)
    return px.view(-1).tolist(), mass.tolist()


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


def _by_value(
    ids: Sequence[int], probs: Sequence[float]
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The distinct ``ids`` with their ``probs``, by decreasing probability (ties by id)."""
    items = sorted(dict(zip(ids, probs, strict=True)).items(), key=lambda kv: (-kv[1], kv[0]))
    return tuple(i for i, _ in items), tuple(x for _, x in items)


def _positions(
    start: int,
    dg: DraftGroup,
    p_target: torch.Tensor,
    v: Verdict,
    committed: Sequence[int],
) -> tuple[DraftPosition, ...]:
    """The per-position trace rows of one step of one row (one host transfer for all).

    Every row keeps p (and, for a drafter that reports q, q) over one set of ids: the union of
    p's and q's top-k, the drafted and the emitted token, and at the rejection the residual's
    top-k -- so a figure never has to draw a bar whose other value is unknown. ``top_p_*`` is
    that set sorted by p, ``top_q_*`` the same set sorted by q (their first k entries are each
    law's own top-k). ``u`` is NaN after the first rejection: no test took place there."""
    k, n = dg.tokens.numel(), v.num_accepted
    h = _on_host(dg, p_target, v, committed)
    top_ps = [_by_value(ids, ps) for ids, ps in zip(h["c_i"], h["c_p"], strict=True)]
    top_qs = [_by_value(ids, qs) for ids, qs in zip(h["c_i"], h.get("c_q", ()), strict=False)]
    res = _by_value(h["r_i"], h["r_v"]) if "r_i" in h else ((), ())
    none: tuple[tuple, tuple] = ((), ())
    rows = [
        _drafted_position(
            start,
            dg,
            i,
            n,
            committed,
            h,
            top_ps[i],
            top_qs[i] if top_qs else none,
            res if i == n else none,
        )  # fmt: skip
        for i in range(k)
    ]
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
                top_p_ids=top_ps[k][0],
                top_p_probs=top_ps[k][1],
            )
        )
    return tuple(rows)


def _on_host(
    dg: DraftGroup, p_target: torch.Tensor, v: Verdict, committed: Sequence[int]
) -> dict[str, list]:
    """Everything the trace rows of one step read, gathered on the device and moved to the
    host at once: p(x), q(x), acceptance, uniforms, the candidate ids with p (and q) over
    them, and the residual's top-k at the rejection."""
    k = dg.tokens.numel()
    n = v.num_accepted
    dev = p_target.device
    tok = dg.tokens.to(dev)
    q_draft = None if dg.q_draft is None else dg.q_draft.to(dev)
    idx = torch.arange(k, device=dev)
    kk = min(TOP_K_TRACE, p_target.shape[-1])
    top_p = torch.topk(p_target[: k + 1], kk, dim=-1).indices  # [k+1, kk]
    # candidate ids per row (duplicates are dropped on the host): p's top-k, q's top-k, the
    # drafted token, the emitted token, the residual's top-k at the rejection
    fill = top_p[:, :1]  # a harmless duplicate where a row has no such id
    emit = torch.tensor(
        [committed[i] if i < len(committed) else -1 for i in range(k + 1)],
        dtype=torch.long,
        device=dev,
    ).view(-1, 1)
    cols = [top_p, torch.where(emit >= 0, emit, fill)]
    if k:
        cols.append(torch.cat([tok.view(-1, 1), fill[k:]]))
    if q_draft is not None and k:
        cols.append(torch.cat([torch.topk(q_draft, kk, dim=-1).indices, top_p[k:]]))
    host: dict[str, Any] = {
        "p_x": p_target[idx, tok],
        "q_x": q_draft[idx, tok] if q_draft is not None else torch.ones(k, device=dev),
        "acc": v.accept_prob,
        "u": v.u,
    }
    if v.residual is not None and n <= k:
        residual = v.residual.to(dev)
        top_r = torch.topk(residual, kk).indices
        res_col = top_p.clone()
        res_col[n] = top_r
        cols.append(res_col)
        r_ids = torch.cat([top_r, emit[n] if n < len(committed) else top_r[:1]])  # + corrected
        host["r_i"], host["r_v"] = r_ids, residual[r_ids]
    cand = torch.cat(cols, dim=1)  # [k+1, C]
    host["c_i"], host["c_p"] = cand, p_target[: k + 1].gather(1, cand)
    if q_draft is not None and k:
        host["c_q"] = q_draft.gather(1, cand[:k])
    return {key: val.tolist() for key, val in host.items()}


def _drafted_position(
    start: int,
    dg: DraftGroup,
    i: int,
    n: int,
    committed: Sequence[int],
    h: dict[str, list],
    top_p: tuple[tuple, tuple],
    top_q: tuple[tuple, tuple],
    residual: tuple[tuple, tuple],
) -> DraftPosition:
    """The trace row of draft ``i`` when ``n`` drafts were accepted."""
    kind = "accepted" if i < n else "corrected" if i == n else "discarded"
    # EOS or max_new_tokens can cut a step short: only committed tokens count as emitted.
    emitted = committed[i] if i < len(committed) else -1
    return DraftPosition(
        position=start + i,
        draft_token=int(dg.tokens[i]),
        q_draft=h["q_x"][i],
        p_target=h["p_x"][i],
        accept_prob=h["acc"][i],
        u=h["u"][i] if i <= n else float("nan"),
        accepted=i < n,
        evaluated=i <= n,
        emitted_token=emitted,
        emitted_kind=kind,
        top_p_ids=top_p[0],
        top_p_probs=top_p[1],
        top_q_ids=top_q[0],
        top_q_probs=top_q[1],
        residual_ids=residual[0],
        residual_probs=residual[1],
        **_source(dg.source, i),
    )
