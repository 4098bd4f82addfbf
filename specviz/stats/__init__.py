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
* greedy-consistency bookkeeping that separates numerical near ties from real bugs;
* anytime-valid sequential comparison of two discrete laws (a betting e-process that may be
  stopped whenever it is decided, and a confidence sequence on their TV distance for an
  "equivalent within tau" stop).

Why this matters (see the field notes, "Shipped mistakes"): the bugs that reached users changed
the output law by a TV distance of 0.05-0.3 (transformers #32867, #47932; vLLM #9834) or made an
impossible token appear (vLLM GHSA-8wr5-jm2h-8r4f), and they were missed because the projects'
tests had no p-value, no stated power and no negative control.

Result objects are frozen dataclasses with scipy's vocabulary (``statistic``, ``pvalue``) plus
``dof``, ``n``, ``method`` and, where meaningful, the tables that were actually tested.
Arrays inside results are read-only.
"""

from __future__ import annotations

from ._calibration import calibrate
from ._continuous import anderson_darling_2sample, ks_2sample, random_tie_ranks
from ._discrete import (
    counts_from_samples,
    goodness_of_fit,
    grouped_goodness_of_fit,
    homogeneity,
    outcome_key,
)
from ._estimates import MIN_UNITS_FOR_CI, estimate_kl, estimate_tv, kl_divergence, tv_distance
from ._greedy import greedy_consistency
from ._multiple import adjust_pvalues
from ._pit import pit_uniformity, randomized_pit
from ._power import (
    min_detectable_tv,
    power_gof,
    power_homogeneity,
    sample_size_for_laws,
    sample_size_for_tv,
    simulated_power,
    tv_alternative,
    uniform_law,
    zipf_law,
)
from ._results import (
    DEFAULT_MONTE_CARLO,
    DEFAULT_NEAR_TIE,
    CalibrationResult,
    ContinuousResult,
    EstimateResult,
    GofResult,
    GreedyConsistencyResult,
    GroupedGofResult,
    HomogeneityResult,
    ImpossibleOutcomeError,
    Method,
    MultipleTestResult,
    PitResult,
    Pooled,
)
from ._sequential import (
    PairedBettingTest,
    SequentialResult,
    SequentialTwoSample,
    TVConfidenceSequence,
    check_sequential_settings,
    sequential_homogeneity,
    sequential_method,
)

__all__ = [
    "CalibrationResult",
    "ContinuousResult",
    "DEFAULT_MONTE_CARLO",
    "DEFAULT_NEAR_TIE",
    "EstimateResult",
    "GofResult",
    "GreedyConsistencyResult",
    "GroupedGofResult",
    "HomogeneityResult",
    "ImpossibleOutcomeError",
    "MIN_UNITS_FOR_CI",
    "Method",
    "MultipleTestResult",
    "PairedBettingTest",
    "PitResult",
    "Pooled",
    "SequentialResult",
    "SequentialTwoSample",
    "TVConfidenceSequence",
    "adjust_pvalues",
    "anderson_darling_2sample",
    "calibrate",
    "check_sequential_settings",
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
    "outcome_key",
    "pit_uniformity",
    "power_gof",
    "power_homogeneity",
    "random_tie_ranks",
    "randomized_pit",
    "sample_size_for_laws",
    "sample_size_for_tv",
    "sequential_homogeneity",
    "sequential_method",
    "simulated_power",
    "tv_alternative",
    "tv_distance",
    "uniform_law",
    "zipf_law",
]
