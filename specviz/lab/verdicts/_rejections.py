"""Claims 3 and 10 from rejection points (notebook 03): a statistic and its percentile bootstrap interval over prompts decide (:class:`IntervalVerdict`, :func:`diminishing_returns`, :func:`first_rejection_share`, :func:`first_rejection_excess`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ._task_types import CANNOT_TELL, NOT_SUPPORTED, SUPPORTS

__all__ = [
    "AcceptedCounts",
    "IntervalVerdict",
    "diminishing_returns",
    "first_rejection_excess",
    "first_rejection_share",
]


# -- claims 3 and 10 from rejection points (notebook 03) ---------------------------------------

#: Per unit (a prompt, or one step of an i.i.d. run), per gamma: the accepted counts of the steps
#: that drafted a full gamma tokens.
AcceptedCounts = Mapping[str, Mapping[int, Sequence[int]]]


@dataclass(frozen=True)
class IntervalVerdict:
    """A claim's verdict from one statistic and its percentile bootstrap interval over units
    (prompts): ``supports`` when the whole interval lies on the side the claim predicts,
    ``not supported`` when it lies on the other side, ``cannot tell`` when it contains 0 or
    there are too few units (fewer than 2) for an interval. A claim that holds is reported
    "not supported" by chance in at most (1 - level) / 2 of seeded runs."""

    claim: str
    statistic: str
    estimate: float
    ci: tuple[float, float]
    units: int
    verdict: str
    reason: str = ""
    level: float = 0.95
    unit: str = "prompt"
    meaning: Mapping[str, str] | None = None

    def sentence(self) -> str:
        """The "What we saw" sentence: the number, its interval and what they allow."""
        lo, hi = self.ci
        ci = (
            f", {self.level:.0%} CI {lo:+.3f} to {hi:+.3f} over {self.units} {self.unit}s"
            if math.isfinite(lo) and math.isfinite(hi)
            else f" ({self.units} {self.unit}(s))"
        )
        est = f"{self.estimate:+.3f}" if math.isfinite(self.estimate) else "n/a"
        tail = {
            SUPPORTS: f"supports {self.claim.lower()} at this size",
            NOT_SUPPORTED: f"{self.claim.lower()} not supported at this size",
        }.get(self.verdict, "cannot tell at this size")
        extra = (self.meaning or {}).get(self.verdict, "")
        why = f" ({self.reason})" if self.reason else ""
        return f"{self.claim}: {self.statistic} {est}{ci}: {tail}{why}" + (
            f"; {extra}." if extra else "."
        )


def _count_arrays(counts: AcceptedCounts) -> tuple[list[int], np.ndarray]:
    """``(gammas, a)`` with ``a[unit, gamma]`` = (steps, accepted, tested, first rejected)."""
    gammas = sorted({int(g) for per in counts.values() for g in per})
    a = np.zeros((len(counts), len(gammas), 4))
    for i, per in enumerate(counts.values()):
        for j, g in enumerate(gammas):
            acc = np.asarray(list(per.get(g, ())), dtype=float)
            if acc.size and (acc.min() < 0 or acc.max() > g):
                raise ValueError(f"accepted counts must lie in [0, {g}]")
            a[i, j] = (acc.size, acc.sum(), np.minimum(acc + 1, g).sum(), (acc == 0).sum())
    return gammas, a


def _interval_verdict(
    counts: AcceptedCounts,
    stat: Callable[[list[int], np.ndarray], np.ndarray],
    *,
    claim: str,
    statistic: str,
    predicts: str,
    min_gammas: int,
    level: float,
    n_boot: int,
    seed: int,
    unit: str,
    meaning: Mapping[str, str] | None,
) -> IntervalVerdict:
    """``stat(gammas, totals)`` maps summed counts (..., n_gamma, 4) to the statistic; the
    claim predicts it ``"above"`` or ``"below"`` 0."""
    gammas, a = _count_arrays(counts)
    a = a[a[:, :, 0].sum(axis=1) > 0] if len(a) else a  # units with no full-gamma step: none
    base = dict(claim=claim, statistic=statistic, level=level, unit=unit, meaning=meaning)
    nan2 = (math.nan, math.nan)

    def cannot(est: float, why: str) -> IntervalVerdict:
        return IntervalVerdict(
            estimate=est, ci=nan2, units=len(a), verdict=CANNOT_TELL, reason=why, **base
        )

    if len(gammas) < min_gammas:
        why = f"{len(gammas)} gamma(s): the statistic needs at least {min_gammas}"
        return cannot(math.nan, why)
    with np.errstate(divide="ignore", invalid="ignore"):
        est = float(stat(gammas, a.sum(axis=0)))
    if len(a) < 2 or not math.isfinite(est):
        why = (
            f"{len(a)} {unit}(s) with full drafts: an interval needs at least 2"
            if len(a) < 2
            else "a gamma without full drafts"
        )
        return cannot(est, why)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), size=(n_boot, len(a)))
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.asarray(stat(gammas, a[idx].sum(axis=1)), dtype=float)
    d = d[np.isfinite(d)]
    if d.size < n_boot // 2:
        return cannot(est, "too few usable resamples")
    tail = (1 - level) / 2
    lo, hi = (float(v) for v in np.quantile(d, [tail, 1 - tail]))
    above, below = lo > 0, hi < 0
    if predicts == "below":
        above, below = below, above
    verdict = SUPPORTS if above else NOT_SUPPORTED if below else CANNOT_TELL
    reason = "the interval contains 0" if verdict == CANNOT_TELL else ""
    return IntervalVerdict(
        estimate=est, ci=(lo, hi), units=len(a), verdict=verdict, reason=reason, **base
    )


def _tokens_per_call(tot: np.ndarray) -> np.ndarray:
    """Tokens per target call per gamma from summed counts (..., n_gamma, 4)."""
    return 1.0 + tot[..., 1] / tot[..., 0]


def diminishing_returns(
    counts: AcceptedCounts,
    *,
    level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    unit: str = "prompt",
) -> IntervalVerdict:
    """Claim 3's first half: tokens per target call grow with gamma *ever more slowly*. The
    statistic is the gain per extra drafted token over the last gamma step minus the gain over
    the first one (from plain decoding, gamma 0 and 1 token per call): with gammas 2 and 4,
    ``(T(4) - T(2)) / 2 - (T(2) - 1) / 2``, where ``T(g)`` = tokens per call of the steps that
    drafted a full gamma tokens, pooled over the units. Negative supports the claim; the
    interval is a percentile bootstrap over units (prompts), seeded.

    >>> iid = {f"p{i}": {2: [2, 1, 0, 2] * 5, 4: [4, 1, 0, 2] * 5} for i in range(4)}
    >>> v = diminishing_returns(iid)
    >>> v.verdict, round(v.estimate, 3)
    ('supports', -0.375)
    >>> diminishing_returns({"p": {2: [2, 2], 4: [4, 4]}}).verdict
    'cannot tell'
    """

    def stat(gammas: list[int], tot: np.ndarray) -> np.ndarray:
        t = _tokens_per_call(tot)
        g = np.asarray(gammas, dtype=float)
        first = (t[..., 0] - 1.0) / g[0]
        last = (t[..., -1] - t[..., -2]) / (g[-1] - g[-2])
        return last - first

    return _interval_verdict(
        counts,
        stat,
        claim="Claim 3",
        statistic="tokens per call gained per extra drafted token, last gamma step minus first",
        predicts="below",
        min_gammas=2,
        level=level,
        n_boot=n_boot,
        seed=seed,
        unit=unit,
        meaning={
            SUPPORTS: "longer drafts buy ever less, while each drafted token costs the same",
            NOT_SUPPORTED: "tokens per call grew at least linearly with gamma here",
        },
    )


def first_rejection_share(
    counts: AcceptedCounts,
    *,
    often: float = 0.5,
    level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    unit: str = "prompt",
) -> IntervalVerdict:
    """Claim 10 as the article states it ("if drafts are often rejected at the first token,
    shorten gamma or change the drafter"): the share of full-gamma steps whose first drafted
    token was rejected, minus ``often`` (0.5: more often than not), every gamma pooled, with
    a bootstrap interval over units. Above 0: the cue fires (supports); below: the first
    guesses usually hold (not supported: no cue here). :func:`first_rejection_excess` asks
    the finer question (more than i.i.d. acceptance explains).

    >>> heavy = {f"p{i}": {3: [0, 0, 3, 1, 0, 0] * 4} for i in range(5)}
    >>> v = first_rejection_share(heavy)
    >>> v.verdict, round(v.estimate, 3)
    ('supports', 0.167)
    """

    def stat(gammas: list[int], tot: np.ndarray) -> np.ndarray:
        return tot[..., 3].sum(axis=-1) / tot[..., 0].sum(axis=-1) - often

    return _interval_verdict(
        counts,
        stat,
        claim="Claim 10",
        statistic=f"share of full-gamma steps that rejected the first drafted token minus {often:.2f}",
        predicts="above",
        min_gammas=1,
        level=level,
        n_boot=n_boot,
        seed=seed,
        unit=unit,
        meaning={
            SUPPORTS: f"the first drafted token is rejected in more than {often:.0%} of steps: "
            "claim 10's cue to shorten gamma or change the drafter fires",
            NOT_SUPPORTED: f"the first drafted token is rejected in fewer than {often:.0%} of "
            "steps: no cue to shorten gamma here",
        },
    )


def first_rejection_excess(
    counts: AcceptedCounts,
    *,
    level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    unit: str = "prompt",
) -> IntervalVerdict:
    """Claim 10's sign: the share of full-gamma steps that rejected the first drafted token,
    minus the truncated-geometric law's ``1 - alpha`` at the alpha fitted to the same steps
    (accepted / tested drafts), averaged over gammas weighted by steps. Above 0: rejections
    pile up at the first position beyond what i.i.d. acceptance explains -- the sign claim 10
    says to act on (shorten gamma or change the drafter). An i.i.d. pair sits at 0.

    >>> heavy = {f"p{i}": {3: [0, 0, 3, 3, 0, 3] * 4} for i in range(5)}
    >>> v = first_rejection_excess(heavy)
    >>> v.verdict, round(v.estimate, 3)
    ('supports', 0.25)
    """

    def stat(gammas: list[int], tot: np.ndarray) -> np.ndarray:
        steps = tot[..., 0]
        share = tot[..., 3] / steps
        alpha = tot[..., 1] / tot[..., 2]
        ex = np.where(steps > 0, share - (1.0 - alpha), 0.0)
        return (ex * steps).sum(axis=-1) / steps.sum(axis=-1)

    return _interval_verdict(
        counts,
        stat,
        claim="Claim 10",
        statistic="first-position rejection share minus the i.i.d. law's",
        predicts="above",
        min_gammas=1,
        level=level,
        n_boot=n_boot,
        seed=seed,
        unit=unit,
        meaning={
            SUPPORTS: "more first-token rejections than i.i.d. acceptance explains: "
            "shorten gamma or change the drafter",
            NOT_SUPPORTED: "fewer first-token rejections than the i.i.d. law: "
            "no sign to shorten gamma",
        },
    )
