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

With ``sequential=True`` the same samples are drawn batch by batch and the check stops at the
first of reject / equivalent within ``tv_tolerance`` / the cap ``n_samples`` (see
:mod:`specviz.checks.sequential`); it returns a :class:`~specviz.checks.sequential.SequentialReport`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from .. import stats
from ..core.args import check_flag
from ..core.batch_runners import BATCH_THREAD_TOKENS
from ..core.drawing import view
from ..core.heap import reuse_freed_memory
from ..core.runners import vocab_size_of
from ..core.sampling import SamplingParams, sampling_params
from ..decoding.batched import (
    BatchResult,
    autoregressive_generate_batch,
    speculative_generate_batch,
)
from ..decoding.inputs import check_count, check_probability
from ..verification.base import get_verifier
from .report import check_settings, power_outcome, power_statement, prompt_ids, result_row
from .report import verdict as report_verdict
from .sequences import LogprobNumerics, sequence_tests
from .sequential import SequentialReport, SequentialRun

__all__ = ["ConsistencyReport", "consistency_check"]


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
    tv_threshold: float = 0.1  # the first-token TV the check should be able to see

    @property
    def outcome(self) -> str:
        """``verdict`` with its power: "inconsistent" (a test rejected), "consistent" (no
        test rejected, and a first-token TV of ``tv_threshold`` would have been seen with 90%
        probability) or "inconclusive" (no test rejected, but these samples could only see a
        larger TV: a pass is not evidence of losslessness)."""
        return power_outcome(self.verdict, self.min_detectable_tv, self.tv_threshold)

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
        outcome = self.outcome
        if outcome == "inconclusive" and not math.isfinite(self.min_detectable_tv):
            outcome = (
                "inconclusive (no test rejected, and no first-token TV is detectable at this "
                f"sample size; tv_threshold={self.tv_threshold})"
            )
        elif outcome == "inconclusive":
            outcome = (
                f"inconclusive (no test rejected, but these samples could not see a first-token "
                f"TV below {self.min_detectable_tv:.3g}; tv_threshold={self.tv_threshold})"
            )
        return (
            f"verdict: {outcome} (Holm at alpha={self.alpha}, {len(self.tests)} tests, "
            f"{self.n_samples} samples per arm, verifier={self.verifier!r}); smallest adjusted "
            f"p = {worst.holm:.3g} ({worst.test}, prompt {worst.prompt}). {self.power_statement}"
            f" {self.numerics_statement}."
        )

    def figures(self, tokenizer: Any = None) -> dict[str, Any]:
        """Observed-vs-reference bars (first token, labelled by token text when ``tokenizer``
        is given, else ``#id``), p-value QQ plot, PIT histogram."""
        # a view: drawn by specviz.views.reports.consistency_figures (core/drawing.py says why)
        return view("reports.consistency_figures")(self, tokenizer=tokenizer)


# rows x verify columns x vocabulary of a batch whose V-sized tensors were measured to fit:
# SmolLM2-135M (V 49,152), gamma 1, 1,000 rows -- peak RSS 7.4 GB in float32
_BATCH_LOGITS = 1000 * 2 * 49_152


