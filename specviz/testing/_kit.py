"""check_sampler / check_case / assert_lossless: the kit's three entry points."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from ._cases import FAMILIES, Case, Plan, check_law_rows, family_plan
from ._report import ConformanceReport
from ._run import planned_tests, run_plan, test_family
from ._shrink import shrink
from ._signatures import get_adapter

__all__ = ["CALIBRATION", "SIGNATURES", "assert_lossless", "check_case", "check_sampler"]

#: The pinned signature names.
SIGNATURES = ("transformers", "vllm", "flashinfer", "trtllm", "sglang_tree", "specviz")

#: Where the kit's false-alarm rate was measured (the benchmark prints the counts).
CALIBRATION = "measured: benchmarks/results/conformance_calibration.txt"


@contextmanager
def _one_thread():
    """Tiny tensors: intra-op threads only add overhead (and fight other processes)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _check_args(signature, n, alpha, seed, vocab, k) -> None:
    if signature not in SIGNATURES:
        raise ValueError(f"unknown signature {signature!r}; choose from {SIGNATURES}")
    for name, value, low in (("n", n, 50), ("vocab", vocab, 2), ("k", k, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be a number in (0, 0.5), got {alpha!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")


def _sampler_name(fn: Any) -> str:
    if isinstance(fn, str):
        return fn
    name = getattr(fn, "name", None) if not callable(fn) or hasattr(fn, "verify") else None
    if name is None and hasattr(fn, "func"):  # functools.partial
        kw = ", ".join(f"{k}={v!r}" for k, v in fn.keywords.items())
        return f"{getattr(fn.func, '__name__', 'sampler')}({kw})"
    return name or getattr(fn, "__qualname__", None) or type(fn).__name__


def _plans(families, signature, adapter, fn, vocab, k, seed) -> tuple[list[Plan], list[str]]:
    chosen = tuple(FAMILIES if families is None else families)
    bad = [f for f in chosen if f not in FAMILIES]
    if bad:
        raise ValueError(f"unknown families {bad}; choose from {FAMILIES}")
    plans, skipped = [], []
    for fam in chosen:
        if fam == "tree":
            spec_tree = getattr(fn, "verify_tree", None) if signature == "specviz" else None
            if not (signature == "sglang_tree" or spec_tree is not None):
                if families is not None:
                    skipped.append(f"tree ({signature!r} samplers verify chains)")
                continue
            sampling = "deterministic" if signature == "sglang_tree" else (getattr(fn, "tree_sampling", None) or "independent")  # fmt: skip
            plans.append(family_plan(fam, vocab, k, seed, tree_sampling=sampling))
            continue
        plan = family_plan(fam, vocab, k, seed)
        if fam == "ragged" and not adapter.mixed_lengths:
            skipped.append(f"ragged lengths ({signature!r} takes one draft length per call: rows of different laws, same length)")  # fmt: skip
        plans.append(plan)
    return plans, skipped


def _power(rows, alpha: float) -> float:
    """The detectable TV (90% power at level alpha / m, the perturbation of
    :func:`specviz.stats.tv_alternative`: mass moved between the likely and the unlikely half of
    the law) of every first-emitted-token test, into ``row["detectable_tv"]``; returns the
    largest -- a TV every case's first token is checked to."""
    from ..stats import min_detectable_tv

    m, worst = len(rows), 0.0
    for r in rows:
        r["detectable_tv"] = math.nan
        first = r["key"] is not None and r["key"][2] == 0
        if not first or r["expected"] is None or (r["expected"] > 0).sum() < 2 or r["n"] < 100:
            continue
        r["detectable_tv"] = min_detectable_tv(r["expected"], r["n"], alpha=alpha / m, tol=1e-3)
        worst = max(worst, r["detectable_tv"])
    return worst if worst > 0 else math.inf


def _table_row(r: dict[str, Any]) -> dict[str, Any]:
    row = {k: v for k, v in r.items() if k not in ("expected", "observed", "key")}
    row["observed"] = None if r["observed"] is None else tuple(int(c) for c in r["observed"])
    row["expected"] = None if r["expected"] is None else tuple(float(x) for x in r["expected"])
    return row


def _run(
    fn, signature, plans, n, alpha, seed, device, do_shrink, skipped, notes=()
) -> ConformanceReport:
    import pandas as pd

    from ..stats import adjust_pvalues

    t0 = time.process_time()
    adapter = get_adapter(signature)
    target = adapter.check_callable(fn)
    bound = planned_tests(plans)
    rows, results = [], {}
    with _one_thread():
        for i, plan in enumerate(plans):
            res = run_plan(adapter, target, plan, n, seed, device)
            results[plan.family] = res
            rows += test_family(res, seed + i)
            if rows and min(r["pvalue"] for r in rows) < alpha / bound and i + 1 < len(plans):
                skipped = skipped + [f"{p.family} (stopped early: the law was already refuted)" for p in plans[i + 1 :]]  # fmt: skip
                break
        if not rows:
            raise RuntimeError("no test had enough emitted tokens: raise n")
        holm = adjust_pvalues([r["pvalue"] for r in rows], "holm", alpha)
        for r, adj, rej in zip(rows, holm.pvalues_adjusted, holm.reject, strict=True):
            r["holm"], r["reject"] = adj, rej
        worst = min(rows, key=lambda r: r["pvalue"])
        verdict = "fail" if holm.any_reject else "pass"
        counterexample = None
        if verdict == "fail" and do_shrink:
            counterexample = shrink(adapter, target, results[worst["family"]], worst, n, seed + 101, device)  # fmt: skip
        mdt = _power(rows, alpha)
    table = pd.DataFrame([_table_row(r) for r in rows])
    return ConformanceReport(
        verdict=verdict,
        signature=signature,
        sampler=_sampler_name(fn),
        alpha=float(alpha),
        false_alarm_rate=float(alpha),
        calibration=CALIBRATION,
        n_per_case=int(n),
        min_detectable_tv=float(mdt),
        tests=table,
        worst={k: worst[k] for k in ("family", "case", "context", "pvalue", "holm", "n", "tv")},
        counterexample=counterexample,
        skipped=tuple(skipped),
        cpu_seconds=time.process_time() - t0,
        notes=tuple(notes),
    )


def check_sampler(
    fn: Any,
    signature: str = "specviz",
    *,
    n: int = 2000,
    alpha: float = 0.01,
    seed: int = 0,
    families: Sequence[str] | None = None,
    vocab: int = 8,
    k: int = 3,
    shrink: bool = True,
    device: str | torch.device = "cpu",
) -> ConformanceReport:
    """Run ``fn`` (a rejection sampler written to ``signature``) over the exact (p, q) families
    and report whether what it emits follows the target's law.

    Args:
        fn: the sampler. For ``"specviz"`` also a registry name (``"lossless"``,
            ``"shared_noise"``) or a :class:`~specviz.verification.base.VerifierSpec`.
        signature: one of :data:`SIGNATURES` (see :mod:`specviz.testing` for the upstream
            function each mirrors).
        n: runs (rows / streams) per case; the default sees a per-position TV of about 0.06-0.1.
        alpha: family-wise false-alarm rate (Holm over every test).
        families: a subset of :data:`~specviz.testing.FAMILIES` (default: all that apply).
        vocab, k: vocabulary size and draft length of the cases ("long" uses max(2k, 8)).
        shrink: on failure, search the smallest failing case (vocabulary, chain length).
        device: where the kit puts its tensors ("cuda" for GPU kernels).
    """
    _check_args(signature, n, alpha, seed, vocab, k)
    device = torch.device(device)
    adapter = get_adapter(signature)
    target = adapter.check_callable(fn)  # before anything runs: a clear error on a bad callable
    plans, skipped = _plans(families, signature, adapter, target, vocab, k, seed)
    return _run(fn, signature, plans, n, alpha, seed, device, shrink, skipped)


def check_case(
    fn: Any,
    signature: str = "specviz",
    *,
    cases: Sequence[tuple[Any, Any]] | None = None,
    p_target: Any = None,
    q_draft: Any = None,
    layout: str = "single",
    deterministic: bool = False,
    n: int = 2000,
    alpha: float = 0.01,
    seed: int = 0,
    shrink: bool = False,
    device: str | torch.device = "cpu",
) -> ConformanceReport:
    """Rerun one exact case -- what a counterexample pastes as -- through the kit.

    ``cases`` is a list of (p_target [k+1, V], q_draft [k, V]) pairs (or pass one pair as
    ``p_target=``, ``q_draft=``); ``layout`` "single" (each case on its own), "mixed" (the rows
    of one call cycle through the cases) or "rounds" (two cases, the second run by the same
    streams after the first).
    """
    _check_args(signature, n, alpha, seed, 2, 1)
    if cases is None:
        if p_target is None or q_draft is None:
            raise ValueError("give cases=[(p_target, q_draft), ...] or p_target= and q_draft=")
        cases = [(p_target, q_draft)]
    if layout not in ("single", "mixed", "rounds"):
        raise ValueError(f"layout must be 'single', 'mixed' or 'rounds', got {layout!r}")
    built = []
    for i, pair in enumerate(cases):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"cases[{i}] must be a (p_target, q_draft) pair")
        q = check_law_rows(pair[1], f"cases[{i}] q_draft")
        p = check_law_rows(pair[0], f"cases[{i}] p_target", rows=q.shape[0] + 1)
        if p.shape[1] != q.shape[1]:
            raise ValueError(f"cases[{i}]: p_target [k+1, V] and q_draft [k, V] disagree on V ({p.shape[1]} vs {q.shape[1]})")  # fmt: skip
        if deterministic and not ((q == 1.0) | (q == 0.0)).all():
            raise ValueError(f"cases[{i}]: deterministic drafts need one-hot q_draft rows")
        built.append(Case(f"case-{i}", p, q, deterministic))
    if layout == "rounds" and len(built) != 2:
        raise ValueError("layout='rounds' takes exactly two cases (first round, second round)")
    if len({c.vocab for c in built}) != 1:
        raise ValueError("every case must have the same vocabulary size V")
    plan = Plan("case", tuple(built), layout)
    return _run(fn, signature, [plan], n, alpha, seed, torch.device(device), shrink, [])


def assert_lossless(fn: Any, signature: str = "specviz", **kwargs: Any) -> ConformanceReport:
    """:func:`check_sampler`, raising ``AssertionError`` with the report (verdict, worst case,
    shrunk counterexample as pasteable code) when the sampler fails. Returns the report."""
    report = check_sampler(fn, signature, **kwargs)
    if not report.passed:
        raise AssertionError(report.summary())
    return report
