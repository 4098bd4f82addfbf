"""The lossless chain rules: min(1, p/q) with the residual and bonus token, and greedy matching.

The lossless rule (Leviathan et al. 2023; Chen et al. 2023 with the letters swapped): accept
draft x with probability min(1, p_target(x) / q_draft(x)); at the first rejection sample the
next token from norm(max(0, p_target - q_draft)); if all k are accepted, sample a bonus token
from p_target. A drafter with no q (deterministic proposal) is a point mass: accept with
probability p_target(x), residual = p_target with x removed.

The helpers here (``_gathered``, ``_lossless_core``, ``_first_false``) are shared with the bug
zoo's rules (:mod:`.zoo`, :mod:`.shipped`, :mod:`.block`), which import them from this module;
the registry of every rule by name is :mod:`.base`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..core.sampling import sample, sample_grouped, sample_with_uniform
from .verdict import Verdict

__all__ = [
    "check_chain_shapes",
    "verify_greedy",
    "verify_lossless",
    "verify_lossless_groups",
]


def _point_mass(tokens: torch.Tensor, vocab: int, like: torch.Tensor) -> torch.Tensor:
    q = torch.zeros(tokens.numel(), vocab, dtype=like.dtype, device=like.device)
    return q.scatter_(1, tokens.view(-1, 1).to(like.device), 1.0)  # [k, V]


def _first_false(ok: torch.Tensor) -> int:
    """Index of the first False in a 1-D bool tensor, or its length (one host sync)."""
    return int(ok.long().cumprod(0).sum())


def _gathered(tokens, q_draft, p_target):
    k = tokens.numel()
    dev = p_target.device
    idx = torch.arange(k, device=dev)
    tok = tokens.to(dev)
    q = q_draft if q_draft is not None else _point_mass(tok, p_target.shape[-1], p_target)
    p_x = p_target[idx, tok]  # [k]
    q_x = q[idx, tok]  # [k]
    return q, p_x, q_x


def _residual_token(
    p_row: torch.Tensor, q_row: torch.Tensor, generator: torch.Generator
) -> tuple[int, torch.Tensor]:
    residual = torch.clamp(p_row - q_row, min=0.0)  # [V]
    total = residual.sum()
    # A rejection implies p(x) < q(x), so p != q and the residual has mass; only rounding can
    # empty it (p == q up to float error), and then p itself is the right limit.
    residual = residual / total if float(total) > 0.0 else p_row
    return int(sample(residual, generator)), residual


def _lossless_core(tokens, q_draft, p_target, generator, accept_prob, u, residual_from_p=False):
    k = tokens.numel()
    q, _, _ = _gathered(tokens, q_draft, p_target)
    n = _first_false(u < accept_prob)
    if n == k:
        return Verdict(k, int(sample(p_target[k], generator)), "bonus", accept_prob, u, None)
    q_row = torch.zeros_like(p_target[n]) if residual_from_p else q[n]
    tok, residual = _residual_token(p_target[n], q_row, generator)
    return Verdict(n, tok, "corrected", accept_prob, u, residual)


def check_chain_shapes(tokens: Any, q_draft: Any, p_target: Any, who: str) -> None:
    """What a chain verifier is given, when it is called directly: tokens [k] integer ids in
    [0, V), q_draft [k, V] or None, p_target [k+1, V]. (The engine builds these shapes itself;
    a verifier called by hand gets a message instead of an IndexError or a silent answer.)"""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 1:
        raise ValueError(f"{who}: tokens must be a 1-D tensor [k], got {_shape(tokens)}")
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise ValueError(f"{who}: tokens must be integer ids, got dtype {tokens.dtype}")
    k = tokens.shape[0]
    if not isinstance(p_target, torch.Tensor) or p_target.dim() != 2 or p_target.shape[0] != k + 1:
        raise ValueError(
            f"{who}: p_target must be [k+1, V] = [{k + 1}, V] (the target law at each drafted "
            f"position, then the bonus position), got {_shape(p_target)}"
        )
    V = p_target.shape[1]
    if q_draft is not None and (
        not isinstance(q_draft, torch.Tensor) or tuple(q_draft.shape) != (k, V)
    ):
        raise ValueError(
            f"{who}: q_draft must be None or [k, V] = [{k}, {V}], got {_shape(q_draft)}"
        )
    if k and tokens.device.type == "cpu":  # ids from the GPU were checked by the engine
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= V:
            raise ValueError(
                f"{who}: token id {lo if lo < 0 else hi} is outside the vocabulary [0, {V}) of "
                "p_target"
            )


def _shape(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"shape {list(x.shape)}"
    return type(x).__name__


def verify_lossless(
    tokens: torch.Tensor,
    q_draft: torch.Tensor | None,
    p_target: torch.Tensor,
    generator: torch.Generator,
) -> Verdict:
    """tokens [k], q_draft [k, V] or None, p_target [k+1, V] -> Verdict (lossless)."""
    check_chain_shapes(tokens, q_draft, p_target, "verify_lossless")
    return _verify_lossless(tokens, q_draft, p_target, generator)


def _verify_lossless(tokens, q_draft, p_target, generator) -> Verdict:
    # the engine's entry: its shapes are built, and its ids checked, once per step upstream
    _, p_x, q_x = _gathered(tokens, q_draft, p_target)
    if bool((q_x <= 0).any()):
        i = int((q_x <= 0).nonzero()[0])
        raise ValueError(
            f"drafted token {int(tokens[i])} at draft position {i} has q_draft = 0: "
            "a drafter must report the distribution it sampled from"
        )
    accept_prob = torch.clamp(p_x / q_x, max=1.0)  # q_x > 0 checked above: no 0/0
    u = torch.rand(tokens.numel(), generator=generator, device=p_target.device)
    return _lossless_core(tokens, q_draft, p_target, generator, accept_prob, u)


def verify_lossless_groups(
    drafts: list[tuple[torch.Tensor, torch.Tensor | None]],
    p_target: torch.Tensor,
    generators: list[list[torch.Generator]],
    *,
    residuals: bool = True,
    bonus: Callable[[list[int]], torch.Tensor] | None = None,
) -> list[list[Verdict]]:
    """The lossless rule for every row of a step at once.

    ``drafts[d] = (tokens [k_d], q_draft [k_d, V] or None)`` is draft group d, ``p_target``
    [D, >= k_d + 1, V] its target laws, ``generators[d]`` its rows' generators. Each row
    draws exactly what :func:`verify_lossless` draws (k_d uniforms, then one for the next
    token), but the V-sized work runs once per distinct law, not once per row: acceptance
    for all groups in one tensor, and every row's next token by :func:`sample_grouped` from
    the law of its (group, first rejection) -- the unnormalised residual max(0, p - q), or p
    for a bonus token. ``residuals=False`` skips the normalised residuals the trace shows.

    ``bonus``: ``p_target`` holds only the drafted positions ([D, kmax, V]) and
    ``bonus(groups)`` gives the laws after the last drafted token of those groups ([n, V]),
    asked only for the groups where some row accepted every draft.
    """
    if len(generators) == 1 and len(generators[0]) == 1:  # the serial engine: one row
        (tokens, q), (gen,) = drafts[0], generators[0]
        return [[_verify_one(tokens, q, p_target[0], gen, residuals)]]
    dev = p_target.device
    ks = [int(t.numel()) for t, _ in drafts]
    accept = _acceptance(drafts, p_target, ks)  # [D, kmax]
    # every row's uniforms, from its own generator in the serial order
    owner = [d for d, gens in enumerate(generators) for _ in gens]
    gens = [g for row_gens in generators for g in row_gens]
    us = [torch.rand(ks[d], generator=g, device=dev) for d, g in zip(owner, gens, strict=True)]
    n_row = [0] * len(gens)
    if accept.shape[1] and gens:
        U = torch.full((len(gens), accept.shape[1]), 2.0, device=dev)  # padding never accepts
        for r, u in enumerate(us):
            U[r, : u.numel()] = u
        owner_t = torch.tensor(owner, device=dev)
        n_row = (U < accept[owner_t]).long().cumprod(1).sum(1).tolist()
    # one law per distinct (group, first rejection)
    key_of: dict[tuple[int, int], int] = {}
    law_key = [key_of.setdefault((d, n), len(key_of)) for d, n in zip(owner, n_row, strict=True)]
    laws, rejected = _laws(drafts, p_target, ks, list(key_of), bonus)
    draws = [torch.rand((), generator=g, device=g.device, dtype=torch.float64) for g in gens]
    u_next = torch.stack(draws).to(dev) if draws else torch.empty(0, dtype=torch.float64)
    toks = sample_grouped(laws, torch.tensor(law_key, dtype=torch.long), u_next).tolist()
    normed: dict[int, torch.Tensor] = {}
    if residuals and rejected:
        rows = torch.tensor(rejected, device=dev)
        normed = dict(zip(rejected, laws[rows] / laws[rows].sum(-1, keepdim=True), strict=True))
    out: list[list[Verdict]] = [[] for _ in drafts]
    for r, (d, n, m) in enumerate(zip(owner, n_row, law_key, strict=True)):
        kind = "bonus" if n == ks[d] else "corrected"
        out[d].append(Verdict(n, toks[r], kind, accept[d, : ks[d]], us[r], normed.get(m)))
    return out


def _acceptance(drafts, p_target: torch.Tensor, ks: list[int]) -> torch.Tensor:
    """min(1, p(x) / q(x)) of every drafted token of every group, [D, kmax] (0 past k_d);
    a drafted token with q(x) = 0 is refused (its drafter misreported its law)."""
    dev, D, kmax = p_target.device, len(drafts), max(ks, default=0)
    if not kmax:
        return torch.zeros(D, 0, device=dev)
    tok = torch.zeros(D, kmax, dtype=torch.long, device=dev)
    q_x = torch.ones(D, kmax, device=dev)  # point masses: q(x) = 1
    for d, (t, q) in enumerate(drafts):
        tok[d, : ks[d]] = t.to(dev)
        if q is not None and ks[d]:
            q_x[d, : ks[d]] = q.to(dev)[torch.arange(ks[d], device=dev), tok[d, : ks[d]]]
    p_x = p_target[:, :kmax].gather(-1, tok.unsqueeze(-1)).squeeze(-1)  # [D, kmax]
    bad = (q_x <= 0).nonzero()
    if bad.numel():
        d, i = (int(x) for x in bad[0])
        raise ValueError(
            f"drafted token {int(tok[d, i])} at draft position {i} has q_draft = 0: "
            "a drafter must report the distribution it sampled from"
        )
    return torch.clamp(p_x / q_x, max=1.0)


def gather_laws(
    p_target: torch.Tensor,
    groups: list[int],
    positions: list[int],
    bonus: Callable[[list[int]], torch.Tensor] | None = None,
) -> torch.Tensor:
    """``p_target[groups[i], positions[i]]`` for every i -> [n, V]; a position past
    ``p_target``'s columns is a deferred bonus law, from ``bonus`` (see
    :func:`verify_lossless_groups`)."""
    dev, cols = p_target.device, p_target.shape[1]
    late = [i for i, j in enumerate(positions) if j >= cols]
    if late and bonus is None:
        raise AssertionError(f"a law past the {cols} computed positions, and no bonus laws")

    def pick(idx: list[int]) -> torch.Tensor:
        d = torch.tensor([groups[i] for i in idx], dtype=torch.long, device=dev)
        n = torch.tensor([positions[i] for i in idx], dtype=torch.long, device=dev)
        return p_target[d, n]

    if not late:
        return pick(list(range(len(groups))))
    out = torch.empty(len(groups), p_target.shape[-1], dtype=p_target.dtype, device=dev)
    early = [i for i, j in enumerate(positions) if j < cols]
    if early:
        out[early] = pick(early)
    assert bonus is not None
    out[late] = bonus([groups[i] for i in late]).to(dev, p_target.dtype)
    return out


def _laws(drafts, p_target: torch.Tensor, ks: list[int], keys: list[tuple[int, int]], bonus=None):
    """The law of each (group d, first rejection n): p[d, k_d] for a bonus token, else the
    unnormalised residual max(0, p[d, n] - q[d, n]). Returns ([M, V], rejected law indices)."""
    dev, V = p_target.device, p_target.shape[-1]
    # [M, V]: p at each law's position
    laws = gather_laws(p_target, [d for d, _ in keys], [n for _, n in keys], bonus)
    rejected = [m for m, (d, n) in enumerate(keys) if n < ks[d]]
    if rejected:
        q_rows = []
        for m in rejected:
            d, n = keys[m]
            t, q = drafts[d]
            q_rows.append(
                q[n].to(dev) if q is not None else _point_mass(t[n : n + 1], V, p_target)[0]
            )
        rows = torch.tensor(rejected, device=dev)
        p_rows = laws[rows]  # one gather of the rejected laws' p, used twice
        residual = torch.clamp(p_rows - torch.stack(q_rows), min=0.0)
        # A rejection implies p(x) < q(x), so the residual has mass; only rounding can empty
        # it (p == q up to float error), and then p itself is the right limit.
        keep = residual.amax(-1) > 0
        laws[rows] = torch.where(keep.unsqueeze(-1), residual, p_rows)  # no host sync
    return laws, rejected


def _verify_one(tokens, q_draft, p_target, generator, residuals: bool) -> Verdict:
    """One row of :func:`verify_lossless_groups`, the same draws and the same arithmetic."""
    k = tokens.numel()
    accept = torch.zeros(0, device=p_target.device)
    if k:
        q, p_x, q_x = _gathered(tokens, q_draft, p_target)
        if bool((q_x <= 0).any()):
            i = int((q_x <= 0).nonzero()[0])
            raise ValueError(
                f"drafted token {int(tokens[i])} at draft position {i} has q_draft = 0: "
                "a drafter must report the distribution it sampled from"
            )
        accept = torch.clamp(p_x / q_x, max=1.0)
    u = torch.rand(k, generator=generator, device=p_target.device)
    n = _first_false(u < accept) if k else 0
    if n == k:
        law, residual = p_target[k], None
    else:
        law = torch.clamp(p_target[n] - q[n], min=0.0)
        if not bool(law.amax() > 0):  # emptied by rounding only: p itself is the limit
            law = p_target[n]
        residual = law / law.sum() if residuals else None
    v = torch.rand((), generator=generator, device=generator.device, dtype=torch.float64)
    tok = int(sample_with_uniform(law, v.to(p_target.device)))
    return Verdict(n, tok, "bonus" if n == k else "corrected", accept, u, residual)


def verify_greedy(tokens, q_draft, p_target, generator) -> Verdict:
    """Greedy matching: keep drafts while they equal the target's argmax."""
    check_chain_shapes(tokens, q_draft, p_target, "verify_greedy")
    return _verify_greedy(tokens, q_draft, p_target, generator)


def _verify_greedy(tokens, q_draft, p_target, generator) -> Verdict:
    k = tokens.numel()
    top = p_target.argmax(dim=-1)  # [k+1]
    match = tokens.to(top.device) == top[:k]
    n = _first_false(match)
    nan = torch.full((k,), float("nan"), device=p_target.device)
    return Verdict(n, int(top[n]), "bonus" if n == k else "corrected", match.float(), nan, None)
