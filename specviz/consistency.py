"""One call that answers "does this speculative decoder keep the target's distribution?".

:func:`consistency_check` samples the same prompts with speculative and with standard
sampling (batched), runs the tests that fit each kind of outcome, corrects for multiplicity
and returns a :class:`ConsistencyReport`: a verdict, the per-test table, TV estimates with
bootstrap intervals, a power statement and plotly figures.

Tests, per prompt:

* token at each position: two-sample Pearson homogeneity (sparse tokens pooled);
* first bigram and whole continuation: homogeneity with a tail bin;
* sequence log-probability under the target: two-sample KS and Anderson-Darling;
* randomized PIT of every speculative token against the target's own law, recorded during
  the verify pass: a one-sample uniformity test that needs no shared prefix.

The pass/fail verdict is Holm-adjusted at ``alpha`` over all of them; Benjamini-Hochberg
adjusted p-values are reported for exploration.

:func:`greedy_check` is the greedy counterpart: exact-match rate, first divergence and the
target's top-1/top-2 logit margin there ("numerics" near a tie, otherwise "bug").
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from . import stats
from .batch import BatchResult, autoregressive_generate_batch, speculative_generate_batch
from .engine import autoregressive_generate, speculative_generate

__all__ = [
    "CheckCalibration",
    "ConsistencyReport",
    "GreedyReport",
    "LogprobNumerics",
    "SequenceTests",
    "calibrate_check",
    "canonical_logprobs",
    "consistency_check",
    "greedy_check",
    "sequence_tests",
]


@dataclass(frozen=True, eq=False)
class ConsistencyReport:
    verdict: str  # "consistent" | "inconsistent"
    alpha: float
    n_samples: int
    tests: Any  # pandas DataFrame: prompt, test, statistic, pvalue, dof, holm, bh, reject
    tv: Any  # pandas DataFrame: prompt, position, estimate, low, high
    min_detectable_tv: float
    power_statement: str
    pit: np.ndarray  # PIT values of the speculative arm (all prompts, all positions)
    first_token_counts: tuple  # (labels, speculative counts, standard counts) of prompt 0
    seconds: float
    verifier: str
    numerics: tuple[LogprobNumerics, ...] = ()  # per prompt: logprob drift between the arms

    @property
    def numerics_statement(self) -> str:
        """The largest log-probability drift between the arms, over all prompts."""
        shared = [n for n in self.numerics if n.shared]
        if not shared:
            return str(LogprobNumerics(math.nan, 0))
        worst = max(shared, key=lambda n: n.max_gap)
        return str(LogprobNumerics(worst.max_gap, sum(n.shared for n in shared)))

    def summary(self) -> str:
        worst = self.tests.sort_values("holm").iloc[0]
        return (
            f"verdict: {self.verdict} (Holm at alpha={self.alpha}, {len(self.tests)} tests, "
            f"{self.n_samples} samples per arm, verifier={self.verifier!r}); smallest adjusted "
            f"p = {worst.holm:.3g} ({worst.test}, prompt {worst.prompt}). {self.power_statement}"
            f" {self.numerics_statement}."
        )

    def figures(self) -> dict[str, Any]:
        """Observed-vs-reference bars (first token), p-value QQ plot, PIT histogram."""
        import plotly.graph_objects as go

        labels, spec, std = self.first_token_counts
        order = np.argsort(-(np.asarray(std) + np.asarray(spec)))[:25]
        names = [str(labels[i]) for i in order]
        bars = go.Figure(
            [
                go.Bar(name="speculative", x=names, y=[spec[i] for i in order]),
                go.Bar(name="standard", x=names, y=[std[i] for i in order]),
            ]
        )
        bars.update_layout(
            title="First token: speculative vs standard sampling",
            barmode="group",
            xaxis_title="token",
            yaxis_title="count",
        )
        p = np.sort(self.tests.pvalue.to_numpy())
        expected = (np.arange(1, len(p) + 1) - 0.5) / len(p)
        qq = go.Figure(
            [
                go.Scatter(x=expected, y=p, mode="markers", name="tests"),
                go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="uniform", line={"dash": "dash"}),
            ]
        )
        qq.update_layout(
            title="p-values vs uniform (QQ)", xaxis_title="expected", yaxis_title="observed"
        )
        pit = go.Figure([go.Histogram(x=self.pit, xbins={"start": 0, "end": 1, "size": 0.05})])
        pit.update_layout(
            title="Randomized PIT of speculative tokens (uniform if lossless)",
            xaxis_title="PIT value",
            yaxis_title="count",
        )
        return {"first_token": bars, "pvalue_qq": qq, "pit": pit}


@dataclass(frozen=True, eq=False)
class GreedyReport:
    result: stats.GreedyConsistencyResult
    speculative: tuple[tuple[int, ...], ...]
    reference: tuple[tuple[int, ...], ...]

    @property
    def verdict(self) -> str:
        if self.result.n_bug:
            return "bug"
        return "numerics" if self.result.n_numerics else "identical"


def _prompt_ids(prompt: Any, tokenizer: Any) -> list[int]:
    if isinstance(prompt, str):
        if tokenizer is None:
            raise ValueError("text prompts need tokenizer=...")
        from .prompts import render_prompt

        return render_prompt(tokenizer, prompt)
    if hasattr(prompt, "messages") and tokenizer is not None:
        from .prompts import render_prompt

        return render_prompt(tokenizer, prompt)
    if isinstance(prompt, torch.Tensor):
        return prompt.view(-1).tolist()
    return list(prompt)


def _sample_arm(fn, n: int, batch_size: int, seed: int, desc: str, progress: bool, **kw):
    seqs: list[list[int]] = []
    probs: list[list[float]] = []
    above: list[list[float]] = []
    with tqdm(total=n, desc=desc, unit="seq", disable=not progress, leave=False) as bar:
        for start in range(0, n, batch_size):
            m = min(batch_size, n - start)
            r: BatchResult = fn(num_sequences=m, seed=seed + start, record=True, **kw)
            seqs += r.sequences
            probs += r.token_probs
            above += r.mass_above
            bar.update(m)
    return seqs, probs, above


def _logprob(probs: list[list[float]]) -> np.ndarray:
    return np.array([float(np.sum(np.log(np.maximum(p, 1e-300)))) for p in probs])


def result_row(prompt: int, test: str, res: Any) -> dict[str, Any]:
    """One row of a report's per-test table."""
    return dict(
        prompt=prompt,
        test=test,
        statistic=float(res.statistic),
        pvalue=float(res.pvalue),
        dof=getattr(res, "dof", None),
        method=res.method,
    )


