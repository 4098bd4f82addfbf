"""Two-sample tests of continuous (or randomized-rank) summaries: KS and Anderson-Darling."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats as _st

from ._results import ContinuousResult
from ._validation import _rng, _to_numpy

__all__ = ["random_tie_ranks", "ks_2sample", "anderson_darling_2sample"]


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
