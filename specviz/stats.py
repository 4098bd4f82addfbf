"""Statistics toolkit for checking speculative decoding.

Everything here is pure statistics over counts, samples and probability vectors. The functions
wrap scipy and statsmodels (chi-square / G tests, Kolmogorov-Smirnov, Anderson-Darling, Holm and
Benjamini-Hochberg) and add what those libraries leave to the caller:

* pooling of sparse bins, so that the asymptotic chi-square law is trustworthy (and a
  Monte-Carlo p-value when pooling cannot help);
* an exact "impossible outcome observed" verdict (a token with target probability 0 is a proof of
  a bug, not weak evidence);
* a randomized probability integral transform (PIT) that turns tokens emitted by a speculative
  decoder, each under its own target distribution, into i.i.d. U(0, 1) variables under the null;
* plug-in TV / KL estimates with bootstrap intervals;
* analytic power, sample sizes and minimum detectable effects, so that a passing test can state
  what it could have caught;
* a calibration harness (does a test reject a true null at its nominal rate?);
* greedy-consistency bookkeeping that separates numerical near ties from real bugs.

Why this matters (see the field notes, "Shipped mistakes"): the bugs that reached users changed
the output law by a TV distance of 0.05-0.3 (transformers #32867, #47932; vLLM #9834) or made an
impossible token appear (vLLM GHSA-8wr5-jm2h-8r4f), and they were missed because the projects'
tests had no p-value, no stated power and no negative control.

Result objects are frozen dataclasses with scipy's vocabulary (``statistic``, ``pvalue``) plus
``dof``, ``n``, ``method`` and, where meaningful, the tables that were actually tested.
Arrays inside results are read-only.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

import numpy as np
from scipy import special
from scipy import stats as _st

__all__ = [
    "CalibrationResult",
    "ContinuousResult",
    "EstimateResult",
    "GofResult",
    "GroupedGofResult",
    "GreedyConsistencyResult",
    "HomogeneityResult",
    "ImpossibleOutcomeError",
    "MultipleTestResult",
    "PitResult",
    "Pooled",
    "adjust_pvalues",
    "anderson_darling_2sample",
    "calibrate",
    "counts_from_samples",
    "estimate_kl",
    "estimate_tv",
    "goodness_of_fit",
    "greedy_consistency",
    "grouped_goodness_of_fit",
    "homogeneity",
    "kl_divergence",
    "ks_2sample",
    "min_detectable_tv",
    "pit_uniformity",
    "power_gof",
    "power_homogeneity",
    "random_tie_ranks",
    "randomized_pit",
    "sample_size_for_tv",
    "simulated_power",
    "tv_alternative",
    "tv_distance",
    "uniform_law",
    "zipf_law",
]

Method = Literal["pearson", "g"]

#: Monte-Carlo replicates used when a chi-square p-value must be simulated and the caller did not
#: ask for a number (pooling left fewer than two bins).
DEFAULT_MONTE_CARLO = 9999

#: Default absolute logit margin under which a greedy divergence is attributed to numerics.
DEFAULT_NEAR_TIE = 0.05

_PROB_ATOL = 1e-4  # float32 laws over ~1e5 tokens sum to 1 only within ~1e-5
_LAMBDA = {"pearson": "pearson", "g": "log-likelihood"}
_METHOD_NAME = {"pearson": "Pearson chi-square", "g": "G-test (log-likelihood ratio)"}
# Relative tolerance when counting simulated statistics >= the observed one, so that ties that
# differ only by rounding count as ties (R's chisq.test does the same with 1 + 64 eps).
_TIE_RTOL = 64 * np.finfo(float).eps


# --------------------------------------------------------------------------------------------
# Result types
# --------------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """Convert a result field to JSON-friendly Python objects."""
    if isinstance(value, _Result):
        return value.to_dict()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Pooled):
        return str(value)
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


class _Result:
    """Mixin: ``to_dict()`` for reports (arrays become lists, pooled labels become strings)."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


@dataclass(frozen=True)
class Pooled:
    """Label of a bin made by pooling several outcomes (sparse bins or a frequency tail)."""

    members: tuple[Hashable, ...]

    def __str__(self) -> str:
        return f"<pooled: {len(self.members)} outcomes>"

    __repr__ = __str__


@dataclass(frozen=True, eq=False)
class GofResult(_Result):
    """One-sample goodness of fit against an exact law.

    ``observed``/``expected``/``labels`` describe the bins actually tested (after pooling);
    ``groups[j]`` lists the original bin indices that make tested bin ``j``. When an impossible
    outcome was observed, the tables are the unpooled ones and ``impossible`` lists the bins.
    """

    statistic: float
    pvalue: float
    dof: int
    n: int
    method: str
    observed: np.ndarray
    expected: np.ndarray
    labels: tuple[Hashable, ...]
    groups: tuple[tuple[int, ...], ...]
    monte_carlo: int | None = None
    impossible: tuple[int, ...] = ()

    @property
    def residuals(self) -> np.ndarray:
        """Pearson residuals (O - E) / sqrt(E) per tested bin: which outcomes drive a rejection."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return (self.observed - self.expected) / np.sqrt(self.expected)


@dataclass(frozen=True, eq=False)
class HomogeneityResult(_Result):
    """Two-sample test on a 2 x K table (rows: sample a, sample b) after pooling sparse columns.

    ``n`` is the pair of sample sizes.
    """

    statistic: float
    pvalue: float
    dof: int
    n: tuple[int, int]
    method: str
    observed: np.ndarray
    expected: np.ndarray
    labels: tuple[Hashable, ...]
    groups: tuple[tuple[int, ...], ...]
    monte_carlo: int | None = None


@dataclass(frozen=True, eq=False)
class ContinuousResult(_Result):
    """Two-sample test on continuous summaries; ``n`` is the pair of sample sizes."""

    statistic: float
    pvalue: float
    n: tuple[int, int]
    method: str
    dof: int | None = None


@dataclass(frozen=True, eq=False)
class PitResult(_Result):
    """Uniformity of PIT values. ``statistic``/``pvalue`` are the KS ones (primary); the
    histogram chi-square is kept in ``chisquare`` as a second, binned view."""

    statistic: float
    pvalue: float
    n: int
    method: str
    ks: ContinuousResult
    chisquare: GofResult | None
    histogram: np.ndarray
    bin_edges: np.ndarray
    dof: int | None = None


@dataclass(frozen=True, eq=False)
class EstimateResult(_Result):
    """Point estimate with a confidence interval (bootstrap, or binomial for simulated power)."""

    estimate: float
    low: float
    high: float
    method: str
    confidence: float = 0.95
    n_boot: int | None = None
    bias: float | None = None


@dataclass(frozen=True, eq=False)
class MultipleTestResult(_Result):
    """Family-wise (Holm) or false-discovery-rate (Benjamini-Hochberg) adjustment."""

    reject: tuple[bool, ...]
    pvalues_adjusted: tuple[float, ...]
    method: str
    alpha: float
    any_reject: bool
    pvalues: tuple[float, ...] = ()
    labels: tuple[Hashable, ...] | None = None


@dataclass(frozen=True, eq=False)
class CalibrationResult(_Result):
    """Null calibration of a test: p-values from ``replicates`` runs on a true null.

    ``binom_interval_99`` is the central 99% interval of the *number* of rejections when each
    replicate rejects with probability ``alpha``; ``calibrated`` requires the observed number to
    lie inside it and (unless disabled) the p-values to pass a KS test of uniformity.
    """

    pvalues: np.ndarray
    rejection_rate: float
    rejections: int
    binom_interval_99: tuple[int, int]
    ks_uniform_pvalue: float
    calibrated: bool
    alpha: float
    replicates: int
    seed: int | None
    method: str


@dataclass(frozen=True, eq=False)
class GreedyConsistencyResult(_Result):
    """Greedy outputs of a speculative decoder compared with plain greedy decoding."""

    exact_match_rate: float
    first_divergence: tuple[int | None, ...]
    margins: tuple[float | None, ...]
    verdicts: tuple[str, ...]
    near_tie: float
    n: int

    @property
    def n_bug(self) -> int:
        return sum(v == "bug" for v in self.verdicts)

    @property
    def n_numerics(self) -> int:
        return sum(v == "numerics" for v in self.verdicts)


class ImpossibleOutcomeError(ValueError):
    """A token with target probability 0 was emitted: impossible under the null hypothesis."""

    def __init__(self, indices: Sequence[int]):
        self.indices = tuple(int(i) for i in indices)
        head = ", ".join(map(str, self.indices[:10]))
        super().__init__(
            f"{len(self.indices)} emitted token(s) have target probability 0 "
            f"(positions {head}{', ...' if len(self.indices) > 10 else ''}): "
            "impossible under the null"
        )


# --------------------------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------------------------


def _to_numpy(x: Any, dtype: Any = float) -> np.ndarray:
    """np.asarray that also accepts torch tensors (on any device, any float dtype)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu()
        if getattr(x, "is_floating_point", lambda: False)():
            x = x.double()  # bfloat16 has no numpy dtype
    return np.asarray(x, dtype=dtype)


