"""What a drafter hands to a verifier: a chain (:class:`Draft`) or a token tree (:class:`TreeDraft`).

They live at the bottom of the package (like vLLM's ``spec_decode/metadata.py``) so that the
drafters, which make them, and the verifiers, which read them, both import them from below and
neither imports the other. :mod:`specviz.drafting.base` re-exports them (their public home).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["SAMPLINGS", "Draft", "TreeDraft"]

#: How the siblings of a tree were drawn (the verifier picks its rule from it).
SAMPLINGS = ("independent", "without_replacement", "deterministic")


@dataclass(frozen=True)
class Draft:
    tokens: torch.Tensor  # [k] int64, target ids
    q_draft: torch.Tensor | None = None  # [k, V] float32, or None for point-mass proposals
    # A drafter with its own tokenizer (cross-vocabulary drafting) may say what each target
    # token was on its side: the draft's id and string (recorded in the trace).
    source_ids: tuple[int, ...] | None = None
    source_pieces: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.tokens, torch.Tensor):
            raise TypeError(f"Draft.tokens must be a tensor, got {type(self.tokens).__name__}")
        if self.tokens.dim() != 1:
            raise ValueError(f"Draft.tokens must be 1-D, got shape {tuple(self.tokens.shape)}")
        if self.q_draft is not None and not isinstance(self.q_draft, torch.Tensor):
            raise TypeError(
                f"Draft.q_draft must be a tensor or None, got {type(self.q_draft).__name__}"
            )
        if self.q_draft is not None and (
            self.q_draft.dim() != 2 or self.q_draft.shape[0] != self.tokens.shape[0]
        ):
            raise ValueError(
                f"Draft.q_draft must be [k, V] with k={self.tokens.shape[0]}, "
                f"got {tuple(self.q_draft.shape)}"
            )
        for name in ("source_ids", "source_pieces"):
            v = getattr(self, name)
            if v is not None and len(v) != self.tokens.shape[0]:
                raise ValueError(f"Draft.{name} must have one entry per token, got {len(v)}")


@dataclass(frozen=True)
class TreeDraft:
    """Several candidates per position: a token tree (a chain is a tree).

    ``tokens[i]`` hangs under ``parents[i]`` (-1: a child of the last committed token; else
    an earlier node, ``parents[i] < i``). ``q_draft[i]`` ([n, V], or None for deterministic
    candidates) is the law node ``i``'s sibling group was drawn from at its parent; how the
    siblings were drawn is ``sampling``:

    * ``"independent"`` -- each child drawn independently from its ``q_draft`` row (SpecInfer);
    * ``"without_replacement"`` -- children drawn one after another without replacement from
      the same law (Gumbel-top-k; Jeon et al. 2024, Sequoia): rows of siblings are equal;
    * ``"deterministic"`` -- candidates chosen without any draw (EAGLE-2's top-k, n-gram
      branches); ``q_draft`` may be None.

    Siblings are verified in index order.
    """

    tokens: torch.Tensor  # [n] int64
    parents: torch.Tensor  # [n] int64, -1 = child of the last committed token
    q_draft: torch.Tensor | None = None  # [n, V] or None
    sampling: str = "independent"

    def __post_init__(self) -> None:
        t, par = self.tokens, self.parents
        if not isinstance(t, torch.Tensor) or not isinstance(par, torch.Tensor):
            raise TypeError("TreeDraft.tokens and .parents must be tensors")
        if t.dim() != 1 or par.shape != t.shape:
            raise ValueError(
                f"TreeDraft.tokens [n] and .parents [n] must match, got {tuple(t.shape)} and "
                f"{tuple(par.shape)}"
            )
        for name, x in (("tokens", t), ("parents", par)):
            if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
                raise ValueError(f"TreeDraft.{name} must hold integers, got dtype {x.dtype}")
        if self.q_draft is not None and not isinstance(self.q_draft, torch.Tensor):
            raise TypeError(
                f"TreeDraft.q_draft must be a tensor or None, got {type(self.q_draft).__name__}"
            )
        if self.sampling not in SAMPLINGS:
            raise ValueError(
                f"TreeDraft.sampling must be one of {SAMPLINGS}, got {self.sampling!r}"
            )
        n = t.numel()
        if n:
            idx = torch.arange(n)
            if bool(((par < -1) | (par >= idx)).any()):
                raise ValueError("TreeDraft.parents[i] must be -1 or an earlier node (< i)")
        if self.q_draft is not None and (self.q_draft.dim() != 2 or self.q_draft.shape[0] != n):
            raise ValueError(
                f"TreeDraft.q_draft must be [n, V] with n={n}, got {tuple(self.q_draft.shape)}"
            )

    @classmethod
    def chain(cls, draft: Draft) -> TreeDraft:
        """A chain as a tree: node i under node i - 1."""
        n = draft.tokens.numel()
        sampling = "deterministic" if draft.q_draft is None else "independent"
        return cls(draft.tokens, torch.arange(n) - 1, draft.q_draft, sampling)

    @property
    def size(self) -> int:
        return int(self.tokens.numel())

    def children(self) -> dict[int, list[int]]:
        """parent (-1 = root) -> its children, in verification order."""
        out: dict[int, list[int]] = {}
        for i, p in enumerate(self.parents.tolist()):
            out.setdefault(int(p), []).append(i)
        return out

    def depths(self) -> list[int]:
        """Depth of every node (1 for the root's children)."""
        d: list[int] = []
        for p in self.parents.tolist():
            d.append(1 if p < 0 else d[p] + 1)
        return d

    def path_to(self, node: int) -> list[int]:
        """Nodes from the root's child down to ``node``."""
        path, par = [], self.parents.tolist()
        while node >= 0:
            path.append(node)
            node = par[node]
        return path[::-1]
