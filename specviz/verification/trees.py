"""Verifying a token tree: several candidates per position, one target call.

At a node with target law p and candidate children x_1..x_m (in index order), a *sibling
rule* decides; after an accepted child the walk continues at that child's children, and the
accepted path plus one corrected or bonus token is emitted. Each lossless rule keeps the
target's law exactly when the candidates were drawn the way it assumes
(:data:`~specviz.core.draft.SAMPLINGS`):

* **independent drafts** (SpecInfer's multi-step speculative sampling, Miao et al. 2023,
  arXiv 2305.09781, Alg. 2; recursive rejection sampling *with* replacement): each x_i drawn
  independently from its q_i. For i = 1..m: (1) accept x_i with probability
  min(1, p(x_i) / q_i(x_i)); (2) on rejection p <- norm(max(0, p - q_i)). (3) If all are
  rejected, sample the next token from the final p.
* **drafts without replacement** (recursive rejection sampling without replacement, Jeon et
  al. 2024, arXiv 2402.14160; Sequoia): q_1 = q, q_{i+1}(x) = q_i(x) 1[x != x_i] / (1 - q_i(x_i)).
  (1) Accept x_i with probability min(1, p_i(x_i) / q_i(x_i)); (2) else
  p_{i+1} = norm(max(0, p_i - q_i)); (3) if all are rejected, sample from p_{m+1}.
* **deterministic candidates** (EAGLE-2's top-k, n-gram branches; q = 1): (1) accept x_i with
  probability p_i(x_i); (2) on rejection zero x_i in p and renormalise; (3) if all are
  rejected, sample from what is left. Lossless as long as the candidates do not depend on the
  verifier's random numbers.
* **greedy** (``do_sample=False``): follow the child equal to the target's argmax.

A rule is written once, as the acceptance probability of each sibling given the ones before it
and the law left after its rejection (:class:`SiblingRule`); the same function drives the
sampler (one uniform per tried sibling from the row's generator, then one for the final draw)
and the exact first-token law (:func:`first_token_law_tree`), so the stated effect of every
rule describes the code that runs. The bug zoo's tree rules live in
:mod:`specviz.verification.zoo`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..core.draft import Draft, TreeDraft
from ..core.sampling import sample
from .verdict import Verdict

__all__ = [
    "LOSSLESS_TREE_RULES",
    "NodeDecision",
    "SiblingRule",
    "TreeVerdict",
    "SiblingWalk",
    "first_token_law_tree",
    "rejectable_candidates",
    "sibling_walk",
    "tree_walk",
    "verify_tree_greedy",
    "verify_tree_lossless",
]


def _norm(r: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    total = r.sum()
    # A rejection implies mass left; only rounding can empty it, and then the previous law is
    # the right limit.
    return r / total if float(total) > 0.0 else fallback


def _remove(law: torch.Tensor, x: int) -> torch.Tensor:
    r = law.clone()
    r[x] = 0.0
    return _norm(r, law)


@dataclass
class SiblingState:
    """What a rule carries from one sibling to the next."""

    p: torch.Tensor  # [V] the target law the next sibling is tested against
    q: torch.Tensor | None = None  # [V] the draft law of the next sibling (rule-specific)
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SiblingRule:
    """``start(p, q_rows) -> state``; ``step(state, i, x, q_rows) -> (a, state after x is
    rejected)``; after the last rejection the next token is drawn from ``state.p``."""

    name: str
    start: Callable[[torch.Tensor, list | None], SiblingState]
    step: Callable[[SiblingState, int, int, list | None], tuple[float, SiblingState]]
    one_coin: bool = False  # one uniform for the whole sibling group (SGLang's kernel)


def _start_p(p, qs):
    return SiblingState(p)


def _start_pq(p, qs):
    return SiblingState(p, qs[0].clone())


def _need_q(q: torch.Tensor, x: int) -> float:
    qx = float(q[x])
    if qx <= 0.0:
        raise ValueError(f"drafted token {x} has q_draft = 0 in the law it was drawn from")
    return qx


def _step_independent(s, i, x, qs):  # SpecInfer (1)-(2)
    q = qs[i]
    a = min(1.0, float(s.p[x]) / _need_q(q, x))
    return a, SiblingState(_norm(torch.clamp(s.p - q, min=0.0), s.p))


def _step_without_replacement(s, i, x, qs):  # Jeon et al. (1)-(2), q_i renormalised
    a = min(1.0, float(s.p[x]) / _need_q(s.q, x))
    return a, SiblingState(_norm(torch.clamp(s.p - s.q, min=0.0), s.p), _remove(s.q, x))


def _step_deterministic(s, i, x, qs):  # accept with p_i(x_i), else remove x_i
    return float(s.p[x]), SiblingState(_remove(s.p, x))


LOSSLESS_TREE_RULES: dict[str, SiblingRule] = {
    "independent": SiblingRule("independent", _start_p, _step_independent),
    "without_replacement": SiblingRule("without_replacement", _start_pq, _step_without_replacement),
    "deterministic": SiblingRule("deterministic", _start_p, _step_deterministic),
}


@dataclass(frozen=True)
class NodeDecision:
    """What the verifier did at one tried candidate."""

    node: int
    accept_prob: float
    u: float  # the uniform draw (NaN when the rule draws none)
    accepted: bool
    residual: torch.Tensor | None  # [V] the law after this rejection (None when accepted)


@dataclass(frozen=True)
class TreeVerdict:
    path: tuple[int, ...]  # accepted nodes, root's child first
    next_token: int
    next_kind: str  # "corrected" (all children of the last node rejected) or "bonus" (a leaf)
    decisions: tuple[NodeDecision, ...]  # every tried candidate, in order
    final_law: torch.Tensor  # [V] the law the next token was drawn from

    @property
    def num_accepted(self) -> int:
        return len(self.path)


def _uniform(generator: torch.Generator, device: torch.device) -> float:
    return float(torch.rand((), generator=generator, device=device, dtype=torch.float64))


def _siblings(rule: SiblingRule, p, toks, qs, generator):
    """Apply ``rule`` to one sibling group: (index accepted or None, decisions, final law)."""
    state = rule.start(p, qs)
    out = []
    coin = _uniform(generator, p.device) if rule.one_coin else None
    reach = 1.0
    for i, x in enumerate(toks):
        a, rejected = rule.step(state, i, x, qs)
        if rule.one_coin:  # a is conditional on reaching i: the coin's interval is scaled
            u = coin
            accepted = coin < 1.0 - reach * (1.0 - a)
            reach *= 1.0 - a
        else:
            u = _uniform(generator, p.device)
            accepted = u < a
        if accepted:
            out.append((a, u, True, None))
            return i, out, state.p
        state = rejected
        out.append((a, u, False, state.p))
    return None, out, state.p


def tree_walk(
    tree: TreeDraft, p_nodes: torch.Tensor, generator: torch.Generator, rule: SiblingRule
) -> TreeVerdict:
    """Walk ``tree`` from the root with a sibling ``rule``. ``p_nodes`` [n+1, V]: row 0 the
    target law after the last committed token, row i+1 the law after node i."""
    kids = tree.children()
    tokens = tree.tokens.tolist()
    q = tree.q_draft
    cur, path, decisions = -1, [], []
    while True:
        p = p_nodes[cur + 1]
        children = kids.get(cur, [])
        if not children:
            return TreeVerdict(tuple(path), int(sample(p, generator)), "bonus", tuple(decisions), p)
        toks = [tokens[c] for c in children]
        qs = None if q is None else [q[c].to(p.device) for c in children]
        picked, out, final = _siblings(rule, p, toks, qs, generator)
        decisions += [
            NodeDecision(c, a, u, ok, res)
            for c, (a, u, ok, res) in zip(children, out, strict=False)
        ]
        if picked is None:
            nxt = int(sample(final, generator))
            return TreeVerdict(tuple(path), nxt, "corrected", tuple(decisions), final)
        cur = children[picked]
        path.append(cur)


def check_tree_shapes(tree: Any, p_nodes: Any, who: str) -> None:
    """What a tree verifier is given, when it is called directly: a :class:`TreeDraft` of n
    nodes with ids in [0, V) and ``q_draft`` [n, V] or None, and ``p_nodes`` [n+1, V]."""
    if not isinstance(tree, TreeDraft):
        raise TypeError(f"{who}: tree must be a TreeDraft, got {type(tree).__name__}")
    n = tree.size
    if not isinstance(p_nodes, torch.Tensor) or p_nodes.dim() != 2 or p_nodes.shape[0] != n + 1:
        got = list(p_nodes.shape) if isinstance(p_nodes, torch.Tensor) else type(p_nodes).__name__
        raise ValueError(
            f"{who}: p_nodes must be [n+1, V] = [{n + 1}, V] (the target law after the last "
            f"committed token, then after each node), got {got}"
        )
    V = p_nodes.shape[1]
    q = tree.q_draft
    if q is not None and q.shape[-1] != V:
        raise ValueError(f"{who}: tree.q_draft has {q.shape[-1]} columns, p_nodes {V}")
    if n and tree.tokens.device.type == "cpu":
        lo, hi = int(tree.tokens.min()), int(tree.tokens.max())
        if lo < 0 or hi >= V:
            raise ValueError(
                f"{who}: tree token id {lo if lo < 0 else hi} is outside the vocabulary [0, {V}) "
                "of p_nodes"
            )


def verify_tree_lossless(tree: TreeDraft, p_nodes: torch.Tensor, generator) -> TreeVerdict:
    """The lossless rule for the way ``tree``'s siblings were drawn (its ``sampling``)."""
    check_tree_shapes(tree, p_nodes, "verify_tree_lossless")
    return _verify_tree_lossless(tree, p_nodes, generator)


