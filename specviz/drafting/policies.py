"""How many tokens to draft: gamma policies, live and replayed.

A policy is asked before every target call how many drafts it wants (0 = a plain decoding
step) and told afterwards how the call went. Pass one as
``speculative_generate(..., gamma=policy)``; an ``int`` keeps the fixed-gamma behaviour.

Policies only decide *how many* tokens are drafted, never how they are verified, so every
live policy is lossless: the accept/reject rule is applied unchanged to whatever was drafted.
(:class:`ConfidenceStop` stops the draft model early on its own ``q_draft``, which depends
only on the context -- the same argument.)

* :class:`ConstantGamma` -- the classic fixed gamma.
* :class:`HeuristicGamma` -- transformers' ``num_assistant_tokens_schedule="heuristic"``:
  +2 after a fully accepted draft, -1 otherwise.
* :class:`ConfidenceStop` -- stop drafting when the draft's top probability falls below a
  threshold (DISCO / transformers' ``assistant_confidence_threshold`` idea).
* :class:`AcceptanceEMA` -- tracks acceptance and the draft cost ratio, drafts the gamma that
  maximises the predicted speedup, and falls back to plain decoding when that speedup drops
  below 1 (or the batch is too large), probing now and then to notice recovery.
* :class:`BatchFallback` -- a fixed gamma while few rows share a model call, plain decoding
  above ``max_batch`` rows (the batched engine and load generator set ``batch_size``).

The *policy lab* (:func:`replay`, :func:`compare_policies`) replays a recorded run offline:
given, for every generated position, whether a draft there would have been accepted (and the
draft's confidence), it runs any policy against a cost model in microseconds, so policies
can be compared on the very same text before running them live.

>>> pol = HeuristicGamma(initial=3)
>>> pol.start(); pol.next_gamma()
3
>>> pol.update(drafted=3, accepted=3, draft_time=0.0, verify_time=0.0); pol.next_gamma()
5
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.args import check_int, check_real, is_int
from ..perf.theory import VerifyCost, optimal_gamma, speedup_positional
from .model import ConfidenceStopDrafter
from .modes import DraftStop

__all__ = [
    "DraftStop",
    "GammaPolicy",
    "ConstantGamma",
    "HeuristicGamma",
    "ConfidenceStopDrafter",
    "ConfidenceStop",
    "AcceptanceEMA",
    "BatchFallback",
    "as_policy",
]


class GammaPolicy:
    """The gamma-policy contract. Override :meth:`next_gamma`; the hooks have no-op defaults,
    so the decoding core calls them unconditionally:

    * ``start()`` once per generation;
    * ``observe_batch(rows)`` before every target call: the rows that share it (1 serially);
    * ``next_gamma()`` drafts wanted for the next call (0 = a plain decoding step);
    * ``update(drafted, accepted, draft_time, verify_time)`` what the call did;
    * ``draft_stop()`` a :class:`DraftStop` rule for model drafts, or None.

    A duck-typed object with ``next_gamma`` and ``update`` still works: :func:`as_policy`
    wraps it once.
    """

    name = "policy"
    max_gamma = 0
    batch_size = 1

    def start(self) -> None:
        """Reset per-generation state (called once at the start of every generation)."""

    def observe_batch(self, rows: int) -> None:
        """Rows in the next model call (the batched engine and the load generator)."""
        self.batch_size = rows

    def next_gamma(self) -> int:
        """Drafts wanted for the next target call (0 = plain decoding step)."""
        raise NotImplementedError(f"{type(self).__name__} must implement next_gamma()")

    def update(self, drafted: int, accepted: int, draft_time: float, verify_time: float) -> None:
        """What the last call did: drafts proposed and accepted, seconds spent."""

    def draft_stop(self) -> DraftStop | None:
        """A rule that stops a model draft early on its own q_draft (None: draft them all)."""
        return None

    def draft_length(self, gamma: int, top_probs: Sequence[float]) -> int:
        """Replay only: how many of ``gamma`` drafts the drafter would actually propose given
        the draft's top probabilities at the next positions (all of them, by default)."""
        return gamma

    def __repr__(self) -> str:
        return self.name


def _count(name: str, value: Any, minimum: int) -> int:
    return check_int(name, value, minimum)


