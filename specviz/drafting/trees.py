"""Token trees from a draft model: static (k_d children per node at depth d) or dynamic
(EAGLE-2-style: expand the most probable paths first, up to a budget of nodes).

Siblings are drawn as ``sampling`` says -- independently from the parent's law
(``"independent"``), one after another without replacement (``"without_replacement"``), or
as the top-k candidates (``"deterministic"``) -- and each node reports the law its sibling group
came from as its ``q_draft`` row, so the verifier (:mod:`specviz.verification.trees`) can keep
the target's law exactly. With greedy decoding the candidates are the draft's top-k. A dynamic
tree of drawn siblings decides *which nodes get children* from the paths' cumulative draft
probability, never which drawn siblings to keep, so every sibling group still follows its
sampling law; a dynamic tree of top-k candidates is grown wider than its budget and reranked
(EAGLE-2), since which candidates are verified does not enter the top-k rule's exactness.

The draft model runs on a masked batch cache of one row with tree attention: one draft call per
tree level (static) or expansion round (dynamic); after proposing, the tree's columns become
holes again, so the draft cache only ever holds committed text.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

import torch

from ..core.args import as_int, check_flag, check_int
from ..core.batch_runners import batch_runner
from ..core.runners import vocab_size_of
from ..core.sampling import SamplingParams, logits_to_probs, sample
from .base import SAMPLINGS, Drafter, TreeDraft
from .modes import check_draft_logits

__all__ = ["TreeDrafter", "draw_siblings", "grow_dynamic", "grow_static"]


def draw_siblings(q: torch.Tensor, k: int, sampling: str, generator: torch.Generator) -> list[int]:
    """``k`` children from the law ``q`` [V] as ``sampling`` says (without replacement and
    top-k give at most as many as ``q`` has support)."""
    if sampling == "deterministic":
        k = min(k, int((q > 0).sum()))
        return torch.topk(q, k).indices.tolist()
    if sampling == "independent":
        return [int(sample(q, generator)) for _ in range(k)]
    out, law = [], q.clone()
    for _ in range(min(k, int((q > 0).sum()))):
        x = int(sample(law / law.sum(), generator))
        out.append(x)
        law[x] = 0.0
    return out


# expand(tokens, parents, nodes) -> the children laws of ``nodes`` of the tree so far
Expand = Any


def grow_static(root_law: torch.Tensor, expand: Expand, branching: Sequence[int], sampling: str,
                generator: torch.Generator) -> tuple[list[int], list[int], list[torch.Tensor]]:  # fmt: skip
    """A static tree: ``branching[d]`` children under every node of depth d (the root's
    children at d = 0); one ``expand`` call per level. Returns (tokens, parents, the law each
    node's sibling group was drawn from)."""
    tokens: list[int] = []
    parents: list[int] = []
    laws: list[torch.Tensor] = []
    level = [(-1, root_law)]
    for d, k in enumerate(branching):
        new = []
        for node, law in level:
            for x in draw_siblings(law, k, sampling, generator):
                tokens.append(x)
                parents.append(node)
                laws.append(law)
                new.append(len(tokens) - 1)
        if d + 1 >= len(branching) or not new:
            break
        level = list(zip(new, expand(tokens, parents, new), strict=True))
    return tokens, parents, laws


def grow_dynamic(root_law: torch.Tensor, expand: Expand, k: int, budget: int, width: int,
                 depth_cap: int, sampling: str, generator: torch.Generator,
                 rerank: bool | None = None):  # fmt: skip
    """An EAGLE-2-style tree of at most ``budget`` nodes, grown by cumulative draft probability.

    With ``rerank`` (the default for ``"deterministic"`` candidates, as in EAGLE-2, Li et al.
    2024, section 4): *expand* ``depth_cap`` rounds -- round d gives ``k`` children to each of the
    ``width`` nodes of depth d with the highest path probability -- then *rerank* every candidate
    by its path probability and keep the best ``budget``. A child's path probability never
    exceeds its parent's (ties go to the older node), so the kept nodes form a tree. Which
    candidates are kept depends only on the draft's laws, so the top-k rule stays exact.

    Without ``rerank`` (always for drawn siblings, whose law a value-dependent pruning would
    change): the ``width`` frontier nodes with the highest path probability get ``k`` children
    each, round after round, until ``budget`` nodes; every sibling group is kept whole.
    One ``expand`` call per round either way."""
    if rerank is None:
        rerank = sampling == "deterministic"
    if rerank and sampling != "deterministic":
        raise ValueError("rerank prunes sibling groups by value: only for deterministic candidates")
    if rerank:
        return _grow_reranked(root_law, expand, k, budget, width, depth_cap)
    tokens: list[int] = []
    parents: list[int] = []
    laws: list[torch.Tensor] = []
    depth: list[int] = []
    frontier: list[tuple[float, int]] = [(-1.0, -1)]  # (-score, node); the root scores 1
    node_law = {-1: root_law}
    while frontier and len(tokens) < budget:
        picked = [heapq.heappop(frontier) for _ in range(min(width, len(frontier)))]
        for neg, node in picked:
            room = budget - len(tokens)
            if room <= 0:
                break
            law = node_law[node]
            d = 1 if node < 0 else depth[node] + 1
            for x in draw_siblings(law, min(k, room), sampling, generator):
                tokens.append(x)
                parents.append(node)
                laws.append(law)
                depth.append(d)
                if d < depth_cap:
                    heapq.heappush(frontier, (neg * float(law[x]), len(tokens) - 1))
        todo = [node for _, node in frontier if node not in node_law]
        if todo and len(tokens) < budget:
            node_law.update(zip(todo, expand(tokens, parents, todo), strict=True))
    return tokens, parents, laws


def _grow_reranked(root_law: torch.Tensor, expand: Expand, k: int, budget: int, width: int,
                   depth_cap: int):  # fmt: skip
    """EAGLE-2's expand-then-rerank for top-k candidates (see :func:`grow_dynamic`)."""
    tokens: list[int] = []
    parents: list[int] = []
    laws: list[torch.Tensor] = []
    score: list[float] = []  # path probability under the draft
    layer = [(-1, root_law, 1.0)]  # (node, its children's law, its path probability)
    for d in range(depth_cap):
        new = []
        for node, law, s in layer:
            for x in draw_siblings(law, k, "deterministic", None):
                tokens.append(x)
                parents.append(node)
                laws.append(law)
                score.append(s * float(law[x]))
                new.append(len(tokens) - 1)
        if d + 1 >= depth_cap or not new:
            break
        # The best ``width`` of this depth grow on; nodes that cannot make the final cut
        # (fewer than ``budget`` nodes score higher already) are not worth a draft call.
        best = sorted(new, key=lambda i: (-score[i], i))[:width]
        cut = sorted(score, reverse=True)[budget - 1] if len(score) >= budget else 0.0
        best = [i for i in best if score[i] > cut]
        if not best:
            break
        grown = expand(tokens, parents, best)
        layer = [(i, law, score[i]) for i, law in zip(best, grown, strict=True)]
    keep = sorted(sorted(range(len(tokens)), key=lambda i: (-score[i], i))[:budget])
    index = {old: new for new, old in enumerate(keep)}
    assert all(parents[i] < 0 or parents[i] in index for i in keep), "reranked nodes lost a parent"
    return (
        [tokens[i] for i in keep],
        [-1 if parents[i] < 0 else index[parents[i]] for i in keep],
        [laws[i] for i in keep],
    )


def _check_settings(branching, sampling, dynamic, budget, width, max_depth):
    """A tree drafter's settings, each refused with a message naming it."""
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
    if isinstance(branching, (str, bytes)) or not isinstance(branching, Sequence):
        raise TypeError(
            f"branching must be a sequence of children per depth, e.g. (4,) or (2, 2, 1), got "
            f"{type(branching).__name__} {branching!r}"
        )
    ints = tuple(as_int(b) for b in branching)
    if not ints or any(b is None or b < 1 for b in ints):
        raise ValueError(f"branching must be positive integers, got {tuple(branching)!r}")
    check_flag("dynamic", dynamic)
    if budget is not None:
        if not dynamic:
            raise ValueError(
                "budget is the node budget of a dynamic tree: pass dynamic=True with it (a "
                "static tree's size is set by branching)"
            )
        budget = check_int("budget", budget, 1)
    elif dynamic:
        raise ValueError("dynamic=True needs budget=n (the number of tree nodes)")
    width = check_int("width", width, 1)
    max_depth = check_int("max_depth", max_depth, 1)
    return ints, budget, width, max_depth


class TreeDrafter(Drafter):
    """Token trees from a draft model (a causal LM or a toy model).

    Args:
        draft: the draft model (its tokenizer must be the target's).
        branching: static trees: children per node at depths 1, 2, ... (``(4, 2, 1)``: 4
            candidates for the next token, 2 under each, 1 under those: 4 + 8 + 8 = 20 nodes).
        sampling: how siblings are drawn (see :data:`~specviz.drafting.base.SAMPLINGS`).
        dynamic: grow an EAGLE-2-style tree instead (:func:`grow_dynamic`): the ``width``
            nodes with the highest cumulative draft probability get ``branching[0]`` children
            each per draft call; deterministic candidates are then reranked to the best
            ``budget`` nodes, drawn siblings stop at ``budget``.
        budget: node budget of a dynamic tree.
        max_depth: depth cap of a dynamic tree (default: ``len(branching)`` for static trees).
    """

    proposes_trees = True

    def __init__(
        self,
        draft: Any,
        branching: Sequence[int] = (2, 2, 1),
        sampling: str = "independent",
        *,
        dynamic: bool = False,
        budget: int | None = None,
        width: int = 4,
        max_depth: int = 6,
        name: str | None = None,
        validate_only: bool = False,
    ) -> None:
        branching, budget, width, max_depth = _check_settings(
            branching, sampling, dynamic, budget, width, max_depth
        )
        if not validate_only and not (
            callable(getattr(draft, "parameters", None)) or hasattr(draft, "make_runner")
        ):
            raise TypeError(
                f"TreeDrafter grows trees from a draft *model* (a causal LM or a toy model), got "
                f"{type(draft).__name__}; for n-gram branches use "
                "PromptLookupDrafter(branches=n)"
            )
        self.branching = branching
        self.budget, self.width, self.max_depth = budget, width, max_depth
        if validate_only:  # another drafter (the head) checks its tree settings here
            return
        self.model = draft
        self.branching = branching
        self.sampling = sampling
        self.dynamic = dynamic
        self.budget = budget
        self.width = width
        self.max_depth = max_depth if dynamic else len(branching)
        self.vocab_size = vocab_size_of(draft)
        shape = (
            f"dynamic(n={budget},k={branching[0]})" if dynamic else "x".join(map(str, branching))
        )
        self.name = name or f"tree[{shape},{sampling}]"
        self.params = SamplingParams()
        self._reset()

    def _reset(self) -> None:
        self.runner = batch_runner(self.model, 1)
        self._fed: list[int] = []

    # -- the contract ----------------------------------------------------------------------
    def start(self, prompt: torch.Tensor, params: Any) -> None:
        self.params = params
        self._reset()

    @property
    def deterministic(self) -> bool:
        return self.params.is_greedy or self.sampling == "deterministic"

    def fork(self) -> TreeDrafter:
        twin = TreeDrafter.__new__(TreeDrafter)
        twin.__dict__.update(self.__dict__)
        twin._reset()
        return twin

    @torch.inference_mode()
    def propose(self, context: torch.Tensor, k: int, generator: torch.Generator) -> TreeDraft:
        depth_cap = min(k, self.max_depth)
        empty = torch.empty(0, dtype=torch.long)
        if depth_cap <= 0:
            return TreeDraft(empty, empty, None, self.sampling)
        root_logits = self._sync(context)  # [V]
        if self.dynamic:
            return self._dynamic(root_logits, depth_cap, generator)
        return self._static(root_logits, depth_cap, generator)

    # -- drafting ------------------------------------------------------------------------------
    def _law(self, logits: torch.Tensor) -> torch.Tensor:
        """The law siblings are drawn from: the processed draft law; greedy decoding ranks
        candidates by the raw softmax."""
        check_draft_logits(logits, self.name)
        if self.params.is_greedy:
            return torch.softmax(logits.float(), dim=-1)
        return logits_to_probs(logits, self.params)

    def _sampling(self) -> str:
        return "deterministic" if self.params.is_greedy else self.sampling

    def _sync(self, context: torch.Tensor) -> torch.Tensor:
        """Bring the draft cache to ``context`` (committed text only); logits after it."""
        ctx = context.tolist()
        if self._fed != ctx[: len(self._fed)] or len(self._fed) >= len(ctx):
            self._reset()
        new = torch.tensor(ctx[len(self._fed) :], dtype=torch.long).view(1, -1)
        logits = self.runner.extend(new, torch.ones_like(new, dtype=torch.bool), 1)
        self._fed = ctx
        return logits[0, -1]

    def _node_logits(self, tokens: list[int], parents: list[int]) -> torch.Tensor:
        """Draft logits after every node of a partial tree ([n, V]); the draft cache is left
        holding the committed text only."""
        start = self.runner.mask.shape[1]
        t = torch.tensor([tokens], dtype=torch.long)
        out = self.runner.extend_tree(
            t, torch.ones_like(t, dtype=torch.bool), torch.tensor([parents])
        )
        self.runner.keep_columns(start, [[]])
        return out[0]

    def _expand(
        self, tokens: list[int], parents: list[int], nodes: list[int]
    ) -> list[torch.Tensor]:
        logits = self._node_logits(tokens, parents)  # one draft call for the whole tree so far
        return [self._law(logits[i]) for i in nodes]

    def _static(self, root_logits: torch.Tensor, depth_cap: int, gen) -> TreeDraft:
        tokens, parents, laws = grow_static(
            self._law(root_logits), self._expand, self.branching[:depth_cap], self._sampling(), gen
        )
        return self._tree(tokens, parents, laws, self._sampling())

    def _dynamic(self, root_logits: torch.Tensor, depth_cap: int, gen) -> TreeDraft:
        tokens, parents, laws = grow_dynamic(
            self._law(root_logits), self._expand, self.branching[0], self.budget, self.width,
            depth_cap, self._sampling(), gen,
        )  # fmt: skip
        return self._tree(tokens, parents, laws, self._sampling())

    def _tree(self, tokens, parents, laws, sampling) -> TreeDraft:
        t = torch.tensor(tokens, dtype=torch.long)
        par = torch.tensor(parents, dtype=torch.long)
        q = torch.stack(laws).cpu() if laws and not self.params.is_greedy else None
        return TreeDraft(t, par, q, sampling)