def _as_counts(x: Any, name: str) -> np.ndarray:
    arr = _to_numpy(x)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array of counts, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be finite and non-negative")
    rounded = np.round(arr)
    if not np.allclose(arr, rounded, rtol=0, atol=1e-9):
        raise ValueError(f"{name} must hold integer counts")
    return rounded.astype(np.int64)


def _as_probs(x: Any, name: str, *, atol: float = _PROB_ATOL) -> np.ndarray:
    """Validate a probability vector (or a stack of them along the last axis) and renormalize
    rounding drift up to ``atol``; larger deviations are errors, not drift."""
    arr = _to_numpy(x)
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise ValueError(f"{name} must be a non-empty probability vector, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf")
    if np.any(arr < 0):
        raise ValueError(f"{name} has negative entries")
    total = arr.sum(axis=-1, keepdims=True)
    bad = np.abs(total - 1.0) > atol
    if np.any(bad):
        worst = float(np.max(np.abs(total - 1.0)))
        raise ValueError(f"{name} must sum to 1 (tolerance {atol:g}); off by {worst:.3g}")
    return arr / total


def _method_key(method: str) -> Method:
    key = method.lower()
    if key in ("g", "g-test", "log-likelihood", "llr"):
        return "g"
    if key in ("pearson", "chi2", "chisquare"):
        return "pearson"
    raise ValueError(f"method must be 'pearson' or 'g', got {method!r}")


def _check_labels(labels: Sequence[Hashable] | None, k: int) -> tuple[Hashable, ...]:
    if labels is None:
        return tuple(range(k))
    labels = tuple(labels)
    if len(labels) != k:
        raise ValueError(f"labels has {len(labels)} entries for {k} bins")
    return labels


def _readonly(arr: np.ndarray) -> np.ndarray:
    arr = np.array(arr, copy=True)
    arr.setflags(write=False)
    return arr


def _rng(rng: np.random.Generator | None) -> tuple[np.random.Generator, str]:
    if rng is None:
        return np.random.default_rng(), "unseeded rng"
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator")
    return rng, "seeded rng"


# --------------------------------------------------------------------------------------------
# Pooling
# --------------------------------------------------------------------------------------------


def _pool_groups(expected: np.ndarray, min_expected: float) -> list[np.ndarray]:
    """Group bins so that each tested bin has expected count >= ``min_expected``.

    All sparse bins go into one tail bin (last); if the tail is itself sparse it is merged into
    the smallest dense bin. May return a single group (then no asymptotic test is possible).
    """
    idx = np.arange(expected.size)
    sparse = expected < min_expected
    groups = [np.array([i]) for i in idx[~sparse]]
    if sparse.any():
        tail = idx[sparse]
        if expected[tail].sum() >= min_expected or not groups:
            groups.append(tail)
        else:
            j = int(np.argmin([expected[g].sum() for g in groups]))
            groups[j] = np.concatenate([groups[j], tail])
    return groups


def _group_labels(groups: Sequence[np.ndarray], labels: Sequence[Hashable]) -> tuple:
    out = []
    for g in groups:
        out.append(labels[int(g[0])] if g.size == 1 else Pooled(tuple(labels[int(i)] for i in g)))
    return tuple(out)


def _aggregate(x: np.ndarray, groups: Sequence[np.ndarray]) -> np.ndarray:
    return np.array([x[g].sum() for g in groups])


def _count_at_least(sim: np.ndarray, stat: float) -> int:
    return int(np.count_nonzero(sim >= stat * (1.0 - _TIE_RTOL) - 1e-12))


# --------------------------------------------------------------------------------------------
# One-sample goodness of fit
# --------------------------------------------------------------------------------------------


