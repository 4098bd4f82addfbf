"""Run the draft model for k steps: the one loop over a draft model, for one sequence or many.

A draft model's proposal is, per position: refuse non-finite logits, ask the confidence stop
(:class:`~specviz.drafting.modes.DraftStop`), let every drafting row draw its token with its
own generator, fork the groups whose rows drew differently, and feed the drawn tokens to get
the next position's logits. :func:`run_draft` does that over ``G`` groups of rows;
:class:`~specviz.drafting.model.ModelDrafter` (one sequence) runs it as a batch of one group of
one row over its single-sequence runner, the batched engine's ``ModelGroups`` over its
masked batch cache. Only the model calls differ (a :class:`DraftFeed`): a one-row draft never
forks and never feeds padding, so it computes exactly what a single-sequence runner computes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ..core.sampling import SamplingParams, logits_to_probs, sample_grouped
from .modes import DraftStop, check_draft_logits, draft_step

__all__ = ["DraftFeed", "DraftRows", "run_draft", "sample_rows"]


class DraftFeed(Protocol):
    """The model calls of a draft: feed one token per group, fork groups."""

    def feed(self, tokens: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """tokens, valid [G, 1] (valid False: a hole, the group has stopped) -> logits [G, V]."""
        ...

    def fork(self, parents: torch.Tensor) -> None:
        """Keep the cache rows ``parents`` [G'] (int64), in that order (a row may repeat)."""
        ...


@dataclass(eq=False)
class DraftRows:
    """The physical draft rows of one draft (they fork as rows' draws differ): their rows
    (anything with a ``generator``), drafts wanted, original group, and what they drew."""

    members: list[list[Any]]
    ks: list[int]
    origin: list[int] = field(default_factory=list)  # group each physical draft row came from
    fed_last: list[bool] = field(default_factory=list)  # a stop already fed the last token
    drafts: torch.Tensor = field(init=False)  # [G, width]
    qs: list[list[torch.Tensor]] = field(init=False)

    def __post_init__(self) -> None:
        G = len(self.ks)
        self.origin = self.origin or list(range(G))
        self.fed_last = self.fed_last or [False] * G
        self.drafts = torch.zeros(G, max(0, *self.ks), dtype=torch.long)
        self.qs = [[] for _ in range(G)]

    def fork(self, parents: list[int]) -> None:
        idx = torch.tensor(parents, dtype=torch.long)
        self.drafts = self.drafts[idx]
        self.qs = [list(self.qs[p]) for p in parents]
        self.ks = [self.ks[p] for p in parents]
        self.fed_last = [self.fed_last[p] for p in parents]
        self.origin = [self.origin[p] for p in parents]


@dataclass(frozen=True)
class _Rule:
    """How a draft model turns logits into tokens: sampling settings, bug-zoo mode, stop."""

    params: SamplingParams
    mode: str
    stop: DraftStop | None
    name: str


def run_draft(
    feed: DraftFeed,
    b: DraftRows,
    logits: torch.Tensor,
    params: SamplingParams,
    *,
    mode: str,
    stop: DraftStop | None,
    name: str,
) -> DraftRows:
    """Draft up to ``b.ks`` tokens per group from the first position's ``logits`` [G, V]:
    ``b`` afterwards holds every physical row's tokens (``drafts[c, :ks[c]]``), q_draft rows
    (``qs[c]``, None entries for none) and members. The model has seen each drawn token but
    a group's last (unless a stop came first: ``fed_last``)."""
    rule = _Rule(params, mode, stop, name)
    for i in range(max(b.ks, default=0)):
        if i >= max(b.ks):  # every group stopped drafting
            break
        logits = _position(feed, rule, b, i, logits)
    return b


def _position(
    feed: DraftFeed, rule: _Rule, b: DraftRows, i: int, logits: torch.Tensor
) -> torch.Tensor:
    """Draft position ``i`` of every group ([G, V] logits): the stop rule, every row's
    draw, the forks where rows drew differently; returns the next position's logits."""
    check_draft_logits(logits, rule.name)
    q_all = logits_to_probs(logits, rule.params) if rule.mode == "exact" else None
    halt = None if rule.stop is None else rule.stop.stops(i, logits, rule.params, q_all)
    if halt is not None:  # [G]: one decision per group, before the draw
        for p in halt.nonzero().view(-1).tolist():
            if i < b.ks[p]:
                b.ks[p] = i
                b.fed_last[p] = i > 0  # the draft has already been fed its last token
    split, q_of = _draw(rule, b, i, logits, q_all)
    parents = [p for p, _ in split]
    if parents != list(range(len(b.ks))):  # fork groups whose rows drew different tokens
        idx = torch.tensor(parents, dtype=torch.long)
        feed.fork(idx)
        b.fork(parents)
        logits = logits[idx]
    b.members = list(split.values())
    for c, (p, tok) in enumerate(split):
        if tok >= 0:
            b.drafts[c, i] = tok
            b.qs[c].append(q_of[(p, tok)])
    if i + 1 >= max(b.ks):
        return logits
    feed_valid = torch.tensor([i + 1 < k for k in b.ks]).view(len(b.ks), 1)
    return feed.feed(b.drafts[:, i : i + 1], feed_valid)


def _draw(rule: _Rule, b: DraftRows, i: int, logits: torch.Tensor, q_all: torch.Tensor | None):
    """Every drawing row's token at position ``i``: ``(group, token) -> rows`` in group
    order (token -1: the group stopped) and the q_draft of each (group, token)."""
    rows = [(p, r) for p, k in enumerate(b.ks) if i < k for r in b.members[p]]
    if q_all is not None:  # every drawing row at once, from its group's q
        owner = [p for p, _ in rows]
        toks = sample_rows(q_all, [r.generator for _, r in rows], rule.params.is_greedy, owner)
        drawn = [(p, r, t, q_all[p]) for (p, r), t in zip(rows, toks, strict=True)]
    else:  # the bug zoo's misbehaving drafts, row by row
        drawn = []
        for p, r in rows:
            tok, q = draft_step(logits[p], rule.params, rule.mode, r.generator)
            drawn.append((p, r, int(tok), q))
    split: dict[tuple[int, int], list[Any]] = {}  # (parent, token) -> rows
    q_of: dict[tuple[int, int], torch.Tensor] = {}
    for p, k in enumerate(b.ks):
        if i >= k:
            split[(p, -1)] = b.members[p]
    for p, r, tok, q in drawn:
        split.setdefault((p, int(tok)), []).append(r)
        q_of[(p, int(tok))] = q
    return dict(sorted(split.items(), key=lambda kv: kv[0])), q_of  # children in parent order


def sample_rows(
    probs: torch.Tensor, gens: list[torch.Generator], greedy: bool, owner: list[int] | None = None
) -> list[int]:
    """One token per row, row r drawing from ``probs[owner[r]]`` ([M, V]; ``owner`` None:
    row r from ``probs[r]``) with one uniform from its own generator (the draw ``sample``
    would make); each law's CDF is built once however many rows draw from it."""
    if not gens:
        return []
    idx = torch.tensor(owner if owner is not None else range(len(gens)), dtype=torch.long)
    if greedy:
        return probs.argmax(-1)[idx.to(probs.device)].tolist()
    u = torch.stack(
        [torch.rand((), generator=g, device=g.device, dtype=torch.float64) for g in gens]
    )
    return sample_grouped(probs, idx, u.to(probs.device)).tolist()
