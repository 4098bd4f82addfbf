"""Where a step's drafts come from: any Drafter, one per group of identical rows (forked when
rows diverge), or a draft model run batched over the groups token by token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..core.batch_runners import batch_runner
from ..core.sampling import SamplingParams, logits_to_probs, sample_grouped
from ..drafting.base import Draft, Drafter, TreeDraft
from ..drafting.modes import DraftStop, check_draft_logits, draft_step
from .inputs import check_draft, check_tree
from .state import DraftGroup, Group, Row
from .targets import prefill

__all__ = ["DraftSource", "DrafterGroups", "ModelGroups"]

_EMPTY = torch.empty(0, dtype=torch.long)


# ------------------------------------------------------------------------------ drafting


class DraftSource:
    """Where a step's drafts come from (see :class:`DrafterGroups`, :class:`ModelGroups`)."""

    name = "none"
    wants_hidden = False
    normalised = True  # q_draft rows must sum to 1 (see check_draft)

    def start(self, groups: list[Group], params: SamplingParams) -> None:
        pass

    def draft(self, groups: list[Group], ks: list[int], vocab: int | None) -> list[DraftGroup]:
        return [DraftGroup(i, g.rows, _EMPTY, None) for i, g in enumerate(groups)]

    def commit_forks(self, groups: list[Group]) -> None:
        pass

    def commit(self, groups: list[Group], plan: list[tuple[int, int, int, int]]) -> None:
        """``plan[c] = (draft group, accepted n, drafted k, next token)`` of new group c."""

    def finished(self, group: Group, row: Row) -> None:
        pass


class DrafterGroups(DraftSource):
    """Any :class:`Drafter`: each group owns one (the first group the given object, the
    others forks). A deterministic drafter proposes once per group; otherwise every row
    proposes with its own generator, and rows that drew differently verify apart."""

    def __init__(self, drafter: Drafter) -> None:
        self.drafter = drafter
        self.name = drafter.name
        self.wants_hidden = bool(drafter.wants_target_hidden)
        self.normalised = bool(getattr(drafter, "normalised_q", True))

    def start(self, groups: list[Group], params: SamplingParams) -> None:
        for i, g in enumerate(groups):
            g.drafter = self.drafter if i == 0 else self.drafter.fork()
            g.drafter.start(g.context.clone(), params)

    def draft(self, groups: list[Group], ks: list[int], vocab: int | None) -> list[DraftGroup]:
        out: list[DraftGroup] = []
        for gi, (g, k) in enumerate(zip(groups, ks, strict=True)):
            d = g.drafter
            if k <= 0:
                out.append(DraftGroup(gi, g.rows, _EMPTY, None))
            elif len(g.rows) == 1 or d.deterministic:
                prop = self._propose(d, g, k, g.rows[0].generator, vocab)
                out.append(_draft_group(gi, g.rows, prop))
            else:
                split: dict[tuple, DraftGroup] = {}
                for r in g.rows:
                    prop = self._propose(d, g, k, r.generator, vocab)
                    key = _draft_key(prop)
                    if key in split:
                        split[key].rows.append(r)
                    else:
                        split[key] = _draft_group(gi, [r], prop)
                out.extend(split.values())
        return out

    def _propose(
        self, d: Drafter, g: Group, k: int, gen: torch.Generator, vocab: int | None
    ) -> Draft | TreeDraft:
        prop = d.propose(g.context, k, gen)
        if isinstance(prop, TreeDraft):
            check_tree(prop, k, vocab, d.name, normalised=self.normalised)
        elif isinstance(prop, Draft):
            check_draft(prop, k, vocab, d.name, normalised=self.normalised)
        else:
            raise TypeError(
                f"drafter {d.name!r} returned {type(prop).__name__}, not a Draft or TreeDraft"
            )
        return prop

    def commit_forks(self, groups: list[Group]) -> None:
        """New groups that come from the same old one: the first keeps its drafter, the
        others get forks, taken *before* any drafter hears about this step."""
        seen: set[int] = set()
        for g in groups:
            if id(g.drafter) in seen:
                g.drafter = g.drafter.fork()
            seen.add(id(g.drafter))

    def commit(self, groups: list[Group], plan: list[tuple[int, int, int, int]]) -> None:
        self.commit_forks(groups)  # a no-op when observe_target already forked them
        for g, (_, n, _, _) in zip(groups, plan, strict=True):
            g.drafter.feedback(n)

    def finished(self, group: Group, row: Row) -> None:
        if group.drafter is not None:
            group.drafter.end(torch.cat([row.prompt, torch.tensor(row.tokens, dtype=torch.long)]))


