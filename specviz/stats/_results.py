"""Result types of the statistics toolkit: frozen dataclasses with scipy's field names."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

import numpy as np

__all__ = [
    "Method",
    "DEFAULT_MONTE_CARLO",
    "DEFAULT_NEAR_TIE",
    "Pooled",
    "GofResult",
    "HomogeneityResult",
    "ContinuousResult",
    "PitResult",
    "EstimateResult",
    "MultipleTestResult",
    "CalibrationResult",
    "GreedyConsistencyResult",
    "ImpossibleOutcomeError",
    "GroupedGofResult",
]


Method = Literal["pearson", "g"]

#: Monte-Carlo replicates used when a chi-square p-value must be simulated and the caller did not
#: ask for a number (pooling left fewer than two bins).
DEFAULT_MONTE_CARLO = 9999

#: Default absolute logit margin under which a greedy divergence is attributed to numerics.
DEFAULT_NEAR_TIE = 0.05


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
