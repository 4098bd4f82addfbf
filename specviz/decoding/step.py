"""The one speculative step, and the loop that drives it for one row or for many.

One step (one target call for every live row)::

    plan     k = policy gamma, capped by what each row can still emit     (GammaPolicy)
    draft    each row's drafter proposes k tokens with q_draft            (Drafter, own caches)
    check    draft ids in [0, V), q_draft finite and >= 0: before the target runs
    verify   one target call on [pending, x_1..x_k] per row -> p_target [G, k+1, V]
    decide   accept a prefix, then a corrected or bonus token             (verifier, per row)
    commit   cut at EOS / max_new_tokens, roll the caches back to the kept prefix,
             tell the drafter and the policy, record the step

The serial engine runs it on a batch of one (:class:`SingleTarget`: a single-sequence runner
whose rollback is a crop, and which can be a static, compiled cache); the batched engine on
many (:class:`BatchTarget`: a masked cache whose rollback leaves holes). Rows that are in the
same state -- same tokens so far -- share one physical row of the caches (a *group*); a group
forks when its rows' random draws differ, so thousands of samples of one prompt cost a
handful of rows in the first steps. Every row draws from its own ``torch.Generator`` in
exactly the order a serial run does, so row ``i`` of a batch reproduces the serial run with
its seed.

Drafting comes from a :class:`DraftSource`: :class:`DrafterGroups` (any :class:`Drafter`, one
per group, forked when a group splits) or :class:`ModelGroups` (a draft *model* run batched
over the groups, token by token). The records a step produces are the trace's
:class:`~specviz.core.trace.Step` rows, one per row and call; every result type is built from
them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..core.batch_runners import batch_runner
from ..core.runners import LMRunner
from ..core.sampling import SamplingParams, logits_to_probs, sample_with_uniform
from ..core.trace import DraftPosition, Step, TreeNode
from ..drafting.base import Draft, Drafter, TreeDraft
from ..drafting.modes import _draft_step, check_draft_logits
from ..drafting.policies import DraftStop, GammaPolicy
from ..verification.base import VERIFIERS, Verdict, VerifierSpec
from .inputs import check_count, check_draft, check_target_logits, check_tree

__all__ = ["Decoder", "Row", "SingleTarget", "BatchTarget", "DrafterGroups", "ModelGroups"]

TOP_K_TRACE = 10
_EMPTY = torch.empty(0, dtype=torch.long)


# ------------------------------------------------------------------------------ state


@dataclass(eq=False)
class Row:
    """One logical sequence: its generator, what it emitted and the records of its steps."""

    index: int
    generator: torch.Generator
    seed: int | None
    prompt: torch.Tensor
    room: int  # tokens it may still emit
    tokens: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)  # record=True: p(token) under the target
    above: list[float] = field(default_factory=list)  # record=True: mass ranked above it


@dataclass(eq=False)
class Group:
    """Rows in the same state: one physical row of the target (and draft) caches."""

    rows: list[Row]
    context: torch.Tensor  # [T] prompt + committed tokens (CPU)
    pending: torch.Tensor  # tokens the target has not seen yet (CPU)
    drafter: Drafter | None = None


@dataclass(eq=False)
class DraftGroup:
    """Rows of one group that drew the same draft (they verify against one target row)."""

    parent: int  # index of the group it came from
    rows: list[Row]
    tokens: torch.Tensor  # [k] (a tree's nodes)
    q_draft: torch.Tensor | None  # [k, V] or None (point masses)
    tree: TreeDraft | None = None  # set when the drafter proposed a tree
    source: Draft | None = None  # the chain draft itself (its draft-side ids and strings)


# ------------------------------------------------------------------------------ targets


class SingleTarget:
    """A batch of one over a single-sequence :class:`~specviz.core.runners.LMRunner`:
    rollback is ``crop`` (static caches just move their write position)."""

    def __init__(self, runner: LMRunner) -> None:
        self.runner = runner
        self.device = runner.device

    def start(self, prompts: list[torch.Tensor], hidden: bool):
        (prompt,) = prompts
        return [prompt], None  # the first verify pass also prefills the prompt

    def forward(self, feeds: list[torch.Tensor], num_logits: int, hidden: bool):
        (feed,) = feeds
        self._before = self.runner.length
        out = self.runner.extend(feed, num_logits, return_hidden=True) if hidden else None
        if out is None:
            return self.runner.extend(feed, num_logits)[None], None  # [1, k+1, V]
        logits, h = out
        return logits[None], h[None]

    def forward_tree(self, feeds, parents, hidden):
        raise TypeError(
            "a drafter proposed a token tree to a single-sequence runner: tree drafters set "
            "proposes_trees = True so that the engine verifies them on its masked cache"
        )

    def select(self, parents: list[int]) -> None:
        if parents not in ([], [0]):
            raise AssertionError(f"a single-sequence target cannot fork rows ({parents})")

    def keep(self, kept: list[int]) -> None:
        if kept:
            self.runner.crop(self._before + kept[0])

    def finish(self) -> None:
        pass


class BatchTarget:
    """Many rows over a masked batch cache (:class:`~specviz.core.batch_runners.BatchRunner`):
    rollback leaves holes, finished rows leave, forks copy cache rows."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.device = _device_of(model)

    def start(self, prompts: list[torch.Tensor], hidden: bool):
        """Prefill all but the last token of every group's prompt (a shared prompt once,
        its cache copied); return each group's pending last token (and, with ``hidden``,
        the prefilled tokens' hidden states per group)."""
        self.runner = batch_runner(self.model, len(prompts))
        feats = prefill(self.runner, prompts, hidden)
        return [p[-1:] for p in prompts], feats

    def forward(self, feeds: list[torch.Tensor], num_logits: int, hidden: bool):
        G, m = len(feeds), max(f.numel() for f in feeds)
        tokens = torch.zeros(G, m, dtype=torch.long)
        valid = torch.zeros(G, m, dtype=torch.bool)
        for g, f in enumerate(feeds):
            tokens[g, : f.numel()] = f
            valid[g, : f.numel()] = True
        self._col0, self._width = self.runner.mask.shape[1], m
        out = self.runner.extend(tokens, valid, m, return_hidden=hidden)
        logits, h = out if hidden else (out, None)
        return logits[:, :num_logits], h  # rows are left-aligned: column j of row g is its j-th

    def forward_tree(self, feeds: list[torch.Tensor], parents: list[list[int]], hidden: bool):
        """One target call on every row's [pending, tree nodes] with tree attention; row j
        of each row's logits is the law after feed token j."""
        G, m = len(feeds), max(f.numel() for f in feeds)
        tokens = torch.zeros(G, m, dtype=torch.long)
        valid = torch.zeros(G, m, dtype=torch.bool)
        par = torch.full((G, m), -1, dtype=torch.long)
        for g, (f, pa) in enumerate(zip(feeds, parents, strict=True)):
            tokens[g, : f.numel()] = f
            valid[g, : f.numel()] = True
            par[g, : len(pa)] = torch.tensor(pa)
        self._col0, self._width = self.runner.mask.shape[1], m
        out = self.runner.extend_tree(tokens, valid, par, return_hidden=hidden)
        return out if hidden else (out, None)

    def keep_columns(self, cols: list[list[int]]) -> None:
        self.runner.keep_columns(self._col0, cols)

    def select(self, parents: list[int]) -> None:
        if parents != list(range(len(parents))) or len(parents) != self.runner.mask.shape[0]:
            if parents:
                self.runner.select(torch.tensor(parents, dtype=torch.long))

    def keep(self, kept: list[int]) -> None:
        for g, n in enumerate(kept):
            self.runner.mask[g, self._col0 + n : self._col0 + self._width] = False
        self.runner.trim()

    def finish(self) -> None:
        pass


