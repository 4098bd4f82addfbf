"""Drafters: anything that can propose the next few tokens.

A drafter subclasses :class:`Drafter` (as transformers' candidate generators subclass a
two-method base) and implements one method::

    propose(context, k, generator) -> Draft(tokens, q_draft or None)

The other hooks have no-op defaults, so the decoding core calls them unconditionally (no
``hasattr`` probing in the loop):

* ``start(prompt, params)`` once per generation;
* ``feedback(num_accepted)`` after each verification;
* ``observe_target(tokens, hidden)`` after each verification, with the target's final hidden
  states ([m, H]) of the tokens it kept -- only for drafters that set
  ``wants_target_hidden = True`` (feature-level, EAGLE-style drafting);
* ``end(context)`` when the generation finished (the prompt plus every new token);
* ``fork()`` a copy for a row of a batch whose text will diverge from this one's;
* ``proposes_trees``: True for a drafter that may return a :class:`TreeDraft` (several
  candidates per position) instead of a chain;
* ``deterministic`` (property): True when the proposal is a function of the context alone (no
  random draw), so one proposal serves every row of a batch that shares the context.

``q_draft`` is the distribution each proposed token was *actually sampled from*, one row per
token. A drafter that proposes deterministically (n-gram lookup, argmax) returns ``None`` and
the verifier treats each token as a point mass. ``vocab_size`` (when known) is checked
against the target's before any model runs.

Any object with a ``propose`` method still works: :func:`specviz.drafting.as_drafter` wraps it
in an adapter that supplies the missing hooks once, at the start.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["SAMPLINGS", "Draft", "Drafter", "TreeDraft"]

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


class Drafter:
    """The drafter contract: override :meth:`propose`; the hooks are no-ops by default."""

    name: str = "drafter"
    wants_target_hidden: bool = False
    proposes_trees: bool = False  # may return a TreeDraft (verified on the masked cache)
    vocab_size: int | None = None
    # q_draft rows sum to 1 (checked every step); only the bug zoo's deliberately broken
    # cross-vocabulary shortcut reports an unnormalised q
    normalised_q: bool = True

    def start(self, prompt: torch.Tensor, params: Any) -> None:
        """A new generation starts (``params``: its :class:`~specviz.SamplingParams`)."""

    def propose(
        self, context: torch.Tensor, k: int, generator: torch.Generator
    ) -> Draft | TreeDraft:
        """Up to ``k`` tokens that may follow ``context`` ([T] ids on the CPU): a chain
        (:class:`Draft`) or a tree of depth at most ``k`` (:class:`TreeDraft`)."""
        raise NotImplementedError(f"{type(self).__name__} must implement propose()")

    def feedback(self, num_accepted: int) -> None:
        """How many of the last proposal's tokens the verifier kept."""

    def observe_target(self, tokens: torch.Tensor, hidden: torch.Tensor) -> None:
        """The target's final hidden states of the tokens it kept (``wants_target_hidden``)."""

    def end(self, context: torch.Tensor) -> None:
        """The generation finished; ``context`` is the prompt plus every new token."""

    @property
    def deterministic(self) -> bool:
        """True when :meth:`propose` draws nothing from its generator."""
        return False

    def fork(self) -> Drafter:
        """A copy that can follow a different continuation from here on (a batch row that
        diverged). The default shallow copy suits drafters without per-text state."""
        return copy.copy(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class ForeignDrafter(Drafter):
    """Adapter for an object that only duck-types the contract (``propose`` at least)."""

    def __init__(self, inner: Any) -> None:
        if not callable(getattr(inner, "propose", None)):
            raise TypeError(f"a drafter needs a propose() method; {type(inner).__name__} has none")
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)
        self.wants_target_hidden = bool(getattr(inner, "wants_target_hidden", False))
        self.proposes_trees = bool(getattr(inner, "proposes_trees", False))
        vocab = getattr(inner, "vocab_size", None)
        self.vocab_size = vocab if isinstance(vocab, int) else None
        self.normalised_q = bool(getattr(inner, "normalised_q", True))
        noop = lambda *a: None  # noqa: E731
        self._start = getattr(inner, "start", noop)
        self._feedback = getattr(inner, "feedback", noop)
        self._observe = getattr(inner, "observe_target", noop)
        self._end = getattr(inner, "end", noop)

    def start(self, prompt: torch.Tensor, params: Any) -> None:
        self._start(prompt, params)

    def propose(self, context: torch.Tensor, k: int, generator: torch.Generator) -> Draft:
        return self.inner.propose(context, k, generator)

    def feedback(self, num_accepted: int) -> None:
        self._feedback(num_accepted)

    def observe_target(self, tokens: torch.Tensor, hidden: torch.Tensor) -> None:
        self._observe(tokens, hidden)

    def end(self, context: torch.Tensor) -> None:
        self._end(context)

    def fork(self) -> Drafter:
        fork = getattr(self.inner, "fork", None)
        return ForeignDrafter(fork() if callable(fork) else copy.copy(self.inner))