def default_batch(vocab: int | None, gamma: int) -> int:
    """Rows per batched call when the caller gives none: as many as keep one step's
    [rows, gamma + 1, V] logits within the size measured to fit (``_BATCH_LOGITS``), between
    256 (the old fixed default) and 1,000 (larger batches measured no faster: 2,500 rows took
    178 s against 177 s for 1,000 on SmolLM2). Bigger batches pay on CPUs: fewer steps, one
    shared prompt and one set of per-step costs for more rows (1,000 rows: 31 s against 39 s
    for 256, SmolLM2, 1,000 samples per arm).

    >>> default_batch(49_152, 1), default_batch(49_152, 4), default_batch(151_936, 4)
    (1000, 400, 256)
    >>> default_batch(None, 4), default_batch(7, 4)
    (256, 1000)
    """
    if not vocab:
        return 256
    return max(256, min(1000, _BATCH_LOGITS // ((gamma + 1) * int(vocab))))


def _sample_arm(fn, n: int, batch_size: int, seed: int, desc: str, progress: bool, **kw):
    seqs: list[list[int]] = []
    probs: list[list[float]] = []
    above: list[list[float]] = []
    # one kept heap for all the arm's batches: each run would otherwise hand it back (a
    # malloc_trim of ~0.3 s) only for the next batch to fault it in again
    with (
        tqdm(total=n, desc=desc, unit="seq", disable=not progress, leave=False) as bar,
        reuse_freed_memory(batch_size >= BATCH_THREAD_TOKENS),
    ):
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


def consistency_check(
    target: Any,
    draft: Any,
    prompts: Sequence[Any],
    *,
    n_samples: int | None = None,
    max_new_tokens: int,
    do_sample: bool = True,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    gamma: int = 4,
    verifier: str = "lossless",
    alpha: float = 0.01,
    seed: int = 0,
    batch_size: int | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    tokenizer: Any = None,
    n_boot: int = 500,
    progress: bool = True,
    tv_threshold: float = 0.1,
    sequential: bool = False,
    tv_tolerance: float = 0.05,
    params: SamplingParams | None = None,
) -> ConsistencyReport | SequentialReport:
    """Speculative vs standard sampling on ``prompts`` (token-id lists, strings or
    :class:`~specviz.prompts.Prompt` with ``tokenizer``); ``n_samples`` per arm and prompt.

    ``report.verdict`` is the Holm decision; ``report.outcome`` adds its power: a check whose
    smallest detectable first-token TV is above ``tv_threshold`` is "inconclusive", never a
    pass.

    ``sequential=True``: batches of ``batch_size`` per arm and prompt, checked after each, until
    the anytime-valid test rejects ("inconsistent"), every position's TV upper bound is below
    ``tv_tolerance`` ("equivalent within ...") or ``n_samples`` per arm -- the cap; None: 1.5x
    the fixed-n design for ``tv_tolerance`` -- is reached ("inconclusive"). The samples are the
    fixed-n check's, in its order.

    ``batch_size``: rows per batched call of each arm; None picks :func:`default_batch`
    (256 with ``sequential``, where it is also the test's look size). Row i of every batch
    is seeded ``seed + its index in the arm``, so the samples do not depend on it.

    ``params`` (a :class:`~specviz.SamplingParams`, sampling) may replace ``temperature``,
    ``top_k`` and ``top_p``."""
    import pandas as pd

    if not check_flag("do_sample", do_sample):
        raise ValueError("consistency_check compares sampled outputs; use greedy_check for greedy")
    sequential = check_flag("sequential", sequential)
    if n_samples is None and not sequential:
        raise TypeError(
            "consistency_check needs n_samples (samples per arm); only sequential=True may "
            "leave it out (then the cap is 1.5x the fixed-n design for tv_tolerance)"
        )
    check_settings(
        n_samples=2 if n_samples is None else n_samples,
        alpha=alpha,
        batch_size=1 if batch_size is None else batch_size,
    )
    if n_samples is not None:
        n_samples = check_count("n_samples", n_samples, 2)
    check_count("gamma", gamma, 0)
    if batch_size is None:
        batch_size = 256 if sequential else default_batch(vocab_size_of(target), gamma)
    batch_size = int(batch_size)
    if sequential:
        stats.check_sequential_settings(
            alpha=alpha, tv_tolerance=tv_tolerance, cap=n_samples, batch=batch_size
        )
    max_new_tokens = check_count("max_new_tokens", max_new_tokens, 1)
    check_count("n_boot", n_boot, 1)
    check_probability("tv_threshold", tv_threshold)
    seed = check_count("seed", seed, 0)  # arms use seed .. seed + 10**9 + n_samples
    if seed > 2**62:
        raise ValueError(f"seed must be an integer in [0, 2**62], got {seed}")
    check_flag("progress", progress)
    # refuse bad settings before sampling
    settings = sampling_params(
        params, True, temperature, top_k, top_p, defaults=SamplingParams(True)
    )
    if not settings.do_sample:
        raise ValueError("consistency_check compares sampled outputs; use greedy_check for greedy")
    get_verifier(verifier, greedy=False)
    id_lists = prompt_ids(prompts, tokenizer, vocab_size_of(target))
    sampling = dict(params=settings, eos_token_id=eos_token_id)
    if sequential:

        def draw(pi: int, start: int, m: int) -> tuple[list, list]:
            # the fixed-n check's batch at ``start`` (same seeds, same samples), unrecorded
            common = dict(
                input_ids=id_lists[pi], max_new_tokens=max_new_tokens, num_sequences=m, **sampling
            )
            spec = speculative_generate_batch(
                target, draft, gamma=gamma, verifier=verifier, seed=seed + start, **common
            )
            std = autoregressive_generate_batch(target, seed=seed + 10**9 + start, **common)
            return std.sequences, spec.sequences

        run = SequentialRun(
            len(id_lists),
            max_new_tokens,
            alpha=alpha,
            tv_tolerance=tv_tolerance,
            batch=batch_size,
            cap=n_samples,
        )
        return _run_sequential(run, draw, len(id_lists), progress, f"verifier={verifier!r}")
    assert n_samples is not None
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    tv_rows: list[dict[str, Any]] = []
    all_pit: list[np.ndarray] = []
    first_counts: tuple = ((), np.zeros(0), np.zeros(0))
    mdts: list[float] = []
    numerics: list[LogprobNumerics] = []
    for pi, ids in enumerate(tqdm(id_lists, desc="prompts", disable=not progress)):
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
        mdts.append(seq_tests.min_detectable_tv)
        if pi == 0:
            first_counts = seq_tests.first_counts
        # Randomized PIT of every speculative token against the target's recorded law.
        p = np.concatenate([np.asarray(x) for x in spec_p])
        above = np.concatenate([np.asarray(x) for x in spec_above])
        pit = np.clip(above + rng.random(p.shape) * p, 0.0, 1.0)
        all_pit.append(pit)
        add("PIT uniformity", stats.pit_uniformity(pit))

    tests = pd.DataFrame(rows)
    verdict = report_verdict(tests, alpha)
    mdt, statement = power_statement(mdts, n_samples, alpha, len(tests), per="arm")
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
        tv_threshold=tv_threshold,
    )


def _run_sequential(run: SequentialRun, draw, n_prompts: int, progress: bool, compared: str):
    """Draw batches until ``run`` decides (each prompt's reference and candidate arms)."""
    t0 = time.perf_counter()
    with tqdm(total=run.cap, desc="sequential", unit="seq/arm", disable=not progress) as bar:
        while (m := run.next_size) > 0:
            run.feed([draw(pi, run.n, m) for pi in range(n_prompts)])
            bar.total = run.cap
            bar.update(m)
            bar.set_postfix(e=f"{run.seq.e_value:.3g}", tv=f"<{run.seq.tv_upper:.3f}")
    return run.report(seconds=time.perf_counter() - t0, compared=compared)
