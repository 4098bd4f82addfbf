"""How a model drafter turns its logits into (token, reported q): the correct way and the
misbehaviours of the bug zoo.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..core.sampling import SamplingParams, check_logits, logits_to_probs, sample

__all__ = ["DRAFT_MODES", "DraftStop", "check_draft_logits", "draft_step", "shifted_ids"]


# How a model drafter turns its logits into (token, reported q). "exact" is correct; the
# others reproduce mistakes real systems shipped (see verify.py's bug zoo).
DRAFT_MODES = (
    "exact",
    "argmax_softmax_q",  # propose argmax, report softmax (transformers #32867)
    "unprocessed_q",  # sample processed, report raw softmax (transformers #47932)
    "ignores_temperature",  # sample at T=1, report q at T
    "bf16_sample",  # sample from bf16 probabilities, report fp32 q (DeepSpec #31)
    "vocab_shift",  # draft ids shifted for the upper half of the vocabulary, q not remapped
)


@dataclass(frozen=True)
class DraftStop:
    """Stop drafting at the first position (after ``min_tokens``) whose draft distribution has
    top probability below ``threshold`` -- decided before that position's token is drawn.

    The one home of the confidence-stop rule: the serial model drafter, the batched model
    drafts and the policy lab's replay all ask it.
    """

    threshold: float
    min_tokens: int = 1

    def halts(self, i: int, top: Any) -> Any:
        """Stop before drawing position ``i`` (0-based) whose top probability is ``top`` (a
        number, or a tensor of them: then a bool tensor)."""
        return i >= self.min_tokens and top < self.threshold

    def stops(
        self, i: int, logits: torch.Tensor, params: SamplingParams, q: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        """[...] bool from draft logits [..., V] (``q``: their processed law, when already
        computed): where drafting stops before position ``i``'s draw. None when the rule
        does not look at position ``i`` (no reduction, no host sync)."""
        if i < self.min_tokens:
            return None
        # greedy "probabilities" are one-hot: judge confidence on the raw softmax
        if params.is_greedy:
            probs = torch.softmax(logits.float(), dim=-1)
        else:
            probs = q if q is not None else logits_to_probs(logits, params)
        return self.halts(i, probs.amax(-1).double())  # float64: as a Python float compares


def check_draft_logits(logits: torch.Tensor, name: str) -> None:
    """Refuse NaN/inf draft logits (one reduction; the elementwise check only on failure)."""
    if not bool(torch.isfinite(logits.sum())):
        check_logits(logits, f"draft {name!r}")


def shifted_ids(vocab: int, device: torch.device | None = None) -> torch.Tensor:
    """The id map of the vocabulary-mismatch demonstration: draft id j means target token
    perm[j], where the upper half of the vocabulary is rotated by one (as when two tokenizers
    differ by one inserted token)."""
    perm = torch.arange(vocab, device=device)
    half = vocab // 2
    perm[half:] = torch.roll(perm[half:], 1)
    return perm


def draft_step(
    logits: torch.Tensor, params: SamplingParams, mode: str, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """One drafted token and the q the drafter reports for it. logits: [V]."""
    q = logits_to_probs(logits, params)  # what a correct drafter samples from
    if params.is_greedy or mode == "exact":
        tok = q.argmax() if params.is_greedy else sample(q, generator)
        return tok, q
    if mode == "argmax_softmax_q":
        return logits.argmax(), q
    if mode == "unprocessed_q":
        return sample(q, generator), torch.softmax(logits.float(), dim=-1)
    if mode == "ignores_temperature":
        t1 = SamplingParams(True, 1.0, params.top_k, params.top_p)
        return sample(logits_to_probs(logits, t1), generator), q
    if mode == "vocab_shift":
        # The draft's own distribution lives in its id space: q_d[j] = q[perm[j]]. The token is
        # translated correctly (perm[j]) but q_d is reported as if indexed by target ids.
        perm = shifted_ids(q.shape[-1], q.device)
        q_d = q[perm]
        j = sample(q_d, generator)
        return perm[j], q_d
    if mode == "bf16_sample":
        q16 = logits_to_probs(logits.to(torch.bfloat16), params).to(torch.bfloat16).float()
        return sample(q16 / q16.sum(), generator), q
    raise ValueError(f"unknown draft mode {mode!r}; choose from {DRAFT_MODES}")
