"""Memoised language models: exact law checks on a real model at toy-model cost.

:class:`MemoLM` wraps a causal LM so that the logits after a prefix are computed once;
:func:`memo_pair` adds a *noisy copy* as the draft. Batched and serial engines run on it
unchanged (it looks like a toy model: ``next_logits`` and ``make_runner``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .toy import ToyRunner

__all__ = ["MemoLM", "memo_pair"]


class MemoLM:
    """A causal LM whose next-token logits are memoised by prefix, optionally plus fixed
    per-token logit noise (a *noisy copy*: see :func:`memo_pair`).

    Law checks draw thousands of short continuations of one prompt; the distinct prefixes
    number in the hundreds, so memoising turns hours of forward passes into seconds while the
    engine under test runs unchanged (it sees an ordinary runner, like a toy model's).

    Example::

        target, draft = memo_pair(model, sigma=1.0)
        sv.consistency_check(target, draft, [ids], n_samples=1000, max_new_tokens=2)
    """

    def __init__(
        self, model: Any, base: MemoLM | None = None, noise: torch.Tensor | None = None
    ) -> None:
        self.model = model
        self.base = base  # a noisy copy shares its base's memo and adds ``noise``
        self.noise = noise
        self.device = torch.device("cpu")
        self.memo: dict[tuple[int, ...], torch.Tensor] = {}
        self.name = "memo" if base is None else "memo+noise"
        self.vocab_size = int(model.config.vocab_size)

    def noisy_copy(self, sigma: float, seed: int = 0) -> MemoLM:
        """This model plus fixed Gaussian per-token logit noise of scale ``sigma``: the real
        vocabulary and conditional laws, agreement with the target set by ``sigma``."""
        if sigma < 0:
            raise ValueError(f"sigma must be >= 0, got {sigma!r}")
        vocab = self.model.config.vocab_size
        noise = torch.randn(vocab, generator=torch.Generator().manual_seed(seed)) * sigma
        return MemoLM(self.model, base=self, noise=noise)

    @torch.inference_mode()
    def next_logits(self, prefix: Sequence[int]) -> torch.Tensor:
        """Logits ([V], fp32) of the token after ``prefix``."""
        key = tuple(int(t) for t in prefix)
        if self.base is not None:
            return self.base.next_logits(key) + self.noise
        hit = self.memo.get(key)
        if hit is None:
            ids = torch.tensor([key], device=self.model.device)
            hit = self.model(input_ids=ids, logits_to_keep=1).logits[0, -1].float().cpu()
            self.memo[key] = hit
        return hit

    def make_runner(self) -> ToyRunner:
        return ToyRunner(self)


def memo_pair(model: Any, sigma: float = 1.0, seed: int = 0) -> tuple[MemoLM, MemoLM]:
    """``(target, draft)``: ``model`` memoised, and a noisy copy of it as the draft.

    Why not an early exit: the target's untrained shallow layers agree with it almost nowhere
    (per-position acceptance near 0 on SmolLM2-135M), which leaves the accept path of the rule
    idle; a noisy copy exercises both the accept and the residual path on real laws."""
    target = MemoLM(model)
    return target, target.noisy_copy(sigma, seed)
