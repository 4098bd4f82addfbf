"""Discrete outcomes: pooling, goodness of fit against an exact law, two-sample homogeneity."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats as _st

from ._results import (
    DEFAULT_MONTE_CARLO,
    GofResult,
    GroupedGofResult,
    HomogeneityResult,
    Method,
    Pooled,
)
from ._validation import (
    _LAMBDA,
    _METHOD_NAME,
    _as_counts,
    _as_probs,
    _check_labels,
    _chunks,
    _count_at_least,
    _method_key,
    _readonly,
    _rng,
)

__all__ = ["goodness_of_fit", "grouped_goodness_of_fit", "homogeneity", "counts_from_samples"]


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


#: The value-hashable key of an outcome (a token, an n-gram, a continuation).
outcome_key = _hashable
