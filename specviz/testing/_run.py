"""Running a sampler over the exact families and testing what it emitted.

For every family the kit draws the drafts from each case's q (numpy, seeded), calls the sampler
through its signature adapter, and counts the tokens emitted in each *context* -- the target row
whose law the token must follow (chains: its position; trees: the node it hangs under). Each
context with enough emissions gets a Pearson goodness-of-fit test against that row
(:func:`specviz.stats.goodness_of_fit`, sparse bins pooled, an impossible token is p = 0); the
"rounds" family adds a test that a stream's second round does not depend on its first
(:func:`~specviz.stats.grouped_goodness_of_fit`, the second round's first token grouped by how
many drafts the first round kept). The verdict is Holm-adjusted over all tests at ``alpha``
(:func:`~specviz.stats.adjust_pvalues`). A family that already refutes the law at the
Bonferroni level of every planned test ends the run early: later tests cannot change "fail".
"""

from __future__ import annotations

import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ._adapters import Adapter, Rows
from ._cases import Case, Plan, restrict

__all__ = ["FamilyResult", "draw_drafts", "run_plan", "test_family"]

MIN_RUNS = 20  # a context emitted fewer times is only checked for impossible tokens


def _draw_row(q: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    cdf = np.cumsum(q)
    idx = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
    return np.minimum(idx, np.flatnonzero(q > 0)[-1])


def _siblings(q: np.ndarray, m: int, n: int, sampling: str, rng) -> np.ndarray:
    """[n, m] sibling tokens drawn from one law the way ``sampling`` says."""
    if sampling == "deterministic":
        return np.tile(np.argsort(-q, kind="stable")[:m], (n, 1))
    if sampling == "independent":
        return np.stack([_draw_row(q, n, rng) for _ in range(m)], 1)
    g = -np.log(-np.log(rng.random((n, q.size))))  # Gumbel-top-m = draws without replacement
    with np.errstate(divide="ignore"):
        keys = np.where(q > 0, np.log(q) + g, -np.inf)
    return np.argsort(-keys, axis=1)[:, :m]


def draw_drafts(case: Case, n: int, rng: np.random.Generator) -> np.ndarray:
    """[n, k] chain drafts (position i from q_i), or [n, nodes] tree candidates."""
    if case.tree is None:
        return np.stack([_draw_row(case.q_draft[i], n, rng) for i in range(case.k)], 1)
    parents = case.tree.parents
    out = np.zeros((n, len(parents)), dtype=np.int64)
    groups: dict[int, list[int]] = defaultdict(list)
    for i, par in enumerate(parents):
        groups[par].append(i)
    for nodes in groups.values():
        out[:, nodes] = _siblings(case.q_draft[nodes[0]], len(nodes), n, case.tree.sampling, rng)
    return out


@dataclass
class FamilyResult:
    """Counts per (round, case index, context), the rounds extra, and exact failures."""

    plan: Plan
    counts: dict[tuple[int, int, int], np.ndarray] = field(default_factory=dict)
    second_by_first: dict[int, np.ndarray] = field(default_factory=dict)  # rounds: n1 -> counts
    example: dict[tuple[int, int, int, int], tuple[int, ...]] = field(default_factory=dict)
    counter_errors: int = 0
    problem: str = ""  # what a counted error means for this signature
    rows: int = 0
    cases: tuple[Case, ...] = ()


def _record(res: FamilyResult, rnd: int, case_ids: list[int], drafts, emitted) -> None:
    V = res.cases[0].vocab
    tally: Counter = Counter()
    for b, (ci, toks) in enumerate(zip(case_ids, emitted, strict=True)):
        for ctx, t in toks:
            key = (rnd, ci, ctx, t)
            if key not in tally and key not in res.example:  # a run that emitted it, for the report
                res.example[key] = tuple(int(x) for x in drafts[b])
            tally[key] += 1
    for (r, ci, ctx, t), c in tally.items():
        if (r, ci, ctx) not in res.counts:
            res.counts[(r, ci, ctx)] = np.zeros(V, dtype=np.int64)
        res.counts[(r, ci, ctx)][t] += c


def run_plan(adapter: Adapter, fn: Any, plan: Plan, n: int, seed: int, device: torch.device) -> FamilyResult:  # fmt: skip
    """Run one family: ``n`` rows (streams) per case."""
    rng = np.random.default_rng([seed, 7919, zlib.crc32(plan.family.encode())])
    cases = plan.cases
    if plan.layout == "mixed" and not adapter.mixed_lengths:  # one length per call: cut to it
        k = min(c.k for c in cases)
        cases = tuple(restrict(c, np.arange(c.vocab), k) for c in cases)
    res = FamilyResult(plan, cases=cases, problem=adapter.problem)
    stream_seed = int(rng.integers(2**31))
    if plan.layout == "single":
        for ci, case in enumerate(cases):
            drafts = draw_drafts(case, n, rng)
            streams = adapter.streams(n, stream_seed + ci, device)
            out, bad = adapter.call(fn, Rows([case] * n, list(drafts)), streams, device, rng)
            res.counter_errors += bad
            _record(res, 0, [ci] * n, drafts, out)
    elif plan.layout == "mixed":
        ids = [b % len(cases) for b in range(n * len(cases))]
        per_case = [iter(draw_drafts(c, n, rng)) for c in cases]
        drafts = [next(per_case[ci]) for ci in ids]
        streams = adapter.streams(len(ids), stream_seed, device)
        rows = Rows([cases[ci] for ci in ids], drafts)
        out, bad = adapter.call(fn, rows, streams, device, rng)
        res.counter_errors += bad
        _record(res, 0, ids, drafts, out)
    else:  # rounds: every stream runs cases[0], then cases[1], with its state carried over
        streams = adapter.streams(n, stream_seed, device)
        firsts = None
        for rnd, case in enumerate(cases):
            drafts = draw_drafts(case, n, rng)
            out, bad = adapter.call(fn, Rows([case] * n, list(drafts)), streams, device, rng)
            res.counter_errors += bad
            _record(res, rnd, [rnd] * n, drafts, out)
            if rnd == 0:
                firsts = [len(toks) - 1 for toks in out]  # drafts kept in round 1
            else:
                for n1, toks in zip(firsts, out, strict=True):
                    row = res.second_by_first.setdefault(n1, np.zeros(case.vocab, dtype=np.int64))
                    row[toks[0][1]] += 1
    res.rows = n * len(cases)
    return res


def _context_name(plan: Plan, rnd: int, case: Case, ctx: int) -> str:
    prefix = f"round {rnd + 1}, " if plan.layout == "rounds" else ""
    if case.tree is not None:
        return prefix + ("token after the root" if ctx == 0 else f"token after node {ctx - 1}")
    return prefix + f"position {ctx}" + (" (bonus)" if ctx == case.k else "")


def test_family(res: FamilyResult, seed: int) -> list[dict[str, Any]]:
    """One row per test: family, case, context, n, statistic, dof, pvalue, tv, plus the data
    the report and the shrinker need (expected law, observed counts, key)."""
    from ..stats import goodness_of_fit, grouped_goodness_of_fit

    plan, out = res.plan, []
    rng = np.random.default_rng(seed)
    for (rnd, ci, ctx), counts in sorted(res.counts.items()):
        case = res.cases[ci]
        law = case.p_target[ctx]
        n = int(counts.sum())
        impossible = bool((counts[law == 0] > 0).any())
        if n < MIN_RUNS and not impossible:
            continue
        g = goodness_of_fit(counts, law, rng=rng)
        freq = counts / n
        out.append(dict(family=plan.family, case=case.name, context=_context_name(plan, rnd, case, ctx),
                        n=n, statistic=g.statistic, dof=g.dof, pvalue=g.pvalue,
                        tv=float(0.5 * np.abs(freq - law).sum()), expected=law, observed=counts,
                        key=(rnd, ci, ctx)))  # fmt: skip
    if res.second_by_first:
        law = res.cases[1].p_target[0]
        groups = {n1: c for n1, c in sorted(res.second_by_first.items())}
        g = grouped_goodness_of_fit(groups, lambda key: law)
        if g.dof > 0 or g.pvalue == 0.0:
            total = sum(groups.values())
            out.append(dict(family=plan.family, case=res.cases[1].name,
                            context="round 2, position 0, grouped by the drafts round 1 kept",
                            n=int(total.sum()), statistic=g.statistic, dof=g.dof, pvalue=g.pvalue,
                            tv=float(0.5 * np.abs(total / total.sum() - law).sum()), expected=law,
                            observed=total, key=(1, 1, 0)))  # fmt: skip
    if res.counter_errors:
        out.append(dict(family=plan.family, case=", ".join(c.name for c in res.cases),
                        context=f"{res.problem} in {res.counter_errors} rows",
                        n=res.rows, statistic=np.inf, dof=0, pvalue=0.0, tv=np.nan, expected=None,
                        observed=None, key=None))  # fmt: skip
    return out


def planned_tests(plans: list[Plan]) -> int:
    """An upper bound on the number of tests the plans can produce (for early stopping)."""
    total = 0
    for plan in plans:
        rounds = 2 if plan.layout == "rounds" else 1
        total += sum(c.p_target.shape[0] for c in plan.cases) * rounds + 2
    return total
