"""Prompt lookup: copy what followed the last n-gram earlier in the text (or, as a tree, what
followed several earlier matches)."""

from __future__ import annotations

import torch

from ..core.args import check_int
from .base import Draft, Drafter, TreeDraft

__all__ = ["PromptLookupDrafter"]


class PromptLookupDrafter(Drafter):
    """Prompt lookup decoding: find the last n-gram earlier in the text, copy what followed.

    Proposals are deterministic (no q): the verifier treats them as point masses, which keeps
    sampling lossless. Among earlier matches the most recent one is used, since repeated
    structure is usually local. With ``branches=b > 1`` the continuations of up to ``b``
    earlier matches (most recent first, distinct ones only) become the branches of a
    deterministic token tree, merged where they share a prefix.
    """

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, *, branches: int = 1) -> None:
        max_ngram = check_int("max_ngram", max_ngram, 1)
        min_ngram = check_int("min_ngram", min_ngram, 1)
        if not (1 <= min_ngram <= max_ngram):
            raise ValueError(
                f"need 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram}, max_ngram={max_ngram}"
            )
        branches = check_int("branches", branches, 1)
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.branches = branches
        self.proposes_trees = branches > 1
        self.name = f"prompt_lookup(n={min_ngram}..{max_ngram})" + (
            f"+{branches} branches" if branches > 1 else ""
        )

    def propose(
        self, context: torch.Tensor, k: int, generator: torch.Generator
    ) -> Draft | TreeDraft:
        ctx = context.cpu()
        T = ctx.numel()
        for n in range(min(self.max_ngram, T - 1), self.min_ngram - 1, -1):
            windows = ctx.unfold(0, n, 1)[:-1]  # [T-n, n], all earlier n-grams
            hits = (windows == ctx[T - n :]).all(dim=1).nonzero().flatten()
            if hits.numel():
                if self.branches == 1:
                    start = int(hits[-1]) + n
                    return Draft(ctx[start : min(start + k, T)].clone(), None)
                return self._tree(ctx, hits.flip(0) + n, k)
        return Draft(torch.empty(0, dtype=torch.long), None)

    def _tree(self, ctx: torch.Tensor, starts: torch.Tensor, k: int) -> TreeDraft:
        """The continuations after ``starts`` (most recent first) as a trie of up to
        ``branches`` distinct branches, each at most ``k`` tokens."""
        tokens: list[int] = []
        parents: list[int] = []
        child: dict[tuple[int, int], int] = {}  # (parent node, token) -> node
        seen: set[tuple[int, ...]] = set()
        T = ctx.numel()
        for s in starts.tolist():
            branch = tuple(ctx[s : min(s + k, T)].tolist())
            if not branch or branch in seen:
                continue
            seen.add(branch)
            node = -1
            for t in branch:
                if (node, t) not in child:
                    tokens.append(t)
                    parents.append(node)
                    child[(node, t)] = len(tokens) - 1
                node = child[(node, t)]
            if len(seen) >= self.branches:
                break
        return TreeDraft(torch.tensor(tokens, dtype=torch.long),
                         torch.tensor(parents, dtype=torch.long), None, "deterministic")  # fmt: skip

    @property
    def deterministic(self) -> bool:
        return True
