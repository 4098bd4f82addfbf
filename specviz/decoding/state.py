"""The state the decoding step works on: logical rows, the groups of rows that share a
state (one physical cache row), and the drafts they drew.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..core.trace import Step
from ..drafting.base import Draft, Drafter, TreeDraft

__all__ = ["Row", "Group", "DraftGroup"]


# ------------------------------------------------------------------------------ state


@dataclass(eq=False)
class Row:
    """One logical sequence: its generator, what it emitted and the records of its steps."""

    index: int
    generator: torch.Generator
    seed: int | None
    prompt: torch.Tensor
    room: int  # tokens it may still emit
    tokens: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)  # record=True: p(token) under the target
    above: list[float] = field(default_factory=list)  # record=True: mass ranked above it


@dataclass(eq=False)
class Group:
    """Rows in the same state: one physical row of the target (and draft) caches."""

    rows: list[Row]
    context: torch.Tensor  # [T] prompt + committed tokens (CPU)
    pending: torch.Tensor  # tokens the target has not seen yet (CPU)
    drafter: Drafter | None = None


@dataclass(eq=False)
class DraftGroup:
    """Rows of one group that drew the same draft (they verify against one target row)."""

    parent: int  # index of the group it came from
    rows: list[Row]
    tokens: torch.Tensor  # [k] (a tree's nodes)
    q_draft: torch.Tensor | None  # [k, V] or None (point masses)
    tree: TreeDraft | None = None  # set when the drafter proposed a tree
    source: Draft | None = None  # the chain draft itself (its draft-side ids and strings)
