"""Distances between laws and their estimates with bootstrap intervals."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from scipy import special

from ._results import EstimateResult
from ._validation import _as_counts, _as_probs, _chunks, _rng

__all__ = ["tv_distance", "kl_divergence", "estimate_tv", "estimate_kl", "MIN_UNITS_FOR_CI"]

#: Fewest units (prompts) whose interval is printed as a 95% interval. Over 2 units a
#: percentile bootstrap returns little more than the two values' range (4 equally likely
#: resamples), whose coverage is nowhere near 95% (09 printed "95% CI 0.86x-0.86x"); over 3 it
#: is still their min-max range, so from 3 units the intervals that decide (a category's
#: speed-up in 10, a coverage in 12) are jackknife t intervals. The printed lines and the
#: figures (``views``) read this one value.
MIN_UNITS_FOR_CI = 3


# --------------------------------------------------------------------------------------------
# Distances and their estimates
# --------------------------------------------------------------------------------------------


def tv_distance(p: Any, q: Any) -> float | np.ndarray:
    """Exact total-variation distance ``0.5 * sum |p - q|`` between known laws (last axis).

    TV is the natural effect size here: per-position acceptance is ``1 - TV(p, q)`` (Leviathan et
    al.), and the shipped bugs are described by the TV they cause (#32867: p=[0.6, 0.4] became
    [0.75, 0.25], TV 0.15).
    """
    P, Q = _as_probs(p, "p"), _as_probs(q, "q")
    if P.shape != Q.shape:
        raise ValueError(f"shape mismatch: {P.shape} vs {Q.shape}")
    out = 0.5 * np.abs(P - Q).sum(axis=-1)
    return float(out) if out.ndim == 0 else out


def kl_divergence(p: Any, q: Any) -> float | np.ndarray:
    """Exact KL(p || q) in nats between known laws (last axis); ``inf`` if q misses p's support."""
    P, Q = _as_probs(p, "p"), _as_probs(q, "q")
    if P.shape != Q.shape:
        raise ValueError(f"shape mismatch: {P.shape} vs {Q.shape}")
    out = special.rel_entr(P, Q).sum(axis=-1)
    return float(out) if out.ndim == 0 else out


