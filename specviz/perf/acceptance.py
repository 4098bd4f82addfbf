"""Acceptance numbers measured from traces (the laws they are compared with live in
:mod:`specviz.perf.theory`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..core.trace import Trace

__all__ = ["fit_alpha", "accepted_counts", "per_position_acceptance"]


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


def accepted_counts(trace: Trace, gamma: int | None = None) -> list[int]:
    """Accepted count of every step that drafted exactly ``gamma`` tokens (default: the
    trace's gamma). Shorter drafts -- the last steps before ``max_new_tokens``, or a prompt
    lookup that found little -- follow a different law and are left out."""
    if gamma is None:
        gamma = int(trace.meta.get("gamma") or max((s.drafted for s in trace.steps), default=0))
    return [s.accepted for s in trace.steps if s.drafted == gamma and gamma > 0]


def per_position_acceptance(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """``(rate, reached)`` per draft position ``i = 0..gamma-1``: P(accept at i | the verifier
    reached i), and how many steps reached it (the rate's sample size)."""
    gamma = max((s.drafted for s in trace.steps), default=0)
    reached = np.zeros(gamma, dtype=int)
    kept = np.zeros(gamma, dtype=int)
    for s in trace.steps:
        for i in range(min(s.drafted, s.accepted + 1)):
            reached[i] += 1
            kept[i] += i < s.accepted
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(reached > 0, kept / np.maximum(reached, 1), np.nan)
    return rate, reached