@dataclass(frozen=True)
class LogprobNumerics:
    """How far two samplers' log-probabilities for the *same* continuation differ.

    Each arm records the log-probability of what it emitted through its own forward passes
    (a (k+1)-token verify pass against a 1-token decode pass; two server configurations): the
    same continuation then gets values that differ in the last bits. That drift is a finding,
    not an error -- and the reason the tests use one value per continuation.
    """

    max_gap: float  # largest |logprob_a - logprob_b| over records of one continuation (nats)
    shared: int  # distinct continuations seen in both samples
    between: str = "arms"

    def __str__(self) -> str:
        if not self.shared:
            return f"numerics: no continuation seen in both {self.between} to compare"
        return (
            f"numerics: up to {self.max_gap:.2g} nats between {self.between} for the same "
            f"continuation ({self.shared} continuations seen in both)"
        )


def canonical_logprobs(
    a: Sequence[Sequence[Any]],
    b: Sequence[Sequence[Any]],
    logprobs_a: Sequence[float],
    logprobs_b: Sequence[float],
    *,
    between: str = "arms",
) -> tuple[np.ndarray, np.ndarray, LogprobNumerics]:
    """One log-probability per distinct continuation, used in both samples.

    The value of a continuation is the mean of every value recorded for it, both samples
    pooled (symmetric in the samples, so neither arm's numerics is preferred). Equal outcomes
    then carry exactly equal values, which KS/AD need: fed the raw per-arm values, each atom
    of a peaked law splits in two (one per arm) and the tests reject a correct sampler with
    certainty (issue 13). Also returns the drift between the samples' own records.
    """
    la = np.asarray(logprobs_a, dtype=float)
    lb = np.asarray(logprobs_b, dtype=float)
    if la.size != len(a) or lb.size != len(b):
        raise ValueError(
            f"{la.size} and {lb.size} log-probabilities for {len(a)} and {len(b)} sequences"
        )
    keys_a = [stats._hashable(s) for s in a]
    keys_b = [stats._hashable(s) for s in b]
    total: dict[Any, float] = {}
    count: dict[Any, int] = {}
    lo: dict[Any, list[float]] = {}  # per key: [min a, max a, min b, max b]
    for arm, keys, vals in ((0, keys_a, la), (1, keys_b, lb)):
        for key, v in zip(keys, vals, strict=True):
            total[key] = total.get(key, 0.0) + float(v)
            count[key] = count.get(key, 0) + 1
            rec = lo.setdefault(key, [np.inf, -np.inf, np.inf, -np.inf])
            rec[2 * arm] = min(rec[2 * arm], float(v))
            rec[2 * arm + 1] = max(rec[2 * arm + 1], float(v))
    value = {key: total[key] / count[key] for key in total}
    shared = [r for r in lo.values() if np.isfinite(r[0]) and np.isfinite(r[2])]
    gap = max((max(r[1] - r[2], r[3] - r[0]) for r in shared), default=math.nan)
    return (
        np.array([value[k] for k in keys_a]),
        np.array([value[k] for k in keys_b]),
        LogprobNumerics(float(gap), len(shared), between),
    )


