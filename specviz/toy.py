"""Toy language models whose every probability is known exactly.

A :class:`ToyLM` is an order-``order`` Markov model over a small vocabulary: the logits for
the next token are a fixed table indexed by the last ``order`` tokens (the start of the
sequence is padded with a virtual BOS). Because the law of every continuation can be
enumerated, a speculative sampler can be checked against the *exact* answer rather than
against another sampler -- which is how specviz proves (or disproves) losslessness.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch

from .sampling import SamplingParams, logits_to_probs

__all__ = ["ToyLM", "ToyRunner", "toy_pair", "exact_continuation_law"]


class ToyLM:
    """Markov toy model. ``table`` is [(V+1)**order, V] logits (index V = BOS padding)."""

    def __init__(self, table: torch.Tensor, vocab_size: int, order: int = 2, name: str = "toy"):
        expected_rows = (vocab_size + 1) ** order
        if table.shape != (expected_rows, vocab_size):
            raise ValueError(
                f"toy table must be [{expected_rows}, {vocab_size}], got {tuple(table.shape)}"
            )
        self.table = table.float()
        self.vocab_size = vocab_size
        self.order = order
        self.name = name
        self.device = torch.device("cpu")

    @classmethod
    def random(
        cls, vocab_size: int = 5, order: int = 2, *, seed: int = 0, scale: float = 1.5
    ) -> ToyLM:
        g = torch.Generator().manual_seed(seed)
        table = torch.randn((vocab_size + 1) ** order, vocab_size, generator=g) * scale
        return cls(table, vocab_size, order, name=f"toy-v{vocab_size}-o{order}-s{seed}")

    def perturbed(self, noise: float, *, seed: int = 1) -> ToyLM:
        """A 'draft' that agrees with this model up to Gaussian logit noise."""
        g = torch.Generator().manual_seed(seed)
        table = self.table + noise * torch.randn(self.table.shape, generator=g)
        return ToyLM(table, self.vocab_size, self.order, name=f"{self.name}+noise{noise}")

    def _row(self, context: Sequence[int]) -> int:
        V = self.vocab_size
        if self.order == 0:
            return 0
        last = [V] * max(0, self.order - len(context)) + list(context[-self.order :])
        idx = 0
        for t in last:
            idx = idx * (V + 1) + int(t)
        return idx

    def next_logits(self, context: Sequence[int]) -> torch.Tensor:
        """Logits ([V]) of the token that follows ``context``."""
        return self.table[self._row(context)]

    def next_probs(self, context: Sequence[int], params: SamplingParams) -> torch.Tensor:
        return logits_to_probs(self.next_logits(context), params)

    def make_runner(self) -> ToyRunner:
        return ToyRunner(self)


class ToyRunner:
    """Runner for :class:`ToyLM` -- or any model with ``next_logits(prefix)`` and
    ``vocab_size`` (e.g. :class:`specviz.memo.MemoLM`); its 'cache' is the token list."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.device = model.device
        self.tokens: list[int] = []

    @property
    def length(self) -> int:
        return len(self.tokens)

    def reset(self) -> None:
        self.tokens = []

    def extend(self, tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        new = [int(t) for t in tokens.tolist()]
        if any(t < 0 or t >= self.model.vocab_size for t in new):
            raise ValueError(f"token id out of the toy vocabulary [0, {self.model.vocab_size})")
        self.tokens.extend(new)
        n = len(self.tokens)
        ends = range(n - num_logits + 1, n + 1)
        return torch.stack([self.model.next_logits(self.tokens[:end]) for end in ends])

    def crop(self, length: int) -> None:
        if length > len(self.tokens):
            raise ValueError(f"cannot crop {len(self.tokens)} tokens to {length}")
        del self.tokens[length:]


def toy_pair(
    vocab_size: int = 5, order: int = 2, *, noise: float = 1.0, seed: int = 0
) -> tuple[ToyLM, ToyLM]:
    """A (target, draft) pair with context-dependent laws and imperfect agreement."""
    target = ToyLM.random(vocab_size, order, seed=seed)
    return target, target.perturbed(noise, seed=seed + 1000)


def exact_continuation_law(
    model: Any, prompt: Sequence[int], length: int, params: SamplingParams
) -> dict[tuple[int, ...], float]:
    """P(continuation) for every continuation of ``length`` tokens, under ``params``.

    ``model`` is a toy model or any causal LM small enough to enumerate (a transformers model
    is run once per distinct prefix, on the whole prefix).
    """
    next_probs = getattr(model, "next_probs", None)
    if next_probs is None:
        next_probs = _full_forward_probs(model)
    vocab = model.vocab_size if hasattr(model, "vocab_size") else model.config.vocab_size
    law: dict[tuple[int, ...], float] = {}
    memo: dict[tuple[int, ...], torch.Tensor] = {}
    for cont in itertools.product(range(vocab), repeat=length):
        prob = 1.0
        ctx = list(prompt)
        for tok in cont:
            key = tuple(ctx)
            if key not in memo:
                memo[key] = next_probs(ctx, params)
            prob *= float(memo[key][tok])
            if prob == 0.0:
                break
            ctx.append(tok)
        if prob > 0.0:
            law[cont] = prob
    return law


def _full_forward_probs(model: Any):
    @torch.inference_mode()
    def next_probs(ctx: Sequence[int], params: SamplingParams) -> torch.Tensor:
        ids = torch.tensor([list(ctx)], device=next(model.parameters()).device)
        return logits_to_probs(model(ids).logits[0, -1].float().cpu(), params)

    return next_probs