class ModelGroups(DraftSource):
    """A draft model run batched over the groups: token by token, every row drawing with
    its own generator; a group forks (its draft-cache row is copied) as soon as its rows'
    draws differ. ``mode`` is a bug-zoo draft mode; ``stop`` a confidence-stop rule."""

    def __init__(self, model: Any, mode: str, name: str, stop: DraftStop | None) -> None:
        self.model = model
        self.mode = mode
        self.name = name
        self.stop = stop

    def start(self, groups: list[Group], params: SamplingParams) -> None:
        self.params = params
        self.runner = batch_runner(self.model, max(1, len(groups)))
        prefill(self.runner, [g.context for g in groups])
        G = len(groups)
        self.pending = torch.stack([g.context[-1] for g in groups]).view(G, 1)
        self.valid = torch.ones(G, 1, dtype=torch.bool)

    def draft(self, groups: list[Group], ks: list[int], vocab: int | None) -> list[DraftGroup]:
        G, width = len(groups), max(ks)
        b = _DraftRows([list(g.rows) for g in groups], list(ks), list(range(G)), [False] * G,
                       torch.zeros(G, max(width, 0), dtype=torch.long), [[] for _ in range(G)])  # fmt: skip
        self.cols: list[int] = []  # physical draft-cache columns of x_1..x_{width-1}
        self.caught_up = width > 0  # a plain step leaves the draft behind (caught up later)
        if self.caught_up:
            logits = self.runner.extend(self.pending, self.valid, 1)[:, -1]  # [G, V]
        for i in range(width):
            if i >= max(b.ks):  # every group stopped drafting
                break
            logits = self._position(b, i, logits)
        self.ks, self.fed_last, self._drafts = b.ks, b.fed_last, b.drafts
        out = []
        for c, k in enumerate(b.ks):
            q = torch.stack(b.qs[c]) if k else None
            dg = DraftGroup(b.origin[c], b.members[c], b.drafts[c, :k].clone(), q)
            check_draft(Draft(dg.tokens, dg.q_draft), max(width, 0), vocab, self.name)
            out.append(dg)
        return out

    def _position(self, b: _DraftRows, i: int, logits: torch.Tensor) -> torch.Tensor:
        """Draft position ``i`` of every group ([G, V] logits): the stop rule, every row's
        draw, the forks where rows drew differently; returns the next position's logits."""
        check_draft_logits(logits, self.name)
        params = self.params
        q_all = logits_to_probs(logits, params) if self.mode == "exact" else None
        halt = None if self.stop is None else self.stop.stops(i, logits, params, q_all)
        if halt is not None:  # [G]: the serial drafter's rule, per group, before the draw
            for p in halt.nonzero().view(-1).tolist():
                if i < b.ks[p]:
                    b.ks[p] = i
                    b.fed_last[p] = i > 0  # the draft has already been fed its last token
        split, q_of = self._draw(b, i, logits, q_all)
        parents = [p for p, _ in split]
        if parents != list(range(len(b.ks))):  # fork groups whose rows drew different tokens
            idx = torch.tensor(parents, dtype=torch.long)
            self.runner.select(idx)
            self.pending, self.valid = self.pending[idx], self.valid[idx]
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
        self.cols.append(self.runner.mask.shape[1])
        return self.runner.extend(b.drafts[:, i : i + 1], feed_valid, 1)[:, -1]

    def _draw(self, b: _DraftRows, i: int, logits: torch.Tensor, q_all: torch.Tensor | None):
        """Every drawing row's token at position ``i``: ``(group, token) -> rows`` in group
        order (token -1: the group stopped) and the q_draft of each (group, token)."""
        rows = [(p, r) for p, k in enumerate(b.ks) if i < k for r in b.members[p]]
        if q_all is not None:  # every drawing row at once, from its group's q
            owner = [p for p, _ in rows]
            toks = _sample_rows(q_all, [r.generator for _, r in rows], self.params.is_greedy, owner)
            drawn = [(p, r, t, q_all[p]) for (p, r), t in zip(rows, toks, strict=True)]
        else:  # the bug zoo's misbehaving drafts, row by row
            drawn = []
            for p, r in rows:
                tok, q = draft_step(logits[p], self.params, self.mode, r.generator)
                drawn.append((p, r, int(tok), q))
        split: dict[tuple[int, int], list[Row]] = {}  # (parent, token) -> rows
        q_of: dict[tuple[int, int], torch.Tensor] = {}
        for p, k in enumerate(b.ks):
            if i >= k:
                split[(p, -1)] = b.members[p]
        for p, r, tok, q in drawn:
            split.setdefault((p, int(tok)), []).append(r)
            q_of[(p, int(tok))] = q
        return dict(sorted(split.items(), key=lambda kv: kv[0])), q_of  # children in parent order

    def commit(self, groups: list[Group], plan: list[tuple[int, int, int, int]]) -> None:
        run = self.runner
        parents = [dg for dg, _, _, _ in plan]
        idx = torch.tensor(parents, dtype=torch.long)
        if parents != list(range(len(self.ks))):
            if parents:
                run.select(idx)
        G = len(plan)
        new_pending = torch.zeros(G, 2, dtype=torch.long)
        new_valid = torch.zeros(G, 2, dtype=torch.bool)
        for c, (dg, n, k, nxt) in enumerate(plan):
            for i, col in enumerate(self.cols, start=1):  # column of x_i: a hole if rejected
                if i > n:
                    run.mask[c, col] = False
            # the draft has seen x_1..x_{k-1} (x_k too after a confidence stop); if all k
            # were accepted it still needs x_k
            if n == k and k > 0 and not self.fed_last[dg]:
                new_pending[c, 0], new_valid[c, 0] = int(self._drafts[dg, k - 1]), True
            new_pending[c, 1], new_valid[c, 1] = nxt, True
        if self.caught_up:
            self.pending, self.valid = new_pending, new_valid
        else:  # the draft skipped this call: it still owes the old pending tokens
            self.pending = torch.cat([self.pending[idx], new_pending], 1)
            self.valid = torch.cat([self.valid[idx], new_valid], 1)
        if G:
            run.trim()