def _verify_tree_lossless(tree: TreeDraft, p_nodes: torch.Tensor, generator) -> TreeVerdict:
    if tree.q_draft is None and tree.sampling != "deterministic" and tree.size:
        raise ValueError(
            f"a tree drawn {tree.sampling!r} must report q_draft (the law its siblings came from)"
        )
    return tree_walk(tree, p_nodes, generator, LOSSLESS_TREE_RULES[tree.sampling])


def verify_tree_greedy(tree: TreeDraft, p_nodes: torch.Tensor, generator) -> TreeVerdict:
    """Greedy tree matching: follow the child equal to the target's argmax."""
    check_tree_shapes(tree, p_nodes, "verify_tree_greedy")
    return _verify_tree_greedy(tree, p_nodes, generator)


def _verify_tree_greedy(tree: TreeDraft, p_nodes: torch.Tensor, generator) -> TreeVerdict:
    kids = tree.children()
    tokens = tree.tokens.tolist()
    cur, path, decisions = -1, [], []
    nan = float("nan")
    while True:
        top = int(p_nodes[cur + 1].argmax())
        children = kids.get(cur, [])
        match = next((c for c in children if tokens[c] == top), None)
        for c in children:
            decisions.append(NodeDecision(c, float(tokens[c] == top), nan, c == match, None))
            if c == match:
                break
        if match is None:
            kind = "corrected" if children else "bonus"
            return TreeVerdict(tuple(path), top, kind, tuple(decisions), p_nodes[cur + 1])
        cur = match
        path.append(cur)


