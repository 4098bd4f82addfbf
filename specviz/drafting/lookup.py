"""Prompt lookup: copy what followed the last n-gram earlier in the text."""

from __future__ import annotations

import torch

from .base import Draft, Drafter

__all__ = ["PromptLookupDrafter"]


class PromptLookupDrafter(Drafter):
    """Prompt lookup decoding: find the last n-gram earlier in the text, copy what followed.

    Proposals are deterministic (no q): the verifier treats them as point masses, which keeps
    sampling lossless. Among earlier matches the most recent one is used, since repeated
    structure is usually local.
    """

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not (1 <= min_ngram <= max_ngram):
            raise ValueError(
                f"need 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram}, max_ngram={max_ngram}"
            )
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.name = f"prompt_lookup(n={min_ngram}..{max_ngram})"

    def propose(self, context: torch.Tensor, k: int, generator: torch.Generator) -> Draft:
        ctx = context.cpu()
        T = ctx.numel()
        for n in range(min(self.max_ngram, T - 1), self.min_ngram - 1, -1):
            windows = ctx.unfold(0, n, 1)[:-1]  # [T-n, n], all earlier n-grams
            hits = (windows == ctx[T - n :]).all(dim=1).nonzero().flatten()
            if hits.numel():
                start = int(hits[-1]) + n
                return Draft(ctx[start : min(start + k, T)].clone(), None)
        return Draft(torch.empty(0, dtype=torch.long), None)

    @property
    def deterministic(self) -> bool:
        return True
