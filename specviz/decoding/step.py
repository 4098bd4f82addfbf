"""The one speculative step, and the loop that drives it for one row or for many.

One step (one target call for every live row)::

    plan     k = policy gamma, capped by what each row can still emit     (GammaPolicy)
    draft    each row's drafter proposes k tokens with q_draft            (Drafter, own caches)
    check    draft ids in [0, V), q_draft finite, >= 0, rows summing to 1: before the target runs
    verify   one target call on [pending, x_1..x_k] per row -> p_target [G, k+1, V]
    decide   accept a prefix, then a corrected or bonus token             (verifier, per row)
    commit   cut at EOS / max_new_tokens, roll the caches back to the kept prefix,
             tell the drafter and the policy, record the step

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
from typing import Any

import torch

from ..core.sampling import SamplingParams, logits_to_probs
from ..core.trace import Step
from ..drafting.base import Draft, TreeDraft
from ..drafting.policies import GammaPolicy
from ..verification.base import VERIFIERS, Verdict, VerifierSpec
from .drafts import DraftSource, _sample_rows
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
                d = Draft(dg.tokens, dg.q_draft)
                check_draft(
                    d, width, self.vocab, self.drafts.name, normalised=self.drafts.normalised
                )
        p_all = logits if self.logits_suffice else logits_to_probs(logits, params)  # [G, m, V]

        verdicts = self._verify(dgs, p_all, groups)
        now = time.perf_counter()
        end = now - self.t0
        self.draft_seconds += t_verify - t_draft
        self.verify_seconds += now - t_verify
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
        if self.spec.verify_rows is not None and all(dg.tree is None for dg in dgs):
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
        if self.spec.verify_groups is not None and all(dg.tree is None for dg in dgs):
            # every row of the step at once: V-sized work once per distinct law, not per row
            return self.spec.verify_groups(
                [(dg.tokens, dg.q_draft) for dg in dgs],
                p_all,
                [[r.generator for r in dg.rows] for dg in dgs],
                residuals=self.trace,
            )
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
                    p[:1],
                    [r.generator for r in dg.rows],
                    self.params.is_greedy or self.logits_suffice,
                    [0] * len(dg.rows),
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


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _truncate(tokens: list[int], room: int, eos: frozenset[int]) -> tuple[list[int], bool]:
    tokens = tokens[:room]
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1], True
    return tokens, False
