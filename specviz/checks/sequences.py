"""Two-sample tests of token sequences, shared by consistency_check and the audit."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import stats

__all__ = ["LogprobNumerics", "canonical_logprobs", "SequenceTests", "sequence_tests"]


@dataclass(frozen=True)
class LogprobNumerics:
    """How far two samplers' log-probabilities for the *same* continuation differ.

    Each arm records the log-probability of what it emitted through its own forward passes
    (a (k+1)-token verify pass against a 1-token decode pass; two server configurations): the
    same continuation then gets values that differ in the last bits. That drift is a finding,
    not an error -- and the reason the tests use one value per continuation.
    """

    max_gap: float  # largest |logprob_a - logprob_b| over records of one continuation (nats)
    shared: int  # distinct continuations seen in both samples
    between: str = "arms"

    def __str__(self) -> str:
        if not self.shared:
            return f"numerics: no continuation seen in both {self.between} to compare"
        return (
            f"numerics: up to {self.max_gap:.2g} nats between {self.between} for the same "
            f"continuation ({self.shared} continuations seen in both)"
        )


def canonical_logprobs(
    a: Sequence[Sequence[Any]],
    b: Sequence[Sequence[Any]],
    logprobs_a: Sequence[float],
    logprobs_b: Sequence[float],
    *,
    between: str = "arms",
) -> tuple[np.ndarray, np.ndarray, LogprobNumerics]:
    """One log-probability per distinct continuation, used in both samples.

    The value of a continuation is the mean of every value recorded for it, both samples
    pooled (symmetric in the samples, so neither arm's numerics is preferred). Equal outcomes
    then carry exactly equal values, which KS/AD need: fed the raw per-arm values, each atom
    of a peaked law splits in two (one per arm) and the tests reject a correct sampler with
    certainty (issue 13). Also returns the drift between the samples' own records.
    """
    la = np.asarray(logprobs_a, dtype=float)
    lb = np.asarray(logprobs_b, dtype=float)
    if la.size != len(a) or lb.size != len(b):
        raise ValueError(
            f"{la.size} and {lb.size} log-probabilities for {len(a)} and {len(b)} sequences"
        )
    keys_a = [stats.outcome_key(s) for s in a]
    keys_b = [stats.outcome_key(s) for s in b]
    total: dict[Any, float] = {}
    count: dict[Any, int] = {}
    lo: dict[Any, list[float]] = {}  # per key: [min a, max a, min b, max b]
    for arm, keys, vals in ((0, keys_a, la), (1, keys_b, lb)):
        for key, v in zip(keys, vals, strict=True):
            total[key] = total.get(key, 0.0) + float(v)
            count[key] = count.get(key, 0) + 1
            rec = lo.setdefault(key, [np.inf, -np.inf, np.inf, -np.inf])
            rec[2 * arm] = min(rec[2 * arm], float(v))
            rec[2 * arm + 1] = max(rec[2 * arm + 1], float(v))
    value = {key: total[key] / count[key] for key in total}
    shared = [r for r in lo.values() if np.isfinite(r[0]) and np.isfinite(r[2])]
    gap = max((max(r[1] - r[2], r[3] - r[0]) for r in shared), default=math.nan)
    return (
        np.array([value[k] for k in keys_a]),
        np.array([value[k] for k in keys_b]),
        LogprobNumerics(float(gap), len(shared), between),
    )


@dataclass(frozen=True, eq=False)
class SequenceTests:
    """Two-sample tests of two sets of token sequences (see :func:`sequence_tests`)."""

    results: list[tuple[str, Any]]  # (test name, stats result with statistic/pvalue/method)
    tv: list[dict[str, float]]  # per position: position, estimate, low, high
    first_counts: tuple  # (labels, counts of a, counts of b) of the first token
    min_detectable_tv: float  # first-token TV found with 90% power (pooled law as the null)
    numerics: LogprobNumerics | None = None  # log-probability drift, when logprobs were given


def sequence_tests(
    a: Sequence[Sequence[int]],
    b: Sequence[Sequence[int]],
    max_positions: int,
    *,
    alpha: float = 0.01,
    rng: np.random.Generator | None = None,
    n_boot: int = 500,
    logprobs: tuple[Any, Any] | None = None,
    between: str = "arms",
) -> SequenceTests:
    """The tests that fit token sequences from two samplers (speculative vs standard, or two
    configurations of a server): homogeneity of the token at each position, of the first
    bigram and of whole continuations (tail bins), TV per position with bootstrap intervals,
    KS/AD on sequence log-probabilities when given (one value per distinct continuation, see
    :func:`canonical_logprobs`), and KS on lengths when they vary.

    Every test sees a function of the outcome only, the same function in both samples, and
    the rank tests break ties at random (exact size for summaries with few values).
    """
    rng = rng if rng is not None else np.random.default_rng(0)
    results: list[tuple[str, Any]] = []
    tv: list[dict[str, float]] = []
    first: tuple = ((), np.zeros(0), np.zeros(0))
    mdt = math.nan
    for pos in range(max_positions):
        xa = [s[pos] for s in a if len(s) > pos]
        xb = [s[pos] for s in b if len(s) > pos]
        if not xa or not xb:
            continue
        labels, ca, cb = stats.counts_from_samples(xa, xb)
        if len(labels) > 1:
            results.append((f"token@{pos}", stats.homogeneity(ca, cb)))
        est = stats.estimate_tv(ca, cb, n_boot=n_boot, rng=rng)
        tv.append(dict(position=pos, estimate=est.estimate, low=est.low, high=est.high))
        if pos == 0:
            first = (labels, ca, cb)
            pooled = (ca + cb) / (ca.sum() + cb.sum())
            n = min(len(xa), len(xb))
            mdt = stats.min_detectable_tv(pooled, n, alpha=alpha, two_sample=True)
    if max_positions > 2:  # with two positions the first bigram is the whole continuation
        labels, ca, cb = stats.counts_from_samples(
            [tuple(s[:2]) for s in a], [tuple(s[:2]) for s in b], max_bins=200
        )
        if len(labels) > 1:
            results.append(("bigram@0", stats.homogeneity(ca, cb)))
    labels, ca, cb = stats.counts_from_samples(
        [tuple(s) for s in a], [tuple(s) for s in b], max_bins=200
    )
    if len(labels) > 1:
        results.append(("continuation", stats.homogeneity(ca, cb)))
    numerics = None
    if logprobs is not None:
        la, lb, numerics = canonical_logprobs(a, b, *logprobs, between=between)
        if np.ptp(np.concatenate([la, lb])) > 0:
            results.append(("logprob KS", stats.ks_2sample(la, lb, ties="random", rng=rng)))
            results.append(
                ("logprob AD", stats.anderson_darling_2sample(la, lb, ties="random", rng=rng))
            )
    lengths_a, lengths_b = [len(s) for s in a], [len(s) for s in b]
    if len(set(lengths_a) | set(lengths_b)) > 1:
        results.append(
            ("length KS", stats.ks_2sample(lengths_a, lengths_b, ties="random", rng=rng))
        )
    return SequenceTests(results, tv, first, mdt, numerics)