@dataclass(frozen=True, eq=False)
class SequenceTests:
    """Two-sample tests of two sets of token sequences (see :func:`sequence_tests`)."""

    results: list[tuple[str, Any]]  # (test name, stats result with statistic/pvalue/method)
    tv: list[dict[str, float]]  # per position: position, estimate, low, high
    first_counts: tuple  # (labels, counts of a, counts of b) of the first token
    min_detectable_tv: float  # first-token TV found with 90% power (pooled law as the null)
    numerics: LogprobNumerics | None = None  # log-probability drift, when logprobs were given


def sequence_tests(
    a: Sequence[Sequence[int]],
    b: Sequence[Sequence[int]],
    max_positions: int,
    *,
    alpha: float = 0.01,
    rng: np.random.Generator | None = None,
    n_boot: int = 500,
    logprobs: tuple[Any, Any] | None = None,
    between: str = "arms",
) -> SequenceTests:
    """The tests that fit token sequences from two samplers (speculative vs standard, or two
    configurations of a server): homogeneity of the token at each position, of the first
    bigram and of whole continuations (tail bins), TV per position with bootstrap intervals,
    KS/AD on sequence log-probabilities when given (one value per distinct continuation, see
    :func:`canonical_logprobs`), and KS on lengths when they vary.

    Every test sees a function of the outcome only, the same function in both samples, and
    the rank tests break ties at random (exact size for summaries with few values).
    """
    rng = rng if rng is not None else np.random.default_rng(0)
    results: list[tuple[str, Any]] = []
    tv: list[dict[str, float]] = []
    first: tuple = ((), np.zeros(0), np.zeros(0))
    mdt = math.nan
    for pos in range(max_positions):
        xa = [s[pos] for s in a if len(s) > pos]
        xb = [s[pos] for s in b if len(s) > pos]
        if not xa or not xb:
            continue
        labels, ca, cb = stats.counts_from_samples(xa, xb)
        if len(labels) > 1:
            results.append((f"token@{pos}", stats.homogeneity(ca, cb)))
        est = stats.estimate_tv(ca, cb, n_boot=n_boot, rng=rng)
        tv.append(dict(position=pos, estimate=est.estimate, low=est.low, high=est.high))
        if pos == 0:
            first = (labels, ca, cb)
            pooled = (ca + cb) / (ca.sum() + cb.sum())
            n = min(len(xa), len(xb))
            mdt = stats.min_detectable_tv(pooled, n, alpha=alpha, two_sample=True)
    if max_positions > 2:  # with two positions the first bigram is the whole continuation
        labels, ca, cb = stats.counts_from_samples(
            [tuple(s[:2]) for s in a], [tuple(s[:2]) for s in b], max_bins=200
        )
        if len(labels) > 1:
            results.append(("bigram@0", stats.homogeneity(ca, cb)))
    labels, ca, cb = stats.counts_from_samples(
        [tuple(s) for s in a], [tuple(s) for s in b], max_bins=200
    )
    if len(labels) > 1:
        results.append(("continuation", stats.homogeneity(ca, cb)))
    numerics = None
    if logprobs is not None:
        la, lb, numerics = canonical_logprobs(a, b, *logprobs, between=between)
        if np.ptp(np.concatenate([la, lb])) > 0:
            results.append(("logprob KS", stats.ks_2sample(la, lb, ties="random", rng=rng)))
            results.append(
                ("logprob AD", stats.anderson_darling_2sample(la, lb, ties="random", rng=rng))
            )
    lengths_a, lengths_b = [len(s) for s in a], [len(s) for s in b]
    if len(set(lengths_a) | set(lengths_b)) > 1:
        results.append(
            ("length KS", stats.ks_2sample(lengths_a, lengths_b, ties="random", rng=rng))
        )
    return SequenceTests(results, tv, first, mdt, numerics)


