"""The single-run verdicts on the law (notebooks 04 and 05): the bug zoo's rules against their exact laws, and the lossless check, its negative control, greedy identity and same-seed runs on a real model."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...checks.report import outcome_phrase
from ._single_run import CANNOT_TELL, CONTRADICTS, SUPPORTS, ClaimLine, p_phrase

__all__ = [
    "rule_outcomes",
    "bug_zoo_lines",
    "lossless_check_line",
    "negative_control_line",
    "greedy_check_line",
    "same_seed_line",
    "shipped_mistake_lines",
    "sampler_check_lines",
    "sequential_line",
]


# -- 04: the bug zoo ---------------------------------------------------------------------------


def rule_outcomes(table: Any, *, n_samples: int) -> list[str]:
    """Per row of notebook 04's table (``lossless``, ``rejected``, ``n_to_detect``), what the
    test did: a lossless rule ``passed`` (or raised a ``false alarm``); a broken rule was
    ``caught``, or its miss is ``cannot tell`` (its first-token TV needs more samples, or is 0
    there) or ``missed`` (a test of this size should have seen it). The shipped mistakes'
    table, with ``caught`` for ``rejected``, is read the same way.

    >>> import pandas as pd
    >>> t = pd.DataFrame({"lossless": [True, False, False, False],
    ...     "caught": [False, True, False, False], "n_to_detect": [0, 50, 5000, 100]})
    >>> rule_outcomes(t, n_samples=400)
    ['passed', 'caught', 'cannot tell', 'missed']
    """
    out = []
    for r in table.itertuples():
        rejected = bool(r.rejected if hasattr(r, "rejected") else r.caught)
        if r.lossless:
            out.append("false alarm" if rejected else "passed")
        elif rejected:
            out.append("caught")
        elif not math.isfinite(r.n_to_detect) or r.n_to_detect > n_samples:
            out.append("cannot tell")
        else:
            out.append("missed")
    return out


def bug_zoo_lines(table: Any, *, n_samples: int, level: float) -> list[ClaimLine | str]:
    """Claim 9 from notebook 04's table: how many broken rules the test rejected, which
    misses were beyond this size, then one line per rule (largest damage first)."""
    outcome = dict(zip(table.verifier, rule_outcomes(table, n_samples=n_samples), strict=True))
    broken = table[~table.lossless]
    caught = [v for v in broken.verifier if outcome[v] == "caught"]
    unseen = [v for v in broken.verifier if outcome[v] == "cannot tell"]
    missed = [v for v in broken.verifier if outcome[v] == "missed"]
    if len(caught) == len(broken):
        verdict, tail = SUPPORTS, "supports claim 9 for every broken rule at this sample size"
    else:
        verdict = CONTRADICTS if missed else SUPPORTS if caught else CANNOT_TELL
        tail = (
            f"supports claim 9 for {len(caught)}; cannot tell at this size for {len(unseen)} whose "
            "first-token TV needs more samples"
            + (
                f"; {len(missed)} missed although a first-token test of this size should see them"
                if missed
                else ""
            )
        )
    lines: list[ClaimLine | str] = [
        ClaimLine(
            9,
            verdict,
            f"Claim 9: {len(caught)} of {len(broken)} broken rules rejected at level {level:g} "
            f"with {n_samples} samples each: {tail}:",
        )
    ]
    fates = {
        "caught": "caught",
        "cannot tell": "not rejected: cannot tell at this size",
        "missed": "missed although a first-token test of this size should see it",
    }
    for r in broken.sort_values("first_token_tv", ascending=False).itertuples():
        fate = fates[outcome[r.verifier]]
        if np.isinf(r.n_to_detect) and outcome[r.verifier] != "caught":
            fate = "not rejected: TV 0 at the first token, only later tokens could show it"
        pval = (
            "p = 0 (an impossible outcome was seen)"
            if r.impossible
            else (f"p = {r.pvalue:.2e}" if r.pvalue > 0 else p_phrase(r.pvalue))
        )
        need = (
            f"a one-sample first-token test (alpha {level:g}, 90% power, against a departure of "
            f"this TV) needs ~{r.n_to_detect:,.0f} samples"
            if np.isfinite(r.n_to_detect)
            else "TV 0: nothing to detect at the first token"
            if np.isinf(r.n_to_detect)
            else "no power estimate for a TV this large"
        )
        lines.append(
            f"  {r.verifier}: first-token TV {r.first_token_tv:.4f}, {pval}, {fate}; {need}"
            f"\n    what it does: {r.what}"
        )
    return lines


# -- 05: the law on a real model ---------------------------------------------------------------


def lossless_check_line(report: Any, *, n_samples: int) -> ClaimLine:
    """Claim 6 from a lossless ``consistency_check``: consistent (with the TV it could
    see) supports it, inconclusive cannot tell, inconsistent contradicts it."""
    worst = report.tests.sort_values("pvalue").iloc[0]
    tv0 = report.tv[report.tv.position == 0].iloc[0]
    ci = (
        f"first-token TV estimate {tv0.estimate:.3f}, 95% bootstrap interval "
        f"[{tv0.low:.3f}, {tv0.high:.3f}], biased up by sampling noise"
    )
    verdict, tail = {
        "consistent": (SUPPORTS, f"supports claim 6 at this sample size ({ci})"),
        "inconclusive": (CANNOT_TELL, f"cannot tell at this size whether claim 6 holds ({ci})"),
        "inconsistent": (CONTRADICTS, f"contradicts claim 6 ({ci})"),
    }[report.outcome]
    return ClaimLine(
        6,
        verdict,
        f"Claim 6: lossless rule, {n_samples} samples per arm, {len(report.tests)} tests: "
        f"{outcome_phrase(report)} -- {tail}; smallest raw p = {worst.pvalue:.3g} ({worst.test}). "
        f"{report.power_statement}",
    )


def negative_control_line(
    broken: Any, *, name: str, tv: float, needed: float, n_samples: int
) -> ClaimLine:
    """Claim 9 from the broken rule's check: caught supports it; not caught is cannot tell
    when the size could not see its TV, and a failed control when it could."""
    verdict, fate = {
        "inconsistent": (SUPPORTS, "caught: the test sees this broken rule at this sample size"),
        "inconclusive": (CANNOT_TELL, "not caught, and this size could not tell"),
        "consistent": (
            CONTRADICTS,
            "missed although a TV this size would have been seen 90% of the time",
        ),
    }[broken.outcome]
    return ClaimLine(
        9,
        verdict,
        f"Claim 9, negative control {name}: exact first-token TV {tv:.3f}; {outcome_phrase(broken)} "
        f"-- {fate}; smallest Holm-adjusted p = {broken.tests.holm.min():.2e}; 90% power needs "
        f"{needed:.0f} samples per arm (drawn: {n_samples}).",
    )


def greedy_check_line(greedy: Any, *, tokens: int, drafter: str, accepted: str) -> ClaimLine:
    """Claim 7 from ``greedy_check`` (``tokens``: the budget per prompt; EOS can end one sooner):
    every prompt identical supports it; a divergence at a near tie is numerics (the claim's
    condition), at a clear margin a bug."""
    g = greedy.result
    same = sum(v == "identical" for v in g.verdicts)
    verdict = SUPPORTS if same == g.n else CONTRADICTS if g.n_bug else CANNOT_TELL
    tail = {
        SUPPORTS: "supports claim 7",
        CONTRADICTS: "contradicts claim 7: a divergence at a clear logit margin is a bug",
        CANNOT_TELL: "the divergences sit at near ties (numerics: claim 7's condition)",
    }[verdict]
    return ClaimLine(
        7,
        verdict,
        f"Claim 7: greedy speculative == plain greedy on {same} of {g.n} prompts (up to {tokens} "
        f"tokens, {drafter}, fp32; {accepted}); numerics {g.n_numerics}, bug {g.n_bug}: {tail}.",
    )


def same_seed_line(same_seed: Sequence[Any], report: Any) -> ClaimLine:
    """Claim 8: the same seed gives different text (the random numbers are consumed
    differently) while the law test finds no difference -- both halves needed to support it."""
    diffs = [r.first_difference for r in same_seed if not r.identical]
    text = (
        f"Claim 8: same seed, {len(same_seed)} seeds: {len(diffs)} speculative texts differ from "
        "the plain text" + (f" (first differing token at {diffs})" if diffs else "")
    )
    if report.outcome == "consistent" and diffs:
        return ClaimLine(
            8,
            SUPPORTS,
            text + f", while the law test above found no difference it could see "
            f"({outcome_phrase(report)}): supports claim 8.",
        )
    return ClaimLine(
        8,
        CANNOT_TELL,
        text + f"; the law test above cannot back the 'same law' half ({outcome_phrase(report)}): "
        "cannot tell at this size.",
    )


def shipped_mistake_lines(shipped: Any, *, n_draws: int) -> list[str]:
    """Claim 9 on the mistakes engines shipped (notebook 04's table, indexed by rule, with
    ``lossless``, ``caught``, ``n_to_detect``, ``predicted_tv``, ``law``, ``measured_tv``,
    ``pvalue``): a broken rule is caught when its check rejected, *cannot tell at this size*
    when it needs more than ``n_draws`` draws, and *not caught* otherwise; a lossless rule that
    is flagged is a false alarm.

    The measured TV is a plug-in estimate, biased upward at a small ``n_draws``; when the
    table has ``expected_measured_tv`` (:func:`specviz.effects.shipped.expected_plugin_tv`)
    each line prints it next to the measurement -- what the prediction says the measurement
    will be -- so "measured above predicted" is not read as a wrong prediction. With
    ``impossible`` (draws on an outcome the lossless law forbids), a catch it decides says so:
    one such draw refutes the sampler whatever its TV.

    >>> import pandas as pd
    >>> t = pd.DataFrame({"lossless": [False, False, True], "caught": [True, False, False],
    ...     "n_to_detect": [50, 5000, 0], "predicted_tv": [0.3, 0.01, 0.0], "law": ["a", "b", "c"],
    ...     "measured_tv": [0.29, 0.02, 0.01], "pvalue": [1e-9, 0.4, 0.7]}, index=["x", "y", "z"])
    >>> print("\\n".join(shipped_mistake_lines(t, n_draws=400)))  # doctest: +NORMALIZE_WHITESPACE
    Claim 9, shipped mistakes: 1 of 2 caught at alpha = 0.01 with 400 draws of their stated
      outcome; cannot tell at this size for 1 (they need more draws)
      x: predicted TV 0.3000 (a), measured 0.2900, needs ~50 draws: caught (p = 1e-09)
      y: predicted TV 0.0100 (b), measured 0.0200, needs ~5,000 draws: cannot tell at this size
      (p = 0.4)
      z (lossless): predicted TV 0.0000, measured 0.0100: no departure found
    """
    broken = shipped[~shipped.lossless]
    seen = broken[broken.caught]
    small = broken[~broken.caught & (broken.n_to_detect > n_draws)]
    lines = [
        f"Claim 9, shipped mistakes: {len(seen)} of {len(broken)} caught at alpha = 0.01 with "
        f"{n_draws} draws of their stated outcome"
        + (
            f"; cannot tell at this size for {len(small)} (they need more draws)"
            if len(small)
            else ""
        )
    ]
    if "expected_measured_tv" in shipped.columns:
        lines.append(
            f"  (measured = the plug-in TV of {n_draws} draws, biased upward at this size; "
            f"'expected' = its mean under the predicted law, the number to compare it with)"
        )

    def measured(r: Any) -> str:
        exp = getattr(r, "expected_measured_tv", None)
        tail = "" if exp is None else f" (expected {exp:.4f})"
        lo, hi = getattr(r, "expected_low", None), getattr(r, "expected_high", None)
        if exp is not None and lo is not None and hi is not None:
            side = "above" if r.measured_tv > hi else "below" if r.measured_tv < lo else ""
            if side:  # named, not left for the reader to spot on the whisker
                tail = (f" (expected {exp:.4f}; {side} the {lo:.4f}-{hi:.4f} that 90% of runs "
                        "under the prediction give -- one member in ten lands outside by chance)")  # fmt: skip
        return f"measured {r.measured_tv:.4f}{tail}"

    def pval(r: Any, impossible: int) -> str:  # an impossible outcome seen: p is exactly 0
        return "p = 0" if impossible and r.pvalue == 0 else p_phrase(r.pvalue)

    for r in broken.itertuples():
        fate = (
            "caught"
            if r.caught
            else "cannot tell at this size"
            if r.n_to_detect > n_draws
            else "not caught"
        )
        seen = int(getattr(r, "impossible", 0) or 0)
        why = (
            f"; an impossible outcome was seen: {seen} of {n_draws} draws on an outcome the "
            "lossless law gives probability 0, which refutes the sampler on its own"
            if r.caught and seen
            else ""
        )
        lines.append(
            f"  {r.Index}: predicted TV {r.predicted_tv:.4f} ({r.law}), {measured(r)}, "
            f"needs ~{r.n_to_detect:,.0f} draws: {fate} ({pval(r, seen)}{why})"
        )
    for r in shipped[shipped.lossless].itertuples():
        verdict = "no departure found"
        if r.caught:
            again = getattr(r, "recheck_pvalue", math.nan)
            if not math.isfinite(again):
                verdict = (f"flagged (p = {r.pvalue:.2g}; a lossless check at alpha = 0.01 is "
                           "flagged in 1 of 100 runs)")  # fmt: skip
            elif again >= 0.01:
                verdict = (f"flagged (p = {r.pvalue:.2g}): a false alarm -- its exact law is the "
                           f"target's (predicted TV 0), and a second sample of {n_draws} draws gives "
                           f"p = {again:.2g}; at alpha = 0.01 one lossless check in 100 is flagged")  # fmt: skip
            else:
                verdict = (f"flagged twice (p = {r.pvalue:.2g}, then {again:.2g} on a second sample "
                           "of the same size): not chance -- the sampler departs from its stated law")  # fmt: skip
        lines.append(
            f"  {r.Index} (lossless): predicted TV {r.predicted_tv:.4f}, {measured(r)}: {verdict}"
        )
    return lines


def sampler_check_lines(mine: Any, installed: Any, *, n_runs: int) -> list[str]:
    """The conformance kit's verdict on the reader's sampler next to transformers' installed
    one (notebook 04), with the smallest failing case when the reader's fails."""
    lines = [
        f"Your sampler ({n_runs} runs per case): {mine.verdict.upper()}; transformers' installed "
        f"_speculative_sampling: {installed.verdict.upper()} (every case's first token checked to "
        f"TV >= {installed.min_detectable_tv:.3f} with 90% power, false-alarm rate <= {installed.alpha:g})"
    ]
    if mine.counterexample is not None:
        ce = mine.counterexample
        lines.append(
            f"  your smallest failing case: V = {ce.vocab}, k = {ce.k} ({ce.where}, p = {ce.pvalue:.2g})"
        )
    return lines