def prefill(runner: Any, prompts: list[torch.Tensor], hidden: bool = False) -> Any:
    """Prefill all but the last token of each row's prompt into a batch runner: a shared
    prompt (the same tensor in every row) once with its cache copied, different prompts
    together with holes padding the shorter ones. With ``hidden``, returns each row's
    hidden states of its prefilled tokens ([m_b, H] each)."""
    B = len(prompts)
    if all(p is prompts[0] for p in prompts):
        m = prompts[0].numel() - 1
        if m <= 0:
            return [None] * B if hidden else None
        h = runner.prefill_shared(prompts[0][:-1], return_hidden=hidden)
        return [h[0]] * B if hidden else None
    width = max(p.numel() for p in prompts) - 1
    if width <= 0:
        return [None] * B if hidden else None
    tokens = torch.zeros(B, width, dtype=torch.long)
    valid = torch.zeros(B, width, dtype=torch.bool)
    for b, p in enumerate(prompts):
        tokens[b, : p.numel() - 1] = p[:-1]
        valid[b, : p.numel() - 1] = True
    out = runner.extend(tokens, valid, 1, return_hidden=hidden)
    if not hidden:
        return None
    h = out[1]  # [B, width, H], each row's tokens left-aligned
    return [h[b, : p.numel() - 1] for b, p in enumerate(prompts)]