def consistency_check(
    target: Any,
    draft: Any,
    prompts: Sequence[Any],
    *,
    n_samples: int,
    max_new_tokens: int,
    do_sample: bool = True,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    gamma: int = 4,
    verifier: str = "lossless",
    alpha: float = 0.01,
    seed: int = 0,
    batch_size: int = 256,
    eos_token_id: int | Sequence[int] | None = None,
    tokenizer: Any = None,
    n_boot: int = 500,
    progress: bool = True,
) -> ConsistencyReport:
    """Speculative vs standard sampling on ``prompts`` (token-id lists, strings or
    :class:`~specviz.prompts.Prompt` with ``tokenizer``); ``n_samples`` per arm and prompt."""
    import pandas as pd

    if not do_sample:
        raise ValueError("consistency_check compares sampled outputs; use greedy_check for greedy")
    if not prompts:
        raise ValueError("prompts is empty")
    sampling = dict(
        do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p, eos_token_id=eos_token_id
    )
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    tv_rows: list[dict[str, Any]] = []
    all_pit: list[np.ndarray] = []
    first_counts: tuple = ((), np.zeros(0), np.zeros(0))
    mdt = math.nan
    numerics: list[LogprobNumerics] = []
    for pi, prompt in enumerate(tqdm(prompts, desc="prompts", disable=not progress)):
        ids = _prompt_ids(prompt, tokenizer)
        common = dict(input_ids=ids, max_new_tokens=max_new_tokens, **sampling)
        spec, spec_p, spec_above = _sample_arm(
            lambda **kw: speculative_generate_batch(
                target, draft, gamma=gamma, verifier=verifier, **kw
            ),
            n_samples,
            batch_size,
            seed,
            "speculative",
            progress,
            **common,
        )
        std, std_p, _ = _sample_arm(
            lambda **kw: autoregressive_generate_batch(target, **kw),
            n_samples,
            batch_size,
            seed + 10**9,
            "standard",
            progress,
            **common,
        )

        def add(test: str, res: Any, pi: int = pi) -> None:
            rows.append(result_row(pi, test, res))

        seq_tests = sequence_tests(
            spec,
            std,
            max_new_tokens,
            alpha=alpha,
            rng=rng,
            n_boot=n_boot,
            logprobs=(_logprob(spec_p), _logprob(std_p)),
        )
        for name, res in seq_tests.results:
            add(name, res)
        tv_rows += [dict(prompt=pi, **row) for row in seq_tests.tv]
        numerics.append(seq_tests.numerics)
        if pi == 0:
            first_counts, mdt = seq_tests.first_counts, seq_tests.min_detectable_tv
        # Randomized PIT of every speculative token against the target's recorded law.
        p = np.concatenate([np.asarray(x) for x in spec_p])
        above = np.concatenate([np.asarray(x) for x in spec_above])
        pit = np.clip(above + rng.random(p.shape) * p, 0.0, 1.0)
        all_pit.append(pit)
        add("PIT uniformity", stats.pit_uniformity(pit))

    tests = pd.DataFrame(rows)
    holm = stats.adjust_pvalues(tests.pvalue.to_numpy(), method="holm", alpha=alpha)
    bh = stats.adjust_pvalues(tests.pvalue.to_numpy(), method="fdr_bh", alpha=alpha)
    tests["holm"] = holm.pvalues_adjusted
    tests["bh"] = bh.pvalues_adjusted
    tests["reject"] = holm.reject
    verdict = "inconsistent" if holm.any_reject else "consistent"
    statement = (
        f"With {n_samples} samples per arm, a first-token TV of {mdt:.3f} or more would be "
        f"detected with 90% probability (alpha={alpha}, two-sample Pearson)."
        if math.isfinite(mdt)
        else "Too few distinct first tokens to state a detectable TV."
    )
    return ConsistencyReport(
        verdict=verdict,
        alpha=alpha,
        n_samples=n_samples,
        tests=tests,
        tv=pd.DataFrame(tv_rows),
        min_detectable_tv=mdt,
        power_statement=statement,
        pit=np.concatenate(all_pit) if all_pit else np.zeros(0),
        first_token_counts=first_counts,
        seconds=time.perf_counter() - t0,
        verifier=verifier,
        numerics=tuple(numerics),
    )


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

    t0 = time.perf_counter()
    alpha = float(check.get("alpha", 0.01))
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