def _second_law(counts_b: Any, probs_b: Any, k: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    if (counts_b is None) == (probs_b is None):
        raise ValueError("give exactly one of counts_b (a second sample) or probs_b (a known law)")
    if counts_b is not None:
        cb = _as_counts(counts_b, "counts_b")
        if cb.size != k:
            raise ValueError(f"shape mismatch: {k} vs {cb.size} bins")
        if cb.sum() == 0:
            raise ValueError("counts_b sum to 0")
        return cb, None
    pb = _as_probs(probs_b, "probs_b")
    if pb.shape != (k,):
        raise ValueError(f"shape mismatch: {k} bins vs probs_b {pb.shape}")
    return None, pb


def _bootstrap(
    stat: Callable[[np.ndarray, np.ndarray | None], np.ndarray],
    ca: np.ndarray,
    cb: np.ndarray | None,
    n_boot: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Multinomial bootstrap of the count vectors; ``stat`` maps [B, K] count arrays to [B]."""
    pa = ca / ca.sum()
    pb = None if cb is None else cb / cb.sum()
    out = []
    for size in _chunks(n_boot, max(1, 4_000_000 // ca.size)):
        ra = rng.multinomial(int(ca.sum()), pa, size=size)
        rb = None if cb is None else rng.multinomial(int(cb.sum()), pb, size=size)
        out.append(stat(ra, rb))
    return np.concatenate(out)


def _interval(
    estimate: float, boot: np.ndarray, confidence: float, interval: str, lower: float = 0.0
) -> tuple[float, float]:
    a = (1.0 - confidence) / 2.0
    q_lo, q_hi = np.quantile(boot, [a, 1.0 - a])
    if interval == "percentile":
        lo, hi = q_lo, q_hi
    elif interval == "basic":
        lo, hi = 2 * estimate - q_hi, 2 * estimate - q_lo
    else:
        raise ValueError("interval must be 'percentile' or 'basic'")
    return float(max(lower, lo)), float(max(lower, hi))


def estimate_tv(
    counts_a: Any,
    counts_b: Any = None,
    *,
    probs_b: Any = None,
    n_boot: int = 1000,
    rng: np.random.Generator | None = None,
    confidence: float = 0.95,
    interval: Literal["percentile", "basic"] = "basic",
) -> EstimateResult:
    """Plug-in TV distance between an empirical law and a second sample or a known law.

    The estimate is ``TV(counts_a / n_a, counts_b / n_b)`` (or against ``probs_b``) with a
    bootstrap interval from multinomial resampling of the count vector(s) (a known ``probs_b``
    is not resampled). The plug-in is biased upward: sampling noise alone gives TV > 0, roughly
    ``0.4 * sqrt(K / n)`` for K populated bins, which swamps small true distances. ``bias``
    reports the bootstrap estimate of it (``mean(boot) - estimate``).

    ``interval="basic"`` (default) reflects the bootstrap quantiles around the estimate, which
    corrects the bias to first order; ``"percentile"`` is the plain percentile interval. Measured
    coverage of nominal 95% (200 replicates each): K=2, TV 0.15, n=2000: 0.95 / 0.96 (basic /
    percentile); Zipf K=50, TV 0.05, n=2000 one-sample: 0.90 / 0.00; same, two-sample: 0.81 /
    0.00; two-sample n=20000: 0.93 / 0.45. At a true TV of 0 (a boundary) neither interval covers
    0 reliably. So: use this to *size* a difference the tests found, read ``high`` as an upper
    bound, and use :func:`goodness_of_fit` / :func:`homogeneity` to decide whether TV > 0.
    """
    ca = _as_counts(counts_a, "counts_a")
    if ca.sum() == 0:
        raise ValueError("counts_a sum to 0")
    cb, pb = _second_law(counts_b, probs_b, ca.size)
    gen, seeded = _rng(rng)

    def stat(ra: np.ndarray, rb: np.ndarray | None) -> np.ndarray:
        fa = ra / ra.sum(axis=-1, keepdims=True)
        fb = pb if rb is None else rb / rb.sum(axis=-1, keepdims=True)
        return 0.5 * np.abs(fa - fb).sum(axis=-1)

    est = float(stat(ca[None, :], None if cb is None else cb[None, :])[0])
    boot = _bootstrap(stat, ca, cb, int(n_boot), gen)
    lo, hi = _interval(est, boot, confidence, interval)
    against = "second sample" if cb is not None else "known law"
    return EstimateResult(
        estimate=est,
        low=lo,
        high=hi,
        method=f"plug-in TV vs {against} (no smoothing; biased upward), {interval} bootstrap "
        f"{confidence:.0%} interval, {int(n_boot)} multinomial resamples ({seeded})",
        confidence=confidence,
        n_boot=int(n_boot),
        bias=float(boot.mean() - est),
    )


def estimate_kl(
    counts_a: Any,
    counts_b: Any = None,
    *,
    probs_b: Any = None,
    pseudocount: float = 0.5,
    n_boot: int = 1000,
    rng: np.random.Generator | None = None,
    confidence: float = 0.95,
    interval: Literal["percentile", "basic"] = "basic",
) -> EstimateResult:
    """Plug-in KL(a || b) in nats with additive smoothing and a bootstrap interval.

    Empirical frequencies are smoothed as ``(c + pseudocount) / (n + K * pseudocount)`` (0.5 =
    Jeffreys / Krichevsky-Trofimov), because an unseen outcome would otherwise make KL infinite.
    Against a known ``probs_b`` only the support of ``probs_b`` receives pseudocounts: if
    ``counts_a`` has an observation where ``probs_b`` is 0 the estimate is ``inf`` (the true KL
    is infinite). Smoothing biases the estimate (towards 0 for small n); the bootstrap
    resamples the raw counts and re-applies the smoothing.
    """
    if pseudocount < 0:
        raise ValueError("pseudocount must be >= 0")
    ca = _as_counts(counts_a, "counts_a")
    if ca.sum() == 0:
        raise ValueError("counts_a sum to 0")
    cb, pb = _second_law(counts_b, probs_b, ca.size)
    gen, seeded = _rng(rng)
    support = np.ones(ca.size, bool) if pb is None else pb > 0
    alpha_vec = np.where(support, float(pseudocount), 0.0)

    def smooth(c: np.ndarray) -> np.ndarray:
        s = c + alpha_vec
        return s / s.sum(axis=-1, keepdims=True)

    def stat(ra: np.ndarray, rb: np.ndarray | None) -> np.ndarray:
        fa = smooth(ra)
        fb = pb if rb is None else smooth(rb)
        return special.rel_entr(fa, fb).sum(axis=-1)

    est = float(stat(ca[None, :], None if cb is None else cb[None, :])[0])
    boot = _bootstrap(stat, ca, cb, int(n_boot), gen)
    finite = np.isfinite(boot)
    if math.isinf(est) or not finite.all():
        lo, hi = (float(np.quantile(boot, (1 - confidence) / 2)), math.inf)
    else:
        lo, hi = _interval(est, boot, confidence, interval)
    against = "second sample" if cb is not None else "known law"
    return EstimateResult(
        estimate=est,
        low=lo,
        high=hi,
        method=f"plug-in KL(a||b) vs {against} with additive smoothing "
        f"(pseudocount {pseudocount:g}), {interval} bootstrap {confidence:.0%} interval, "
        f"{int(n_boot)} multinomial resamples ({seeded})",
        confidence=confidence,
        n_boot=int(n_boot),
        bias=float(boot[finite].mean() - est) if finite.any() and math.isfinite(est) else None,
    )
