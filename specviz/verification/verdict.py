"""What a chain verifier returns (:class:`Verdict`) and a chain rule's signature (:data:`VerifyFn`).

A module of its own so that every rule module (the lossless rules in :mod:`.base`, the tree
rules in :mod:`.trees`, the bug zoo) imports it from below and none needs another's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["Verdict", "VerifyFn"]


@dataclass(frozen=True)
class Verdict:
    num_accepted: int
    next_token: int
    next_kind: str  # "corrected" (after a rejection) or "bonus" (all drafts accepted)
    accept_prob: torch.Tensor  # [k] probability each draft would be accepted
    u: torch.Tensor  # [k] the uniform draws (NaN where the rule draws none)
    residual: torch.Tensor | None  # [V] the law the corrected token was drawn from


VerifyFn = Callable[[torch.Tensor, "torch.Tensor | None", torch.Tensor, torch.Generator], Verdict]