@torch.inference_mode()
def _margin(target: Any, prefix: list[int]) -> float:
    """Target's top-1 minus top-2 logit for the token after ``prefix``."""
    from .lm import as_runner

    logits = as_runner(target).extend(torch.tensor(prefix), 1)[-1]
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


def greedy_check(
    target: Any,
    draft: Any,
    prompts: Sequence[Any],
    *,
    max_new_tokens: int,
    gamma: int = 4,
    eos_token_id: int | Sequence[int] | None = None,
    tokenizer: Any = None,
    near_tie: float = stats.DEFAULT_NEAR_TIE,
    verifier: str = "lossless",
    progress: bool = True,
) -> GreedyReport:
    """Greedy speculative vs plain greedy decoding, prompt by prompt, with the logit margin
    at the first divergence (a near tie means numerics, a clear margin means a bug)."""
    specs, refs, margins = [], [], []
    for prompt in tqdm(prompts, desc="greedy", disable=not progress):
        ids = _prompt_ids(prompt, tokenizer)
        kw = dict(max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
        ref = autoregressive_generate(target, ids, **kw).new_tokens
        spec = speculative_generate(
            target, draft, ids, gamma=gamma, verifier=verifier, trace=False, **kw
        ).new_tokens
        i = next((j for j, (a, b) in enumerate(zip(ref, spec, strict=False)) if a != b), None)
        margins.append(None if i is None else _margin(target, ids + ref[:i]))
        specs.append(tuple(spec))
        refs.append(tuple(ref))
    result = stats.greedy_consistency(refs, specs, margins, near_tie=near_tie)
    return GreedyReport(result, tuple(specs), tuple(refs))
