"""Sequential verdicts: sample in batches, stop at the first of reject / equivalent / cap.

Shared by ``consistency_check(..., sequential=True)`` and ``specviz audit --sequential``: the
caller draws the next batch of continuations per prompt and arm (its own sampling, unchanged)
and feeds them to :class:`SequentialRun`, which keeps the anytime-valid statistics of
:mod:`specviz.stats` (:class:`~specviz.stats.SequentialTwoSample`) and builds the
:class:`SequentialReport`.

Views of one continuation: the token at each position (``"<end>"`` past its end), the first
bigram (more than two positions) and the whole continuation (more than one) -- the outcomes the
fixed-n report tests. Their e-values are averaged per prompt, prompts multiply. "Equivalent
within tau" speaks about the token law at every position of every prompt: each one's TV upper
confidence bound must be below tau.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import stats
from ..core.drawing import view

__all__ = ["END", "SequentialReport", "SequentialRun", "fixed_n_design", "sequence_views"]

END = "<end>"  # the outcome of a position after the continuation ended (EOS)
CAP_FACTOR = 1.5  # default cap: this many times the fixed-n design for the tolerance


def sequence_views(seqs: Sequence[Sequence[Any]], max_positions: int) -> dict[str, list]:
    """The outcomes of each continuation seen through every view (see the module docstring)."""
    views: dict[str, list] = {
        f"token@{pos}": [s[pos] if len(s) > pos else END for s in seqs]
        for pos in range(max_positions)
    }
    if max_positions > 2:
        views["bigram@0"] = [tuple(s[:2]) for s in seqs]
    if max_positions > 1:
        views["continuation"] = [tuple(s) for s in seqs]
    return views


def fixed_n_design(
    laws: Sequence[np.ndarray], tv_tolerance: float, alpha: float
) -> tuple[int, str]:
    """Samples per arm a fixed-n two-sample Pearson test needs to see *any* TV of
    ``tv_tolerance`` with 90% power at ``alpha``, for the hardest of ``laws`` (each a view's
    pooled law); a Zipf law on 10 outcomes when no law has two outcomes. Returns (n, what it
    was computed for); n is ``MAX_DESIGN`` when the design needs more.

    "Any" TV: the design is powered against the least-favourable difference of that size
    (:func:`specviz.stats.sample_size_for_tv` with ``alternative="least-favourable"``: mass
    moved between the two parts of the law whose masses are nearest 1/2), not the head-tail
    move of the generic power statements. "Equivalent within tau" is a claim about every
    difference of size tau, and ruling them all out costs about what detecting the hardest one
    costs, whatever the law's shape; the head-tail design is small for a peaked law (its rare
    half has little mass, so a move into it is easy to see), and a cap of 1.5x *it* was too
    short for the equivalence stop (``benchmarks/results/sequential_exact.txt``)."""
    best, what = 0, ""
    for law in laws:
        law = law[law > 0]
        if law.size >= 2:
            n = _design(law / law.sum(), tv_tolerance, alpha)
            if n > best:
                best, what = n, f"the observed law of the hardest view ({law.size} outcomes)"
    if best == 0:
        best = _design(10, tv_tolerance, alpha)
        what = "a Zipf law on 10 outcomes (every view showed a single outcome)"
    what = f"{FIXED_N_BASIS}, {what}"
    if best >= MAX_DESIGN:
        what += f"; at least {MAX_DESIGN:.0e}"
    return int(best), what


MAX_DESIGN = 10**9
FIXED_N_BASIS = "two-sample Pearson, 90% power against the least-favourable difference"


def _design(law: Any, tv: float, alpha: float) -> int:
    try:
        return stats.sample_size_for_tv(
            law,
            tv,
            alpha=alpha,
            two_sample=True,
            max_n=MAX_DESIGN,
            alternative="least-favourable",
        )
    except ValueError:  # more than MAX_DESIGN (or no alternative of this size)
        return MAX_DESIGN


def _pooled_law(xs: Sequence[Any], ys: Sequence[Any]) -> np.ndarray:
    _, ca, cb = stats.counts_from_samples(list(xs), list(ys))
    return (ca + cb).astype(float)


@dataclass(frozen=True, eq=False)
class SequentialReport:
    """A sequential verdict (``consistency_check(..., sequential=True)``, ``specviz audit
    --sequential``).

    ``outcome`` starts with ``"inconsistent"`` (the e-value reached 1/alpha: the laws differ),
    ``"equivalent"`` (``"equivalent within 0.05"``: every position's token law is within TV
    ``tv_tolerance`` of the reference arm's, at confidence 1 - alpha) or ``"inconclusive"``
    (the cap came first). ``samples_per_arm`` is what was used (per prompt), ``fixed_n`` what
    a fixed-n design for ``tv_tolerance`` needs, ``trajectory`` one row per batch.
    """

    outcome: str
    samples_per_arm: int
    cap: int
    alpha: float
    tv_tolerance: float
    e_value: float
    pvalue: float  # anytime-valid: min(1, 1 / largest e-value so far)
    tv_upper: float  # largest TV upper end over positions and prompts
    fixed_n: int
    fixed_n_basis: str
    trajectory: Any  # DataFrame: samples_per_arm, e_value, tv_upper
    views: Any  # DataFrame: prompt, view, e_value, tv_upper (NaN: not an equivalence view)
    method: str
    seconds: float
    compared: str  # what was compared (the verifier, or the endpoints)
    # a finding outside the e-value that made the outcome "inconsistent" (the in-process
    # identity probe: a draft equal to the target was rejected); "" when none
    finding: str = ""

    @property
    def decision(self) -> str:
        """The outcome's first word: inconsistent | equivalent | inconclusive."""
        return self.outcome.split()[0]

    def summary(self) -> str:
        n, cap, a = self.samples_per_arm, self.cap, self.alpha
        saved = f"a fixed-n design for TV {self.tv_tolerance:g} needs {self.fixed_n:,} per arm"
        ratio = f"{n / self.fixed_n:.2f}x" if self.fixed_n else "n/a"
        head = f"sequential verdict ({self.compared}): "
        if self.finding:
            what = (
                f"inconsistent after {n:,} samples per arm: {self.finding} (e-value "
                f"{self.e_value:.3g}, TV upper end {self.tv_upper:.3g})"
            )
        elif self.decision == "inconsistent":
            worst = self.views.sort_values("e_value").iloc[-1]
            what = (
                f"inconsistent after {n:,} samples per arm: e-value {self.e_value:.3g} >= "
                f"1/alpha = {1 / a:g} (anytime-valid p = {self.pvalue:.3g}; strongest view "
                f"{worst.view}, prompt {worst.prompt})"
            )
        elif self.decision == "equivalent":
            what = (
                f"equivalent within {self.tv_tolerance:g} after {n:,} samples per arm: every "
                f"position's token law within TV {self.tv_tolerance:g} of the reference, at "
                f"{1 - a:.3g} confidence (every TV of "
                f"{_beside(self.tv_upper, self.tv_tolerance)} or more rejected at every "
                f"position: the bound's upper end is exclusive; e-value {self.e_value:.3g})"
            )
        else:
            what = (
                f"inconclusive: the cap ({cap:,} per arm) came first, with e-value "
                f"{self.e_value:.3g} (< {1 / a:g}) and TV upper end "
                f"{_beside(self.tv_upper, self.tv_tolerance)} "
                f"(> {self.tv_tolerance:g}): no difference found, none ruled out below TV "
                f"{self.tv_upper:.3g} -- not evidence of equivalence"
            )
        return f"{head}{what}. {saved[0].upper()}{saved[1:]} ({self.fixed_n_basis}); used {ratio} of it."

    def figures(self) -> dict[str, Any]:
        """The e-value and TV upper end after every batch (plotly): a view, drawn by
        :func:`specviz.views.stats.sequential_figures` (``core/drawing.py`` says why)."""
        return view("stats.sequential_figures")(self)

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["trajectory"] = self.trajectory.to_dict(orient="records")
        out["views"] = self.views.to_dict(orient="records")
        return out


def _beside(x: float, ref: float) -> str:
    """``x`` with as many significant digits (3 to 6) as it takes not to print like ``ref``
    when it differs: an upper end of 0.04996 next to a tolerance of 0.05 reads "0.04996", not
    "0.05" -- which would look like a bound that is not below the tolerance.

    >>> _beside(0.049962, 0.05), _beside(0.1453, 0.05), _beside(0.05, 0.05)
    ('0.04996', '0.145', '0.05')
    """
    for digits in range(3, 7):
        text = f"{x:.{digits}g}"
        if x == ref or float(text) != ref:
            return text
    return f"{x:.6g}"


class SequentialRun:
    """The state of one sequential comparison; the caller draws, this decides.

    ``next_size`` is how many continuations per arm and prompt to draw next (0: stop);
    ``feed`` takes them, one ``(reference, candidate)`` pair of lists per prompt. A ``cap``
    of None becomes ``CAP_FACTOR`` x the fixed-n design for ``tv_tolerance``, computed from
    the first batch.
    """

    def __init__(
        self,
        n_prompts: int,
        max_positions: int,
        *,
        alpha: float,
        tv_tolerance: float,
        batch: int,
        cap: int | None = None,
    ) -> None:
        stats.check_sequential_settings(
            alpha=alpha, tv_tolerance=tv_tolerance, cap=cap, batch=batch
        )
        names = list(sequence_views([[0] * max_positions], max_positions))
        self.seq = stats.SequentialTwoSample(
            n_prompts,
            names,
            alpha=alpha,
            tv_tolerance=tv_tolerance,
            equivalence_views=[v for v in names if v.startswith("token@")],
        )
        self.max_positions, self.batch, self.cap = max_positions, batch, cap
        self.n = 0
        self.rows: list[dict[str, float]] = []
        self.fixed_n: int | None = None
        self.fixed_n_basis = ""

    @property
    def next_size(self) -> int:
        if self.seq.decision != "continue" or (self.cap is not None and self.n >= self.cap):
            return 0
        return self.batch if self.cap is None else min(self.batch, self.cap - self.n)

    def feed(self, per_prompt: Sequence[tuple[Sequence[Any], Sequence[Any]]]) -> None:
        sizes = {len(x) for pair in per_prompt for x in pair}
        if len(sizes) != 1:
            raise ValueError(f"every prompt and arm needs the same number of draws, got {sizes}")
        laws = []
        for pi, (ref, cand) in enumerate(per_prompt):
            va = sequence_views(ref, self.max_positions)
            vb = sequence_views(cand, self.max_positions)
            self.seq.update(pi, {k: (va[k], vb[k]) for k in va})
            if self.fixed_n is None:
                laws += [_pooled_law(va[k], vb[k]) for k in va if k.startswith("token@")]
        self.n += sizes.pop()
        if self.fixed_n is None:
            tau, alpha = self.seq.tv_tolerance, self.seq.alpha
            self.fixed_n, self.fixed_n_basis = fixed_n_design(laws, tau, alpha)  # type: ignore[arg-type]
            if self.cap is None:
                self.cap = max(self.batch, math.ceil(CAP_FACTOR * self.fixed_n))
        self.rows.append(
            dict(samples_per_arm=self.n, e_value=self.seq.e_value, tv_upper=self.seq.tv_upper)
        )

    def report(self, *, seconds: float, compared: str, finding: str = "") -> SequentialReport:
        """The report where the run stopped; ``finding`` (a check outside the e-value failed,
        e.g. the identity probe's acceptance) makes the outcome ``"inconsistent (finding)"``."""
        import pandas as pd

        decision = self.seq.decision
        outcome = {
            "reject": "inconsistent",
            "equivalent": f"equivalent within {self.seq.tv_tolerance:g}",
        }.get(decision, "inconclusive")
        if finding:
            outcome = f"inconsistent ({finding})"
        views = [
            dict(
                prompt=pi,
                view=v,
                e_value=t.e_value,
                tv_upper=self.seq.bounds[pi][v].upper if v in self.seq.bounds[pi] else math.nan,
            )
            for pi, tests in enumerate(self.seq.tests)
            for v, t in tests.items()
        ]
        return SequentialReport(
            outcome=outcome,
            samples_per_arm=self.n,
            cap=int(self.cap or self.n),
            alpha=self.seq.alpha,
            tv_tolerance=float(self.seq.tv_tolerance),  # type: ignore[arg-type]
            e_value=self.seq.e_value,
            pvalue=self.seq.pvalue,
            tv_upper=self.seq.tv_upper,
            fixed_n=int(self.fixed_n or 0),
            fixed_n_basis=self.fixed_n_basis,
            trajectory=pd.DataFrame(self.rows, columns=["samples_per_arm", "e_value", "tv_upper"]),
            views=pd.DataFrame(views),
            method=stats.sequential_method(self.seq.alpha, self.seq.tv_tolerance),
            seconds=seconds,
            compared=compared,
            finding=finding,
        )
