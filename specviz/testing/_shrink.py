"""Shrinking a failure to the smallest case that still fails.

From the worst failing test, the kit ranks the tokens by how much they took part in the failure
(an impossible token first, then by |observed - expected| frequency, then by target and draft
mass) and reruns the same family with the vocabulary cut to the top V' tokens and the chains cut
to k' drafts (every row renormalised), smallest V' first and, for each, smallest k' first. The
first candidate whose own tests reject at Holm level ``SHRINK_ALPHA`` (stricter than the
verdict's, so the reproduction fails reliably) is the counterexample; when none does, the
original case is.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._adapters import Adapter
from ._cases import Plan, restrict
from ._report import Counterexample
from ._run import FamilyResult, run_plan, test_family

__all__ = ["SHRINK_ALPHA", "shrink"]

SHRINK_ALPHA = 1e-3
MAX_CANDIDATES = 24


def _ranked_tokens(res: FamilyResult, row: dict[str, Any]) -> np.ndarray:
    V = res.cases[0].vocab
    score = np.zeros(V)
    if row.get("observed") is not None:
        obs, exp = row["observed"].astype(float), row["expected"]
        score += 10.0 * ((exp == 0) & (obs > 0)) + np.abs(obs / max(1.0, obs.sum()) - exp)
    mass = sum(c.p_target.sum(0) + c.q_draft.sum(0) for c in res.cases)
    return np.lexsort((-mass, -score))  # by score, ties by mass


def _sizes(V: int, floor: int) -> list[int]:
    return sorted({s for s in (2, 3, 4, 6, V) if floor <= s <= V} | {V})


def _chain_lengths(res: FamilyResult, row: dict[str, Any]) -> list[int]:
    k = max(c.k for c in res.cases)
    if res.cases[0].tree is not None:
        return [k]
    ctx = row["key"][2] if row.get("key") else k
    return sorted({x for x in (1, 2, 3, ctx, ctx + 1, k) if 1 <= x <= k})


def _counterexample(adapter, res: FamilyResult, row, tokens) -> Counterexample:
    rnd, ci, ctx = row["key"] if row.get("key") else (0, 0, 0)
    obs, exp = row["observed"], row["expected"]
    if obs is None:  # a bookkeeping failure: no law to show
        obs, exp = np.zeros(res.cases[0].vocab), res.cases[ci].p_target[0]
    over = int(np.argmax(obs / max(1, obs.sum()) - exp))
    drafts = res.example.get((rnd, ci, ctx, over)) or next(
        (v for (r, c, _, _), v in res.example.items() if (r, c) == (rnd, ci)), ()
    )
    cases = res.cases if res.plan.layout != "single" else (res.cases[ci],)
    return Counterexample(
        signature=adapter.name,
        family=res.plan.family,
        layout=res.plan.layout,
        cases=tuple((c.p_target, c.q_draft) for c in cases),
        deterministic=res.cases[ci].deterministic,
        draft_tokens=tuple(drafts),
        where=row["context"],
        expected=np.asarray(exp),
        observed=np.asarray(obs),
        pvalue=float(row["pvalue"]),
        n=int(row["n"]),
        vocab=res.cases[0].vocab,
        k=max(c.k for c in res.cases),
        tokens=tuple(int(t) for t in tokens),
    )


def _fails(adapter, fn, plan, n, seed, device):
    res = run_plan(adapter, fn, plan, n, seed, device)
    rows = test_family(res, seed)
    if not rows:
        return None
    worst = min(rows, key=lambda r: r["pvalue"])
    # Holm rejects at least one test exactly when the smallest p-value is <= alpha / m
    return (res, worst) if worst["pvalue"] <= SHRINK_ALPHA / len(rows) else None


def shrink(
    adapter: Adapter, fn: Any, res: FamilyResult, row: dict[str, Any], n: int, seed: int,
    device: torch.device,
) -> Counterexample:  # fmt: skip
    """The smallest (V', k') restriction of the failing family that still fails."""
    V = res.cases[0].vocab
    ranked = _ranked_tokens(res, row)
    floor = 4 if res.cases[0].tree is not None else 2
    tried = 0
    for size in _sizes(V, floor):
        keep = np.sort(ranked[:size])
        for k in _chain_lengths(res, row):
            if size == V and k == max(c.k for c in res.cases):
                break  # the original case: nothing smaller failed
            cases = [restrict(c, keep, min(c.k, k)) for c in res.cases]
            if any(c is None for c in cases):
                continue
            tried += 1
            if tried > MAX_CANDIDATES:
                break
            found = _fails(adapter, fn, Plan(res.plan.family, tuple(cases), res.plan.layout), n, seed + tried, device)  # fmt: skip
            if found is not None:
                return _counterexample(adapter, found[0], found[1], keep)
    return _counterexample(adapter, res, row, np.arange(V))
