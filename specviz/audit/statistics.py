"""The audit's tests (:mod:`specviz.audit.run`, steps 3-4): the two-sample tests per prompt with
Holm / Benjamini-Hochberg and the power statement, and the greedy identity report."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import stats
from ..checks.positions import position_power_statement, position_tests
from ..checks.report import result_row
from ..checks.report import verdict as report_verdict
from ..checks.sequences import LogprobNumerics, sequence_tests
from .client import AuditError
from .config import ARMS, AuditConfig
from .sampling import _Raw

# ------------------------------------------------------------------------------ statistics


def _tests(
    cfg: AuditConfig, raw: _Raw, rng: np.random.Generator, first_token_control: bool | None = True
):
    import pandas as pd

    rows: list[dict[str, Any]] = []
    tv_rows: list[dict[str, Any]] = []
    power: list = []
    numerics: list[LogprobNumerics | None] = []
    first: tuple = ((), np.zeros(0), np.zeros(0))
    logprob_note = None
    # in-process engines report no logprobs: nothing to compare
    use_logprobs = cfg.outcome == "tokens" and all(r["logprobs"] for r in raw.samples.values())
    if use_logprobs:
        bad = []
        for arm in ARMS:
            recs = [r for k, r in raw.samples.items() if k[0] == arm]
            n_tok = sum(len(r["tokens"]) for r in recs)
            n_bad = sum(r.get("unreported", 0) for r in recs)
            if n_bad:
                bad.append(
                    f"{arm.upper()} reported no logprob for {n_bad} of its {n_tok} sampled tokens"
                )
        if bad:
            use_logprobs = False
            logprob_note = (
                "; ".join(bad) + " (logprob 0.0 without the requested alternatives: the server "
                "did not compute them -- llama.cpp does this for tokens of its speculative "
                "path). The logprob KS/AD tests compare reported numbers, so they are skipped; "
                "the token tests are unaffected."
            )

    for pi in range(len(cfg.prompts)):
        arms = {arm: [raw.samples[(arm, pi, j)] for j in range(cfg.n_samples)] for arm in ARMS}
        seq = {arm: [tuple(r["tokens"]) for r in recs] for arm, recs in arms.items()}

        def add(test: str, res: Any, pi: int = pi) -> None:
            rows.append(result_row(pi, test, res))

        lp = {arm: [sum(r["logprobs"]) for r in recs] for arm, recs in arms.items()}
        seq_tests = sequence_tests(
            seq["a"],
            seq["b"],
            cfg.max_tokens,
            alpha=cfg.alpha,
            rng=rng,
            n_boot=cfg.n_boot,
            logprobs=(lp["a"], lp["b"]) if use_logprobs else None,
            between="configurations",
        )
        numerics.append(seq_tests.numerics)
        for name, res in seq_tests.results:
            add(name, res)
        tv_rows += [dict(prompt=pi, **row) for row in seq_tests.tv]
        # where speculation acts: positions 2.. (the joint law of the first t tokens, token t
        # given its prefix) and the power at every position
        skip = {cfg.max_tokens} | ({2} if cfg.max_tokens > 2 else set())
        pos_results, pos_power = position_tests(
            seq["a"], seq["b"], cfg.max_tokens, alpha=cfg.alpha, skip_joint=tuple(skip)
        )
        for name, res in pos_results:
            add(name, res)
        power.append(pos_power)
        if pi == 0:
            first = seq_tests.first_counts

    tests = pd.DataFrame(rows)
    if tests.empty:
        raise AuditError(
            "nothing to test: every prompt produced a single outcome in both arms "
            "(raise the temperature or max_tokens, or use prompts with an uncertain next token)"
        )
    verdict = report_verdict(tests, cfg.alpha)
    mdt, statement = position_power_statement(
        power,
        cfg.n_samples,
        cfg.alpha,
        len(tests),
        per="configuration and prompt",
        first_token_control=first_token_control,
    )
    power_rows = [dict(prompt=pi, **vars(row)) for pi, rows in enumerate(power) for row in rows]
    return (
        verdict,
        tests,
        pd.DataFrame(tv_rows),
        mdt,
        statement,
        first,
        tuple(numerics),
        logprob_note,
        power_rows,
    )


def _greedy(cfg: AuditConfig, raw: _Raw) -> stats.GreedyConsistencyResult:
    refs, cands, margins, gaps = [], [], [], []
    for pi in range(len(cfg.prompts)):
        ra, rb = raw.greedy[("a", pi)], raw.greedy[("b", pi)]
        ta, tb = ra["tokens"], rb["tokens"]
        d = next((i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y), None)
        if d is None and len(ta) != len(tb):
            d = min(len(ta), len(tb))
        margin = None
        if d is not None and ra["top"] and d < len(ra["top"]):
            # logprob differences equal logit differences: log-softmax shifts all by one constant
            top = sorted(ra["top"][d].values(), reverse=True)
            if len(top) >= 2:
                margin = top[0] - top[1]
        refs.append(ta)
        cands.append(tb)
        margins.append(margin)
        shared = len(ta) if d is None else d
        la, lb = ra["logprobs"][:shared], rb["logprobs"][:shared]
        # positions whose logprob came without alternatives were not computed: leave them out
        ok = [
            i
            for i in range(min(len(la), len(lb)))
            if (not ra["top"] or ra["top"][i]) and (not rb["top"] or rb["top"][i])
        ]
        gaps.append(max((abs(la[i] - lb[i]) for i in ok), default=None) if la and lb else None)
    result = stats.greedy_consistency(refs, cands, margins, near_tie=cfg.near_tie)
    return result, tuple(gaps)
