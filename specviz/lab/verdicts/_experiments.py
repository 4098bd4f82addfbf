"""Claim verdicts the notebooks print, computed here so that a cell only calls them.

Each verdict is a fixed rule on measured numbers, stated in its docstring, and can come out
either way. Shared pieces:

* :func:`ratio_verdict` -- a ratio of sums (tokens per call, tokens per second) between two
  arms measured on the same prompts, with a percentile bootstrap interval over the prompts;
* :func:`exactness_lines` -- lossless rules and shipped shortcuts against an exact law
  (notebooks 11 and 12): per rule caught / consistent / cannot tell, and the claim 6 and 9
  verdicts;
* :func:`claim7_verdict` -- greedy identity split into "speculation changed the text" and
  "precision changed the text" (notebook 06);
* :func:`coverage_verdict` -- a cross-vocabulary pair's coverage per task category with an
  interval over prompts (notebook 12);
* :func:`first_token_tv_note` -- the plug-in TV of a consistency check next to what two
  identical samplers would show at that sample size (its upward bias), and the bootstrap
  bias-corrected estimate with its own interval;
* :func:`next_gamma` -- theory's next gamma, only on enough drafted tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ...checks.report import outcome_phrase
from ...stats import MIN_UNITS_FOR_CI  # noqa: F401 (re-exported: verdicts.MIN_UNITS_FOR_CI)
from ._single_run import CONTRADICTS, ClaimLine, p_phrase

__all__ = [
    "RatioVerdict",
    "ratio_verdict",
    "speedup_verdict",
    "SLOW_RUN_FACTOR",
    "slow_runs",
    "speed_lines",
    "exactness_lines",
    "samples_shown",
    "claim7_verdict",
    "greedy_identity_line",
    "mixed_precision_line",
    "coverage_verdict",
    "kruskal_best_p",
    "first_token_tv_note",
    "NextGamma",
    "next_gamma",
    "alone_sentence",
    "claim1_lines",
    "claim11_costs",
    "grid_speedup",
    "accepted_length_intervals",
    "MIN_UNITS_FOR_CI",
    "interval_label",
]

SUPPORTS, NOT_SUPPORTED, CANNOT_TELL = "supports", "not supported", "cannot tell"


# -- a ratio between two arms, with an interval over prompts ----------------------------------


def interval_label(
    lo: float,
    hi: float,
    units: int,
    *,
    level: float = 0.95,
    sep: str = "-",
    over: bool = True,
    fmt: str = "{:.2f}x",
) -> str:
    """How an interval over ``units`` prompts is printed: ``"95% CI 1.29x-1.64x over 3
    prompts"``, or with fewer than :data:`MIN_UNITS_FOR_CI` prompts ``"range 1.29x-1.64x over 2
    prompts, too few for a 95% interval"`` -- the same numbers, named by what they are.
    ``fmt`` formats each bound (a ratio by default; ``"{:.3f}"`` for a share).

    >>> interval_label(1.29, 1.64, 3)
    '95% CI 1.29x-1.64x over 3 prompts'
    >>> interval_label(1.29, 1.64, 2)
    'range 1.29x-1.64x over 2 prompts, too few for a 95% interval'
    >>> interval_label(0.635, 0.988, 2, fmt="{:.3f}")
    'range 0.635-0.988 over 2 prompts, too few for a 95% interval'
    """
    where = f" over {units} prompts" if over else ""
    bounds = f"{fmt.format(lo)}{sep}{fmt.format(hi)}"
    if units < MIN_UNITS_FOR_CI:
        return f"range {bounds} over {units} prompts, too few for a {level:.0%} interval"
    return f"{level:.0%} CI {bounds}{where}"


@dataclass(frozen=True)
class RatioVerdict:
    """``estimate`` (a ratio, 1 = no difference) with its bootstrap interval over ``units``
    prompts; ``verdict`` is ``supports`` when the whole interval lies beyond ``1 + margin``
    on the side the claim predicts, ``not supported`` when it lies beyond ``1 - margin`` on
    the other, else ``cannot tell``."""

    claim: str
    statistic: str
    estimate: float
    ci: tuple[float, float]
    units: int
    verdict: str
    meaning: str = ""
    margin: float = 0.0
    level: float = 0.95
    #: printed inside the interval's parenthesis (e.g. the per-prompt median speed-up).
    aside: str = ""

    def sentence(self) -> str:
        lo, hi = self.ci
        aside = f"; {self.aside}" if self.aside else ""
        ci = (
            f" ({interval_label(lo, hi, self.units, level=self.level, sep=' to ')}{aside})"
            if math.isfinite(lo)
            else f" ({self.units} prompt(s): an interval needs at least 2{aside})"
        )
        if self.claim.startswith("Claim"):
            tail = {SUPPORTS: f"supports {self.claim.lower()} at this size",
                    NOT_SUPPORTED: f"{self.claim.lower()} not supported at this size"}.get(
                self.verdict, "cannot tell at this size")  # fmt: skip
        else:  # a measurement, not a claim: the side it came out on
            tail = {SUPPORTS: "above 1 at this size", NOT_SUPPORTED: "below 1 at this size"}.get(
                self.verdict, "cannot tell at this size")  # fmt: skip
        extra = f" -- {self.meaning}" if self.meaning else ""
        return f"{self.claim}: {self.statistic} {self.estimate:.2f}x{ci}: {tail}{extra}."


def ratio_verdict(
    num: Mapping[str, Sequence[float]],
    den: Mapping[str, Sequence[float]],
    *,
    claim: str,
    statistic: str,
    predicts: str = "above",
    margin: float = 0.0,
    meanings: Mapping[str, str] | None = None,
    level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    interval: str = "bootstrap",
) -> RatioVerdict:
    """The ratio ``(sum a / sum b) / (sum c / sum d)`` of two arms, where ``num = {"a": ...,
    "b": ...}`` and ``den = {"c": ..., "d": ...}`` hold one value per prompt (e.g. tokens and
    target calls of the tree, then of the chain), with a seeded percentile bootstrap over
    the prompts. The claim predicts the ratio ``"above"`` or ``"below"`` 1; ``margin`` widens
    the band of "no difference" (e.g. a timing noise floor).

    ``interval="jackknife_t"`` replaces the bootstrap with a leave-one-prompt-out jackknife
    standard error of the log ratio and Student's t with ``units - 1`` degrees of freedom:
    at 3-6 prompts a percentile bootstrap is too narrow (it covers ~85% at 5 prompts, not
    95%), and a decision taken on a handful of timed prompts needs the honest width. Below
    :data:`MIN_UNITS_FOR_CI` prompts it gives no interval (NaN) and the verdict cannot tell.

    >>> v = ratio_verdict({"t": [10, 12, 9], "c": [4, 5, 4]}, {"t": [10, 12, 9], "c": [8, 9, 8]},
    ...                   claim="Claim 1", statistic="tokens per call, tree / chain")
    >>> v.verdict, round(v.estimate, 2)
    ('supports', 1.92)
    """
    (na, a), (nb, b) = ((k, np.asarray(v, float)) for k, v in num.items())
    (nc, c), (nd, d) = ((k, np.asarray(v, float)) for k, v in den.items())
    cols = np.stack([a, b, c, d], axis=1)  # [units, 4]

    def stat(s: np.ndarray) -> np.ndarray:
        return (s[..., 0] / s[..., 1]) / (s[..., 2] / s[..., 3])

    est = float(stat(cols.sum(axis=0)))
    meanings = meanings or {}
    if interval not in ("bootstrap", "jackknife_t"):
        raise ValueError(f"interval must be 'bootstrap' or 'jackknife_t', got {interval!r}")
    fewest = MIN_UNITS_FOR_CI if interval == "jackknife_t" else 2
    if len(cols) < fewest:
        return RatioVerdict(claim, statistic, est, (math.nan, math.nan), len(cols), CANNOT_TELL,
                            meanings.get(CANNOT_TELL, ""), margin, level)  # fmt: skip
    tail = (1 - level) / 2
    if interval == "jackknife_t":
        lo, hi = _jackknife_t(cols, stat, est, tail)
    else:
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, len(cols), size=(n_boot, len(cols)))
        with np.errstate(divide="ignore", invalid="ignore"):
            boot = stat(cols[idx].sum(axis=1))
        boot = boot[np.isfinite(boot)]
        lo, hi = (float(x) for x in np.quantile(boot, [tail, 1 - tail]))
    above, below = lo > 1 + margin, hi < 1 - margin
    if predicts == "below":
        above, below = below, above
    verdict = SUPPORTS if above else NOT_SUPPORTED if below else CANNOT_TELL
    return RatioVerdict(claim, statistic, est, (lo, hi), len(cols), verdict,
                        meanings.get(verdict, ""), margin, level)  # fmt: skip


def _jackknife_t(
    cols: np.ndarray, stat: Callable[[np.ndarray], np.ndarray], est: float, tail: float
) -> tuple[float, float]:
    """A t interval for a ratio of sums: the leave-one-unit-out jackknife standard error of
    its log, Student's t quantile at ``units - 1`` degrees of freedom, back on the ratio
    scale (so it stays positive and is symmetric in the log, as a speed-up is)."""
    from scipy import stats as st

    n = len(cols)
    total = cols.sum(axis=0)
    loo = np.log(stat(total[None, :] - cols))  # [units]: the log ratio without each unit
    se = math.sqrt((n - 1) / n * float(np.sum((loo - loo.mean()) ** 2)))
    half = float(st.t.ppf(1 - tail, n - 1)) * se
    return math.exp(math.log(est) - half), math.exp(math.log(est) + half)


def speedup_verdict(
    plain: Mapping[str, Sequence[float]],
    spec: Mapping[str, Sequence[float]],
    *,
    claim: str,
    label: str,
    margin: float = 0.0,
    seed: int = 0,
    interval: str = "bootstrap",
) -> RatioVerdict:
    """Wall-clock speed-up of ``spec`` over ``plain``: tokens per second of each, per prompt
    (``{"tokens": [...], "seconds": [...]}``), as :func:`ratio_verdict` (above 1: speculation
    faster; ``interval`` as there). ``margin`` is the timing noise floor a speed-up must
    clear."""
    return ratio_verdict(
        {"tokens": spec["tokens"], "seconds": spec["seconds"]},
        {"tokens": plain["tokens"], "seconds": plain["seconds"]},
        claim=claim,
        statistic=f"wall-clock speed-up of {label} over plain decoding",
        margin=margin,
        meanings={
            SUPPORTS: f"{label} paid on this machine",
            NOT_SUPPORTED: f"{label} cost more than it saved on this machine",
            CANNOT_TELL: "the interval contains 1",
        },
        seed=seed,
        interval=interval,
    )


#: A run whose seconds per target call exceed this many times the median of the *other* runs
#: of the same arm is taken as a slow spell of the shared machine and left out of the timing
#: lines. Seconds per call, not per token, so a short answer is not flagged for its prefill;
#: 3x, because per-call times of one arm on one machine spread well under 2x across prompts
#: (12's committed report: 1.0-2.1 s per intersection call in 15 runs, and one run at 12.6 s
#: that alone moved the ratio of summed seconds from 1.09x to 0.65x).
SLOW_RUN_FACTOR = 3.0


def slow_runs(
    seconds: Sequence[float], calls: Sequence[float], *, factor: float = SLOW_RUN_FACTOR
) -> dict[int, tuple[float, float]]:
    """The runs of one arm timed during a slow spell: ``{index: (seconds per call, median
    seconds per call of the other runs)}`` for every run whose seconds per target call exceed
    ``factor`` x the median of the other runs. The median of the *others*, so the slow run
    does not raise its own yardstick; fewer than 3 runs flag nothing (no "others" to speak of).

    >>> slow_runs([13.2, 33.0, 200.9, 16.9], [10, 16, 16, 10])
    {2: (12.55625, 1.69)}
    >>> slow_runs([1.0, 9.0], [1, 1])
    {}
    """
    per = np.asarray(seconds, float) / np.maximum(np.asarray(calls, float), 1.0)
    if len(per) < 3:
        return {}
    out = {}
    for i, x in enumerate(per):
        med = float(np.median(np.delete(per, i)))
        if med > 0 and x > factor * med:
            out[i] = (float(x), med)
    return out


def _timed(
    plain: Mapping[str, Sequence[float]],
    spec: Mapping[str, Sequence[float]],
    label: str,
    names: Sequence[str] | None,
    factor: float,
) -> tuple[list[int], str]:
    """The prompts kept for the timing lines of ``spec`` against ``plain`` (a prompt goes
    when either arm's run on it is slow, see :func:`slow_runs`: the speed-up is paired) and
    the note that says which went and why ("" when none)."""
    n = len(plain["seconds"])
    flagged = {
        arm: slow_runs(d["seconds"], d["calls"], factor=factor)
        for arm, d in (("plain decoding", plain), (label, spec))
    }
    left = sorted({i for f in flagged.values() for i in f})
    if not left or len(left) == n:  # nothing slow, or nothing left to time: keep every run
        return list(range(n)), ""
    parts = []
    for arm, f in flagged.items():
        for i, (x, med) in sorted(f.items()):
            who = f"prompt {i + 1}" + (f" ({names[i]})" if names is not None else "")
            parts.append(f"{who}: {arm} {x:.2f} s per target call, {x / med:.1f}x the median "
                         f"{med:.2f} s of its other {n - 1} runs")  # fmt: skip
    whole = speedup_verdict(plain, spec, claim="", label=label).estimate
    note = (f"  Left out of the timings of {label}: {'; '.join(parts)}. Rule: a run over "
            f"{factor:g}x the median seconds per target call of the other runs of its arm is "
            f"a slow spell of the shared machine, not the method; its prompt leaves both arms' "
            f"timings (with it, the ratio of summed seconds would read {whole:.2f}x).")  # fmt: skip
    return [i for i in range(n) if i not in left], note


def _pick(d: Mapping[str, Sequence[Any]], keep: Sequence[int]) -> dict[str, list[Any]]:
    return {k: [v[i] for i in keep] for k, v in d.items()}


def speed_lines(
    plain: Mapping[str, Sequence[float]],
    spec: Mapping[str, Sequence[float]],
    label: str,
    *,
    names: Sequence[str] | None = None,
    margin: float = 0.0,
    seed: int = 0,
    factor: float = SLOW_RUN_FACTOR,
) -> list[str]:
    """The wall-clock speed-up of ``spec`` over ``plain`` (per prompt ``tokens``, ``calls``,
    ``seconds``) as a measurement line: the ratio of summed tokens per second with its
    interval over prompts, and beside it the median of the per-prompt speed-ups, which one
    run cannot move. A ratio of sums is dominated by its longest runs, so a run timed during
    a slow spell (:func:`slow_runs`: over ``factor`` x its arm's median seconds per call) is
    left out, and a second line names it, the rule, and what the line would read with it.
    ``names`` label the prompts in that note (e.g. their categories)."""
    keep, note = _timed(plain, spec, label, names, factor)
    p, s = _pick(plain, keep), _pick(spec, keep)
    v = speedup_verdict(p, s, claim=f"Speed, {label}", label=f"the {label}", margin=margin,
                        seed=seed)  # fmt: skip
    with np.errstate(divide="ignore", invalid="ignore"):
        each = (np.asarray(s["tokens"], float) / np.asarray(s["seconds"], float)) / (
            np.asarray(p["tokens"], float) / np.asarray(p["seconds"], float)
        )
    each = each[np.isfinite(each)]
    if len(each) >= 2:
        v = replace(v, aside=f"median of the per-prompt speed-ups {float(np.median(each)):.2f}x")
    return [v.sentence(), *([note] if note else [])]


def claim1_lines(
    plain: Mapping[str, Sequence[float]],
    spec: Mapping[str, Sequence[float]],
    label: str,
    *,
    margin: float = 0.0,
    seed: int = 0,
    names: Sequence[str] | None = None,
    factor: float = SLOW_RUN_FACTOR,
) -> list[str]:
    """Claim 1 (fewer serial target calls, not cheaper ones) for one speculative arm against
    plain decoding on the same prompts (per prompt ``tokens``, ``calls``, ``seconds``): the
    tokens per target call ratio and the seconds per call ratio, each with a 95% interval
    over the prompts. *supports* when both intervals lie above 1 (fewer calls, each dearer),
    *not supported* when the calls were not fewer, else *cannot tell*. Then the wall-clock
    speed-up, the product of the two: a measurement, not the claim (``margin``: its noise
    floor), from :func:`speed_lines`. Both timings (seconds per call, the speed-up) leave out
    the prompts with a run timed in a slow spell (:func:`slow_runs`) and a last line says
    which; the count of calls keeps every prompt (a slow machine does not change it)."""
    keep, _ = _timed(plain, spec, label, names, factor)
    fewer = ratio_verdict({"t": spec["tokens"], "c": spec["calls"]},
                          {"t": plain["tokens"], "c": plain["calls"]},
                          claim="", statistic="", seed=seed)  # fmt: skip
    ps, ss = _pick(plain, keep), _pick(spec, keep)
    dearer = ratio_verdict({"s": ss["seconds"], "c": ss["calls"]},
                           {"s": ps["seconds"], "c": ps["calls"]},
                           claim="", statistic="", seed=seed)  # fmt: skip

    def ci(v: RatioVerdict) -> str:
        if not math.isfinite(v.ci[0]):
            return ""
        return f" ({interval_label(v.ci[0], v.ci[1], v.units, over=False)})"

    if fewer.verdict == SUPPORTS and dearer.verdict == SUPPORTS:
        tail = "supports claim 1 at this size: fewer serial calls, each one dearer"
    elif fewer.verdict == NOT_SUPPORTED:
        tail = "claim 1 not supported at this size: no fewer serial calls"
    else:
        tail = "cannot tell at this size (an interval contains 1)"
    first = (f"Claim 1, {label}: {fewer.estimate:.2f}x the tokens per target call of plain "
             f"decoding{ci(fewer)}, each call {dearer.estimate:.2f}x as long{ci(dearer)} -- "
             f"{tail}.")  # fmt: skip
    return [first, *speed_lines(plain, spec, label, names=names, margin=margin, seed=seed,
                                factor=factor)]  # fmt: skip


# -- exact laws: lossless rules and shortcuts (notebooks 11, 12) -------------------------------


def samples_shown(ns: Iterable[float], *, none: str = "none: TV is 0") -> list[object]:
    """Sample sizes as a table prints them: whole samples, and ``none`` where the size is
    infinite (an exact TV of 0 leaves nothing for any sample size to detect) -- not
    ``140007133.0`` or ``inf``.

    >>> samples_shown([23.0, float("inf"), 140007133.0])
    [23, 'none: TV is 0', 140007133]
    """
    return [int(n) if math.isfinite(n) else none for n in ns]


def exactness_lines(exact: Any, n_samples: int, level: float, *, on: str = "") -> list[str]:
    """The "What we saw" lines of an exactness table (one row per rule: ``lossless``,
    ``rejected``, ``pvalue``, ``first_token_tv``, ``n_needed``): each shortcut caught, not
    caught at this size (it needs more samples than were drawn: *cannot tell*), or missed
    although the samples should suffice; then the claim 6 verdict (every lossless rule
    consistent with the exact law -- *supports* for departures as large as the smallest
    shortcut caught, else *contradicts*) and the claim 9 verdict (*supports* for the
    shortcuts caught, *cannot tell* for those too small for this size). ``on`` names what the
    table was measured on (e.g. ``"the toy (target over ...)"``): the claim lines then say
    ``"... consistent with the exact law on the toy (...)"``, so a verdict measured on a stated
    toy is not read as one on the page's real pair.

    >>> import pandas as pd
    >>> t = pd.DataFrame(dict(lossless=[True, False], rejected=[False, True], pvalue=[0.4, 1e-9],
    ...                       first_token_tv=[0.0, 0.2], n_needed=[float("inf"), 300.0]),
    ...                  index=["lossless", "shortcut"])
    >>> exactness_lines(t, 2000, 1e-3, on="the toy")[-1]
    'Claim 9: 1 of 1 shortcuts rejected on the toy at alpha=0.001 -- supports claim 9 for 1 of 1 shortcuts.'
    """
    where = f" on {on}" if on else ""
    lines = []
    shortcuts, kept = exact[~exact.lossless], exact[exact.lossless]
    caught, small, missed = [], [], []
    for name, r in shortcuts.iterrows():
        if r.rejected:
            caught.append((name, r.first_token_tv))
            lines.append(
                f"- {name}: caught ({p_phrase(r.pvalue)}; first-token TV {r.first_token_tv:.3f})"
            )
        elif n_samples < r.n_needed:
            small.append(name)
            lines.append(f"- {name}: not caught at this size -- it needs ~{r.n_needed:.0f} samples "
                         f"(TV {r.first_token_tv:.3f}); cannot tell at {n_samples}")  # fmt: skip
        else:
            missed.append(name)
            lines.append(f"- {name}: NOT caught although {n_samples} samples should suffice "
                         f"({p_phrase(r.pvalue)})")  # fmt: skip
    ok = int((~kept.rejected).sum())
    ps = ", ".join(f"{p:.2g}" for p in kept.pvalue)
    head = (f"Claim 6: {ok} of {len(kept)} lossless rules consistent with the exact law{where} "
            f"at alpha={level:g} with {n_samples} samples each (p = {ps})")  # fmt: skip
    if ok < len(kept):
        lines.append(head + " -- contradicts claim 6: a lossless rule was rejected.")
    elif caught:
        tv = min(t for _, t in caught)
        lines.append(head + f" -- supports claim 6 at this size: the same samples caught a "
                     f"shortcut of first-token TV {tv:.3f}")  # fmt: skip
    else:
        lines.append(head + " -- cannot tell at this size: no shortcut was caught either, so "
                     "these samples have shown no power")  # fmt: skip
    tail = []
    if caught:
        tail.append(f"supports claim 9 for {len(caught)} of {len(shortcuts)} shortcuts")
    if small:
        tail.append(f"cannot tell at this size for {', '.join(small)}")
    if missed:
        tail.append(f"a miss although the size should suffice: {', '.join(missed)}")
    lines.append(f"Claim 9: {len(caught)} of {len(shortcuts)} shortcuts rejected{where} at "
                 f"alpha={level:g} -- {'; '.join(tail) or 'no shortcuts tested'}.")  # fmt: skip
    return lines


# -- claim 7: who changed the greedy text (notebook 06) ----------------------------------------


def claim7_verdict(table: Any, *, reference: str = "fp32") -> list[str]:
    """Claim 7 (greedy outputs are identical when verification, numerics and ties match),
    from :func:`specviz.lab.experiments.precision_greedy`'s table, in two parts:

    * *speculation changed the text*: the speculative rows (any drafter, compared with plain
      decoding in the same precision). A divergence with a clear logit margin ("bug")
      *contradicts* the identity; a divergence at a near tie ("numerics") *supports claim 7's
      condition* (the verify pass rounded differently from the decode pass: numerics, not the
      acceptance rule, changed the text). Every row identical *supports* the identity, and the
      line says how many greedy decisions were close enough for the verify pass's rounding to
      flip them (``within_gap``, when the table has it): with none, the identity held where it
      could not have failed, and the line says so (*cannot tell at this size* whether rounding
      in the verify pass changes greedy text);
    * *precision changed the text*: the ``plain`` rows (plain decoding in another precision
      against plain ``reference``). A divergence *supports* the condition (numerics alone
      changed the greedy text, no speculation involved); none means *cannot tell at this
      size* (the condition was not exercised).

    With ``verify_gap`` / ``within_gap`` / ``verify_flips`` columns, one more line per
    precision gives the direct measurement: how far the verify pass's logits are from the
    decode pass's, and at how many decisions its argmax flips.
    """
    spec = table[table.drafter != "plain"]
    prec = table[table.drafter == "plain"]
    out = []
    bugs = spec[spec.verdict == "bug"]
    ties = spec[spec.verdict == "numerics"]
    n_same = int(spec.identical.sum())
    chances = None
    if {"verify_gap", "within_gap", "verify_flips"} <= set(spec.columns):
        chances = spec.drop_duplicates(["prompt", "dtype"])
    head = (f"Claim 7, speculation (speculative vs plain greedy, same precision): {n_same} of "
            f"{len(spec)} runs identical")  # fmt: skip
    if len(bugs):
        where = ", ".join(f"{r.dtype} {r.drafter} on {r.prompt} (margin {r.margin:.3g})"
                          for r in bugs.itertuples())  # fmt: skip
        out.append(head + f"; diverged with a clear margin at {where} -- contradicts claim 7: "
                   "the verify path, not numerics, changed the text.")  # fmt: skip
    elif len(ties):
        exact = int((ties.margin == 0).sum())
        where = ", ".join(f"{r.dtype} {r.drafter} on {r.prompt} (margin {r.margin:.3g})"
                          for r in ties.itertuples())  # fmt: skip
        out.append(head + f"; {len(ties)} diverged at near ties ({where}"
                   + (f"; {exact} at an exact tie, decided by tie-breaking alone" if exact else "")
                   + ") -- supports claim 7's condition: speculation changed the greedy text "
                   "through numerics (its verify pass rounded differently from the decode pass "
                   "at a near tie), not through the acceptance rule.")  # fmt: skip
    elif chances is not None and int(chances.within_gap.sum()) == 0:
        out.append(head + " -- cannot tell at this size whether speculation can change greedy "
                   "text: no greedy decision had a margin within the verify-vs-decode logit gap "
                   f"(largest {float(chances.verify_gap.max()):.3g}), so the verify pass's "
                   "rounding could not flip one here and identical texts were certain.")  # fmt: skip
    else:
        note = ""
        if chances is not None:
            note = (f"; {int(chances.within_gap.sum())} greedy decisions had a margin within the "
                    "verify-vs-decode logit gap, where the verify pass's rounding could flip "
                    "the argmax")  # fmt: skip
        out.append(head + note + " -- supports claim 7: speculation itself never changed the "
                   "greedy text.")  # fmt: skip
    if chances is not None:
        for dt in dict.fromkeys(chances.dtype):
            c = chances[chances.dtype == dt]
            n = int(c.decisions.sum()) if "decisions" in c else None
            of = f" of {n}" if n is not None else ""
            out.append(
                f"Claim 7, verify vs decode ({dt}): the target's logits computed by a verify pass "
                f"and by plain decoding differ by up to {float(c.verify_gap.max()):.3g} along the "
                f"plain texts; {int(c.within_gap.sum())}{of} greedy decisions had a top-1/top-2 "
                f"margin within that gap, and the verify pass's argmax flipped at "
                f"{int(c.verify_flips.sum())} (teacher forced; a real run's verify calls start "
                "where its previous step ended)."
            )
    diff = prec[~prec.identical]
    for dt in dict.fromkeys(prec.dtype):
        sub, d = prec[prec.dtype == dt], diff[diff.dtype == dt]
        line = (f"Claim 7, precision (plain {dt} vs plain {reference}): {len(d)} of {len(sub)} "
                "prompts changed their greedy text")  # fmt: skip
        if len(d):
            ms = ", ".join(f"{m:.3g}" for m in d.margin.dropna())
            line += (f" (first divergences at margins [{ms}]) -- supports claim 7's condition: "
                     "numerics alone change greedy outputs, with no speculation involved.")  # fmt: skip
        else:
            line += (" -- cannot tell at this size: precision changed no text here, so the "
                     "condition was not exercised.")  # fmt: skip
        out.append(line)
    return out


# -- claim 2 on a cross-vocabulary pair: coverage per task (notebook 12) ------------------------


def greedy_identity_line(identical: Mapping[str, int], n: int) -> str:
    """Claim 7 over several drafting methods (notebook 12): each method's greedy text against
    plain decoding on ``n`` prompts; it supports the claim only if every method matched on all.

    >>> print(greedy_identity_line({"intersection": 3, "string": 2}, 3))
    Claim 7: greedy identical to plain decoding: intersection 3/3, string 2/3 -- a method changed the greedy text: see the table (near ties or a bug).
    >>> greedy_identity_line({"intersection": 3, "string": 3}, 3).endswith("own argmax.")
    True
    """
    counts = ", ".join(f"{name} {k}/{n}" for name, k in identical.items())
    return f"Claim 7: greedy identical to plain decoding: {counts} -- " + (
        "supports claim 7: both methods verify with the target's own argmax."
        if all(k == n for k in identical.values())
        else "a method changed the greedy text: see the table (near ties or a bug)."
    )


def mixed_precision_line(
    report: Any, *, n_samples: int, exact_tv: float, samples_needed: float
) -> ClaimLine:
    """What notebook 06's consistency check of the ``mixed_precision`` bug allows (claim 9):
    caught (*supports*), cannot tell at this size (its TV needs more samples), or a miss
    (*contradicts*, as notebook 04 counts a broken rule a powered test missed). A ``Claim 9``
    line, so the demo index reads its verdict."""
    verdict, meaning = {
        "inconsistent": (SUPPORTS, "caught the bug: supports claim 9 at this sample size"),
        "inconclusive": (
            CANNOT_TELL,
            f"cannot tell at this size (the bug's TV {exact_tv:.4f} needs "
            f"~{samples_needed:.0f} samples per arm)",
        ),
        "consistent": (
            CONTRADICTS,
            "no test rejected although this TV would have been seen 90% of the time "
            "(a miss: contradicts claim 9's 'observable' at this size)",
        ),
    }[report.outcome]
    return ClaimLine(
        9,
        verdict,
        f"Claim 9, consistency_check of mixed_precision with {n_samples} samples per arm: "
        f"{outcome_phrase(report)} -- {meaning}.",
    )


def coverage_verdict(cov: Any, *, alpha: float = 0.05) -> tuple[Any, str]:
    """Coverage per task category, with an interval over prompts, and a claim 2 verdict.

    ``cov`` is :func:`specviz.drafting.cross_vocab.coverage_by_category`'s table (one row per
    decided position: ``category``, ``prompt``, ``coverage``). Per category: the mean coverage
    of its positions and, in ``low`` / ``high``, a 95% jackknife t interval over its prompts
    (leave one prompt out, on the log of the share, Student's t at ``prompts - 1`` degrees of
    freedom; an upper end past 1 is clipped to 1, so a ``high`` of 1.000 is that clip) --
    with fewer than :data:`MIN_UNITS_FOR_CI` prompts the range of its prompts' mean coverages
    instead (a bootstrap over 2 or 3 prompts returns little more than that range, and calling
    it a 95% interval overstates it); the ``interval`` column says
    which, as :func:`interval_label` does (NaN bounds with one prompt). The verdict tests
    whether coverage -- the most a step can accept -- depends on the task: a Kruskal-Wallis
    test of the per-prompt mean coverages across categories. *supports* claim 2 when it
    rejects at ``alpha``; *cannot tell* otherwise (or with fewer than 2 prompts in every
    category), and then the line gives the smallest p-value this design could reach at all
    (categories that never overlap) and how many prompts per category would let that best
    case fall below ``alpha / 10``: at 2 prompts in each of 8 categories even a perfect
    separation gives p = 0.038, so 2 per category can hardly decide."""
    import pandas as pd
    from scipy.stats import kruskal

    per_prompt = cov.groupby(["category", "prompt"], sort=False).coverage.agg(["sum", "size"])
    rows, groups = [], []
    for cat, sub in per_prompt.groupby(level=0, sort=False):
        s, n = sub["sum"].to_numpy(float), sub["size"].to_numpy(float)
        lo = hi = math.nan
        if len(s) >= MIN_UNITS_FOR_CI and s.sum() > 0:
            # a jackknife t interval over prompts, clipped to shares: a percentile bootstrap
            # over 3 prompts returns their min-max range (all three resamples land on the
            # lowest prompt 1 time in 27, more than 2.5%), which holds the mean far less often
            cols = np.stack([s, n], axis=1)  # [prompts, 2]
            lo, hi = _jackknife_t(cols, lambda t: t[:, 0] / t[:, 1], s.sum() / n.sum(), 0.025)
            lo, hi = max(0.0, lo), min(1.0, hi)
        elif len(s) >= MIN_UNITS_FOR_CI:  # no coverage at all in this category: no spread
            lo = hi = 0.0
        elif len(s) >= 2:
            lo, hi = float((s / n).min()), float((s / n).max())
        kind = interval_label(lo, hi, len(s), fmt="{:.3f}") if len(s) >= 2 else "1 prompt"
        groups.append(s / n)
        rows.append(dict(category=cat, prompts=len(s), positions=int(n.sum()),
                         mean_coverage=s.sum() / n.sum(), low=lo, high=hi,
                         interval=kind))  # fmt: skip
    table = pd.DataFrame(rows).set_index("category")
    lowest, highest = table.mean_coverage.idxmin(), table.mean_coverage.idxmax()
    span = (f"coverage from {table.mean_coverage.min():.3f} ({lowest}) to "
            f"{table.mean_coverage.max():.3f} ({highest}) over {len(table)} categories")  # fmt: skip
    if len(groups) < 2 or all(len(g) < 2 for g in groups):
        return table, (f"Claim 2: {span}: cannot tell at this size (an interval needs at least "
                       "2 prompts per category).")  # fmt: skip
    p = float(kruskal(*groups).pvalue) if len({float(x) for g in groups for x in g}) > 1 else 1.0
    if p < alpha:
        tail = (f"supports claim 2 at this size: the share of the target's law this draft "
                f"can reach depends on the task (Kruskal-Wallis over prompts, p = {p:.2g})")  # fmt: skip
    else:
        sizes = [len(g) for g in groups]
        best = kruskal_best_p(sizes)
        m = min(sizes)
        need = next(
            (k for k in range(m, 101) if kruskal_best_p([k] * len(sizes)) < alpha / 10), None
        )
        room = (f"even categories that never overlap would give p = {best:.3g} at best with "
                f"{m if m == max(sizes) else f'{m}-{max(sizes)}'} prompts per category")  # fmt: skip
        if best >= alpha:
            room += ", so this design cannot decide at all"
        elif best >= alpha / 10:
            room += f", so {m} per category can hardly decide"
        if need is not None and need > m:
            room += (f"; from {need} prompts per category that best case falls below "
                     f"{alpha / 10:g}, room for categories that overlap a little")  # fmt: skip
        tail = (f"cannot tell at this size whether it depends on the task (Kruskal-Wallis over "
                f"prompts, p = {p:.2g} >= {alpha:g}; {room})")  # fmt: skip
    return table, f"Claim 2: {span}: {tail}."


def kruskal_best_p(sizes: Sequence[int]) -> float:
    """The smallest p-value a Kruskal-Wallis test (chi-square approximation, as
    :func:`scipy.stats.kruskal`) can return for groups of these sizes: every group's values
    above the previous group's (no overlap, no ties). Below ``alpha`` only if the design can
    decide at all.

    >>> round(kruskal_best_p([2] * 8), 3), round(kruskal_best_p([3] * 8), 4)
    (0.038, 0.0019)
    """
    from itertools import permutations

    from scipy.stats import chi2

    sizes = [int(k) for k in sizes if k > 0]
    n = sum(sizes)
    if len(sizes) < 2 or n < 2:
        return 1.0

    def h_of(order: Sequence[int]) -> float:
        start, h = 0, 0.0
        for k in order:  # this block holds ranks start+1 .. start+k
            h += (k * (2 * start + k + 1) / 2) ** 2 / k
            start += k
        return 12.0 / (n * (n + 1)) * h - 3 * (n + 1)

    # the order of unequal blocks matters; try each distinct one (few: sizes repeat)
    orders = set(permutations(sorted(sizes))) if len(sizes) <= 8 else {tuple(sorted(sizes))}
    return float(chi2.sf(max(h_of(o) for o in orders), len(sizes) - 1))


# -- the first-token TV of a consistency check, with its bias (notebook 10) --------------------


def first_token_tv_note(report: Any, *, n_sim: int = 2000, seed: int = 0) -> str:
    """The first-token TV of a :class:`~specviz.ConsistencyReport`, one estimator per number.

    * the **plug-in** TV of the two first-token laws, printed as what it is: biased upward at
      this sample size, next to what two *identical* samplers of the pooled law show with the
      same samples per arm (``n_sim`` seeded simulations: their mean and 95% point) -- a
      reference, not a correction;
    * the **bootstrap bias-corrected** estimate (plug-in minus the bootstrap's estimate of its
      bias, ``2 x plug-in - mean of the resamples``, floored at 0) with the **basic** bootstrap
      95% interval of :func:`specviz.stats.estimate_tv` on the same counts: the interval of
      that same corrected estimate, which therefore always lies inside it.

    (The line used to print the plug-in next to the basic interval and subtract the identical
    samplers' mean under the same name "bias-corrected": both estimates then fell outside the
    interval printed beside them.) Small samples make the plug-in large even for a lossless
    sampler; the test's verdict, not these numbers, decides."""
    from ...stats import estimate_tv

    _, spec, std = report.first_token_counts
    a, b = np.asarray(spec, float), np.asarray(std, float)
    na, nb = int(a.sum()), int(b.sum())
    rng = np.random.default_rng(seed)
    tv = estimate_tv(a, b, rng=rng, interval="basic")
    est = tv.estimate
    corrected = max(0.0, est - tv.bias)
    pooled = (a + b) / (na + nb)
    sa, sb = rng.multinomial(na, pooled, size=n_sim), rng.multinomial(nb, pooled, size=n_sim)
    null = 0.5 * np.abs(sa / na - sb / nb).sum(axis=1)
    mean, q95 = float(null.mean()), float(np.quantile(null, 0.95))
    where = "below" if est <= q95 else "above"
    return (
        f"first-token TV: plug-in estimate {est:.3f}, biased upward at {na} samples per arm "
        f"(two identical samplers show {mean:.3f} on average, 95% of them below {q95:.3f}; "
        f"this plug-in is {where} that); bootstrap bias-corrected estimate {corrected:.3f} with "
        f"its 95% basic bootstrap interval [{tv.low:.3f}, {tv.high:.3f}]. The test's outcome "
        "decides, not this interval (at a true TV of 0 it does not cover 0 reliably)"
    )


# -- theory's next gamma, on enough evidence (notebook 10) --------------------------------------


@dataclass(frozen=True)
class NextGamma:
    """Theory's best gamma from a measured acceptance ``a`` (of ``drafted`` tokens, Wilson
    interval ``a_ci``) and draft cost ratio ``c``; ``suggested`` is None when fewer than
    ``min_drafted`` tokens were drafted, and ``across`` is the best gamma at both ends of
    the acceptance interval.

    ``predicted`` is Leviathan's formula (verification free); with a measured verify cost
    (``verify_ratio``: v(gamma + 1), a verify pass on gamma + 1 tokens in decode steps)
    ``predicted_verify`` charges it, and ``suggested`` / ``across`` come from that model
    (0: no gamma is predicted to beat plain decoding). ``measured`` is the run's own
    speed-up at ``gamma`` (NaN: not given); the sentence says which prediction it is closer
    to, and never suggests speculating beside a measured loss without saying the
    measurement decides."""

    a: float
    a_ci: tuple[float, float]
    c: float
    drafted: int
    gamma: int
    predicted: dict[int, float]
    suggested: int | None
    across: tuple[int, int]
    min_drafted: int
    predicted_verify: dict[int, float] = field(default_factory=dict)
    verify_ratio: float = math.nan
    measured: float = math.nan
    cap: int | None = None
    #: tokens the verifier looked at (``None``: ``a`` is accepted / drafted) and accepted ones
    looked: int | None = None
    accepted: int = 0
    #: v(gamma + 1) in words: the measurement, and the fit the predictions use where it differs
    verify_text: str = ""

    @property
    def charges_verify(self) -> bool:
        return bool(self.predicted_verify)

    def _g(self, g: int) -> str:
        # a best gamma at the end of the searched range is a lower bound, not an optimum
        return f"at least {g}" if self.cap is not None and g >= self.cap else str(g)

    def sentence(self) -> str:
        lo, hi = self.a_ci
        g = self.gamma
        if self.looked is None:
            what = (f"acceptance {self.a:.2f} (95% CI {lo:.2f}-{hi:.2f}, {self.drafted} drafted "
                    "tokens)")  # fmt: skip
        else:
            what = (f"per-token acceptance alpha {self.a:.2f} (95% CI {lo:.2f}-{hi:.2f}: "
                    f"{self.accepted} accepted of the {self.looked} drafted tokens the verifier "
                    f"looked at, up to each step's first rejection; {self.drafted} drafted)")  # fmt: skip
        base = (f"gamma {g}: {what}, draft cost ratio c = {self.c:.2f}; predicted "
                f"speed-up at gamma {g}: {self.predicted[g]:.2f}x")  # fmt: skip
        if self.charges_verify:
            v = self.verify_text or f"{self.verify_ratio:.2f} decode steps"
            base += (f" with verification free (Leviathan), {self.predicted_verify[g]:.2f}x "
                     f"charging the measured verify pass ({g + 1} tokens: {v})")  # fmt: skip
        if math.isfinite(self.measured):
            base += f"; measured {self.measured:.2f}x at gamma {g}"
            if self.charges_verify:
                free, ver = self.predicted[g], self.predicted_verify[g]
                closer = ("the prediction that charges the verify pass"
                          if abs(math.log(self.measured / ver)) <= abs(math.log(self.measured / free))
                          else "the free-verification prediction")  # fmt: skip
                base += f", closer to {closer}"
        rng = (self._g(self.across[0]) if self.across[0] == self.across[1]
               else f"{self.across[0]}-{self._g(self.across[1])}")  # fmt: skip
        model = " (verify cost charged)" if self.charges_verify else ""
        how = "verify cost charged; " if self.charges_verify else ""
        if self.suggested is None:
            return (base + f"; no suggested gamma: {self.drafted} drafted tokens are fewer than "
                    f"the {self.min_drafted} a suggestion needs (across the acceptance interval "
                    f"theory's best gamma{model} is {rng})")  # fmt: skip
        if self.suggested == 0:
            return (base + f"; suggested gamma: none -- charging the measured verify cost, no "
                    f"gamma beats plain decoding (best gamma {rng} across the acceptance "
                    "interval; 0 = plain decoding)")  # fmt: skip
        s = (base + f"; suggested gamma: {self._g(self.suggested)} ({how}best gamma {rng} across the "
             "acceptance interval)")  # fmt: skip
        if math.isfinite(self.measured) and self.measured < 1.0:
            s += (f", but this run measured {self.measured:.2f}x at gamma {g}: the measurement, "
                  "not theory, decides -- see the decisions")  # fmt: skip
        return s


def next_gamma(
    accepted: int,
    drafted: int,
    c: float,
    *,
    gamma: int,
    max_gamma: int | None = None,
    min_drafted: int = 100,
    optimal: Callable[..., int] | None = None,
    speedup: Callable[..., float] | None = None,
    verify_cost: Any = None,
    measured: float | None = None,
    looked: int | None = None,
) -> NextGamma:
    """Theory's next gamma after a run at ``gamma``: ``accepted`` of ``drafted`` tokens and a
    draft cost ratio ``c``; a suggestion only on at least ``min_drafted`` drafted tokens.

    Leviathan's ``alpha`` is the chance that one drafted token is accepted. ``accepted /
    drafted`` is not it: the tokens after a step's first rejection are never looked at, so
    that share runs low (notebook 10 printed 0.44 where its 1.82 tokens per call implied
    about 0.55). Pass ``looked`` -- the drafted tokens the verifier judged, each step's
    accepted ones plus the rejected one (:func:`specviz.perf.acceptance.alpha_counts`) -- and
    ``a = accepted / looked``, the maximum-likelihood alpha, with its Wilson interval.

    ``verify_cost`` (a :class:`specviz.perf.theory.VerifyCost`, e.g. from
    :func:`~specviz.perf.theory.measure_verify_cost`, as notebook 08 measures it) charges a
    verify pass on ``g + 1`` tokens at ``v(g + 1)`` decode steps, and the suggestion comes
    from that model: Leviathan's formula takes verification as free, which on a CPU predicted
    1.41x beside a measured 0.70x-1.00x (notebook 10). ``measured`` is the run's own speed-up
    at ``gamma``, printed beside both predictions.

    Without ``max_gamma`` the best gamma is searched until the prediction turns down
    (:func:`specviz.perf.theory.search_optimal_gamma`, up to its cap, where it reads
    "at least"): a range of 1..8 made 8 the answer whenever the formula still rose there.

    >>> next_gamma(13, 16, 0.05, gamma=2).suggested is None
    True
    >>> next_gamma(130, 160, 0.05, gamma=2).suggested
    8
    >>> next_gamma(150, 160, 0.05, gamma=2).suggested
    18
    >>> next_gamma(150, 160, 0.05, gamma=2, max_gamma=8).suggested  # the range's edge
    8
    """
    from ...perf import acceptance, theory

    cap = None
    if optimal is None and max_gamma is None:
        cap = theory.GAMMA_SEARCH_CAP

        def optimal(a: float, c: float, **kw: Any) -> int:
            return theory.search_optimal_gamma(a, c, verify_cost=kw.get("verify_cost")).gamma

    optimal = optimal or theory.optimal_gamma
    max_gamma = max_gamma or 8
    speedup = speedup or theory.speedup
    trials = drafted if looked is None else looked
    if looked is not None and not accepted <= looked <= drafted:
        raise ValueError(f"looked must lie in [accepted, drafted], got {looked} "
                         f"(accepted {accepted}, drafted {drafted})")  # fmt: skip
    a = accepted / trials if trials else 0.0
    lo, hi = (float(x) for x in acceptance.wilson_interval(accepted, max(trials, 0)))
    if not trials:
        lo = hi = 0.0
    shown = range(1, max(max_gamma, gamma) + 1)
    predicted = {g: speedup(a, g, c) for g in shown}
    kw: dict[str, Any] = {"max_gamma": max_gamma}
    predicted_verify: dict[int, float] = {}
    v = math.nan
    if verify_cost is not None:
        kw["verify_cost"] = verify_cost
        predicted_verify = {g: speedup(a, g, c, verify_cost.ratio(g + 1)) for g in shown}
        v = float(verify_cost.ratio(gamma + 1))
    best = optimal(a, c, **kw)
    across = (optimal(lo, c, **kw), optimal(min(hi, 0.999), c, **kw))
    m = float(measured) if measured is not None else math.nan
    text = verify_cost.describe(gamma + 1) if verify_cost is not None else ""
    return NextGamma(a, (lo, hi), c, drafted, gamma, predicted,
                     best if drafted >= min_drafted else None, across, min_drafted,
                     predicted_verify, v, m if m > 0 and math.isfinite(m) else math.nan,
                     cap, looked, int(accepted), text)  # fmt: skip


# -- one request at a time, on a named set of prompts (notebook 09's reconciliation with 07) ---


def alone_sentence(rows: Any, label: str, *, seed: int = 0) -> str:
    """One line from :func:`specviz.load.served_alone`'s rows (one plain and one speculative
    engine): the drafter's acceptance and tokens per target call on these prompts, and the
    speed-up with its interval over the prompts."""
    plain, spec = rows[rows["mode"] == "plain"], rows[rows["mode"] == "speculative"]
    v = speedup_verdict(
        {"tokens": plain.tokens.tolist(), "seconds": plain.seconds.tolist()},
        {"tokens": spec.tokens.tolist(), "seconds": spec.seconds.tolist()},
        claim="",
        label="",
        seed=seed,
    )
    acc = spec.accepted.sum() / max(1, spec.drafted.sum())
    lo, hi = v.ci
    ci = f" ({interval_label(lo, hi, v.units, over=False)})" if math.isfinite(lo) else ""
    return (
        f"{label}: {len(spec)} prompts served alone: acceptance {acc:.2f}, "
        f"{spec.tokens.sum() / max(1, spec.target_calls.sum()):.2f} tokens per target call, "
        f"speculative/plain {v.estimate:.2f}x{ci}"
    )


# -- claim 11: what each drafter's accepted tokens cost (notebook 07) --------------------------


def _sum_ratio_ci(
    num: np.ndarray, den: np.ndarray, rng: np.random.Generator, n_boot: int
) -> tuple[float, float, float]:
    """sum(num) / sum(den) over units, with a percentile bootstrap 95% interval over them
    (inf where a resample has nothing in ``den``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        est = float(num.sum() / den.sum()) if den.sum() else math.inf
        if len(num) < 2:
            return est, math.nan, math.nan
        idx = rng.integers(0, len(num), size=(n_boot, len(num)))
        d = den[idx].sum(axis=1)
        boot = np.where(d > 0, num[idx].sum(axis=1) / np.where(d > 0, d, 1), np.inf)
    boot = np.sort(boot)  # order statistics: an infinite resample stays inf, never NaN
    lo, hi = float(boot[int(0.025 * n_boot)]), float(boot[int(0.975 * n_boot) - 1])
    return est, lo, hi


def grid_speedup(
    grid: Any, drafter: str, *, gamma: int, mode: str, label: str = "", seed: int = 0
) -> RatioVerdict:
    """One drafter's wall-clock speed-up over plain decoding in a
    :func:`specviz.lab.analysis.run_grid` table (every cell carries its prompt's plain run,
    ``baseline_new_tokens`` / ``baseline_time``, measured in the same run), pooled per prompt
    at one gamma and mode, with a 95% bootstrap interval over the prompts
    (:func:`speedup_verdict`): "above 1", "below 1" or "cannot tell at this size". A single
    timed run decides nothing; this is what 07 says about "does the drafter pay here"."""
    sub = grid[(grid.drafter == drafter) & (grid.gamma == gamma) & (grid["mode"] == mode)]
    if sub.empty:
        raise ValueError(f"no cells of drafter {drafter!r} at gamma {gamma}, mode {mode!r}")
    per = sub.groupby("prompt_id")[
        ["new_tokens", "total_time", "baseline_new_tokens", "baseline_time"]
    ].sum()
    return speedup_verdict(
        {"tokens": per.baseline_new_tokens.tolist(), "seconds": per.baseline_time.tolist()},
        {"tokens": per.new_tokens.tolist(), "seconds": per.total_time.tolist()},
        claim="Speed",
        label=label or drafter,
        seed=seed,
    )


def claim11_costs(
    grid: Any, *, gamma: int, mode: str, n_boot: int = 2000, seed: int = 0
) -> list[str]:
    """Claim 11 (drafts come from many places, each at its own cost), from a
    :func:`specviz.lab.analysis.run_grid` table at one gamma and mode: per drafter, the
    milliseconds of drafting per *accepted* draft token, pooled over its cells, with a 95%
    bootstrap interval over the prompts. *supports* claim 11 at this size when the cheapest
    and the dearest drafter's intervals do not overlap (their costs really differ); *cannot
    tell* otherwise. A drafter that never had a draft accepted costs "inf"."""
    rng = np.random.default_rng(seed)
    sub = grid[(grid.gamma == gamma) & (grid["mode"] == mode)]
    rows = []
    for name, g in sub.groupby("drafter", sort=False):
        per = g.groupby("prompt_id")[["draft_time", "accepted"]].sum()
        est, lo, hi = _sum_ratio_ci(1e3 * per.draft_time.to_numpy(float),
                                    per.accepted.to_numpy(float), rng, n_boot)  # fmt: skip
        rows.append((str(name), est, lo, hi, int(per.accepted.sum()), len(per)))
    lines = [
        f"Claim 11, {n}: {est:.3g} ms of drafting per accepted token"
        + (f" (95% CI {lo:.3g}-{hi:.3g} over {k} prompts)" if math.isfinite(lo) else f" ({k} prompt(s))")
        + f", {acc} drafts accepted"
        for n, est, lo, hi, acc, k in rows
    ]  # fmt: skip
    ranked = sorted(rows, key=lambda r: r[1])
    if len(ranked) < 2:
        return lines + ["Claim 11: one drafter: nothing to compare."]
    cheap, dear = ranked[0], ranked[-1]
    apart = bool(cheap[3] < dear[2])  # NaN (a single prompt: no interval) compares False
    if apart:
        # "the cheapest" only when no other drafter's interval reaches the cheapest one's
        # (07 named suffix the cheapest at 1.02 ms, 95% CI 0.28-3.48, beside prompt lookup's
        # 1.21 ms, 0.49-5.48); otherwise the drafters not told apart from it are named
        low = [r[0] for r in ranked if not r[2] > cheap[3]]
        high = [r[0] for r in ranked if not r[3] < dear[2]]
        first = (
            f"{cheap[0]} is the cheapest per accepted token"
            if len(low) == 1
            else f"{' and '.join(low)} are the cheapest per accepted token, not told apart "
            "from each other (their intervals overlap)"
        )
        last = (
            f"{dear[0]} the dearest"
            if len(high) == 1
            else f"{' and '.join(high)} the dearest, not told apart from each other"
        )
        tail = (
            f"supports claim 11 at this size: {first}, and {last}; those two ends' intervals apart"
        )
    else:
        tail = (
            f"cannot tell at this size which drafter is cheapest per accepted token (the "
            f"intervals of {cheap[0]} and {dear[0]} overlap)"
        )
    return lines + [f"Claim 11 verdict (gamma {gamma}, {mode}): {tail}."]


def accepted_length_intervals(
    grid: Any, *, gamma: int, mode: str, n_boot: int = 2000, seed: int = 0
) -> dict[tuple[str, str], tuple[float, float]]:
    """``(drafter, category) -> (low, high)``: a 95% bootstrap interval over prompts of the
    mean accepted length (tokens per target call, pooled) of a
    :func:`specviz.lab.analysis.run_grid` table at one gamma and mode, category ``all``
    included -- error bars for :func:`specviz.views.perf.metric_bars_figure`."""
    rng = np.random.default_rng(seed)
    sub = grid[(grid.gamma == gamma) & (grid["mode"] == mode)]
    groups = list(sub.groupby(["drafter", "category"], sort=False))
    groups += [((name, "all"), g) for name, g in sub.groupby("drafter", sort=False)]
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for (name, cat), g in groups:
        per = g.groupby("prompt_id")[["new_tokens", "target_calls"]].sum()
        tokens, calls = per.new_tokens.to_numpy(float), per.target_calls.to_numpy(float)
        _, lo, hi = _sum_ratio_ci(tokens, calls, rng, n_boot)
        if math.isfinite(lo) and math.isfinite(hi):
            out[(str(name), str(cat))] = (lo, hi)
    return out