def chain_verifier(verify_tree: Callable) -> Callable:
    """A tree rule applied to a chain (a tree with one child per node), returning the chain
    verifier's :class:`~specviz.verification.verdict.Verdict`."""

    def verify(tokens, q_draft, p_target, generator):
        tree = TreeDraft.chain(Draft(tokens, q_draft))
        tv = verify_tree(tree, p_target, generator)
        k = tokens.numel()
        acc = torch.full((k,), float("nan"), device=p_target.device)
        u = torch.full((k,), float("nan"), device=p_target.device)
        for d in tv.decisions:
            acc[d.node], u[d.node] = d.accept_prob, d.u
        residual = None if tv.next_kind == "bonus" else tv.final_law
        return Verdict(tv.num_accepted, tv.next_token, tv.next_kind, acc, u, residual)

    return verify


# ------------------------------------------------------------------------------ exact laws


def _sibling_draws(q: torch.Tensor, m: int, sampling: str):
    """Every way the root's m children can be drawn from q: (tokens, probability)."""
    V = q.shape[-1]
    support = [x for x in range(V) if float(q[x]) > 0]
    if sampling == "deterministic":
        top = torch.topk(q, m).indices.tolist()
        yield top, 1.0
        return
    if sampling == "independent":
        for combo in itertools.product(support, repeat=m):
            yield list(combo), float(torch.prod(q[list(combo)].double()))
        return
    for combo in itertools.permutations(support, min(m, len(support))):
        prob, left = 1.0, 1.0
        for x in combo:
            prob *= float(q[x]) / left
            left -= float(q[x])
        yield list(combo), prob