# ------------------------------------------------------------------------------ drafting


class DraftSource:
    """Where a step's drafts come from (see :class:`DrafterGroups`, :class:`ModelGroups`)."""

    name = "none"
    wants_hidden = False

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

    @staticmethod
    def _propose(
        d: Drafter, g: Group, k: int, gen: torch.Generator, vocab: int | None
    ) -> Draft | TreeDraft:
        prop = d.propose(g.context, k, gen)
        if isinstance(prop, TreeDraft):
            check_tree(prop, k, vocab, d.name)
        elif isinstance(prop, Draft):
            check_draft(prop, k, vocab, d.name)
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
        params, run = self.params, self.runner
        G, ks = len(groups), list(ks)
        width = max(ks)
        members = [list(g.rows) for g in groups]
        origin = list(range(G))  # group each physical draft row came from
        self.fed_last = [False] * G  # a confidence stop already fed the draft its last token
        self.cols: list[int] = []  # physical draft-cache columns of x_1..x_{width-1}
        self.caught_up = width > 0  # a plain step leaves the draft behind (caught up later)
        drafts = torch.zeros(G, max(width, 0), dtype=torch.long)
        qs: list[list[torch.Tensor]] = [[] for _ in range(G)]
        if self.caught_up:
            logits = run.extend(self.pending, self.valid, 1)[:, -1]  # [G, V]
        for i in range(width):
            if i >= max(ks):  # every group stopped drafting
                break
            check_draft_logits(logits, self.name)
            exact = self.mode == "exact"
            q_all = logits_to_probs(logits, params) if exact else None
            if self.stop is not None and i >= self.stop.min_tokens:
                # the serial ConfidenceStopDrafter's rule, per group, before the draw
                conf = (
                    torch.softmax(logits.float(), dim=-1)
                    if params.is_greedy
                    else (q_all if q_all is not None else logits_to_probs(logits, params))
                ).amax(-1)  # [G]
                for p in range(G):
                    if i < ks[p] and float(conf[p]) < self.stop.threshold:
                        ks[p] = i
                        self.fed_last[p] = i > 0
            drawing = [p for p in range(G) if i < ks[p]]
            rows = [(p, r) for p in drawing for r in members[p]]
            if q_all is not None:  # every drawing row at once, from its group's q
                owner = [p for p, _ in rows]
                toks = _sample_rows(q_all[owner], [r.generator for _, r in rows], params.is_greedy)
                drawn = [(p, r, t, q_all[p]) for (p, r), t in zip(rows, toks, strict=True)]
            else:  # the bug zoo's misbehaving drafts, row by row
                drawn = []
                for p, r in rows:
                    tok, q = _draft_step(logits[p], params, self.mode, r.generator)
                    drawn.append((p, r, int(tok), q))
            split: dict[tuple[int, int], list[Row]] = {}  # (parent, token) -> rows
            q_of: dict[tuple[int, int], torch.Tensor] = {}
            for p in range(G):
                if i >= ks[p]:
                    split[(p, -1)] = members[p]
            for p, r, tok, q in drawn:
                split.setdefault((p, int(tok)), []).append(r)
                q_of[(p, int(tok))] = q
            split = dict(sorted(split.items(), key=lambda kv: kv[0]))  # children in parent order
            parents = [p for p, _ in split]
            if parents != list(range(G)):  # fork groups whose rows drew different tokens
                idx = torch.tensor(parents, dtype=torch.long)
                run.select(idx)
                self.pending, self.valid = self.pending[idx], self.valid[idx]
                drafts, logits = drafts[idx], logits[idx]
                qs = [list(qs[p]) for p in parents]
                ks = [ks[p] for p in parents]
                self.fed_last = [self.fed_last[p] for p in parents]
                origin = [origin[p] for p in parents]
            members = list(split.values())
            G = len(members)
            for c, (p, tok) in enumerate(split):
                if tok >= 0:
                    drafts[c, i] = tok
                    qs[c].append(q_of[(p, tok)])
            if i + 1 < max(ks):
                feed_valid = torch.tensor([i + 1 < ks[c] for c in range(G)]).view(G, 1)
                self.cols.append(run.mask.shape[1])
                logits = run.extend(drafts[:, i : i + 1], feed_valid, 1)[:, -1]
        self.ks = ks
        out = []
        for c in range(G):
            k = ks[c]
            q = torch.stack(qs[c]) if k else None
            dg = DraftGroup(origin[c], members[c], drafts[c, :k].clone(), q)
            check_draft(Draft(dg.tokens, dg.q_draft), max(width, 0), vocab, self.name)
            out.append(dg)
        self._drafts = drafts
        return out

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


