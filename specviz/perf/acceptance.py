"""Acceptance numbers measured from traces (the laws they are compared with live in
:mod:`specviz.perf.theory`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.trace import Trace

__all__ = [
    "fit_alpha",
    "alpha_counts",
    "accepted_counts",
    "per_position_acceptance",
    "PositionCounts",
    "wilson_interval",
]


def wilson_interval(k: Any, n: Any, confidence: float = 0.95) -> tuple[Any, Any]:
    """Wilson score interval of a proportion ``k / n`` (scipy's
    ``binomtest(k, n).proportion_ci(method="wilson")``), elementwise over arrays. Where
    ``n == 0`` there is no rate and both ends are NaN -- never a fake 0.

    >>> lo, hi = wilson_interval(8, 10)
    >>> round(lo, 3), round(hi, 3)
    (0.49, 0.943)
    >>> wilson_interval([0, 3], [0, 3])[0].tolist()
    [nan, 0.4385029...]
    """
    from scipy.stats import binomtest

    ks, ns = np.asarray(k, dtype=int), np.asarray(n, dtype=int)
    if ks.shape != ns.shape:
        raise ValueError(f"k and n differ in shape: {ks.shape} vs {ns.shape}")
    if np.any(ns < 0) or np.any(ks < 0) or np.any(ks > ns):
        raise ValueError("need 0 <= k <= n")
    lo, hi = np.full(ks.shape, np.nan), np.full(ks.shape, np.nan)
    for idx in np.ndindex(ks.shape):
        if ns[idx] > 0:
            ci = binomtest(int(ks[idx]), int(ns[idx])).proportion_ci(
                confidence_level=confidence, method="wilson"
            )
            lo[idx], hi[idx] = float(ci.low), float(ci.high)
    if ks.ndim == 0:
        return float(lo), float(hi)
    return lo, hi


def fit_alpha(accepted: Sequence[int], gamma: int) -> float:
    """Maximum-likelihood ``alpha`` of the truncated-geometric law from accepted counts of
    ``gamma``-token drafts: accepted tokens / tokens the verifier looked at (every step looks
    at ``n + 1`` drafts, or ``gamma`` when all were accepted)."""
    acc = np.asarray(accepted, dtype=int)
    if acc.size == 0:
        return math.nan
    if acc.min() < 0 or acc.max() > gamma:
        raise ValueError(f"accepted counts must lie in [0, {gamma}]")
    looked = np.minimum(acc + 1, gamma).sum()
    return float(acc.sum() / looked) if looked else math.nan


def alpha_counts(accepted: Sequence[int], gamma: int) -> tuple[int, int]:
    """The counts behind :func:`fit_alpha`: ``(accepted tokens, tokens the verifier looked
    at)`` over steps of ``gamma``-token drafts, for an interval on alpha
    (:func:`wilson_interval`).

    >>> alpha_counts([0, 2, 3], 3)
    (5, 7)
    """
    acc = np.asarray(accepted, dtype=int)
    if acc.size and (acc.min() < 0 or acc.max() > gamma):
        raise ValueError(f"accepted counts must lie in [0, {gamma}]")
    return int(acc.sum()), int(np.minimum(acc + 1, gamma).sum())


def accepted_counts(trace: Trace, gamma: int | None = None) -> list[int]:
    """Accepted count of every step that drafted exactly ``gamma`` tokens (default: the
    trace's gamma). Shorter drafts -- the last steps before ``max_new_tokens``, or a prompt
    lookup that found little -- follow a different law and are left out."""
    if gamma is None:
        gamma = int(trace.meta.get("gamma") or max((s.drafted for s in trace.steps), default=0))
    return [s.accepted for s in trace.steps if s.drafted == gamma and gamma > 0]


def per_position_acceptance(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """``(rate, reached)`` per draft position ``i = 0..gamma-1``: P(accept at i | the verifier
    reached i), and how many steps reached it (the rate's sample size). The accepted counts
    and intervals: :meth:`PositionCounts.from_trace`."""
    c = PositionCounts.from_trace(trace)
    return c.rate, np.asarray(c.reached, dtype=int)


@dataclass(frozen=True)
class PositionCounts:
    """The counts behind P(accept at draft position i | reached i), ``i = 0..gamma-1``
    (figures label position ``i`` as ``i + 1``: the first drafted token is position 1):
    ``reached[i]`` steps had their draft token at position i tested, ``kept[i]`` of them
    accepted it. A position no step reached has no rate (NaN), not a rate of 0.

    >>> c = PositionCounts.from_counts(accepted=[0, 2, 3], drafted=[3, 3, 3])
    >>> c.kept, c.reached
    ((2, 2, 1), (3, 2, 2))
    >>> c.rate.tolist()
    [0.666..., 1.0, 0.5]
    >>> PositionCounts.from_histograms([1, 0, 1, 1], [1, 0, 1]) == c
    True
    """

    kept: tuple[int, ...]
    reached: tuple[int, ...]

    def __post_init__(self) -> None:
        kept = tuple(int(x) for x in self.kept)
        reached = tuple(int(x) for x in self.reached)
        if len(kept) != len(reached):
            raise ValueError(f"kept has {len(kept)} positions, reached {len(reached)}")
        if any(not 0 <= k <= r for k, r in zip(kept, reached, strict=True)):
            raise ValueError(f"need 0 <= kept <= reached, got {kept} of {reached}")
        object.__setattr__(self, "kept", kept)
        object.__setattr__(self, "reached", reached)

    @property
    def gamma(self) -> int:
        return len(self.reached)

    @property
    def rate(self) -> np.ndarray:
        """kept / reached per position, NaN where no step reached it."""
        k = np.asarray(self.kept, dtype=float)
        r = np.asarray(self.reached, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(r > 0, k / np.maximum(r, 1), np.nan)

    def interval(self, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Wilson interval per position (:func:`wilson_interval`), NaN where never reached."""
        return wilson_interval(list(self.kept), list(self.reached), confidence)

    @classmethod
    def from_counts(cls, accepted: Iterable[int], drafted: Iterable[int]) -> PositionCounts:
        """From per-step accepted and drafted counts (``GenerationResult.accepted_counts``
        and ``drafted_counts``): a step that accepted ``n`` of ``d`` drafts reached
        positions ``0..min(d, n + 1) - 1`` and kept the first ``n``."""
        acc, dra = [int(a) for a in accepted], [int(d) for d in drafted]
        if len(acc) != len(dra):
            raise ValueError("accepted and drafted counts differ in length")
        gamma = max(dra, default=0)
        reached, kept = [0] * gamma, [0] * gamma
        for n, d in zip(acc, dra, strict=True):
            if not 0 <= n <= d:
                raise ValueError(f"a step accepted {n} of {d} drafts")
            for i in range(min(d, n + 1)):
                reached[i] += 1
                kept[i] += i < n
        return cls(tuple(kept), tuple(reached))

    @classmethod
    def from_trace(cls, trace: Trace | Sequence[Trace]) -> PositionCounts:
        """From a :class:`~specviz.Trace`'s steps (or several traces', pooled)."""
        traces = [trace] if isinstance(trace, Trace) else list(trace)
        steps = [s for t in traces for s in t.steps]
        return cls.from_counts([s.accepted for s in steps], [s.drafted for s in steps])

    @classmethod
    def from_histograms(
        cls, accepted_hist: Sequence[int], rejection_hist: Sequence[int]
    ) -> PositionCounts:
        """From a grid cell's histograms (:func:`specviz.analysis.run_grid`):
        ``accepted_hist[n]`` steps accepted ``n`` drafts, ``rejection_hist[n]`` of them were
        rejected right after. Position ``i`` was kept by every step that accepted more than
        ``i`` drafts, and reached by those plus the steps rejected at ``i``."""
        acc = [int(x) for x in accepted_hist]
        rej = [int(x) for x in rejection_hist]
        gamma = len(rej)
        if len(acc) != gamma + 1:
            raise ValueError(f"accepted_hist needs gamma + 1 = {gamma + 1} entries, got {len(acc)}")
        kept = [sum(acc[i + 1 :]) for i in range(gamma)]
        return cls(tuple(kept), tuple(k + r for k, r in zip(kept, rej, strict=True)))

    def __add__(self, other: PositionCounts) -> PositionCounts:
        if not isinstance(other, PositionCounts):
            return NotImplemented
        g = max(self.gamma, other.gamma)

        def pad(x: tuple[int, ...]) -> np.ndarray:
            return np.pad(np.asarray(x, dtype=int), (0, g - len(x)))

        return PositionCounts(
            tuple(pad(self.kept) + pad(other.kept)), tuple(pad(self.reached) + pad(other.reached))
        )