def first_token_law_tree(
    rule: SiblingRule, p: torch.Tensor, q: torch.Tensor, m: int, sampling: str
) -> torch.Tensor:
    """Exact law of the first token a tree step emits when the root has ``m`` children drawn
    from ``q`` as ``sampling`` says and ``rule`` verifies them against the target law ``p``
    (whatever lies deeper: the first token is the accepted child or the final draw). The
    lossless rule for ``sampling`` gives exactly ``p``."""
    p, q = p.double(), q.double()
    law = torch.zeros_like(p)
    for toks, prob in _sibling_draws(q, m, sampling):
        qs = [q] * len(toks)
        state = rule.start(p, qs)
        reach = 1.0
        for i, x in enumerate(toks):
            a, rejected = rule.step(state, i, x, qs)
            law[x] += prob * reach * a
            reach *= 1.0 - a
            state = rejected
        law += prob * reach * state.p
    return law


@dataclass(frozen=True)
class SiblingWalk:
    """A rule walked through one sibling group with every candidate rejected: the laws it
    tests them against, one after another (``laws[0]`` = p, ``laws[i]`` the law after the
    i-th rejection; the last is the law the corrected token would come from)."""

    tokens: tuple[int, ...]
    accept_probs: tuple[float, ...]
    laws: tuple[torch.Tensor, ...]
    draft_laws: tuple[torch.Tensor | None, ...]  # the q each candidate is tested against


def rejectable_candidates(
    rule: SiblingRule, p: torch.Tensor, q: torch.Tensor | None, n: int = 3
) -> list[int]:
    """``n`` candidates for a teaching walk (:func:`sibling_walk`) in which every rejection
    can really happen: one at a time, the most likely token under the law the next sibling
    is drawn from (``q`` for independent drafts, with replacement; the renormalised ``q`` for
    drafts without replacement; ``q``'s ranking without the tokens tried for deterministic
    candidates) among those whose acceptance probability lies strictly between 0 and 1 (a
    real decision), else the most likely one it rejects for sure (acceptance 0: the residual
    has no mass left there). Never one accepted with probability 1: a walk that "rejects" it
    shows an impossible event. Fewer than ``n`` come back when no candidate can be rejected."""
    qs = None if q is None else [q] * n
    state = rule.start(p, qs)
    chosen: list[int] = []
    for i in range(n):
        draw = state.q if state.q is not None else q
        order = torch.argsort(draw if draw is not None else p, descending=True).tolist()
        real, sure = None, None
        for x in order:
            if rule.name != "independent" and x in chosen:
                continue  # without replacement / deterministic: each token once
            if draw is not None and float(draw[x]) <= 0.0:
                break  # the draft cannot propose it (sorted: nothing after it can either)
            a, after = rule.step(state, i, x, qs)
            if 0.0 < a < 1.0:
                real = (x, after)
                break
            if a <= 0.0 and sure is None:
                sure = (x, after)
        pick = real or sure
        if pick is None:
            break
        chosen.append(pick[0])
        state = pick[1]
    return chosen


def sibling_walk(rule: SiblingRule, p: torch.Tensor, q: torch.Tensor | None, tokens) -> SiblingWalk:
    """p -> norm(max(0, p - q_1)) -> ...: what the rule does to the target law as the
    candidates ``tokens`` are rejected one by one (for figures and teaching)."""
    toks = [int(t) for t in tokens]
    qs = None if q is None else [q] * len(toks)
    state = rule.start(p, qs)
    accepts, laws, draft = [], [state.p], []
    for i, x in enumerate(toks):
        draft.append(state.q if state.q is not None else (None if qs is None else qs[i]))
        a, state = rule.step(state, i, x, qs)
        accepts.append(a)
        laws.append(state.p)
    return SiblingWalk(tuple(toks), tuple(accepts), tuple(laws), tuple(draft))
