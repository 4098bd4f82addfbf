"""Where a step's drafts come from: any Drafter, one per group of identical rows (forked when
rows diverge), or a draft model run batched over the groups token by token.
"""

from __future__ import annotations

from typing import Any

import torch

from ..core.batch_runners import batch_runner
from ..core.sampling import SamplingParams
from ..drafting.base import Draft, Drafter, TreeDraft
from ..drafting.model_loop import DraftRows, run_draft
from ..drafting.modes import DraftStop
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
    draws differ. ``mode`` is a bug-zoo draft mode; ``stop`` a confidence-stop rule. The
    positions are :func:`~specviz.drafting.model_loop.run_draft`'s, the serial drafter's own
    loop; this class supplies its model calls (the masked batch cache) and the commit."""

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
        width = max(ks)
        b = DraftRows([list(g.rows) for g in groups], list(ks))
        self.cols: list[int] = []  # physical draft-cache columns of x_1..x_{width-1}
        self.caught_up = width > 0  # a plain step leaves the draft behind (caught up later)
        if self.caught_up:
            logits = self.runner.extend(self.pending, self.valid, 1)[:, -1]  # [G, V]
            run_draft(self, b, logits, self.params, mode=self.mode, stop=self.stop, name=self.name)
        self.ks, self.fed_last, self._drafts = b.ks, b.fed_last, b.drafts
        out = []
        for c, k in enumerate(b.ks):
            q = torch.stack(b.qs[c]) if k else None
            dg = DraftGroup(b.origin[c], b.members[c], b.drafts[c, :k].clone(), q)
            check_draft(Draft(dg.tokens, dg.q_draft), max(width, 0), vocab, self.name)
            out.append(dg)
        return out

    # the model calls of the one draft loop (drafting.model_loop.DraftFeed)
    def feed(self, tokens: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        self.cols.append(self.runner.mask.shape[1])
        return self.runner.extend(tokens, valid, 1)[:, -1]

    def fork(self, parents: torch.Tensor) -> None:
        self.runner.select(parents)
        self.pending, self.valid = self.pending[parents], self.valid[parents]

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


def _draft_key(prop: Draft | TreeDraft) -> tuple:
    if isinstance(prop, TreeDraft):
        return ("tree", tuple(prop.tokens.tolist()), tuple(prop.parents.tolist()))
    return tuple(prop.tokens.tolist())


def _draft_group(parent: int, rows: list[Row], prop: Draft | TreeDraft) -> DraftGroup:
    tree = prop if isinstance(prop, TreeDraft) else None
    return DraftGroup(parent, rows, prop.tokens, prop.q_draft, tree, None if tree else prop)
