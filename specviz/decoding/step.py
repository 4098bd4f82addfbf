"""The one speculative step, and the loop that drives it for one row or for many.

One step (one target call for every live row), each phase a method of :class:`Decoder`::

    _plan      k = policy gamma, capped by what each row can still emit   (GammaPolicy)
    _draft     each row's drafter proposes k tokens with q_draft          (Drafter, own caches)
               checked: ids in [0, V), q_draft finite, >= 0, rows summing to 1, before the target
    _forward   one target call on [pending, x_1..x_k] per row -> p_target [G, k+1, V]
    _verify    accept a prefix, then a corrected or bonus token           (verifier, per row)
    _commit    cut at EOS / max_new_tokens, record the step, regroup the rows still running
    _rollback  the target's cache keeps each new group's accepted prefix (or tree path)
    _feedback  the drafters and the policy hear how the call went

The serial engine runs it on a batch of one (:class:`~specviz.decoding.targets.SingleTarget`: a
single-sequence runner whose rollback is a crop, and which can be a static, compiled cache);
the batched engine on many (:class:`~specviz.decoding.targets.BatchTarget`: a masked cache
whose rollback leaves holes, and which verifies token trees with tree attention). Rows that are in the
same state -- same tokens so far -- share one physical row of the caches (a *group*); a group
forks when its rows' random draws differ, so thousands of samples of one prompt cost a
handful of rows in the first steps. Every row draws from its own ``torch.Generator`` in
exactly the order a serial run does, so row ``i`` of a batch reproduces the serial run with
its seed.

Drafting comes from a :mod:`~specviz.decoding.drafts` source: ``DrafterGroups`` (any
:class:`~specviz.drafting.Drafter`, one per group, forked when a group splits) or
``ModelGroups`` (a draft *model* run batched over the groups, token by token). The records a step produces (:mod:`~specviz.decoding.records`) are the trace's
:class:`~specviz.core.trace.Step` rows, one per row and call; every result type is built from
them. The rows and groups themselves are in :mod:`~specviz.decoding.state`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ..core.sampling import SamplingParams, logits_to_probs
from ..core.trace import Step
from ..drafting.base import Draft, TreeDraft
from ..drafting.model_loop import sample_rows
from ..drafting.policies import GammaPolicy
from ..verification.base import VERIFIERS, Verdict, VerifierSpec
from ..verification.lossless import gather_laws
from .drafts import DraftSource
from .inputs import check_count, check_draft, check_target_logits
from .records import _positions, _tree_nodes, rank_stats
from .state import DraftGroup, Group, Row
from .targets import BatchTarget, SingleTarget

__all__ = ["Decoder"]


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
        self.prefill_seconds = 0.0  # start(): prompt prefill of target and draft
        self.draft_seconds = self.verify_seconds = 0.0  # summed over steps

    # -- setup ----------------------------------------------------------------------------
    def start(self) -> None:
        # The clock starts before the prompts are prefilled: every token time (TTFT above all)
        # and the run's total include the prefill, as a server's service time does.
        self.t0 = time.perf_counter()
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
        self.prefill_seconds = time.perf_counter() - self.t0

    def run(self) -> float:
        """Decode to the end; returns the seconds it took."""
        with self.target.running(len(self.rows)):
            self.start()
            while self.groups:
                self.step()
        return time.perf_counter() - self.t0

    # -- one target call --------------------------------------------------------------------
    def step(self) -> None:
        """One target call for every live row, in phases."""
        t_draft = time.perf_counter()
        dgs = self._draft(self._plan())
        call = _Call(dgs, t_draft, time.perf_counter())
        self._forward(call)
        verdicts = self._verify(dgs, call.p_all, self.groups, call.bonus)
        call.t_done = time.perf_counter()
        self.draft_seconds += call.t_verify - call.t_draft
        self.verify_seconds += call.t_done - call.t_verify
        commits = self._commit(call, verdicts)
        self._rollback(call, commits)
        self._feedback(call, commits)

    def _plan(self) -> list[int]:
        """How many tokens each group drafts: the policy's gamma, capped by each group's room
        (the last slot is the target's)."""
        self.policy.observe_batch(len(self.groups))
        want = check_count("policy gamma", self.policy.next_gamma(), 0)
        return [min(want, g.rows[0].room - 1) for g in self.groups]

    def _draft(self, ks: list[int]) -> list[DraftGroup]:
        """The drafts; rows that drew differently verify apart (the target's rows follow)."""
        dgs = self.drafts.draft(self.groups, ks, self.vocab)
        self.target.select([dg.parent for dg in dgs])
        _sync(self.target.device)
        return dgs

    def _forward(self, call: _Call) -> None:
        """One target call on [pending, x_1..x_k] per draft group -> p_target [G, m, V]."""
        groups, dgs = self.groups, call.dgs
        call.trees = any(dg.tree is not None for dg in dgs)
        call.feeds = [torch.cat([groups[dg.parent].pending, dg.tokens]) for dg in dgs]
        hidden = self.drafts.wants_hidden
        if call.trees:  # every row verifies a tree (a chain is a tree) in one tree-attention call
            for dg in dgs:
                if dg.tree is None:
                    dg.tree = TreeDraft.chain(Draft(dg.tokens, dg.q_draft))
            parents = [_feed_parents(groups[dg.parent].pending, dg.tree) for dg in dgs]
            width = max(f.numel() for f in call.feeds)
            logits, call.hidden = self.target.forward_tree(call.feeds, parents, hidden)
        else:
            width = max(dg.tokens.numel() for dg in dgs) + 1
            if self._defer_bonus(call, width):
                logits, call.hidden = self.target.forward(call.feeds, width, hidden, True)
                call.bonus = _BonusLaws(self.target, self.params)
            else:
                logits, call.hidden = self.target.forward(call.feeds, width, hidden)
        self.calls += 1
        check_target_logits(logits)
        if self.vocab is None:  # a model whose width was not known before its first call
            self.vocab = int(logits.shape[-1])
            for dg in dgs:
                d = Draft(dg.tokens, dg.q_draft)
                check_draft(
                    d, width, self.vocab, self.drafts.name, normalised=self.drafts.normalised
                )
        # [G, m, V]
        call.p_all = logits if self.logits_suffice else logits_to_probs(logits, self.params)

    def _defer_bonus(self, call: _Call, width: int) -> bool:
        """Leave the bonus column's laws (the target's law after the last draft) for later:
        only rows that accept every draft use them, and with a weak draft that is a few
        percent of rows -- the LM head on that column was ~7% of a consistency check's model
        time. Only where the whole step is verified by a batch rule that can ask for them
        (``verify_groups``) and nothing else reads every law (no trace, no target features)."""
        dgs = call.dgs
        return (
            isinstance(self.target, BatchTarget)
            and width >= 2
            and not self.trace
            and not self.logits_suffice
            and not self.drafts.wants_hidden
            and self.spec.verify_rows is None
            and self.spec.verify_groups is not None
            and not (len(dgs) == 1 and len(dgs[0].rows) == 1)
            and max(f.numel() for f in call.feeds) == width
            and self.target.can_defer()
        )

    def _commit(self, call: _Call, verdicts: list) -> _Commits:
        """Each row takes its accepted drafts and the corrected or bonus token (cut at EOS and
        max_new_tokens) and records the step; rows still running regroup by what they
        committed (same draft group, same path, same next token: one new group)."""
        out = _Commits()
        for di, (dg, vs) in enumerate(zip(call.dgs, verdicts, strict=True)):
            group = self.groups[dg.parent]
            for r, v in zip(dg.rows, vs, strict=True):
                path = v.path if call.trees else tuple(range(v.num_accepted))
                committed, done = self._commit_row(call, di, r, v, path, out)
                if done or r.room <= 0:
                    if len(group.rows) == 1:  # a shared drafter hears of its own text only
                        self.drafts.finished(group, r)
                    continue
                key = (di, path, v.next_token)
                if key not in out.index:
                    out.index[key] = len(out.groups)
                    ctx = torch.cat([group.context, torch.tensor(committed, dtype=torch.long)])
                    out.groups.append(Group([], ctx, torch.tensor([v.next_token]), group.drafter))
                    out.plan.append((di, len(path), dg.tokens.numel(), v.next_token))
                    out.paths.append(path)
                out.groups[out.index[key]].rows.append(r)
        if out.rec:
            self._record(out.rec, call.p_all, call.bonus)
        return out

    def _commit_row(
        self, call: _Call, di: int, r: Row, v: Verdict, path: tuple[int, ...], out: _Commits
    ) -> tuple[list[int], bool]:
        """Row ``r``'s tokens of this step (cut at EOS and at its room) and their record."""
        dg = call.dgs[di]
        committed = [int(dg.tokens[i]) for i in path] + [v.next_token]
        committed, done = _truncate(committed, r.room, self.eos)
        r.steps.append(self._step_record(call, di, r, v, path, committed))
        end = call.t_done - self.t0
        r.tokens.extend(committed)
        r.room -= len(committed)
        r.times.extend([end] * len(committed))
        out.drafted.append(dg.tokens.numel())
        out.accepted.append(len(path))
        if self.record:  # the law each committed token came from
            lag = self.groups[dg.parent].pending.numel() - 1  # p rows of a tree step: offset
            rows_p = [lag] + [lag + 1 + i for i in path] if call.trees else range(len(committed))
            out.rec += [(r, di, j, t) for j, t in zip(rows_p, committed, strict=False)]
        return committed, done

    def _step_record(
        self, call: _Call, di: int, r: Row, v: Verdict, path: tuple[int, ...], committed: list[int]
    ) -> Step:
        """The trace row of row ``r``'s part in this call (before its tokens are appended)."""
        dg, start = call.dgs[di], len(r.tokens)
        lag = self.groups[dg.parent].pending.numel() - 1  # p rows of a tree step: offset
        chain_trace = self.trace and not self.plain and not call.trees
        tree_trace = self.trace and call.trees
        return Step(
            step=len(r.steps),
            position=start,
            drafted=dg.tokens.numel(),
            accepted=len(path),
            emitted=tuple(committed),
            final_kind="target" if self.plain else v.next_kind,
            draft_time=call.t_verify - call.t_draft,
            verify_time=call.t_done - call.t_verify,
            end_time=call.t_done - self.t0,
            positions=_positions(start, dg, call.p_all[di], v, committed) if chain_trace else (),
            tree=_tree_nodes(start, dg, call.p_all[di, lag:], v) if tree_trace else (),
            path=path if call.trees else (),
        )

    def _rollback(self, call: _Call, commits: _Commits) -> None:
        """Each new group keeps its pending tokens and its accepted drafts in the target's
        cache (a chain keeps a prefix; a tree keeps the columns of its accepted path)."""
        self.target.select([di for di, _, _, _ in commits.plan])
        pend = [self.groups[call.dgs[di].parent].pending.numel() for di, _, _, _ in commits.plan]
        if call.trees:
            commits.cols = [
                list(range(m)) + [m + i for i in path]
                for m, path in zip(pend, commits.paths, strict=True)
            ]
            self.target.keep_columns(commits.cols)
        else:
            ns = [n for _, n, _, _ in commits.plan]
            commits.cols = [list(range(m + n)) for m, n in zip(pend, ns, strict=True)]
            self.target.keep([m + n for m, n in zip(pend, ns, strict=True)])

    def _feedback(self, call: _Call, commits: _Commits) -> None:
        """The drafters hear what the target kept (and its features, when they want them),
        the groups move on, and the policy hears how the call went."""
        new_groups, plan = commits.groups, commits.plan
        if self.drafts.wants_hidden:
            self.drafts.commit_forks(new_groups)
            for g, (di, _, _, _), c in zip(new_groups, plan, commits.cols, strict=True):
                idx = torch.tensor(c, dtype=torch.long)
                g.drafter.observe_target(
                    call.feeds[di][idx], call.hidden[di, idx.to(call.hidden.device)]
                )
        self.drafts.commit(new_groups, plan)
        self.groups = new_groups
        _sync(self.target.device)
        t_end = time.perf_counter()
        # the policy sees the rows' mean counts ("all accepted" only when every row was)
        drafted, accepted = commits.drafted, commits.accepted
        d_mean = round(sum(drafted) / len(drafted))
        a_mean = sum(accepted) // len(accepted)
        if accepted != drafted:
            a_mean = min(a_mean, d_mean - 1)
        self.policy.update(
            d_mean, max(a_mean, 0), call.t_verify - call.t_draft, t_end - call.t_verify
        )

    def _verify(
        self, dgs: list[DraftGroup], p_all: torch.Tensor, groups: list[Group], bonus=None
    ) -> list:
        """Every row's verdict (grouped like ``dgs``): a rule over the whole batch where the
        verifier has one and no tree is drafted, else draft group by draft group. ``bonus``:
        the deferred bonus laws (only with a batch rule, see :meth:`_defer_bonus`)."""
        chains = all(dg.tree is None for dg in dgs)
        if self.spec.verify_rows is not None and chains:
            return self._verify_rows(dgs, p_all)
        if self.spec.verify_groups is not None and chains:
            # every row of the step at once: V-sized work once per distinct law, not per row
            return self.spec.verify_groups(
                [(dg.tokens, dg.q_draft) for dg in dgs],
                p_all,
                [[r.generator for r in dg.rows] for dg in dgs],
                residuals=self.trace,
                **({"bonus": bonus} if bonus is not None else {}),
            )
        return [self._verify_group(di, dg, p_all, groups) for di, dg in enumerate(dgs)]

    def _verify_rows(self, dgs: list[DraftGroup], p_all: torch.Tensor) -> list:
        # a rule over the whole batch (the bug zoo's ragged-batch member): every row at once
        items = [(di, r) for di, dg in enumerate(dgs) for r in dg.rows]
        qs = [dgs[di].q_draft for di, _ in items]
        vs = self.spec.verify_rows(
            [dgs[di].tokens for di, _ in items],
            [None if q is None else q.to(p_all.device) for q in qs],
            [p_all[di, : dgs[di].tokens.numel() + 1] for di, _ in items],
            [r.generator for _, r in items],
        )
        grouped: list[list[Any]] = [[] for _ in dgs]
        for (di, _), v in zip(items, vs, strict=True):
            grouped[di].append(v)
        return grouped

    def _verify_group(
        self, di: int, dg: DraftGroup, p_all: torch.Tensor, groups: list[Group]
    ) -> list[Any]:
        if dg.tree is not None:
            verify_tree = self.spec.verify_tree
            if verify_tree is None:
                raise ValueError(f"verifier {self.spec.name!r} checks chains only, not trees")
            lag = groups[dg.parent].pending.numel() - 1
            p = p_all[di, lag : lag + dg.tree.size + 1]  # [n+1, V]: the root law, then nodes
            return [verify_tree(dg.tree, p, r.generator) for r in dg.rows]
        k = dg.tokens.numel()
        p = p_all[di, : k + 1]  # [k+1, V]
        if k == 0 and len(dg.rows) > 1:  # a plain step: every rule samples p[0]
            toks = sample_rows(
                p[:1],
                [r.generator for r in dg.rows],
                self.params.is_greedy or self.logits_suffice,
                [0] * len(dg.rows),
            )
            none = torch.empty(0, device=p.device)
            return [Verdict(0, t, "bonus", none, none, None) for t in toks]
        q = None if dg.q_draft is None else dg.q_draft.to(p.device)
        return [self.spec.verify(dg.tokens, q, p, r.generator) for r in dg.rows]

    def _record(self, rec: list[tuple[Row, int, int, int]], p_all: torch.Tensor, bonus=None):
        """p(token) and the probability mass ranked above it, for every committed token at
        once: log-probabilities and the randomized PIT need nothing else. Rows that took the
        same token from the same law share one V-sized computation (the rows of a group)."""
        index: dict[tuple[int, int, int], int] = {}
        slot = [index.setdefault((di, j, t), len(index)) for _, di, j, t in rec]
        keys = list(index)
        # [distinct, V]
        probs = gather_laws(p_all, [di for di, _, _ in keys], [j for _, j, _ in keys], bonus)
        pxs, aboves = rank_stats(probs, torch.tensor([t for *_, t in keys]))
        for (r, *_), s in zip(rec, slot, strict=True):
            r.probs.append(pxs[s])
            r.above.append(aboves[s])


class _BonusLaws:
    """A verify pass's deferred bonus laws: computed for the draft groups that ask, once."""

    def __init__(self, target: BatchTarget, params: SamplingParams) -> None:
        self.target, self.params = target, params
        self.laws: dict[int, torch.Tensor] = {}

    def __call__(self, groups: list[int]) -> torch.Tensor:
        need = sorted({d for d in groups if d not in self.laws})
        if need:
            logits = self.target.deferred_logits(need)  # [n, V]
            check_target_logits(logits)
            self.laws.update(zip(need, logits_to_probs(logits, self.params), strict=True))
        return torch.stack([self.laws[d] for d in groups])


@dataclass(eq=False)
class _Call:
    """One target call's working data, handed from phase to phase."""

    dgs: list[DraftGroup]
    t_draft: float  # the phases' clock: drafting began,
    t_verify: float  # the target call began,
    t_done: float = 0.0  # verification ended
    trees: bool = False
    feeds: list[torch.Tensor] = field(default_factory=list)  # [pending, drafts] per draft group
    hidden: Any = None  # the target's final hidden states, for feature-level drafters
    p_all: Any = None  # [G, m, V] p_target (the logits when greedy matching suffices)
    bonus: _BonusLaws | None = None  # the last column's laws when deferred: p_all is [G, m-1, V]


@dataclass(eq=False)
class _Commits:
    """What the rows committed: the new groups and how each came from a draft group."""

    groups: list[Group] = field(default_factory=list)
    plan: list[tuple[int, int, int, int]] = field(default_factory=list)  # (dg, n, k, next)
    paths: list[tuple[int, ...]] = field(default_factory=list)
    index: dict[tuple, int] = field(default_factory=dict)
    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    rec: list[tuple[Row, int, int, int]] = field(default_factory=list)  # row, dg, p row, token
    cols: list[list[int]] = field(default_factory=list)  # target columns each group keeps


def _feed_parents(pending: torch.Tensor, tree: TreeDraft) -> list[int]:
    """Parents within the feed [pending..., nodes]: the pending tokens form a chain, the
    tree hangs under the last of them."""
    m = pending.numel()
    head = [-1] + list(range(m - 1))
    return head + [m - 1 if p < 0 else m + p for p in tree.parents.tolist()]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _truncate(tokens: list[int], room: int, eos: frozenset[int]) -> tuple[list[int], bool]:
    tokens = tokens[:room]
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1], True
    return tokens, False
