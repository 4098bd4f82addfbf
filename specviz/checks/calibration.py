"""Is consistency_check calibrated on your pair? Run it on a true null, many times."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ..core.args import check_int
from ..decoding.inputs import check_probability
from .consistency import consistency_check

__all__ = ["CheckCalibration", "calibrate_check"]


@dataclass(frozen=True, eq=False)
class CheckCalibration:
    """:func:`consistency_check` run ``replicates`` times on a true null (see
    :func:`calibrate_check`).

    ``table`` has one row per (prompt, test): ``runs`` (replicates in which the test was
    run), ``rejections`` at ``test_alpha``, the central 99% binomial interval
    ``[low, high]`` of that count for a calibrated test, the KS p-value of the p-values'
    uniformity (for information: Anderson-Darling's tabulated p is capped at 0.25, and chi-square
    p-values of small tables are discrete) and ``calibrated`` (count inside its interval).
    ``false_alarms`` counts "inconsistent" verdicts (Holm at the check's ``alpha``);
    ``false_alarm_high`` is the 99% upper bound of that count for a level-``alpha`` verdict.
    """

    table: Any  # DataFrame
    false_alarms: int
    false_alarm_high: int
    replicates: int
    alpha: float
    test_alpha: float
    seconds: float

    @property
    def calibrated(self) -> bool:
        return bool(self.table.calibrated.all()) and self.false_alarms <= self.false_alarm_high

    def summary(self) -> str:
        bad = self.table[~self.table.calibrated]
        worst = ", ".join(
            f"{r.test}@prompt{r.prompt} {r.rejections}/{r.runs}" for r in bad.itertuples()
        )
        return (
            f"{'calibrated' if self.calibrated else 'NOT calibrated'}: {len(self.table)} tests "
            f"over {self.replicates} null replicates, {len(self.table) - len(bad)} inside their "
            f"99% interval at alpha={self.test_alpha:g}"
            + (f" (outside: {worst})" if len(bad) else "")
            + f"; verdict false alarms {self.false_alarms}/{self.replicates} at alpha="
            f"{self.alpha:g} (99% bound {self.false_alarm_high})"
        )


def calibrate_check(
    target: Any,
    draft: Any,
    prompts: Sequence[Any],
    *,
    replicates: int = 200,
    seed: int = 0,
    test_alpha: float = 0.05,
    progress: bool = False,
    **check: Any,
) -> CheckCalibration:
    """Is :func:`consistency_check` calibrated on *this* pair? Run it ``replicates`` times
    (seeds from one Generator) with a lossless ``verifier`` and count, for every test of the
    report, how often it rejects at ``test_alpha``, and how often the verdict says
    "inconsistent". ``check`` are :func:`consistency_check`'s keyword arguments (``n_samples``,
    ``max_new_tokens``, ``temperature``, ``alpha``, ...). With a broken ``verifier`` the same
    harness is the negative control: it must come out uncalibrated.
    """
    import pandas as pd
    from scipy import stats as st

    replicates = check_int("replicates", replicates, 1)
    test_alpha = check_probability("test_alpha", test_alpha)
    seed = check_int("seed", seed, 0)
    t0 = time.perf_counter()
    alpha = check_probability("alpha", check.get("alpha", 0.01))
    rng = np.random.default_rng(seed)
    pvalues: dict[tuple[int, str], list[float]] = {}
    alarms = 0
    for _ in tqdm(range(int(replicates)), desc="calibrate", disable=not progress, leave=False):
        report = consistency_check(
            target, draft, prompts, seed=int(rng.integers(2**31)), progress=False, **check
        )
        alarms += report.verdict == "inconsistent"
        for row in report.tests.itertuples():
            pvalues.setdefault((int(row.prompt), str(row.test)), []).append(float(row.pvalue))
    rows = []
    for (prompt, test), ps in sorted(pvalues.items()):
        runs = len(ps)
        rej = int(np.count_nonzero(np.asarray(ps) < test_alpha))
        low, high = (int(st.binom.ppf(q, runs, test_alpha)) for q in (0.005, 0.995))
        rows.append(
            dict(
                prompt=prompt,
                test=test,
                runs=runs,
                rejections=rej,
                rate=rej / runs,
                low=low,
                high=high,
                ks_uniform_pvalue=float(st.kstest(ps, "uniform").pvalue),
                calibrated=low <= rej <= high,
            )
        )
    R = int(replicates)
    return CheckCalibration(
        table=pd.DataFrame(rows),
        false_alarms=int(alarms),
        false_alarm_high=int(st.binom.ppf(0.995, R, alpha)),
        replicates=R,
        alpha=alpha,
        test_alpha=test_alpha,
        seconds=time.perf_counter() - t0,
    )