def sequential_line(
    verifier: str, run: Any, *, exact_tv: float, tolerance: float, level: float
) -> str:
    """One rule's sequential check (notebook 05): caught when its e-value crossed ``1 / level``,
    equivalent within ``tolerance`` when the TV's upper end fell below it, inconclusive at the
    cap otherwise -- with how many samples per arm that took against the fixed-n design."""
    if run.decision == "inconsistent":
        what = (
            f"caught after {run.samples_per_arm} samples per arm, "
            f"{run.samples_per_arm / run.fixed_n:.2f}x the fixed-n design for TV {tolerance:g} "
            f"({run.fixed_n}); e-value {run.e_value:.3g} >= {1 / level:g}"
        )
    elif run.decision == "equivalent":
        what = (
            f"equivalent within {tolerance:g} after {run.samples_per_arm} samples per arm "
            f"({run.samples_per_arm / run.fixed_n:.2f}x the fixed-n design): every TV of "
            f"{run.tv_upper:.3g} or more rejected (TV < {run.tv_upper:.3g}), "
            f"e-value {run.e_value:.3g}"
        )
    else:
        what = (
            f"inconclusive at the cap ({run.cap} per arm): e-value {run.e_value:.3g} < "
            f"{1 / level:g} and TV upper end {run.tv_upper:.3f} > {tolerance:g} -- no rejection, "
            "and not evidence of equivalence either"
        )
    return f"Sequential, {verifier} (exact first-token TV {exact_tv:.3f}): {what}."