@dataclass(eq=False)
class _DraftRows:
    """The physical draft rows of one :meth:`ModelGroups.draft` call (they fork as rows'
    draws differ): their rows, drafts wanted, original group, and what they drew."""

    members: list[list[Row]]
    ks: list[int]
    origin: list[int]  # group each physical draft row came from
    fed_last: list[bool]  # a confidence stop already fed the draft its last token
    drafts: torch.Tensor  # [G, width]
    qs: list[list[torch.Tensor]]

    def fork(self, parents: list[int]) -> None:
        idx = torch.tensor(parents, dtype=torch.long)
        self.drafts = self.drafts[idx]
        self.qs = [list(self.qs[p]) for p in parents]
        self.ks = [self.ks[p] for p in parents]
        self.fed_last = [self.fed_last[p] for p in parents]
        self.origin = [self.origin[p] for p in parents]


def _draft_key(prop: Draft | TreeDraft) -> tuple:
    if isinstance(prop, TreeDraft):
        return ("tree", tuple(prop.tokens.tolist()), tuple(prop.parents.tolist()))
    return tuple(prop.tokens.tolist())


def _draft_group(parent: int, rows: list[Row], prop: Draft | TreeDraft) -> DraftGroup:
    tree = prop if isinstance(prop, TreeDraft) else None
    return DraftGroup(parent, rows, prop.tokens, prop.q_draft, tree, None if tree else prop)


def _sample_rows(
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
