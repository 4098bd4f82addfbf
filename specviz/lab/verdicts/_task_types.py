"""Claim 2 -- acceptance depends on the task type -- from a drafter x gamma x category grid (notebook 07): :class:`TaskTypeEffect`, :func:`task_type_effect`, :func:`task_type_effects`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "FORMATTED_CATEGORIES",
    "OPEN_CATEGORIES",
    "TaskTypeEffect",
    "task_type_effect",
    "task_type_effects",
]


# -- claim 2: acceptance depends on the task type ----------------------------------------------

#: Formatted, repetitive tasks (claim 2: they accept more than open writing).
FORMATTED_CATEGORIES = ("structured", "extraction", "code")
#: Open writing.
OPEN_CATEGORIES = ("chat_writing",)

SUPPORTS, NOT_SUPPORTED, CANNOT_TELL = "supports", "not supported", "cannot tell"


@dataclass(frozen=True)
class TaskTypeEffect:
    """Claim 2 for one drafter: pooled acceptance (accepted / drafted) on formatted prompts
    minus on open writing, with a bootstrap interval over prompts (the unit the claim is
    about), and the verdict it allows at this size:

    * ``supports``: the whole interval is above 0 (formatted prompts accept more);
    * ``not supported``: the whole interval is below 0 (open writing accepts more);
    * ``cannot tell``: the interval contains 0, or there are too few prompts for one
      (fewer than 2 per group) or nothing was drafted in a group.
    """

    drafter: str
    formatted_rate: float
    open_rate: float
    difference: float
    ci: tuple[float, float]
    formatted_prompts: int
    open_prompts: int
    verdict: str
    reason: str = ""
    level: float = 0.95
    groups: tuple[str, str] = ("formatted", "open-writing")  # how the sentence names them

    def sentence(self) -> str:
        """The "What we saw" sentence: the numbers, then what they allow."""
        lo, hi = self.ci
        ci = (
            f" ({self.level:.0%} CI {lo:+.1%} to {hi:+.1%})"
            if math.isfinite(lo) and math.isfinite(hi)
            else ""
        )
        head = (
            f"Claim 2, {self.drafter}: acceptance {_pct(self.formatted_rate)} on "
            f"{self.formatted_prompts} {self.groups[0]} prompt(s) vs {_pct(self.open_rate)} on "
            f"{self.open_prompts} {self.groups[1]} prompt(s), difference "
            f"{_pct(self.difference, sign=True)}{ci}"
        )
        if self.verdict == SUPPORTS:
            tail = "supports claim 2 at this size"
        elif self.verdict == NOT_SUPPORTED:
            tail = f"claim 2 not supported at this size: {self.groups[1]} prompts accepted more"
        else:
            tail = "cannot tell at this size"
        return f"{head}: {tail}" + (f" ({self.reason})." if self.reason else ".")


def _pct(x: float, *, sign: bool = False) -> str:
    if not math.isfinite(x):
        return "n/a"
    return f"{x:+.1%}" if sign else f"{x:.1%}"


def task_type_effect(
    formatted: Sequence[tuple[int, int]],
    open_writing: Sequence[tuple[int, int]],
    *,
    drafter: str = "",
    level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    groups: tuple[str, str] = ("formatted", "open-writing"),
) -> TaskTypeEffect:
    """Claim 2 from per-prompt ``(accepted, drafted)`` counts of the two groups: pooled
    acceptance difference with a percentile bootstrap interval, prompts resampled within each
    group (seeded: the same counts give the same verdict). See :class:`TaskTypeEffect`.

    >>> e = task_type_effect([(9, 10), (8, 10)], [(1, 10), (2, 10)], drafter="d")
    >>> e.verdict, round(e.difference, 2)
    ('supports', 0.7)
    >>> task_type_effect([(1, 10), (2, 10)], [(9, 10), (8, 10)]).verdict
    'not supported'
    >>> task_type_effect([(9, 10)], [(1, 10)]).verdict
    'cannot tell'
    """
    f = np.asarray(list(formatted), dtype=float).reshape(-1, 2)
    o = np.asarray(list(open_writing), dtype=float).reshape(-1, 2)

    def rate(x: np.ndarray) -> float:
        d = x[:, 1].sum()
        return float(x[:, 0].sum() / d) if d > 0 else math.nan

    fr, orate = rate(f), rate(o)
    diff = fr - orate
    nan2 = (math.nan, math.nan)
    base = dict(
        drafter=drafter,
        formatted_rate=fr,
        open_rate=orate,
        difference=diff,
        formatted_prompts=len(f),
        open_prompts=len(o),
        level=level,
        groups=tuple(groups),
    )
    if not math.isfinite(diff):
        why = "nothing drafted on " + ("formatted prompts" if math.isnan(fr) else "open writing")
        if not len(f) or not len(o):
            why = "no " + ("formatted" if not len(f) else "open-writing") + " prompts in this run"
        return TaskTypeEffect(ci=nan2, verdict=CANNOT_TELL, reason=why, **base)
    if min(len(f), len(o)) < 2:
        why = (
            f"{len(f)} formatted and {len(o)} open-writing prompt(s): an interval over prompts "
            "needs at least 2 of each"
        )
        return TaskTypeEffect(ci=nan2, verdict=CANNOT_TELL, reason=why, **base)
    rng = np.random.default_rng(seed)

    def boot(x: np.ndarray) -> np.ndarray:
        idx = rng.integers(0, len(x), size=(n_boot, len(x)))
        acc, dra = x[idx, 0].sum(axis=1), x[idx, 1].sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(dra > 0, acc / np.maximum(dra, 1), np.nan)

    d = boot(f) - boot(o)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return TaskTypeEffect(ci=nan2, verdict=CANNOT_TELL, reason="no usable resample", **base)
    tail = (1 - level) / 2
    lo, hi = (float(v) for v in np.quantile(d, [tail, 1 - tail]))
    verdict = SUPPORTS if lo > 0 else NOT_SUPPORTED if hi < 0 else CANNOT_TELL
    reason = "the interval contains 0" if verdict == CANNOT_TELL else ""
    return TaskTypeEffect(ci=(lo, hi), verdict=verdict, reason=reason, **base)


def task_type_effects(
    grid: Any,
    *,
    gamma: int | None = None,
    mode: str | None = None,
    formatted: Sequence[str] = FORMATTED_CATEGORIES,
    open_writing: Sequence[str] = OPEN_CATEGORIES,
    level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> list[TaskTypeEffect]:
    """Claim 2 per drafter of a :func:`run_grid` frame (optionally one gamma and mode): the
    cells of each prompt are pooled into its ``(accepted, drafted)``, then
    :func:`task_type_effect` compares the formatted categories with open writing."""
    df = grid
    if gamma is not None:
        df = df[df["gamma"] == gamma]
    if mode is not None:
        df = df[df["mode"] == mode]
    out = []
    for drafter, sub in df.groupby("drafter", sort=False):
        per = sub.groupby(["category", "prompt_id"], sort=False)[["accepted", "drafted"]].sum()
        per = per.reset_index()

        def counts(cats: Sequence[str], per: Any = per) -> list[tuple[int, int]]:
            rows = per[per["category"].isin(list(cats))]
            return list(zip(rows["accepted"].astype(int), rows["drafted"].astype(int), strict=True))

        out.append(
            task_type_effect(
                counts(formatted),
                counts(open_writing),
                drafter=str(drafter),
                level=level,
                n_boot=n_boot,
                seed=seed,
            )
        )
    return out
