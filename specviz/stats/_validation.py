"""Input checks and small helpers shared by the statistics topics."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np

from ._results import Method

_PROB_ATOL = 1e-4  # float32 laws over ~1e5 tokens sum to 1 only within ~1e-5
_LAMBDA = {"pearson": "pearson", "g": "log-likelihood"}
_METHOD_NAME = {"pearson": "Pearson chi-square", "g": "G-test (log-likelihood ratio)"}
# Relative tolerance when counting simulated statistics >= the observed one, so that ties that
# differ only by rounding count as ties (R's chisq.test does the same with 1 + 64 eps).
_TIE_RTOL = 64 * np.finfo(float).eps


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


def _count_at_least(sim: np.ndarray, stat: float) -> int:
    return int(np.count_nonzero(sim >= stat * (1.0 - _TIE_RTOL) - 1e-12))


def _chunks(total: int, size: int) -> Iterable[int]:
    while total > 0:
        step = min(size, total)
        yield step
        total -= step
