"""Does a test reject a true null at its nominal rate?"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from scipy import stats as _st

from ._results import CalibrationResult
from ._validation import _readonly

__all__ = ["calibrate"]


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
