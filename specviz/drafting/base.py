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
from typing import Any

import torch

from ..core.draft import SAMPLINGS, Draft, TreeDraft

__all__ = ["SAMPLINGS", "Draft", "Drafter", "TreeDraft"]


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
