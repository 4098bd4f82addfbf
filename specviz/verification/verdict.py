"""What a chain verifier returns (:class:`Verdict`), a chain rule's signature (:data:`VerifyFn`)
and a named rule (:class:`VerifierSpec`).

A module of its own so that every rule module (the lossless rules in :mod:`.lossless`, the tree
rules in :mod:`.trees`, the bug zoo) imports them from below and none needs another's; the
registry that names them all is :mod:`.base`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["Verdict", "VerifierSpec", "VerifyFn"]


@dataclass(frozen=True)
class Verdict:
    num_accepted: int
    next_token: int
    next_kind: str  # "corrected" (after a rejection) or "bonus" (all drafts accepted)
    accept_prob: torch.Tensor  # [k] probability each draft would be accepted
    u: torch.Tensor  # [k] the uniform draws (NaN where the rule draws none)
    residual: torch.Tensor | None  # [V] the law the corrected token was drawn from


VerifyFn = Callable[[torch.Tensor, "torch.Tensor | None", torch.Tensor, torch.Generator], Verdict]


@dataclass(frozen=True)
class VerifierSpec:
    name: str
    verify: VerifyFn
    lossless: bool
    description: str
    draft_mode: str = "exact"  # how a model drafter must misbehave to reproduce the bug
    # The same rule for every row of a step at once (the engines use it when set).
    verify_groups: Callable | None = None
    # Token trees: the rule for a TreeDraft (None: this rule verifies chains only), and the
    # way a tree drafter must draw siblings to reproduce the bug (None: any).
    verify_tree: Callable | None = None
    tree_sampling: str | None = None
    # A rule over every chain row of a batch at once (tokens, q, p, generators lists ->
    # verdicts), for the bugs that live between rows; None: each row on its own (``verify``).
    verify_rows: Callable | None = None