def goodness_of_fit(
    observed_counts: Any,
    expected_probs: Any,
    *,
    method: Method = "pearson",
    min_expected: float = 5.0,
    monte_carlo: int | None = None,
    rng: np.random.Generator | None = None,
    labels: Sequence[Hashable] | None = None,
) -> GofResult:
    """Test observed counts against an exactly known law (Pearson chi-square or G-test).

    Use this whenever the law the output *should* follow is computable: the target's
    next-token distribution in a toy model, the truncated-geometric law of accepted counts, a
    teacher-forced distribution. It catches the shipped distribution bugs (transformers #32867:
    TV 0.15 on a two-token example; #47932; vLLM #9834) at the sample sizes of
    :func:`sample_size_for_tv`.

    Bins whose expected count ``n * p`` is below ``min_expected`` are pooled into one tail bin
    (merged into the smallest remaining bin when the tail is itself sparse), because the
    chi-square approximation fails on sparse bins. If fewer than two bins remain, or when
    ``monte_carlo=R`` is given, the p-value is simulated: ``R`` multinomial(n, p) tables from
    ``rng``, ``p = (1 + #{sim >= obs}) / (R + 1)`` (exact-size, never anti-conservative). With
    ``rng=None`` a fresh unseeded generator is used (the ``method`` string says so).

    An observed count in a bin whose expected probability is exactly 0 returns ``pvalue=0.0``
    (statistic ``inf``): that outcome is impossible under the null, so the data refute it
    (vLLM GHSA-8wr5-jm2h-8r4f emitted token ids beyond the vocabulary).

    Prefer Pearson: with many bins of expected count 5-10 the G-test is anti-conservative
    (simulated size at nominal 1%, Zipf laws, 40,000 replicates: support 100, n=2,860: Pearson
    1.09%, G 1.47%; support 1000, n=20,000: Pearson 1.07%, G 2.48%).

    Probabilities must be non-negative and sum to 1 within 1e-6 (renormalized).
    """
    obs = _as_counts(observed_counts, "observed_counts")
    p = _as_probs(expected_probs, "expected_probs")
    if p.ndim != 1 or obs.shape != p.shape:
        raise ValueError(f"shape mismatch: observed {obs.shape} vs expected {p.shape}")
    key = _method_key(method)
    name = _METHOD_NAME[key]
    labs = _check_labels(labels, obs.size)
    n = int(obs.sum())
    if n == 0:
        raise ValueError("observed_counts sum to 0: nothing to test")
    if monte_carlo is not None and int(monte_carlo) < 1:
        raise ValueError("monte_carlo must be a positive number of replicates")

    impossible = np.flatnonzero((p == 0) & (obs > 0))
    if impossible.size:
        k_imp = int(obs[impossible].sum())
        return GofResult(
            statistic=math.inf,
            pvalue=0.0,
            dof=int(np.count_nonzero(p > 0)),
            n=n,
            method=f"{name}: impossible outcome observed ({k_imp} count(s) in "
            f"{impossible.size} bin(s) with expected probability 0)",
            observed=_readonly(obs),
            expected=_readonly(n * p),
            labels=labs,
            groups=tuple((i,) for i in range(obs.size)),
            impossible=tuple(int(i) for i in impossible),
        )

    support = np.flatnonzero(p > 0)
    obs_s, p_s = obs[support], p[support]
    labs_s = [labs[i] for i in support]
    groups = _pool_groups(n * p_s, min_expected)
    notes = []
    if len(groups) < 2:
        # Pooling cannot make an asymptotic test; simulate on the unpooled table instead.
        groups = [np.array([i]) for i in range(support.size)]
        if monte_carlo is None:
            monte_carlo = DEFAULT_MONTE_CARLO
        notes.append(f"pooling left < 2 bins (n*p < {min_expected:g}); unpooled table")
    n_pooled = sum(g.size for g in groups if g.size > 1)
    if n_pooled:
        notes.append(f"{n_pooled} sparse bins pooled")
    o_g = _aggregate(obs_s, groups)
    p_g = _aggregate(p_s, groups)
    e_g = n * p_g
    dof = len(groups) - 1
    if dof < 1:
        # A single bin with positive probability: every sample agrees with the null.
        return GofResult(
            statistic=0.0,
            pvalue=1.0,
            dof=0,
            n=n,
            method=f"{name}: one possible outcome, nothing to test",
            observed=_readonly(o_g),
            expected=_readonly(e_g),
            labels=_group_labels(groups, labs_s),
            groups=tuple(tuple(int(support[i]) for i in g) for g in groups),
        )

    res = _st.power_divergence(o_g, e_g, lambda_=_LAMBDA[key])
    stat = float(res.statistic)
    if monte_carlo is None:
        pvalue = float(res.pvalue)
        how = f"asymptotic chi2({dof})"
    else:
        R = int(monte_carlo)
        gen, seeded = _rng(rng)
        hits = 0
        for size in _chunks(R, max(1, 2_000_000 // len(groups))):
            sims = gen.multinomial(n, p_g, size=size)
            sim_stat = _st.power_divergence(sims, e_g, axis=1, lambda_=_LAMBDA[key]).statistic
            hits += _count_at_least(np.asarray(sim_stat), stat)
        pvalue = (1 + hits) / (R + 1)
        how = f"Monte Carlo, {R} multinomial replicates ({seeded})"
    method_str = f"{name}, {how}" + (f"; {'; '.join(notes)}" if notes else "")
    return GofResult(
        statistic=stat,
        pvalue=pvalue,
        dof=dof,
        n=n,
        method=method_str,
        observed=_readonly(o_g),
        expected=_readonly(e_g),
        labels=_group_labels(groups, labs_s),
        groups=tuple(tuple(int(support[i]) for i in g) for g in groups),
        monte_carlo=None if monte_carlo is None else int(monte_carlo),
    )


@dataclass(frozen=True, eq=False)
class GroupedGofResult(_Result):
    """Goodness of fit pooled over independent groups (e.g. one per conditioning prefix).

    ``statistic`` and ``dof`` are the sums over the informative groups; ``parts`` holds each
    group's own result (keyed like the input), ``skipped`` the groups too small to test.
    """

    statistic: float
    pvalue: float
    dof: int
    n: int
    method: str
    parts: tuple[tuple[Hashable, GofResult], ...]
    skipped: tuple[Hashable, ...] = ()


def grouped_goodness_of_fit(
    groups: Mapping[Hashable, Any],
    law_of: Callable[[Hashable], Any],
    *,
    method: Method = "pearson",
    min_expected: float = 5.0,
) -> GroupedGofResult:
    """One test over many conditional laws: the sum of independent chi-squares is chi-square
    with the summed degrees of freedom.

    This is how a token's law is checked *given its context* (the token after a rejection
    given the accepted prefix, the second token given the first) without needing every
    context to be common. ``groups[key]`` is a count vector or a ``{outcome_index: count}``
    mapping; ``law_of(key)`` the exact law for that group. A group that pools to fewer than
    two bins carries no information and is skipped (listed in ``skipped``). An impossible
    outcome in any group gives ``pvalue=0``.
    """
    parts: list[tuple[Hashable, GofResult]] = []
    skipped: list[Hashable] = []
    stat, dof, n_total = 0.0, 0, 0
    for key, counts in groups.items():
        probs = _as_probs(law_of(key), f"law of group {key!r}")
        if isinstance(counts, Mapping):
            obs = np.zeros(len(probs))
            for idx, c in counts.items():
                obs[int(idx)] += c
        else:
            obs = _as_counts(counts, f"counts of group {key!r}")
        n = int(obs.sum())
        n_total += n
        impossible = bool((obs[probs == 0] > 0).any())
        if not impossible and len(_pool_groups(probs * n, min_expected)) < 2:
            skipped.append(key)
            continue
        res = goodness_of_fit(obs, probs, method=method, min_expected=min_expected)
        parts.append((key, res))
        stat += res.statistic
        dof += res.dof
    if any(r.impossible for _, r in parts):
        pvalue = 0.0
    else:
        pvalue = float(_st.chi2.sf(stat, dof)) if dof > 0 else 1.0
    label = "Pearson" if method == "pearson" else "G-test"
    return GroupedGofResult(
        statistic=float(stat),
        pvalue=pvalue,
        dof=dof,
        n=n_total,
        method=f"{label} summed over {len(parts)} groups",
        parts=tuple(parts),
        skipped=tuple(skipped),
    )


def _chunks(total: int, size: int) -> Iterable[int]:
    while total > 0:
        step = min(size, total)
        yield step
        total -= step


# --------------------------------------------------------------------------------------------
# Two-sample homogeneity
# --------------------------------------------------------------------------------------------


def homogeneity(
    counts_a: Any,
    counts_b: Any,
    *,
    method: Method = "pearson",
    min_expected: float = 5.0,
    labels: Sequence[Hashable] | None = None,
    monte_carlo: int | None = None,
    rng: np.random.Generator | None = None,
) -> HomogeneityResult:
    """Two-sample test: do two count vectors come from the same (unknown) law?

    Use this when the reference law is not computable, e.g. the speculative decoder's outputs
    versus plain sampling from the target on a real model. Wraps
    ``scipy.stats.chi2_contingency(correction=False)`` on the 2 x K table (Yates' correction
    makes the test conservative and is meant for 2 x 2 tables only).

    All-zero columns are dropped; columns whose expected count is below ``min_expected`` in
    either row are pooled into a tail column (merged into the smallest column when the tail is
    itself sparse). If fewer than two columns remain, or ``monte_carlo=R`` is given, the p-value
    is a conditional Monte-Carlo one: ``R`` tables with the observed margins drawn from the
    multivariate hypergeometric law (a permutation test of the sample labels).
    """
    a = _as_counts(counts_a, "counts_a")
    b = _as_counts(counts_b, "counts_b")
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: {a.shape} vs {b.shape}")
    key = _method_key(method)
    name = _METHOD_NAME[key]
    labs = _check_labels(labels, a.size)
    n_a, n_b = int(a.sum()), int(b.sum())
    if n_a == 0 or n_b == 0:
        raise ValueError("each sample needs at least one observation")
    N = n_a + n_b
    cols = a + b
    keep = np.flatnonzero(cols > 0)
    a_k, b_k, cols_k = a[keep], b[keep], cols[keep]
    labs_k = [labs[i] for i in keep]
    col_min_expected = cols_k * min(n_a, n_b) / N
    groups = _pool_groups(col_min_expected, min_expected)
    notes = []
    if len(groups) < 2:
        groups = [np.array([i]) for i in range(keep.size)]
        if monte_carlo is None:
            monte_carlo = DEFAULT_MONTE_CARLO
        notes.append(f"pooling left < 2 columns (expected < {min_expected:g}); unpooled table")
    n_pooled = sum(g.size for g in groups if g.size > 1)
    if n_pooled:
        notes.append(f"{n_pooled} sparse columns pooled")
    if keep.size < len(labs):
        notes.append(f"{len(labs) - keep.size} empty columns dropped")
    table = np.vstack([_aggregate(a_k, groups), _aggregate(b_k, groups)])
    out_groups = tuple(tuple(int(keep[i]) for i in g) for g in groups)
    out_labels = _group_labels(groups, labs_k)
    if table.shape[1] < 2:
        return HomogeneityResult(
            statistic=0.0,
            pvalue=1.0,
            dof=0,
            n=(n_a, n_b),
            method=f"{name}: a single observed outcome in both samples, nothing to test",
            observed=_readonly(table),
            expected=_readonly(table.astype(float)),
            labels=out_labels,
            groups=out_groups,
        )
    res = _st.chi2_contingency(table, correction=False, lambda_=_LAMBDA[key])
    stat = float(res.statistic)
    dof = int(res.dof)
    expected = np.asarray(res.expected_freq, dtype=float)
    if monte_carlo is None:
        pvalue = float(res.pvalue)
        how = f"asymptotic chi2({dof}), no continuity correction"
    else:
        R = int(monte_carlo)
        gen, seeded = _rng(rng)
        col_tot = table.sum(axis=0)
        flat_exp = expected.reshape(-1)
        hits = 0
        for size in _chunks(R, max(1, 1_000_000 // col_tot.size)):
            row_a = gen.multivariate_hypergeometric(col_tot, n_a, size=size)
            sims = np.hstack([row_a, col_tot - row_a])
            sim_stat = _st.power_divergence(sims, flat_exp, axis=1, lambda_=_LAMBDA[key])
            hits += _count_at_least(np.asarray(sim_stat.statistic), stat)
        pvalue = (1 + hits) / (R + 1)
        how = f"conditional Monte Carlo, {R} permutation tables ({seeded})"
    method_str = f"{name} homogeneity, {how}" + (f"; {'; '.join(notes)}" if notes else "")
    return HomogeneityResult(
        statistic=stat,
        pvalue=pvalue,
        dof=dof,
        n=(n_a, n_b),
        method=method_str,
        observed=_readonly(table),
        expected=_readonly(expected),
        labels=out_labels,
        groups=out_groups,
        monte_carlo=None if monte_carlo is None else int(monte_carlo),
    )


def _hashable(x: Any) -> Hashable:
    """Turn an outcome into a value-hashable key.

    Torch tensors hash by identity, so ``hash(tensor(5)) != hash(tensor(5))``: counting tensor
    elements directly would make every token its own outcome. Arrays and lists become tuples.
    """
    if isinstance(x, np.generic):
        return x.item()
    if hasattr(x, "tolist") and not isinstance(x, (str, bytes)):
        x = x.tolist()
    if isinstance(x, (list, tuple)):
        return tuple(_hashable(v) for v in x)
    return x


def counts_from_samples(
    samples_a: Iterable[Any],
    samples_b: Iterable[Any],
    *,
    max_bins: int | None = None,
) -> tuple[tuple[Hashable, ...], np.ndarray, np.ndarray]:
    """Align two lists of outcomes into count vectors for :func:`homogeneity`.

    Outcomes may be token ids, n-gram tuples or whole continuations (tuples of ids); lists,
    numpy arrays and torch tensors are converted to tuples / Python scalars so they hash by value.
    Labels are ordered by combined frequency (ties by first appearance). With ``max_bins`` the
    ``max_bins`` most frequent outcomes are kept and the rest form one :class:`Pooled` tail bin
    (the choice uses both samples symmetrically, so it does not bias the test towards either).
    """
    if max_bins is not None and max_bins < 1:
        raise ValueError("max_bins must be >= 1")
    seq_a = [
        _hashable(s) for s in (samples_a.tolist() if hasattr(samples_a, "tolist") else samples_a)
    ]
    seq_b = [
        _hashable(s) for s in (samples_b.tolist() if hasattr(samples_b, "tolist") else samples_b)
    ]
    ca, cb = Counter(seq_a), Counter(seq_b)
    # Which outcomes get their own bin may depend on the pooled counts only: breaking ties by
    # first appearance would favour sample a's outcomes and bias the test (with all-distinct
    # continuations it rejected a true null at p ~ 1e-36). Ties are broken by the outcome.
    order = sorted(set(ca) | set(cb), key=lambda s: (-(ca[s] + cb[s]), repr(s)))
    head, tail = (order, []) if max_bins is None else (order[:max_bins], order[max_bins:])
    labels: list[Hashable] = list(head)
    va = [ca[s] for s in head]
    vb = [cb[s] for s in head]
    if tail:
        labels.append(Pooled(tuple(tail)))
        va.append(sum(ca[s] for s in tail))
        vb.append(sum(cb[s] for s in tail))
    return tuple(labels), np.array(va, dtype=np.int64), np.array(vb, dtype=np.int64)


# --------------------------------------------------------------------------------------------
# Continuous two-sample tests
# --------------------------------------------------------------------------------------------


def _as_sample(x: Any, name: str) -> np.ndarray:
    arr = _to_numpy(x).reshape(-1)
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf")
    return arr


def _tie_note(x: np.ndarray, y: np.ndarray) -> str:
    both = np.concatenate([x, y])
    ties = both.size - np.unique(both).size
    return f"; {ties} tied values (test is conservative with ties)" if ties else ""


def random_tie_ranks(
    x: Any, y: Any, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, int]:
    """Ranks of the pooled sample ``x + y`` with ties broken uniformly at random.

    KS and Anderson-Darling are rank statistics: replacing the values by their ranks changes
    nothing for distinct values. For discrete summaries (a sequence log-probability that takes
    a few values, a continuation length) the tests are conservative with ties; breaking them at
    random makes the pooled ranks, under the null, a uniformly random permutation -- exactly what
    the continuous test assumes -- so its p-values are again uniform (a randomized test: the
    atoms keep their order, the order inside an atom is the coin). Returns (ranks of x, ranks of
    y, number of tied values).
    """
    xs, ys = _as_sample(x, "x"), _as_sample(y, "y")
    both = np.concatenate([xs, ys])
    ties = both.size - np.unique(both).size
    order = np.lexsort((rng.random(both.size), both))  # by value, then by the coin
    ranks = np.empty(both.size)
    ranks[order] = np.arange(both.size, dtype=float)
    return ranks[: xs.size], ranks[xs.size :], int(ties)


def _untie(
    xs: np.ndarray, ys: np.ndarray, ties: str, rng: np.random.Generator | None
) -> tuple[np.ndarray, np.ndarray, str]:
    """Apply the ``ties`` policy of :func:`ks_2sample` / :func:`anderson_darling_2sample`."""
    if ties == "conservative":
        return xs, ys, _tie_note(xs, ys)
    if ties != "random":
        raise ValueError(f"ties must be 'conservative' or 'random', got {ties!r}")
    if rng is None:
        raise ValueError("ties='random' needs rng (a seeded numpy Generator)")
    rx, ry, n_tied = random_tie_ranks(xs, ys, rng)
    if not n_tied:
        return xs, ys, ""
    return rx, ry, f"; {n_tied} tied values broken at random (exact size with ties)"


def ks_2sample(
    x: Any,
    y: Any,
    *,
    alternative: str = "two-sided",
    ties: str = "conservative",
    rng: np.random.Generator | None = None,
) -> ContinuousResult:
    """Two-sample Kolmogorov-Smirnov test (``scipy.stats.ks_2samp``) for continuous summaries.

    Intended for sequence log-probability, continuation length, EOS position and similar
    real-valued summaries of whole generations. **Never use it on token ids**: token ids have no
    meaningful order (the CDF in id order is an artifact of the tokenizer) and massive ties make
    KS conservative. For categorical outcomes use :func:`homogeneity`.

    With ties, scipy's p-value is conservative (too large). ``ties="random"`` (with ``rng``)
    breaks them at random instead (:func:`random_tie_ranks`), which restores exact size for
    summaries that take few values; equal outcomes must then carry *exactly* equal values in
    both samples (values that differ in the last bits are not ties, and are ordered by that
    noise).
    """
    xs, ys = _as_sample(x, "x"), _as_sample(y, "y")
    xs, ys, note = _untie(xs, ys, ties, rng)
    res = _st.ks_2samp(xs, ys, alternative=alternative)
    return ContinuousResult(
        statistic=float(res.statistic),
        pvalue=float(res.pvalue),
        n=(xs.size, ys.size),
        method=f"two-sample Kolmogorov-Smirnov ({alternative})" + note,
    )


def anderson_darling_2sample(
    x: Any,
    y: Any,
    *,
    permutations: int | None = None,
    rng: np.random.Generator | None = None,
    ties: str = "conservative",
) -> ContinuousResult:
    """Two-sample Anderson-Darling test (``scipy.stats.anderson_ksamp``, midrank variant).

    More sensitive than KS to differences in the tails (e.g. a few abnormally long
    continuations). For continuous summaries only; **never on token ids** (see
    :func:`ks_2sample`). Without ``permutations`` scipy interpolates tabulated critical values,
    so the p-value is clamped to [0.001, 0.25] (the ``method`` string says when); pass
    ``permutations=R`` (and an ``rng``) for a permutation p-value instead. ``ties="random"``
    breaks ties at random first (see :func:`ks_2sample`).
    """
    import warnings

    xs, ys = _as_sample(x, "x"), _as_sample(y, "y")
    xs, ys, note = _untie(xs, ys, ties, rng)
    kwargs: dict[str, Any] = {"variant": "midrank"}
    if permutations is not None:
        gen, seeded = _rng(rng)
        kwargs["method"] = _st.PermutationMethod(n_resamples=int(permutations), rng=gen)
        how = f"permutation p-value, {int(permutations)} resamples ({seeded})"
    else:
        how = "tabulated p-value"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = _st.anderson_ksamp([xs, ys], **kwargs)
    if any("capped" in str(w.message) for w in caught):
        how += ", capped at 0.25 (true p-value is larger)"
    if any("floored" in str(w.message) for w in caught):
        how += ", floored at 0.001 (true p-value is smaller)"
    return ContinuousResult(
        statistic=float(res.statistic),
        pvalue=float(res.pvalue),
        n=(xs.size, ys.size),
        method=f"two-sample Anderson-Darling (midrank), {how}" + note,
    )


# --------------------------------------------------------------------------------------------
# Randomized PIT
# --------------------------------------------------------------------------------------------


def randomized_pit(
    probs: Any,
    tokens: Any,
    rng: np.random.Generator,
    *,
    atol: float = 1e-4,
    impossible: Literal["raise", "nan"] = "raise",
    order: Literal["probability", "id"] = "probability",
) -> np.ndarray:
    """Randomized probability integral transform of emitted tokens.

    For emitted token ``t_i`` with target distribution ``probs[i]`` (shape ``[N, V]``) returns
    ``u_i = F_i(t_i^-) + V_i * p_i(t_i)`` with ``V_i ~ U(0, 1)``, where ``F_i(t^-)`` is the target
    mass of the tokens that come before ``t`` in the chosen order. If each ``t_i`` is drawn from
    ``probs[i]`` (even with ``probs[i]`` chosen adaptively from the past), the ``u_i`` are exactly
    i.i.d. U(0, 1), for any order that depends only on ``probs[i]``. This is what lets one test a
    whole speculative-decoding run, where every position has a different target law, with one
    uniformity test (:func:`pit_uniformity`).

    The order decides the power, not the validity. ``order="id"`` is the CDF in token-id order;
    ids are arbitrary, so a sharpened or flattened law (temperature mismatch, vLLM #9834) or
    mass moved to the top tokens (top-k/top-p drafts, transformers #47932) barely moves the
    PIT histogram. ``order="probability"`` (default) orders tokens by decreasing target
    probability (ties by id): then mass moved to likely tokens piles PIT values near 0 and mass
    moved to unlikely tokens piles them near 1, which KS detects. In the tests, a p^1.5 tilt
    on 3,000 tokens over 50-token Dirichlet rows is rejected at p < 1e-6 in probability order but
    not (p ~ 0.1) in id order.

    Rows are renormalized when they sum to 1 within ``atol`` (default 1e-4, for fp32 softmax over
    large vocabularies); larger deviations raise. A token id outside ``[0, V)`` raises (vocab
    padding bugs, vLLM GHSA-8wr5-jm2h-8r4f). A token with probability 0 is impossible under the
    null: ``impossible="raise"`` raises :class:`ImpossibleOutcomeError`, ``"nan"`` marks it with
    NaN, which :func:`pit_uniformity` turns into ``pvalue=0``.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator")
    P = _to_numpy(probs)
    if P.ndim == 1:
        P = P[None, :]
    if P.ndim != 2:
        raise ValueError(f"probs must have shape [N, V], got {P.shape}")
    t_raw = _to_numpy(tokens).reshape(-1)
    if t_raw.size != P.shape[0]:
        raise ValueError(f"{t_raw.size} tokens for {P.shape[0]} distributions")
    if not np.all(np.isfinite(t_raw)) or np.any(t_raw != np.round(t_raw)):
        raise ValueError("tokens must be integer ids")
    if order not in ("probability", "id"):
        raise ValueError("order must be 'probability' or 'id'")
    t = t_raw.astype(np.int64)
    V = P.shape[1]
    out_of_range = np.flatnonzero((t < 0) | (t >= V))
    if out_of_range.size:
        raise ValueError(
            f"token id(s) {t[out_of_range[:5]].tolist()} outside the vocabulary [0, {V})"
        )
    N = P.shape[0]
    before = np.empty(N)
    pt = np.empty(N)
    rows_per_chunk = max(1, 4_000_000 // max(V, 1))
    for start in range(0, N, rows_per_chunk):
        sl = slice(start, min(N, start + rows_per_chunk))
        block = _as_probs(P[sl], f"probs[{sl.start}:{sl.stop}]", atol=atol)
        idx = np.arange(block.shape[0])
        tt = t[sl]
        p_t = block[idx, tt]
        pt[sl] = p_t
        if order == "id":
            cdf = np.cumsum(block, axis=1)
            before[sl] = np.where(tt > 0, cdf[idx, np.maximum(tt - 1, 0)], 0.0)
        else:
            col = np.arange(V)[None, :]
            ahead = (block > p_t[:, None]) | ((block == p_t[:, None]) & (col < tt[:, None]))
            before[sl] = np.where(ahead, block, 0.0).sum(axis=1)
    zero = np.flatnonzero(pt == 0)
    if zero.size and impossible == "raise":
        raise ImpossibleOutcomeError(zero)
    u = np.clip(before + rng.random(N) * pt, 0.0, 1.0)
    if zero.size:
        u[zero] = np.nan
    return u


def pit_uniformity(
    u: Any,
    *,
    bins: int = 20,
    rng: np.random.Generator | None = None,
) -> PitResult:
    """Test PIT values for uniformity on (0, 1).

    Primary: one-sample KS against U(0, 1) (``scipy.stats.kstest``), exact for continuous data,
    which randomized PIT values are. Secondary: Pearson chi-square on an equal-width histogram
    with ``bins`` bins (reduced so each bin expects >= 5 values), useful for seeing *where* the
    mass is wrong (with :func:`randomized_pit`'s default probability order, excess mass on likely
    tokens shows up near 0, on unlikely tokens near 1). NaN marks an impossible token:
    ``pvalue=0``.
    """
    arr = _to_numpy(u).reshape(-1)
    if arr.size == 0:
        raise ValueError("no PIT values")
    nan = np.isnan(arr)
    finite = arr[~nan]
    if np.any((finite < 0) | (finite > 1)):
        raise ValueError("PIT values must lie in [0, 1]")
    n = int(arr.size)
    if nan.any():
        hist, edges = np.histogram(finite, bins=bins, range=(0.0, 1.0))
        ks = ContinuousResult(
            statistic=math.inf,
            pvalue=0.0,
            n=(n, 0),
            method="impossible outcome observed",
        )
        return PitResult(
            statistic=math.inf,
            pvalue=0.0,
            n=n,
            method=f"randomized PIT: impossible outcome observed ({int(nan.sum())} token(s) "
            "with target probability 0)",
            ks=ks,
            chisquare=None,
            histogram=_readonly(hist),
            bin_edges=_readonly(edges),
        )
    ks_res = _st.kstest(finite, "uniform")
    ks = ContinuousResult(
        statistic=float(ks_res.statistic),
        pvalue=float(ks_res.pvalue),
        n=(n, 0),
        method="one-sample Kolmogorov-Smirnov vs U(0,1)",
    )
    n_bins = max(2, min(int(bins), n // 5))
    hist, edges = np.histogram(finite, bins=n_bins, range=(0.0, 1.0))
    chisq = goodness_of_fit(hist, np.full(n_bins, 1.0 / n_bins), rng=rng)
    return PitResult(
        statistic=ks.statistic,
        pvalue=ks.pvalue,
        n=n,
        method=f"randomized PIT uniformity: KS (primary); chi-square on {n_bins} bins "
        f"p={chisq.pvalue:.3g}",
        ks=ks,
        chisquare=chisq,
        histogram=_readonly(hist),
        bin_edges=_readonly(edges),
        dof=chisq.dof,
    )


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


# --------------------------------------------------------------------------------------------
# Multiple testing
# --------------------------------------------------------------------------------------------


def adjust_pvalues(
    pvalues: Sequence[float] | Mapping[Hashable, float] | np.ndarray,
    method: Literal["holm", "fdr_bh"] = "holm",
    alpha: float = 0.01,
) -> MultipleTestResult:
    """Adjust a family of p-values (``statsmodels.stats.multitest.multipletests``).

    A verification report runs many tests (per position, per prompt, per statistic); without
    adjustment a 1% test run 100 times "finds" a bug about 63% of the time. ``"holm"`` controls
    the family-wise error rate (use it for a pass/fail verdict); ``"fdr_bh"`` controls the false
    discovery rate (use it to list which cells look off). A mapping keeps its keys as labels.
    """
    from statsmodels.stats.multitest import multipletests

    labels: tuple[Hashable, ...] | None = None
    if isinstance(pvalues, Mapping):
        labels = tuple(pvalues.keys())
        pvalues = list(pvalues.values())
    pv = _to_numpy(pvalues).reshape(-1)
    if pv.size == 0:
        raise ValueError("no p-values")
    if not np.all(np.isfinite(pv)) or np.any((pv < 0) | (pv > 1)):
        raise ValueError("p-values must be finite and in [0, 1]")
    if method not in ("holm", "fdr_bh"):
        raise ValueError("method must be 'holm' or 'fdr_bh'")
    reject, adjusted, _, _ = multipletests(pv, alpha=alpha, method=method)
    return MultipleTestResult(
        reject=tuple(bool(r) for r in reject),
        pvalues_adjusted=tuple(float(x) for x in adjusted),
        method={"holm": "Holm (FWER)", "fdr_bh": "Benjamini-Hochberg (FDR)"}[method],
        alpha=float(alpha),
        any_reject=bool(np.any(reject)),
        pvalues=tuple(float(x) for x in pv),
        labels=labels,
    )


# --------------------------------------------------------------------------------------------
# Power, sample size, minimum detectable effect
# --------------------------------------------------------------------------------------------


def zipf_law(support_size: int, exponent: float = 1.0) -> np.ndarray:
    """Zipf-like law ``p_k proportional to k^-exponent``, k = 1..support_size (a stand-in for a
    next-token distribution)."""
    if support_size < 2:
        raise ValueError("support_size must be >= 2")
    w = np.arange(1, support_size + 1, dtype=float) ** (-float(exponent))
    return w / w.sum()


def uniform_law(support_size: int) -> np.ndarray:
    """Uniform law on ``support_size`` outcomes."""
    if support_size < 2:
        raise ValueError("support_size must be >= 2")
    return np.full(support_size, 1.0 / support_size)


def _null_law(support_size_or_p: Any, law: str, exponent: float) -> np.ndarray:
    if isinstance(support_size_or_p, (int, np.integer)):
        if law == "zipf":
            return zipf_law(int(support_size_or_p), exponent)
        if law == "uniform":
            return uniform_law(int(support_size_or_p))
        raise ValueError("law must be 'zipf' or 'uniform'")
    p = _as_probs(support_size_or_p, "p")
    return p[p > 0]  # outcomes the null never produces carry no mass to move (nor power)


def _head_tail(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-p, kind="stable")
    h = (p.size + 1) // 2
    return order[:h], order[h:]


def tv_alternative(p: Any, tv: float) -> np.ndarray:
    """The deterministic alternative at TV distance ``tv`` from ``p`` used for power/sample size.

    Construction: rank outcomes by probability; the top ``ceil(K/2)`` form the head H, the rest
    the tail T. Remove mass ``tv`` from the head proportionally and add it to the tail
    proportionally: ``q = p (1 - tv / P(H))`` on H and ``q = p (1 + tv / P(T))`` on T. Then
    ``TV(p, q) = tv`` exactly and the chi-square distance is
    ``sum (q - p)^2 / p = tv^2 (1 / P(H) + 1 / P(T))``. This mimics a drafter leaking mass
    between frequent and rare tokens, spreading the change over many tokens (harder to detect
    than a change concentrated on one rare token, easier than one between two frequent tokens).
    Requires ``tv <= P(H)``.
    """
    P = _as_probs(p, "p")
    head, tail = _head_tail(P)
    ph, pt = P[head].sum(), P[tail].sum()
    if not 0 <= tv <= ph or pt <= 0:
        raise ValueError(f"tv must be in [0, {ph:.4g}] for this law (head mass)")
    q = P.copy()
    q[head] *= 1.0 - tv / ph
    q[tail] *= 1.0 + tv / pt
    return q / q.sum()


def _noncentral_power(lam: float, dof: int, alpha: float) -> float:
    crit = _st.chi2.isf(alpha, dof)
    if lam <= 0:
        return float(_st.chi2.sf(crit, dof))
    return float(_st.ncx2.sf(crit, dof, lam))


def power_gof(
    p: Any,
    q: Any,
    n: int,
    *,
    alpha: float = 0.01,
    method: Method = "pearson",
    min_expected: float = 5.0,
) -> float:
    """Analytic power of :func:`goodness_of_fit` (null ``p``) when the data come from ``q``.

    Uses the bins the test would use at this ``n`` (same pooling) and the noncentral chi-square
    law with ``dof = bins - 1`` and noncentrality ``n * sum (q - p)^2 / p`` (Pearson) or
    ``2 n KL(q || p)`` (G; equal to first order). Mass of ``q`` where ``p = 0`` is caught exactly
    ("impossible outcome"): ``power = 1 - (1 - m)^n (1 - power_rest)``.

    The noncentral law uses the null variance, so it is accurate for local alternatives and
    conservative when the alternative changes many rare bins by a large factor (their counts
    then vary more than under the null). Checked against :func:`simulated_power` for the
    :func:`tv_alternative` at TV 0.05: support 10, n=1,796: 0.900 analytic vs 0.90-0.91
    simulated; support 100, n=2,860: 0.900 vs 0.94-0.96 (the rare half grows by 38%).
    """
    P, Q = _as_probs(p, "p"), _as_probs(q, "q")
    if P.shape != Q.shape or P.ndim != 1:
        raise ValueError("p and q must be 1-D of the same length")
    key = _method_key(method)
    n = int(n)
    if n < 1:
        raise ValueError("n must be >= 1")
    m = float(Q[P == 0].sum())
    if m >= 1.0:
        return 1.0
    support = P > 0
    ps, qs = P[support], Q[support] / (1.0 - m)
    groups = _pool_groups(n * ps, min_expected)
    if len(groups) < 2:
        groups = [np.array([i]) for i in range(ps.size)]
    if len(groups) < 2:
        rest = 0.0
    else:
        pg, qg = _aggregate(ps, groups), _aggregate(qs, groups)
        if key == "pearson":
            lam = n * float(np.sum((qg - pg) ** 2 / pg))
        else:
            lam = 2.0 * n * float(special.rel_entr(qg, pg).sum())
        rest = _noncentral_power(lam, len(groups) - 1, alpha)
    return float(1.0 - (1.0 - m) ** n * (1.0 - rest))


def power_homogeneity(
    p: Any,
    q: Any,
    n_per_arm: int,
    alpha: float = 0.01,
    *,
    n_b: int | None = None,
    method: Method = "pearson",
    min_expected: float = 5.0,
) -> float:
    """Analytic power of :func:`homogeneity` for samples of ``n_per_arm`` from ``p`` and
    ``n_b`` (default the same) from ``q``.

    Noncentral chi-square with ``dof = columns - 1`` and noncentrality
    ``n_a n_b / (n_a + n_b) * sum (p - q)^2 / m``, where ``m`` is the pooled law
    ``(n_a p + n_b q) / (n_a + n_b)``; for ``n_a = n_b = n`` that is ``n/2 * sum (p-q)^2 / m``,
    half the one-sample value, hence about twice the sample size per arm. Columns are pooled as
    the test would pool them on expected counts ``min(n_a, n_b) * m``.
    """
    P, Q = _as_probs(p, "p"), _as_probs(q, "q")
    if P.shape != Q.shape or P.ndim != 1:
        raise ValueError("p and q must be 1-D of the same length")
    key = _method_key(method)
    n_a = int(n_per_arm)
    nb = n_a if n_b is None else int(n_b)
    if n_a < 1 or nb < 1:
        raise ValueError("sample sizes must be >= 1")
    N = n_a + nb
    M = (n_a * P + nb * Q) / N
    keep = M > 0
    Pk, Qk, Mk = P[keep], Q[keep], M[keep]
    groups = _pool_groups(min(n_a, nb) * Mk, min_expected)
    if len(groups) < 2:
        groups = [np.array([i]) for i in range(Mk.size)]
    if len(groups) < 2:
        return float(alpha)
    pg, qg, mg = (_aggregate(x, groups) for x in (Pk, Qk, Mk))
    if key == "pearson":
        lam = n_a * nb / N * float(np.sum((pg - qg) ** 2 / mg))
    else:
        lam = 2.0 * (
            n_a * float(special.rel_entr(pg, mg).sum()) + nb * float(special.rel_entr(qg, mg).sum())
        )
    return _noncentral_power(lam, len(groups) - 1, alpha)


def _power_at(
    p: np.ndarray,
    tv: float,
    n: int,
    alpha: float,
    two_sample: bool,
    method: Method,
    min_expected: float,
) -> float:
    q = tv_alternative(p, tv)
    if two_sample:
        return power_homogeneity(p, q, n, alpha, method=method, min_expected=min_expected)
    return power_gof(p, q, n, alpha=alpha, method=method, min_expected=min_expected)


def sample_size_for_tv(
    support_size: int | Any,
    tv: float,
    *,
    alpha: float = 0.01,
    power: float = 0.9,
    two_sample: bool = False,
    law: Literal["zipf", "uniform"] = "zipf",
    exponent: float = 1.0,
    method: Method = "pearson",
    min_expected: float = 5.0,
    max_n: int = 10**10,
) -> int:
    """Samples needed (per arm when ``two_sample``) to detect a TV-``tv`` perturbation.

    The null is a Zipf law (``p_k ~ k^-exponent``) or a uniform law on ``support_size``
    outcomes (or pass a probability vector instead); the alternative is
    :func:`tv_alternative` (mass ``tv`` moved proportionally from the more probable half to
    the less probable half). Power is the analytic noncentral chi-square power
    (:func:`power_gof` / :func:`power_homogeneity`) with the pooling the test would apply;
    the result is the smallest ``n`` found by doubling then bisection with power >= ``power``
    at level ``alpha``. Because pooling changes the degrees of freedom with ``n``, power is not
    exactly monotone in ``n``; the bisection assumes it is (the error is a few percent at most).

    The field notes quote ~1,200 (one-sample) / ~2,600 (per arm) for support 10 at TV 0.05 and
    ~1,800 / ~4,100 for support 100. This construction (Zipf exponent 1, Pearson) gives
    1,796 / 3,871 for support 10 and 2,860 / 6,600 for support 100, i.e. about 1.5x more,
    because it spreads the perturbation proportionally over half the support, a less detectable
    direction than whatever construction produced the notes' table (not documented there; the
    numbers were not tuned to match). The analytic power is also conservative when the
    alternative changes the rare bins by a large factor (see :func:`power_gof`): for support
    100 the simulated 90%-power n is about 2,350 rather than 2,860; for support 10 analytic and
    simulated agree. The ``1/tv^2`` scaling and the ~2x per-arm cost of the two-sample test
    agree with the notes. Use :func:`simulated_power` to confirm a specific design.
    """
    p = _null_law(support_size, law, exponent)
    if not 0 < tv:
        raise ValueError("tv must be > 0")
    if not 0 < power < 1 or not 0 < alpha < 1:
        raise ValueError("alpha and power must be in (0, 1)")
    tv_alternative(p, tv)  # validates that the alternative exists

    def ok(n: int) -> bool:
        return _power_at(p, tv, n, alpha, two_sample, method, min_expected) >= power

    return _smallest_n(ok, max_n)


def _smallest_n(ok: Any, max_n: int) -> int:
    """Smallest n with ok(n), by doubling then bisection (ok assumed monotone)."""
    hi = 2
    while not ok(hi):
        hi *= 2
        if hi > max_n:
            raise ValueError(f"more than {max_n} samples needed")
    lo = hi // 2  # ok(lo) is False (or lo is 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return int(hi)


def sample_size_for_laws(
    p: Any,
    q: Any,
    *,
    alpha: float = 0.01,
    power: float = 0.9,
    two_sample: bool = False,
    method: Method = "pearson",
    min_expected: float = 5.0,
    max_n: int = 10**10,
) -> int:
    """Samples needed to tell data from law ``q`` apart from the null law ``p`` with the given
    power: one-sample (:func:`power_gof` against the exact ``p``) or, with ``two_sample``,
    per arm of a homogeneity test (:func:`power_homogeneity`). Where :func:`sample_size_for_tv`
    plans for a generic TV perturbation, this one is for a known alternative -- e.g. a broken
    verifier's exact law (:func:`specviz.zoo.zoo_effects`)."""
    P, Q = _as_probs(p, "p"), _as_probs(q, "q")
    if not 0 < power < 1 or not 0 < alpha < 1:
        raise ValueError("alpha and power must be in (0, 1)")
    if np.allclose(P, Q, rtol=0, atol=1e-15):
        raise ValueError("p and q are the same law: no sample size detects no difference")

    def ok(n: int) -> bool:
        if two_sample:
            pw = power_homogeneity(P, Q, n, alpha, method=method, min_expected=min_expected)
        else:
            pw = power_gof(P, Q, n, alpha=alpha, method=method, min_expected=min_expected)
        return pw >= power

    return _smallest_n(ok, max_n)


def min_detectable_tv(
    support_size_or_p: int | Any,
    n: int,
    *,
    alpha: float = 0.01,
    power: float = 0.9,
    two_sample: bool = False,
    law: Literal["zipf", "uniform"] = "zipf",
    exponent: float = 1.0,
    method: Method = "pearson",
    min_expected: float = 5.0,
    tol: float = 1e-6,
) -> float:
    """Smallest TV (of the :func:`tv_alternative` kind) a test with ``n`` samples (per arm when
    ``two_sample``) detects with probability ``power`` at level ``alpha``.

    Report this next to every passing test: "no difference found, and a difference of TV >= x
    would have been found 90% of the time" is a result; "p = 0.4" alone is not. It inverts
    :func:`sample_size_for_tv` (bisection on ``tv``; power is monotone in ``tv`` at fixed ``n``).
    Returns ``inf`` if even the largest perturbation of this kind (all head mass moved) is not
    detectable.
    """
    p = _null_law(support_size_or_p, law, exponent)
    if p.size < 2:  # one possible outcome: no perturbation of this kind exists
        return math.inf
    head, _ = _head_tail(p)
    tv_max = float(p[head].sum()) * (1 - 1e-9)  # stay inside tv_alternative's range

    def pw(tv: float) -> float:
        return _power_at(p, tv, int(n), alpha, two_sample, method, min_expected)

    if pw(tv_max) < power:
        return math.inf
    lo, hi = 0.0, tv_max
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if pw(mid) >= power:
            hi = mid
        else:
            lo = mid
    return float(hi)


def simulated_power(
    p: Any,
    q: Any,
    n: int,
    *,
    alpha: float = 0.01,
    two_sample: bool = False,
    method: Method = "pearson",
    replicates: int = 1000,
    rng: np.random.Generator | None = None,
    min_expected: float = 5.0,
    confidence: float = 0.95,
) -> EstimateResult:
    """Monte-Carlo power of the actual test (:func:`goodness_of_fit` with null ``p`` on
    multinomial(n, q) data, or :func:`homogeneity` on samples of n from p and n from q), with a
    Clopper-Pearson interval. Use it to check the analytic :func:`power_gof` /
    :func:`power_homogeneity` (and the sample sizes built on them) at a given setting.
    """
    P, Q = _as_probs(p, "p"), _as_probs(q, "q")
    gen, seeded = _rng(rng)
    R = int(replicates)
    rejections = 0
    for _ in range(R):
        if two_sample:
            a = gen.multinomial(n, P)
            b = gen.multinomial(n, Q)
            res = homogeneity(a, b, method=method, min_expected=min_expected, rng=gen)
        else:
            res = goodness_of_fit(
                gen.multinomial(n, Q), P, method=method, min_expected=min_expected, rng=gen
            )
        rejections += res.pvalue < alpha
    ci = _st.binomtest(int(rejections), R).proportion_ci(confidence, method="exact")
    kind = "two-sample homogeneity" if two_sample else "one-sample goodness of fit"
    return EstimateResult(
        estimate=rejections / R,
        low=float(ci.low),
        high=float(ci.high),
        method=f"simulated power of the {kind} test at alpha={alpha:g}, {R} replicates "
        f"({seeded}); Clopper-Pearson interval",
        confidence=confidence,
    )


# --------------------------------------------------------------------------------------------
# Calibration
# --------------------------------------------------------------------------------------------


def calibrate(
    run_null: Callable[[np.random.Generator], Any],
    *,
    replicates: int = 200,
    seed: int | None = 0,
    alpha: float = 0.05,
    require_uniform: bool = True,
    uniform_threshold: float = 0.001,
    progress: bool = False,
) -> CalibrationResult:
    """Run a test on a true null ``replicates`` times and check it rejects at rate ``alpha``.

    ``run_null(rng)`` simulates one data set under the null and returns its p-value (or any
    result with a ``pvalue`` attribute). One Generator is created from ``seed`` and threaded
    through all replicates, never reseeded inside the loop (reseeding per replicate with a
    fixed seed would repeat the same data set and make the check meaningless).

    ``calibrated`` is True when the number of rejections lies in the central 99% binomial
    interval for ``Binomial(replicates, alpha)`` and, if ``require_uniform``, the KS test of
    p-value uniformity gives p >= ``uniform_threshold``. A correctly calibrated continuous test
    therefore fails this check with probability about 1% + 0.1%. Tests with discrete or clamped
    p-values (few bins, Monte-Carlo, Anderson-Darling's tabulated p) are legitimately not
    uniform: pass ``require_uniform=False`` for them. The negative control is to run the same
    harness on data from a perturbed law: it must come out uncalibrated.
    """
    R = int(replicates)
    if R < 1:
        raise ValueError("replicates must be >= 1")
    rng = np.random.default_rng(seed)
    iterator: Iterable[int] = range(R)
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(iterator, total=R, desc="calibrate", leave=False)
    pvals = np.empty(R)
    for i in iterator:
        out = run_null(rng)
        pv = float(getattr(out, "pvalue", out))
        if not 0.0 <= pv <= 1.0:
            raise ValueError(f"replicate {i} returned an invalid p-value {pv!r}")
        pvals[i] = pv
    rejections = int(np.count_nonzero(pvals < alpha))
    low = int(_st.binom.ppf(0.005, R, alpha))
    high = int(_st.binom.ppf(0.995, R, alpha))
    ks_p = float(_st.kstest(pvals, "uniform").pvalue)
    inside = low <= rejections <= high
    uniform = ks_p >= uniform_threshold
    calibrated = inside and (uniform or not require_uniform)
    return CalibrationResult(
        pvalues=_readonly(pvals),
        rejection_rate=rejections / R,
        rejections=rejections,
        binom_interval_99=(low, high),
        ks_uniform_pvalue=ks_p,
        calibrated=bool(calibrated),
        alpha=float(alpha),
        replicates=R,
        seed=seed,
        method=f"{R} null replicates, one Generator(seed={seed}); rejections {rejections} vs 99% "
        f"interval [{low}, {high}] at alpha={alpha:g}; KS uniformity p={ks_p:.3g}"
        + ("" if require_uniform else " (not required)"),
    )


# --------------------------------------------------------------------------------------------
# Greedy consistency
# --------------------------------------------------------------------------------------------


def _first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    m = min(len(a), len(b))
    for i in range(m):
        if a[i] != b[i]:
            return i
    return None if len(a) == len(b) else m


def greedy_consistency(
    reference_tokens: Sequence[Sequence[int]],
    candidate_tokens: Sequence[Sequence[int]],
    margins: Sequence[float | None] | None = None,
    *,
    near_tie: float = DEFAULT_NEAR_TIE,
) -> GreedyConsistencyResult:
    """Compare greedy speculative outputs with plain greedy outputs, prompt by prompt.

    Greedy speculative decoding must reproduce plain greedy decoding token for token, except
    where the target's top-1 and top-2 logits are so close that the different matmul shapes
    of a (k+1)-token verify pass and a 1-token decode pass flip the argmax (transformers #25420,
    #30413; vLLM #41758). vLLM's end-to-end tests accept ~66% exact matches with no explanation;
    here each divergence gets a verdict:

    * ``"identical"``: same tokens (``first_divergence`` is None);
    * ``"numerics"``: diverged where the target's top-1 minus top-2 logit ``margin`` (computed
      by the caller with teacher forcing on the reference prefix) is below ``near_tie``;
    * ``"bug"``: diverged with a clear margin, or with no margin supplied (an unexplained
      divergence is never excused). Catches e.g. transformers PR #28508 (drafts always accepted).

    A length difference where one output is a prefix of the other diverges at the shorter
    length (e.g. EOS vs. a continuation). ``near_tie`` defaults to 0.05 logits, generous for
    fp32 (shape-dependent reduction order moves logits by ~1e-4..1e-3); use ~0.5 for bf16.
    """
    refs = [list(_hashable(r)) for r in reference_tokens]
    cands = [list(_hashable(c)) for c in candidate_tokens]
    if len(refs) != len(cands):
        raise ValueError(f"{len(refs)} reference vs {len(cands)} candidate sequences")
    if margins is not None and len(margins) != len(refs):
        raise ValueError(f"{len(margins)} margins for {len(refs)} sequences")
    if near_tie < 0:
        raise ValueError("near_tie must be >= 0")
    divs: list[int | None] = []
    margs: list[float | None] = []
    verdicts: list[str] = []
    for i, (r, c) in enumerate(zip(refs, cands, strict=True)):
        d = _first_divergence(r, c)
        m = None if margins is None or margins[i] is None else abs(float(margins[i]))  # type: ignore[arg-type]
        divs.append(d)
        margs.append(m)
        if d is None:
            verdicts.append("identical")
        elif m is not None and m < near_tie:
            verdicts.append("numerics")
        else:
            verdicts.append("bug")
    n = len(refs)
    return GreedyConsistencyResult(
        exact_match_rate=(sum(d is None for d in divs) / n) if n else math.nan,
        first_divergence=tuple(divs),
        margins=tuple(margs),
        verdicts=tuple(verdicts),
        near_tie=float(near_tie),
        n=n,
    )
