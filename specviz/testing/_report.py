"""What the kit returns: a verdict with its false-alarm rate, its power, the worst case found and
a shrunk counterexample that pastes into a test."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["ConformanceReport", "Counterexample"]


def _fmt_rows(a: np.ndarray, indent: str) -> str:
    rows = ",\n".join(
        indent + "    [" + ", ".join(f"{x:.6g}" for x in r) + "]" for r in np.atleast_2d(a)
    )
    return "[\n" + rows + ",\n" + indent + "]"


@dataclass(frozen=True)
class Counterexample:
    """The smallest case (vocabulary, chain length) at which the sampler still failed, as data
    and as code (:meth:`code`). ``cases`` holds one (p_target, q_draft) pair per case of the
    layout ("single": one; "rounds": the first and the second round of a stream; "mixed": the
    rows of one call, cycled)."""

    signature: str
    family: str
    layout: str
    cases: tuple[tuple[np.ndarray, np.ndarray], ...]
    deterministic: bool
    draft_tokens: tuple[int, ...]  # drafts of one run that emitted the most over-produced token
    where: str  # which emitted token's law failed
    expected: np.ndarray
    observed: np.ndarray  # counts
    pvalue: float
    n: int
    vocab: int
    k: int
    tokens: tuple[int, ...] = ()  # ids of the original vocabulary the shrunk case kept

    @property
    def tv(self) -> float:
        freq = self.observed / max(1, self.observed.sum())
        return float(0.5 * np.abs(freq - self.expected).sum())

    def code(self, sampler: str = "my_sampler") -> str:
        """Ready-to-paste Python that reruns this case through the kit."""
        lines = ["import torch", "from specviz.testing import check_case", ""]
        names = []
        for i, (p, q) in enumerate(self.cases):
            sfx = "" if len(self.cases) == 1 else f"_{i + 1}"
            lines.append(
                f"p_target{sfx} = torch.tensor({_fmt_rows(p, '')}, dtype=torch.float64)  # [k+1, V]"
            )
            lines.append(
                f"q_draft{sfx} = torch.tensor({_fmt_rows(q, '')}, dtype=torch.float64)  # [k, V]"
            )
            names.append(f"(p_target{sfx}, q_draft{sfx})")
        lines.append(
            f"draft_tokens = {list(self.draft_tokens)}  # drafts of one failing run (drawn from q_draft)"
        )
        args = f"cases=[{', '.join(names)}], layout={self.layout!r}"
        det = ", deterministic=True" if self.deterministic else ""
        lines += [
            f"# {self.where}: expected {np.round(self.expected, 4).tolist()}",
            f"#   observed {self.observed.astype(int).tolist()} in n = {self.n} runs (p = {self.pvalue:.2g}, TV ~ {self.tv:.3f})",
            f"report = check_case({sampler}, signature={self.signature!r}, {args}{det})",
            "assert report.passed, report",
        ]
        return "\n".join(lines)

    def __str__(self) -> str:
        return (
            f"shrunk counterexample (V = {self.vocab}, k = {self.k}, family {self.family!r}, "
            f"layout {self.layout!r}; kept token ids {list(self.tokens)}):\n{self.code()}"
        )


@dataclass(frozen=True, eq=False)
class ConformanceReport:
    """A verdict on one sampler: ``"pass"`` (no test rejected at family-wise level ``alpha``,
    Holm) or ``"fail"``; ``false_alarm_rate`` is the chance a lossless sampler gets "fail"
    (Holm's bound ``alpha``; the kit's measured rate is in ``calibration``);
    ``min_detectable_tv`` a TV between a first emitted token's law and the target's that every
    case's test sees with 90% probability (each test's own is in ``tests.detectable_tv``); ``worst`` the test with the smallest
    p-value; ``counterexample`` the shrunk case (failures only)."""

    verdict: str
    signature: str
    sampler: str
    alpha: float
    false_alarm_rate: float
    calibration: str
    n_per_case: int
    min_detectable_tv: float
    tests: (
        Any  # pandas DataFrame: family, case, context, n, statistic, dof, pvalue, tv, holm, reject
    )
    worst: dict[str, Any] | None
    counterexample: Counterexample | None
    skipped: tuple[str, ...] = ()
    cpu_seconds: float = math.nan
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def summary(self) -> str:
        mdt = (
            "nothing"
            if not math.isfinite(self.min_detectable_tv)
            else f"TV >= {self.min_detectable_tv:.3f}"
        )
        head = (
            f"{self.sampler} ({self.signature!r} signature): {self.verdict.upper()} -- "
            f"{len(self.tests)} tests on exact (p, q) cases, {self.n_per_case} runs per case, "
            f"family-wise false-alarm rate <= {self.false_alarm_rate:g} (Holm; {self.calibration}); "
            f"every case's first token checked to {mdt} (90% power)"
        )
        lines = [head]
        if self.worst is not None:
            w = self.worst
            lines.append(
                f"worst case: family {w['family']!r}, case {w['case']!r}, {w['context']}: "
                f"p = {w['pvalue']:.2g} (Holm {w['holm']:.2g}), n = {w['n']}, TV ~ {w['tv']:.3f}"
            )
        if self.skipped:
            lines.append("not run: " + "; ".join(self.skipped))
        lines += list(self.notes)
        if self.counterexample is not None:
            lines.append(str(self.counterexample))
        lines.append(f"({self.cpu_seconds:.1f} s CPU)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return f"ConformanceReport(verdict={self.verdict!r}, signature={self.signature!r}, sampler={self.sampler!r})"
