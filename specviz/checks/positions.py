"""Tests and power where speculation acts: positions 2 and later.

Engines that draft from the first generated token on (llama-server, OpenVINO GenAI, vLLM)
sample the *first* token from the target alone, so a power statement about the first token says
nothing about speculation. Here, per position t >= 2 (1-based):

* ``tokens[:t]``: homogeneity of the law of the first t tokens (top 200 outcomes + a tail bin).
  When the first t-1 tokens have one law in both arms, the TV of this joint law *is* the mean,
  over the prefix, of the TV of token t given the prefix -- "a TV of x at position t";
* ``token@i|prefix`` (i = t - 1, the 0-based index of ``token@i``): the law of token t given the committed prefix, stratified by prefix
  (Pearson statistics and degrees of freedom summed over the prefixes seen at least
  ``min_stratum`` times in both arms: a sum of independent chi-squares under the null);
* the power statement per position: the smallest TV of the ``tokens[:t]`` law these samples
  detect with 90% probability (:func:`specviz.stats.min_detectable_tv` on the pooled, binned
  joint law). For t = 2 with more than two tokens, ``tokens[:2]`` is the ``bigram@0`` test of
  :func:`~specviz.checks.sequences.sequence_tests`, and for t = max_positions its
  ``continuation`` test (the caller passes them in ``skip_joint``).

Position 1 (the first token) is tested as before; where the engine samples it from the target,
it is the harness's own negative control.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scipy import stats as sps

from .. import stats

__all__ = [
    "PositionPower",
    "StratifiedResult",
    "position_power_statement",
    "position_tests",
]

_MAX_BINS = 200


@dataclass(frozen=True)
class StratifiedResult:
    """Pearson statistics summed over prefixes (strata)."""

    statistic: float
    pvalue: float
    dof: int
    strata: int
    method: str = "stratified Pearson (sum over prefixes)"


@dataclass(frozen=True)
class PositionPower:
    """What one prompt's samples can see at one position (1-based)."""

    position: int
    n: int  # samples per arm
    min_detectable_tv: float
    outcomes: int  # distinct outcomes of the law tested (bins)


def _joint(seqs: Sequence[Sequence[Any]], t: int) -> list[tuple]:
    return [tuple(s[:t]) for s in seqs]


def _stratified(a: Sequence[Sequence[Any]], b: Sequence[Sequence[Any]], t: int, min_stratum: int):
    """Token t (1-based) given the first t-1 tokens, summed over prefixes."""
    groups: dict[tuple, tuple[list, list]] = defaultdict(lambda: ([], []))
    for arm, seqs in ((0, a), (1, b)):
        for s in seqs:
            if len(s) >= t:
                groups[tuple(s[: t - 1])][arm].append(s[t - 1])
    stat, dof, strata = 0.0, 0, 0
    for xa, xb in groups.values():
        if len(xa) < min_stratum or len(xb) < min_stratum:
            continue
        _, ca, cb = stats.counts_from_samples(xa, xb)
        if len(ca) < 2:
            continue
        res = stats.homogeneity(ca, cb)
        if not res.dof or not math.isfinite(res.statistic):
            continue
        stat += float(res.statistic)
        dof += int(res.dof)
        strata += 1
    if not dof:
        return None
    return StratifiedResult(stat, float(sps.chi2.sf(stat, dof)), dof, strata)


def position_tests(
    a: Sequence[Sequence[Any]],
    b: Sequence[Sequence[Any]],
    max_positions: int,
    *,
    alpha: float = 0.01,
    min_stratum: int = 10,
    skip_joint: Sequence[int] = (),
) -> tuple[list[tuple[str, Any]], list[PositionPower]]:
    """The tests of positions 2..``max_positions`` (``tokens[:t]`` for t not in ``skip_joint`` --
    the caller's tests that are the same law, such as the first bigram -- and
    ``token@t|prefix``) and the power at every position 1..``max_positions``."""
    results: list[tuple[str, Any]] = []
    power: list[PositionPower] = []
    n = min(len(a), len(b))
    for t in range(1, max_positions + 1):
        labels, ca, cb = stats.counts_from_samples(_joint(a, t), _joint(b, t), max_bins=_MAX_BINS)
        if t >= 2 and t not in skip_joint and len(labels) > 1:
            results.append((f"tokens[:{t}]", stats.homogeneity(ca, cb)))
        if t >= 2:
            res = _stratified(a, b, t, min_stratum)
            if res is not None:
                results.append((f"token@{t - 1}|prefix", res))
        total = ca.sum() + cb.sum()
        mdt = math.inf
        if len(labels) > 1 and total:
            pooled = (ca + cb) / total
            mdt = stats.min_detectable_tv(pooled, n, alpha=alpha, two_sample=True)
        power.append(PositionPower(t, n, float(mdt), len(labels)))
    return results, power


def _span(values: Sequence[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "none"
    lo, hi = min(finite), max(finite)
    return f"{lo:.3f}" if math.isclose(lo, hi, rel_tol=0.05) else f"{lo:.3f}-{hi:.3f}"


def _first(span: str) -> str:
    if span == "none":
        return "no TV is detectable there at this sample size"
    return f"a TV of {span} would be seen there"


def position_power_statement(
    power: Sequence[Sequence[PositionPower]],
    n_samples: int,
    alpha: float,
    n_tests: int,
    *,
    per: str,
    first_token_control: bool | None,
) -> tuple[float, str]:
    """(the smallest TV detectable at position 2 over the prompts -- or at position 1 when the
    samples have one token -- and the sentence saying what each position can see)."""
    by_t: dict[int, list[float]] = defaultdict(list)
    for rows in power:
        for row in rows:
            by_t[row.position].append(row.min_detectable_tv)
    if not by_t:
        return math.nan, "No position could be tested."
    where = 2 if 2 in by_t else 1
    finite = [v for v in by_t[where] if math.isfinite(v)]
    head = min(finite) if finite else math.nan
    parts = []
    for t in sorted(by_t):
        if t == 1:
            continue
        law = "the first 2 tokens" if t == 2 else f"the first {t} tokens"
        span = _span(by_t[t])
        what = "no TV is detectable" if span == "none" else f"a TV of {span}"
        parts.append(f"{what} at position {t} (law of {law})")
    first = _span(by_t[1])
    if first_token_control:
        tail = (
            f" Position 1 is the negative control (the engine samples it from the target "
            f"alone): {_first(first)}."
        )
    elif first_token_control is False:
        tail = f" Position 1 goes through speculation too: {_first(first)}."
    else:
        tail = f" Position 1: {_first(first)}."
    if not parts:
        return head, (
            f"With {n_samples} samples per {per}, a first-token TV of {first} or more would be "
            f"detected with 90% probability (alpha={alpha}, two-sample Pearson; before the Holm "
            f"correction over {n_tests} tests). These samples have one token: where speculation "
            f"starts at position 2 they cannot see it; raise max_tokens."
        )
    return head, (
        f"With {n_samples} samples per {per}, where speculation acts: "
        + "; ".join(parts)
        + " (each: or more would be detected with 90% probability; the TV of the law of the "
        "first t tokens is the mean TV of token t given the tokens before it; alpha="
        f"{alpha}, two-sample Pearson, before the Holm correction over {n_tests} tests)." + tail
    )
