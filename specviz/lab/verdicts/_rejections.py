"""Claims 3 and 10 from rejection points (notebook 03): a statistic and its percentile bootstrap interval over prompts decide (:class:`IntervalVerdict`, :func:`diminishing_returns`, :func:`first_rejection_share`, :func:`first_rejection_excess`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ._task_types import CANNOT_TELL, NOT_SUPPORTED, SUPPORTS

__all__ = [
    "AcceptedCounts",
    "IntervalVerdict",
    "SpeedRatio",
    "diminishing_returns",
    "first_rejection_excess",
    "first_rejection_share",
    "gamma_profile",
    "gamma_speed_ratio",
    "per_group_verdicts",
    "prompt_speeds",
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


def _step_gains(gammas: list[int], tot: np.ndarray) -> np.ndarray:
    """Tokens per call gained per extra drafted token over each gamma step, the first from
    plain decoding (gamma 0, 1 token per call): shape (..., n_gamma)."""
    t = _tokens_per_call(tot)
    full = np.concatenate([np.ones(t.shape[:-1] + (1,)), t], axis=-1)
    return np.diff(full, axis=-1) / np.diff(np.asarray([0, *gammas], dtype=float))


def gamma_profile(counts: AcceptedCounts) -> dict[int, tuple[float, float, int]]:
    """Per gamma, pooled over the units: ``(tokens per call, acceptance, steps)`` of the steps
    that drafted a full gamma tokens; acceptance = accepted / tested drafts (the
    truncated-geometric law's fitted alpha). Each gamma's runs sample their own texts, so the
    acceptance can differ from gamma to gamma -- and then tokens per call can *fall* with gamma,
    which one drafter on the same contexts cannot do.

    >>> {g: (t, round(a, 3), n) for g, (t, a, n) in gamma_profile({"p": {2: [2, 0], 4: [1, 0]}}).items()}
    {2: (2.0, 0.667, 2), 4: (1.5, 0.333, 2)}
    """
    gammas, a = _count_arrays(counts)
    tot = a.sum(axis=0)
    out = {}
    for j, g in enumerate(gammas):
        steps, acc, tested = tot[j, 0], tot[j, 1], tot[j, 2]
        if steps:
            out[g] = (float(1.0 + acc / steps), float(acc / tested), int(steps))
    return out


def diminishing_returns(
    counts: AcceptedCounts,
    *,
    level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    unit: str = "prompt",
) -> IntervalVerdict:
    """Claim 3's first half: tokens per target call *grow* with gamma *ever more slowly*. The
    statistic is the gain per extra drafted token over the last gamma step minus the gain over
    the first one (from plain decoding, gamma 0 and 1 token per call): with gammas 2 and 4,
    ``(T(4) - T(2)) / 2 - (T(2) - 1) / 2``, where ``T(g)`` = tokens per call of the steps that
    drafted a full gamma tokens, pooled over the units. Negative says slower growth; the
    interval is a percentile bootstrap over units (prompts), seeded.

    A fall is not slower growth. Every gamma's run samples its own texts, so acceptance differs
    between the gamma runs (:func:`gamma_profile`), and ``T`` can fall with gamma although one
    drafter on the same contexts can only gain; the second difference alone would count such a
    fall as support. So the rule asks for growth first (an intersection-union test, each part
    at the same level):

    * *supports* only when the interval of the second difference lies below 0 **and** the
      interval of the smallest per-token gain over any gamma step (plain decoding to the first
      gamma included) lies above 0: growth at every step, and slower at the end;
    * *cannot tell* when tokens per call fell (or stayed) over some gamma step -- the reason
      names the step and every gamma's acceptance -- or when the growth is inside the noise;
    * *not supported* when the second difference's interval lies above 0 and tokens per call
      grew at every step (at least linear growth).

    >>> iid = {f"p{i}": {2: [2, 1, 0, 2] * 5, 4: [4, 1, 0, 2] * 5} for i in range(4)}
    >>> v = diminishing_returns(iid)
    >>> v.verdict, round(v.estimate, 3)
    ('supports', -0.375)
    >>> diminishing_returns({"p": {2: [2, 2], 4: [4, 4]}}).verdict
    'cannot tell'
    >>> fell = {f"p{i}": {2: [2, 2, 1, 2] * 5, 4: [1, 0, 2, 1] * 5} for i in range(4)}
    >>> v = diminishing_returns(fell)
    >>> v.verdict, v.reason.split(":")[0]
    ('cannot tell', 'tokens per call fell from gamma 2 to 4 (2.750 -> 2.000)')
    """

    def stat(gammas: list[int], tot: np.ndarray) -> np.ndarray:
        t = _tokens_per_call(tot)
        g = np.asarray(gammas, dtype=float)
        first = (t[..., 0] - 1.0) / g[0]
        last = (t[..., -1] - t[..., -2]) / (g[-1] - g[-2])
        return last - first

    def smallest_gain(gammas: list[int], tot: np.ndarray) -> np.ndarray:
        return _step_gains(gammas, tot).min(axis=-1)

    common = dict(min_gammas=2, level=level, n_boot=n_boot, seed=seed, unit=unit)
    v = _interval_verdict(
        counts,
        stat,
        claim="Claim 3",
        statistic="tokens per call gained per extra drafted token, last gamma step minus first",
        predicts="below",
        meaning={
            SUPPORTS: "longer drafts buy ever less, while each drafted token costs the same",
            NOT_SUPPORTED: "tokens per call grew at least linearly with gamma here",
        },
        **common,
    )
    if not math.isfinite(v.estimate):
        return v
    growth = _interval_verdict(
        counts, smallest_gain, claim="", statistic="", predicts="above", meaning=None, **common
    )
    profile = gamma_profile(counts)
    gammas = sorted(profile)
    pairs = list(zip([0, *gammas[:-1]], gammas, strict=True))
    tpc = {0: 1.0, **{g: profile[g][0] for g in gammas}}
    fell = [(a, b) for a, b in pairs if tpc[b] <= tpc[a]]
    if fell:
        a, b = fell[0]
        acc = ", ".join(f"{g}: {profile[g][1]:.2f}" for g in gammas)
        why = (
            f"tokens per call fell from gamma {a} to {b} ({tpc[a]:.3f} -> {tpc[b]:.3f}): each "
            f"gamma's run sampled its own texts, so acceptance differed between the gamma runs "
            f"(gamma {acc}); a fall is not slower growth"
        )
    elif v.verdict == SUPPORTS and growth.verdict != SUPPORTS:
        why = (
            "tokens per call did not grow beyond the noise at every gamma step (smallest gain "
            f"per drafted token {growth.estimate:+.3f}, {level:.0%} CI "
            f"{growth.ci[0]:+.3f} to {growth.ci[1]:+.3f}): slower growth needs growth first"
        )
    else:
        return v
    return replace(v, verdict=CANNOT_TELL, reason=why)


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


# -- per category, and the clock (notebook 03) --------------------------------------------------


def per_group_verdicts(
    verdict: Callable[..., IntervalVerdict],
    counts: AcceptedCounts,
    group_of: Mapping[str, str],
    **kwargs: object,
) -> dict[str, IntervalVerdict]:
    """One of this module's verdicts (:func:`first_rejection_share`, :func:`diminishing_returns`,
    ...) on each group's units alone (``group_of[unit]``: e.g. a prompt's task category), in
    the order the groups first appear; each verdict's claim reads ``"Claim 10 (code)"``. A
    pooled verdict can fire a cue that a group's own numbers do not (claim 10's "shorten gamma"
    on a category whose first drafts usually hold).

    >>> counts = {"a1": {2: [0, 0, 0, 1]}, "a2": {2: [0, 0, 1, 0]},
    ...           "b1": {2: [2, 2, 2, 0]}, "b2": {2: [2, 1, 2, 2]}}
    >>> vs = per_group_verdicts(first_rejection_share, counts, {"a1": "a", "a2": "a",
    ...                         "b1": "b", "b2": "b"})
    >>> [(g, v.claim, v.verdict) for g, v in vs.items()]
    [('a', 'Claim 10 (a)', 'supports'), ('b', 'Claim 10 (b)', 'not supported')]
    """
    groups: dict[str, dict[str, Mapping[int, Sequence[int]]]] = {}
    for unit, per in counts.items():
        groups.setdefault(group_of[unit], {})[unit] = per
    out = {}
    for group, sub in groups.items():
        v = verdict(sub, **kwargs)
        out[group] = replace(v, claim=f"{v.claim} ({group})")
    return out


def prompt_speeds(runs: Sequence[Any]) -> dict[str, dict[int, float]]:
    """Per prompt, per gamma: tokens per second of one run of :func:`specviz.lab.run_prompts`
    (``prompt_id``, ``gamma``, ``result.new_tokens``, ``result.total_time``); runs with no
    time are left out. The unit :func:`gamma_speed_ratio` pairs gammas on."""
    out: dict[str, dict[int, float]] = {}
    for r in runs:
        res = r.result
        if res.total_time > 0:
            out.setdefault(r.prompt_id, {})[int(r.gamma)] = len(res.new_tokens) / res.total_time
    return out


@dataclass(frozen=True)
class SpeedRatio:
    """Tokens per second at gamma ``a`` over gamma ``b``, prompt by prompt (the same prompt at
    both gammas): ``estimate`` is the median of the per-prompt ratios, ``ci`` its seeded
    percentile bootstrap interval over prompts (with fewer than
    :data:`~specviz.lab.verdicts.MIN_UNITS_FOR_CI` prompts: the ratios' range), ``verdict``
    ``"gamma a faster"``, ``"gamma b faster"`` or ``"inside the noise"`` (the interval or range
    contains 1: the spread across prompts is larger than the difference)."""

    a: int
    b: int
    estimate: float
    ci: tuple[float, float]
    units: int
    verdict: str

    def phrase(self) -> str:
        """``"gamma 2 / gamma 6 per prompt 1.32x (95% CI 1.10x-1.50x over 5 prompts): gamma 2
        faster"``."""
        from ._experiments import interval_label

        if not self.units:
            return f"gamma {self.a} / gamma {self.b}: no prompt ran both"
        if self.units < 2:
            spread = "1 prompt: no spread to compare with"
        else:
            spread = interval_label(*self.ci, self.units)
        return (
            f"gamma {self.a} / gamma {self.b} per prompt {self.estimate:.2f}x ({spread}): "
            f"{self.verdict}"
        )


def gamma_speed_ratio(
    speeds: Mapping[str, Mapping[int, float]],
    a: int,
    b: int,
    *,
    level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> SpeedRatio:
    """Whether gamma ``a`` ran faster than gamma ``b`` on this machine, beyond the spread across
    prompts: per prompt that ran both (``speeds`` from :func:`prompt_speeds`), tokens per second
    at ``a`` over at ``b``; their median, and a seeded percentile bootstrap interval of the
    median over prompts (with fewer than 3 prompts the ratios' range, named so). Medians, as
    :func:`specviz.lab.run_timings`: one run paused by a shared machine moves one ratio, not
    the verdict. Inside the noise whenever the interval (or range) contains 1.

    >>> sp = {f"p{i}": {2: 13.0 + i * 0.1, 6: 10.0} for i in range(5)}
    >>> gamma_speed_ratio(sp, 2, 6).verdict
    'gamma 2 faster'
    >>> sp = {"p0": {2: 12.1, 6: 11.7}, "p1": {2: 11.0, 6: 12.0}, "p2": {2: 12.5, 6: 11.9}}
    >>> gamma_speed_ratio(sp, 2, 6).verdict
    'inside the noise'
    """
    from ._experiments import MIN_UNITS_FOR_CI

    r = np.asarray(
        [per[a] / per[b] for per in speeds.values() if a in per and b in per and per[b] > 0],
        dtype=float,
    )
    if not r.size:
        return SpeedRatio(a, b, math.nan, (math.nan, math.nan), 0, "inside the noise")
    est = float(np.median(r))
    if r.size >= MIN_UNITS_FOR_CI:
        rng = np.random.default_rng(seed)
        boot = np.median(r[rng.integers(0, r.size, size=(n_boot, r.size))], axis=1)
        tail = (1 - level) / 2
        lo, hi = (float(x) for x in np.quantile(boot, [tail, 1 - tail]))
    else:
        lo, hi = float(r.min()), float(r.max())
    if r.size >= 2 and lo > 1:
        verdict = f"gamma {a} faster"
    elif r.size >= 2 and hi < 1:
        verdict = f"gamma {b} faster"
    else:
        verdict = "inside the noise"
    return SpeedRatio(a, b, est, (lo, hi), int(r.size), verdict)