def _sample_rows(probs: torch.Tensor, gens: list[torch.Generator], greedy: bool) -> list[int]:
    """One token per row of ``probs`` [r, V], each row with one uniform from its own
    generator (the draw ``sample`` would make), sampled in one vectorised call."""
    if not gens:
        return []
    if greedy:
        return probs.argmax(-1).tolist()
    u = torch.stack(
        [torch.rand((), generator=g, device=g.device, dtype=torch.float64) for g in gens]
    )
    return sample_with_uniform(probs, u.to(probs.device)).tolist()


# ------------------------------------------------------------------------------ the loop


class Decoder:
    """Drives the step until every row has emitted ``max_new_tokens`` or an EOS.

    Args:
        target: a :class:`SingleTarget` or :class:`BatchTarget`.
        drafts: a :class:`DraftSource` (the base class drafts nothing: plain decoding).
        rows: the logical rows; ``prompts[i]`` is row i's prompt.
        policy: the gamma policy (a :class:`~specviz.drafting.policies.GammaPolicy`).
        spec: the verifier.
        plain: record steps as plain decoding (``final_kind="target"``, no trace rows).
        trace: build the per-position trace rows of every step.
        record: keep p(token) and the mass ranked above it for every emitted token.
    """

    def __init__(
        self,
        target: SingleTarget | BatchTarget,
        drafts: DraftSource,
        rows: list[Row],
        *,
        params: SamplingParams,
        spec: VerifierSpec,
        policy: GammaPolicy,
        eos: frozenset[int],
        plain: bool = False,
        trace: bool = False,
        record: bool = False,
        vocab: int | None = None,
    ) -> None:
        self.target, self.drafts, self.rows = target, drafts, rows
        self.params, self.spec, self.policy, self.eos = params, spec, policy, eos
        self.plain, self.trace, self.record = plain, trace, record
        self.vocab = vocab
        # Greedy matching reads only the argmax of p_target, which is the argmax of the
        # logits: untraced greedy runs skip building the one-hot [k+1, V] "probabilities".
        self.logits_suffice = spec is VERIFIERS["greedy"] and not trace and not record
        self.calls = 0

    # -- setup ----------------------------------------------------------------------------
    def start(self) -> None:
        by_prompt: dict[tuple[int, ...], list[Row]] = {}
        for r in self.rows:
            if r.room > 0:
                by_prompt.setdefault(tuple(r.prompt.tolist()), []).append(r)
        prompts = [rows[0].prompt for rows in by_prompt.values()]
        hidden = self.drafts.wants_hidden
        pendings, feats = self.target.start(prompts, hidden) if prompts else ([], None)
        self.groups = [
            Group(rows, p.clone(), pend)
            for rows, p, pend in zip(by_prompt.values(), prompts, pendings, strict=True)
        ]
        self.policy.start()
        if self.groups:
            self.drafts.start(self.groups, self.params)
        if hidden and feats is not None:  # the prompt's features, for feature-level drafters
            for g, f in zip(self.groups, feats, strict=True):
                m = g.context.numel() - g.pending.numel()
                if m:
                    g.drafter.observe_target(g.context[:m], f[:m])
        self.t0 = time.perf_counter()

    def run(self) -> float:
        """Decode to the end; returns the seconds it took."""
        self.start()
        while self.groups:
            self.step()
        return time.perf_counter() - self.t0

    # -- one target call --------------------------------------------------------------------
    def step(self) -> None:
        groups, params = self.groups, self.params
        t_draft = time.perf_counter()
        self.policy.observe_batch(len(groups))
        want = check_count("policy gamma", self.policy.next_gamma(), 0)
        ks = [min(want, g.rows[0].room - 1) for g in groups]  # the last slot is the target's
        dgs = self.drafts.draft(groups, ks, self.vocab)
        parents = [dg.parent for dg in dgs]
        self.target.select(parents)  # rows that drew differently verify apart
        _sync(self.target.device)
        t_verify = time.perf_counter()

        trees = any(dg.tree is not None for dg in dgs)
        if trees:  # every row verifies a tree (a chain is a tree) in one tree-attention call
            for dg in dgs:
                if dg.tree is None:
                    dg.tree = TreeDraft.chain(Draft(dg.tokens, dg.q_draft))
            feeds = [torch.cat([groups[dg.parent].pending, dg.tokens]) for dg in dgs]
            tree_parents = [_feed_parents(groups[dg.parent].pending, dg.tree) for dg in dgs]
            width = max(f.numel() for f in feeds)
            logits, hidden = self.target.forward_tree(feeds, tree_parents, self.drafts.wants_hidden)
        else:
            kmax = max(dg.tokens.numel() for dg in dgs)
            feeds = [torch.cat([groups[dg.parent].pending, dg.tokens]) for dg in dgs]
            width = kmax + 1
            logits, hidden = self.target.forward(feeds, width, self.drafts.wants_hidden)
        self.calls += 1
        check_target_logits(logits)
        if self.vocab is None:  # a model whose width was not known before its first call
            self.vocab = int(logits.shape[-1])
            for dg in dgs:
                check_draft(Draft(dg.tokens, dg.q_draft), width, self.vocab, self.drafts.name)
        p_all = logits if self.logits_suffice else logits_to_probs(logits, params)  # [G, m, V]

        verdicts = self._verify(dgs, p_all, groups)
        now = time.perf_counter()
        end = now - self.t0
        new_groups: list[Group] = []
        plan: list[tuple[int, int, int, int]] = []
        paths: list[tuple[int, ...]] = []
        index: dict[tuple, int] = {}
        drafted, accepted = [], []
        rec: list[tuple[Row, int, int, int]] = []  # (row, draft group, p row, token)
        for di, (dg, vs) in enumerate(zip(dgs, verdicts, strict=True)):
            group = groups[dg.parent]
            k = dg.tokens.numel()
            lag = group.pending.numel() - 1  # p rows of a tree step are offset by the pending
            for r, v in zip(dg.rows, vs, strict=True):
                path = v.path if trees else tuple(range(v.num_accepted))
                n = len(path)
                committed = [int(dg.tokens[i]) for i in path] + [v.next_token]
                committed, done = _truncate(committed, r.room, self.eos)
                start_pos = len(r.tokens)
                r.tokens.extend(committed)
                r.room -= len(committed)
                r.times.extend([end] * len(committed))
                drafted.append(k)
                accepted.append(n)
                if self.record:  # the law each committed token came from
                    rows_p = [lag] + [lag + 1 + i for i in path] if trees else range(len(committed))
                    rec += [(r, di, j, t) for j, t in zip(rows_p, committed, strict=False)]
                r.steps.append(
                    Step(
                        step=len(r.steps),
                        position=start_pos,
                        drafted=k,
                        accepted=n,
                        emitted=tuple(committed),
                        final_kind="target" if self.plain else v.next_kind,
                        draft_time=t_verify - t_draft,
                        verify_time=now - t_verify,
                        end_time=end,
                        positions=(
                            _positions(start_pos, dg, p_all[di], v, committed)
                            if self.trace and not self.plain and not trees
                            else ()
                        ),
                        tree=(
                            _tree_nodes(start_pos, dg, p_all[di, lag:], v)
                            if self.trace and trees
                            else ()
                        ),
                        path=path if trees else (),
                    )
                )
                if done or r.room <= 0:
                    if len(group.rows) == 1:  # a shared drafter hears of its own text only
                        self.drafts.finished(group, r)
                    continue
                key = (di, path, v.next_token)
                if key not in index:
                    index[key] = len(new_groups)
                    ctx = torch.cat([group.context, torch.tensor(committed, dtype=torch.long)])
                    new_groups.append(Group([], ctx, torch.tensor([v.next_token]), group.drafter))
                    plan.append((di, n, k, v.next_token))
                    paths.append(path)
                new_groups[index[key]].rows.append(r)
        if rec:
            self._record(rec, p_all)

        # roll back: each new group keeps its pending tokens and its accepted drafts
        self.target.select([di for di, _, _, _ in plan])
        pend = [groups[dgs[di].parent].pending.numel() for di, _, _, _ in plan]
        if trees:
            cols = [
                list(range(m)) + [m + i for i in path] for m, path in zip(pend, paths, strict=True)
            ]
            self.target.keep_columns(cols)
        else:
            cols = [list(range(m + n)) for m, (_, n, _, _) in zip(pend, plan, strict=True)]
            self.target.keep([m + n for m, (_, n, _, _) in zip(pend, plan, strict=True)])
        if self.drafts.wants_hidden:
            self.drafts.commit_forks(new_groups)
            for g, (di, _, _, _), c in zip(new_groups, plan, cols, strict=True):
                idx = torch.tensor(c, dtype=torch.long)
                g.drafter.observe_target(feeds[di][idx], hidden[di, idx.to(hidden.device)])
        self.drafts.commit(new_groups, plan)
        self.groups = new_groups
        _sync(self.target.device)
        t_end = time.perf_counter()
        # the policy sees the rows' mean counts ("all accepted" only when every row was)
        d_mean = round(sum(drafted) / len(drafted))
        a_mean = sum(accepted) // len(accepted)
        if accepted != drafted:
            a_mean = min(a_mean, d_mean - 1)
        self.policy.update(d_mean, max(a_mean, 0), t_verify - t_draft, t_end - t_verify)

    def _verify(self, dgs: list[DraftGroup], p_all: torch.Tensor, groups: list[Group]) -> list:
        out: list[list[Any]] = []
        for di, dg in enumerate(dgs):
            if dg.tree is not None:
                verify_tree = self.spec.verify_tree
                if verify_tree is None:
                    raise ValueError(f"verifier {self.spec.name!r} checks chains only, not trees")
                lag = groups[dg.parent].pending.numel() - 1
                p = p_all[di, lag : lag + dg.tree.size + 1]  # [n+1, V]: the root law, then nodes
                out.append([verify_tree(dg.tree, p, r.generator) for r in dg.rows])
                continue
            k = dg.tokens.numel()
            p = p_all[di, : k + 1]  # [k+1, V]
            if k == 0 and len(dg.rows) > 1:  # a plain step: every rule samples p[0]
                toks = _sample_rows(
                    p[:1].expand(len(dg.rows), -1),
                    [r.generator for r in dg.rows],
                    self.params.is_greedy or self.logits_suffice,
                )
                none = torch.empty(0, device=p.device)
                out.append([Verdict(0, t, "bonus", none, none, None) for t in toks])
                continue
            q = None if dg.q_draft is None else dg.q_draft.to(p.device)
            out.append([self.spec.verify(dg.tokens, q, p, r.generator) for r in dg.rows])
        return out

    def _record(self, rec: list[tuple[Row, int, int, int]], p_all: torch.Tensor) -> None:
        """p(token) and the probability mass ranked above it, for every committed token at
        once: log-probabilities and the randomized PIT need nothing else."""
        rows = torch.tensor([di for _, di, _, _ in rec])
        pos = torch.tensor([j for _, _, j, _ in rec])
        probs = p_all[rows.to(p_all.device), pos.to(p_all.device)]  # [c, V]
        pxs, aboves = rank_stats(probs, torch.tensor([t for *_, t in rec]))
        for (r, *_), px, ab in zip(rec, pxs, aboves, strict=True):
            r.probs.append(px)
            r.above.append(ab)


def _feed_parents(pending: torch.Tensor, tree: TreeDraft) -> list[int]:
    """Parents within the feed [pending..., nodes]: the pending tokens form a chain, the
    tree hangs under the last of them."""
    m = pending.numel()
    head = [-1] + list(range(m - 1))
    return head + [m - 1 if p < 0 else m + p for p in tree.parents.tolist()]


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


def _device_of(model: Any) -> torch.device:
    if hasattr(model, "make_runner"):  # toy models
        return torch.device("cpu")
    return next(model.parameters()).device


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _truncate(tokens: list[int], room: int, eos: frozenset[int]) -> tuple[list[int], bool]:
    tokens = tokens[:room]
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1], True
    return tokens, False


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
