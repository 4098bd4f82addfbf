"""Multiple testing: Holm and Benjamini-Hochberg (statsmodels)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Literal

import numpy as np

from ._results import MultipleTestResult
from ._validation import _to_numpy

__all__ = ["adjust_pvalues"]


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