class _ForeignPolicy(GammaPolicy):
    """Adapter for an object that duck-types ``next_gamma``/``update`` (hooks looked up once)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", repr(inner))
        self.max_gamma = getattr(inner, "max_gamma", None)
        noop = lambda *a: None  # noqa: E731
        self._start = getattr(inner, "start", noop)
        self._has_batch = hasattr(inner, "batch_size")
        self._stop = getattr(inner, "draft_stop", lambda: None)
        self._length = getattr(inner, "draft_length", None)

    def start(self) -> None:
        self._start()

    def observe_batch(self, rows: int) -> None:
        if self._has_batch:
            self.inner.batch_size = rows

    def next_gamma(self) -> int:
        return self.inner.next_gamma()

    def update(self, drafted: int, accepted: int, draft_time: float, verify_time: float) -> None:
        self.inner.update(drafted, accepted, draft_time, verify_time)

    def draft_stop(self) -> DraftStop | None:
        return self._stop()

    def draft_length(self, gamma: int, top_probs: Sequence[float]) -> int:
        return gamma if self._length is None else self._length(gamma, top_probs)


class ConstantGamma(GammaPolicy):
    """Always ``gamma`` drafts (what ``gamma=int`` does)."""

    def __init__(self, gamma: int) -> None:
        self.gamma = gamma = _count("gamma", gamma, 0)
        self.max_gamma = gamma
        self.name = f"constant({gamma})"

    def next_gamma(self) -> int:
        return self.gamma


class HeuristicGamma(GammaPolicy):
    """transformers' heuristic schedule: +``up`` after a fully accepted draft, -``down``
    otherwise, within [min_gamma, max_gamma]. Starts at ``initial`` every generation."""

    def __init__(
        self,
        initial: int = 5,
        *,
        up: int = 2,
        down: int = 1,
        min_gamma: int = 1,
        max_gamma: int = 16,
    ) -> None:
        self.initial = _count("initial", initial, 1)
        self.up, self.down = _count("up", up, 0), _count("down", down, 0)
        self.min_gamma = _count("min_gamma", min_gamma, 1)
        self.max_gamma = _count("max_gamma", max_gamma, self.min_gamma)
        self.name = f"heuristic(+{up}/-{down}, start {initial})"
        self.start()

    def start(self) -> None:
        self.gamma = min(max(self.initial, self.min_gamma), self.max_gamma)

    def next_gamma(self) -> int:
        return self.gamma

    def update(self, drafted: int, accepted: int, draft_time: float, verify_time: float) -> None:
        if drafted == 0:
            return
        step = self.up if accepted == drafted else -self.down
        self.gamma = min(max(self.gamma + step, self.min_gamma), self.max_gamma)


class ConfidenceStop(GammaPolicy):
    """Draft up to ``gamma`` tokens, stopping where the draft's top probability < threshold.

    Live, a model draft stops by its :class:`~specviz.drafting.modes.DraftStop` (serially a
    :class:`~specviz.drafting.model.ConfidenceStopDrafter`); in replay, :meth:`draft_length`
    applies the same rule to recorded top probabilities.
    """

    def __init__(self, gamma: int = 8, threshold: float = 0.4, *, min_tokens: int = 1) -> None:
        self.max_gamma = _count("gamma", gamma, 1)
        self.threshold = threshold = check_real("threshold", threshold, low=0.0, high=1.0)
        self.min_tokens = _count("min_tokens", min_tokens, 0)
        self.name = f"confidence(top<{threshold}, max {gamma})"

    def next_gamma(self) -> int:
        return self.max_gamma

    def draft_stop(self) -> DraftStop:
        return DraftStop(self.threshold, self.min_tokens)

    def draft_length(self, gamma: int, top_probs: Sequence[float]) -> int:
        stop = self.draft_stop()
        for i in range(min(gamma, len(top_probs))):
            if stop.halts(i, top_probs[i]):
                return i
        return gamma


class AcceptanceEMA(GammaPolicy):
    """Drafts the gamma that maximises the predicted speedup under the current estimates,
    or nothing (plain decoding) when that speedup is below ``min_speedup`` or the batch is
    larger than ``max_batch``.

    Acceptance is an exponential moving average over every evaluated draft position (the
    causal prefix plus the first rejection); c is an EMA of (draft seconds per token) /
    (seconds per plain step) once plain steps have been seen, otherwise of (draft seconds per
    token) / (verify seconds), or the fixed ``c`` given. While falling back, every
    ``probe_every``-th step drafts one token so a recovery is noticed.
    """

    def __init__(
        self,
        max_gamma: int = 8,
        *,
        prior: float = 0.6,
        weight: float = 0.15,
        c: float | None = None,
        c_prior: float = 0.2,
        min_speedup: float = 1.0,
        probe_every: int = 8,
        batch_size: int = 1,
        max_batch: int | None = None,
        verify_cost: VerifyCost | None = None,
    ) -> None:
        self.max_gamma = _count("max_gamma", max_gamma, 1)
        weight = check_real("weight", weight, low=0.0, high=1.0, low_open=True)
        # the acceptance rate it starts from: a probability (1 would predict every draft kept)
        prior = check_real("prior", prior, low=0.0, high=1.0)
        self.prior, self.weight = prior, weight
        if c is not None:  # draft cost per token / target cost per call
            c = check_real("c", c, low=0.0)
        self.c_fixed = c
        self.c_prior = check_real("c_prior", c_prior, low=0.0)
        self.min_speedup = check_real("min_speedup", min_speedup, low=0.0)
        self.probe_every = _count("probe_every", probe_every, 1)
        self.batch_size = _count("batch_size", batch_size, 1)
        self.max_batch = None if max_batch is None else _count("max_batch", max_batch, 1)
        self.verify_cost = verify_cost
        self.name = f"acceptance-EMA(max {max_gamma})"
        self.start()

    def start(self) -> None:
        self.alpha = self.prior
        self.c = self.c_fixed if self.c_fixed is not None else self.c_prior
        self.plain_step: float | None = None
        self._plain_run = 0
        self.fallbacks = 0  # plain steps taken because speculation was predicted not to pay

    def predicted_speedup(self, gamma: int) -> float:
        v = self.verify_cost.ratio(gamma + 1) if self.verify_cost is not None else 1.0
        if gamma == 0:
            return 1.0
        return speedup_positional([self.alpha] * gamma, self.c, v)

    def next_gamma(self) -> int:
        if self.max_batch is not None and self.batch_size > self.max_batch:
            self.fallbacks += 1
            return 0
        g = optimal_gamma(
            self.alpha, self.c, max_gamma=self.max_gamma, verify_cost=self.verify_cost
        )
        if g == 0 or self.predicted_speedup(g) < self.min_speedup:
            self._plain_run += 1
            if self._plain_run % self.probe_every == 0:
                return 1
            self.fallbacks += 1
            return 0
        self._plain_run = 0
        return g

    def update(self, drafted: int, accepted: int, draft_time: float, verify_time: float) -> None:
        w = self.weight
        if drafted == 0:
            if verify_time > 0:
                self.plain_step = (
                    verify_time
                    if self.plain_step is None
                    else (1 - w) * self.plain_step + w * verify_time
                )
            return
        for x in [1.0] * accepted + ([0.0] if accepted < drafted else []):
            self.alpha = (1 - w) * self.alpha + w * x
        if self.c_fixed is None and draft_time > 0:
            denom = self.plain_step if self.plain_step else verify_time
            if denom > 0:
                self.c = (1 - w) * self.c + w * (draft_time / drafted) / denom


class BatchFallback(GammaPolicy):
    """``gamma`` drafts while at most ``max_batch`` rows share a model call, plain decoding
    above that: the article's "fall back to plain decoding at high load" as a rule of thumb
    (a batched server is compute bound sooner, and then verifying drafts costs more than it
    saves). :func:`specviz.batch.speculative_generate_batch` updates ``batch_size`` before
    every call; the serial engine leaves it at 1.
    """

    def __init__(self, gamma: int = 4, max_batch: int = 2) -> None:
        self.gamma = gamma = _count("gamma", gamma, 1)
        self.max_gamma = gamma
        self.max_batch = max_batch = _count("max_batch", max_batch, 1)
        self.batch_size = 1
        self.fallbacks = 0
        self.name = f"fallback(gamma {gamma}, plain above batch {max_batch})"

    def start(self) -> None:
        self.batch_size = 1
        self.fallbacks = 0

    def next_gamma(self) -> int:
        if self.batch_size > self.max_batch:
            self.fallbacks += 1
            return 0
        return self.gamma


def as_policy(gamma: int | GammaPolicy) -> GammaPolicy:
    """An int becomes :class:`ConstantGamma`; a :class:`GammaPolicy` is returned as is; an
    object with ``next_gamma()``/``update()`` is wrapped once in the contract's adapter."""
    if is_int(gamma):
        return ConstantGamma(_count("gamma", gamma, 1))
    if isinstance(gamma, GammaPolicy):
        return gamma
    if all(callable(getattr(gamma, m, None)) for m in ("next_gamma", "update")):
        return _ForeignPolicy(gamma)
    raise ValueError(
        f"gamma must be an integer >= 1 or a policy with next_gamma()/update() "
        f"(see specviz.policies), got {gamma!r}"
    )
