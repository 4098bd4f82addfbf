"""The deployment checklist of the source article (claims 12 and 10), as functions.

Before switching speculation on in production, the article asks for: a baseline with fixed
versions, sampling, precision and data; a *short* gamma first; metrics split by task;
low / medium / peak concurrency; a fallback to plain decoding where acceptance is low or load
is high; and the numbers to watch -- mean accepted length, draft cost, end-to-end throughput,
greedy and statistical consistency, where rejections happen. This module computes each step
on a user's own pair and turns the measurements into advice and a report file; notebook
``10_deployment_checklist.ipynb`` wires it together.

Advice is derived from measured numbers with stated thresholds (:func:`advise`); nothing is
pre-written.

>>> import pandas as pd
>>> t = pd.DataFrame({"category": ["code", "code"], "gamma": [2, 4], "speedup": [0.8, 0.7],
...                   "acceptance": [0.3, 0.25], "first_rejection_share": [0.6, 0.65],
...                   "tokens_per_call": [1.4, 1.3]})
>>> [a.action for a in advise(t)]
['plain decoding', 'shorten gamma or change the drafter', 'not cleared: no greedy check; no statistical check']

A statistical check counts only with its power: pass the ``ConsistencyReport`` itself
(``advise(t, consistency=report)``); one that could not see its ``tv_threshold`` is
"inconclusive (could not see TV < x)" and leaves the overall item at "not cleared".
"""

from __future__ import annotations

import hashlib
import math
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..stats import MIN_UNITS_FOR_CI

__all__ = [
    "Advice",
    "advise",
    "category_runs",
    "category_table",
    "claim10_verdict",
    "claim12_verdict",
    "environment",
    "markdown_table",
    "shown_path",
    "write_report",
]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def environment(
    target_name: str,
    draft_name: str,
    *,
    target: Any = None,
    sampling: dict[str, Any] | None = None,
    prompts_path: str | Path | None = None,
) -> dict[str, str]:
    """Everything a baseline must pin: versions, device, precision, threads, sampling and the
    prompt data (its SHA-256), as strings for a report."""
    import numpy
    import torch
    import transformers

    from .. import __version__
    from ..prompts import default_prompts_path

    path = Path(prompts_path) if prompts_path is not None else default_prompts_path()
    env = {
        "target": target_name,
        "draft": draft_name,
        "specviz": __version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}",
        "torch threads": str(torch.get_num_threads()),
        "prompts file": f"{path.name} sha256 {_sha256(path)[:16]}",
        "date (UTC)": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }
    if target is not None:
        try:
            p = next(target.parameters())
            env["device"], env["precision"] = str(p.device), str(p.dtype).replace("torch.", "")
        except (AttributeError, StopIteration):
            pass
    for k, v in (sampling or {}).items():
        env[f"sampling: {k}"] = str(v)
    return env


def category_runs(
    target: Any,
    draft: Any,
    tokenizer: Any,
    prompts: Sequence[Any],
    *,
    gammas: Sequence[int],
    max_new_tokens: int,
    eos_token_id: int | Sequence[int] | None = None,
    progress: bool = True,
) -> Any:
    """Plain greedy decoding and greedy speculative decoding at each gamma, prompt by prompt
    (serial, batch 1, traced). One row per (prompt, gamma); gamma 0 is the plain baseline.

    Greedy, so the speculative tokens must equal the baseline's (``same_as_plain``; a
    difference is explained by :func:`specviz.greedy_check`)."""
    import pandas as pd
    from tqdm.auto import tqdm

    from ..decoding.serial import autoregressive_generate, speculative_generate
    from ..prompts import render_prompt

    if not gammas or any(isinstance(g, bool) or not isinstance(g, int) or g < 1 for g in gammas):
        raise ValueError(f"gammas must be integers >= 1, got {list(gammas)!r}")
    rows = []
    for p in tqdm(prompts, desc="prompts", disable=not progress):
        ids = render_prompt(tokenizer, p)
        kw = dict(max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
        base = autoregressive_generate(target, ids, **kw)
        rows.append(_row(p, 0, base, base))
        for g in gammas:  # a drafter resets its own cache at the start of each run
            res = speculative_generate(target, draft, ids, gamma=g, trace=True, **kw)
            rows.append(_row(p, g, res, base))
    return pd.DataFrame(rows)


def _row(prompt: Any, gamma: int, res: Any, base: Any) -> dict[str, Any]:
    steps = res.trace.steps if res.trace is not None else ()
    drafted = sum(s.drafted for s in steps)
    accepted = sum(s.accepted for s in steps)
    first_rej = sum(1 for s in steps if s.drafted > 0 and s.accepted == 0)
    # the drafted tokens the verifier judged: the accepted ones and the first rejected one
    looked = sum(min(s.accepted + 1, s.drafted) for s in steps if s.drafted > 0)
    with_drafts = sum(1 for s in steps if s.drafted > 0)
    return dict(
        prompt_id=getattr(prompt, "id", ""),
        category=getattr(prompt, "category", ""),
        gamma=gamma,
        tokens=len(res.new_tokens),
        seconds=res.total_time,
        ttft=res.ttft,
        target_calls=res.target_calls,
        drafted=drafted,
        accepted=accepted,
        looked=looked,
        steps_with_drafts=with_drafts,
        first_rejections=first_rej,
        draft_seconds=sum(s.draft_time for s in steps),
        same_as_plain=list(res.new_tokens) == list(base.new_tokens),
    )


def category_table(runs: Any) -> Any:
    """Per (category, gamma): tokens/s, speed-up over plain on the same prompts (with a 95%
    interval over the prompts, ``speedup_ci_low`` / ``speedup_ci_high``: a jackknife t
    interval from :data:`~specviz.stats.MIN_UNITS_FOR_CI` prompts on -- a percentile bootstrap
    is too narrow at a handful of prompts -- the bootstrap's range with two, NaN with one;
    each prompt is timed once, so the spread over prompts carries the machine's run-to-run
    timing noise with the prompts' own differences), acceptance, mean accepted length (tokens
    per target call), the share of steps whose *first* draft was rejected, the draft's share
    of the wall time, and whether greedy tokens matched."""
    import pandas as pd

    from .verdicts import speedup_verdict

    if runs.empty:
        raise ValueError("no runs to summarise")
    rows = []
    for (cat, g), sub in runs.groupby(["category", "gamma"], sort=True):
        base = runs[(runs.category == cat) & (runs.gamma == 0)]
        plain_rate = base.tokens.sum() / base.seconds.sum()
        rate = sub.tokens.sum() / sub.seconds.sum()
        drafted = sub.drafted.sum()
        steps = sub.steps_with_drafts.sum()
        ci = (math.nan, math.nan)
        if base.prompt_id.is_unique and set(sub.prompt_id) <= set(base.prompt_id):
            pair = base.set_index("prompt_id").loc[list(sub.prompt_id)]  # same prompts, plain
            ci = speedup_verdict(
                {"tokens": pair.tokens.tolist(), "seconds": pair.seconds.tolist()},
                {"tokens": sub.tokens.tolist(), "seconds": sub.seconds.tolist()},
                claim="",
                label="",
                interval="jackknife_t" if len(sub) >= MIN_UNITS_FOR_CI else "bootstrap",
            ).ci
        rows.append(
            dict(
                category=cat,
                gamma=int(g),
                prompts=len(sub),
                tokens_per_s=rate,
                speedup=rate / plain_rate,
                speedup_ci_low=ci[0],
                speedup_ci_high=ci[1],
                acceptance=sub.accepted.sum() / drafted if drafted else math.nan,
                tokens_per_call=sub.tokens.sum() / sub.target_calls.sum(),
                first_rejection_share=sub.first_rejections.sum() / steps if steps else math.nan,
                draft_time_share=sub.draft_seconds.sum() / sub.seconds.sum(),
                ttft_mean=sub.ttft.mean(),
                greedy_identical=bool(sub.same_as_plain.all()),
            )
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Advice:
    scope: str  # "category <name>", "load", "consistency", "overall"
    action: str  # short imperative
    reason: str  # the measured numbers behind it
    severity: str = "info"  # "info" | "warn" | "stop"
    # the load item: one specviz.load.LoadDecision per metric family
    decisions: tuple = field(default=(), repr=False, compare=False)

    def line(self) -> str:
        mark = {"stop": "STOP", "warn": "WARN", "info": "OK"}[self.severity]
        return f"[{mark}] {self.scope}: {self.action} -- {self.reason}"


def advise(
    table: Any,
    *,
    crossovers: Sequence[Any] = (),
    greedy_verdict: str | None = None,
    consistency_verdict: str | None = None,
    consistency: Any = None,
    min_speedup: float = 1.0,
    first_rejection_alarm: float = 0.5,
    noise: float = 0.0,
) -> list[Advice]:
    """Turn the measurements into the article's decisions, with fixed thresholds:

    * per category: speculate with the gamma of the best measured speed-up if it is at least
      ``min_speedup``, else fall back to plain decoding. When ``table`` carries the speed-up's
      interval over prompts (``speedup_ci_low`` / ``speedup_ci_high``, as
      :func:`category_table` writes it) the decision needs it: speculate only when the whole
      interval is at or above ``min_speedup``, plain decoding only when it is below, and
      otherwise (an interval that straddles ``min_speedup``; fewer than
      :data:`~specviz.stats.MIN_UNITS_FOR_CI` prompts, whose range is no 95% interval -- two
      prompts straddle their median only half the time) "cannot tell at this size": a few
      timed prompts are noise, not a decision. A table without those columns is judged on
      the point estimate;
    * if more than ``first_rejection_alarm`` of the steps at the *shortest* gamma rejected the
      first draft: shorten gamma or change the drafter (claim 10);
    * load, from the crossovers (:class:`specviz.load.Crossover`) of a load sweep: one
      decision per metric family (:func:`specviz.load.load_decisions`: throughput, and
      latency -- TTFT, TPOT, completion), reconciled in one ``"load"`` item, e.g.
      "throughput-first: speculate up to 2 concurrent clients, plain decoding from 4;
      latency-first: keep speculation off"; a speed-up within its metric's own noise floor
      (the crossover's ``noise``; ``noise`` only for one without) decides nothing;
    * a greedy verdict of ``"bug"`` or an ``"inconsistent"`` statistical verdict: stop;
    * the statistical check counts as a pass only with its power: pass the
      :class:`~specviz.ConsistencyReport` as ``consistency`` (its ``outcome``). A check whose
      smallest detectable first-token TV is above its ``tv_threshold`` is "inconclusive (could
      not see TV < x)", a warning, never "OK"; a bare ``consistency_verdict="consistent"``
      without the report states no power and is not a pass either;
    * last, one ``"overall"`` item: "do not deploy" on any stop; "not cleared" when the
      statistical check could not tell at this sample size (or a check is missing); else
      cleared, per the decisions above.
    """
    out: list[Advice] = []
    spec = table[table.gamma > 0]
    for cat, sub in spec.groupby("category", sort=True):
        best = sub.loc[sub.speedup.idxmax()]
        numbers = (
            f"best speed-up {best.speedup:.2f}x at gamma {int(best.gamma)}, acceptance "
            f"{best.acceptance:.2f}, {best.tokens_per_call:.2f} tokens per target call"
        )
        call = _category_call(best, min_speedup)
        if call == "on":
            out.append(
                Advice(f"category {cat}", f"speculate with gamma {int(best.gamma)}", numbers)
            )
        elif call == "off":
            out.append(Advice(f"category {cat}", "plain decoding", numbers, "warn"))
        else:
            out.append(Advice(f"category {cat}", UNDECIDED, numbers + "; " + call, "warn"))
        short = sub.loc[sub.gamma.idxmin()]
        if short.first_rejection_share > first_rejection_alarm:
            out.append(
                Advice(
                    f"category {cat}",
                    "shorten gamma or change the drafter",
                    f"{short.first_rejection_share:.0%} of the steps at gamma {int(short.gamma)} "
                    f"rejected the very first draft (alarm above {first_rejection_alarm:.0%})",
                    "warn",
                )
            )
    if crossovers:
        out.append(_load_advice(crossovers, noise))
    if greedy_verdict == "bug":
        out.append(
            Advice(
                "consistency",
                "do not deploy: greedy outputs differ with a clear logit margin",
                "a lossless implementation reproduces plain greedy decoding except at near ties",
                "stop",
            )
        )
    elif greedy_verdict is not None:
        out.append(Advice("consistency", f"greedy check: {greedy_verdict}", "see the report"))
    state, item = _statistical_advice(consistency_verdict, consistency)
    if item is not None:
        out.append(item)
    out.append(_overall(out, greedy_verdict, state, consistency))
    return out


UNDECIDED = "cannot tell at this size: measure more prompts"


def _category_call(best: Any, min_speedup: float) -> str:
    """``"on"``, ``"off"``, or why the best gamma's speed-up decides nothing (its interval over
    prompts straddles ``min_speedup``, or there is none)."""
    if "speedup_ci_low" not in best.index:  # no intervals measured: the point estimate
        return "on" if best.speedup >= min_speedup else "off"
    from .verdicts import interval_label

    low, high = best.speedup_ci_low, best.speedup_ci_high
    if not (low == low and high == high):  # NaN: one prompt
        n = int(best.prompts) if "prompts" in best.index else 1
        return f"{n} prompt{'s' if n != 1 else ''}: no interval over prompts"
    n = int(best.prompts) if "prompts" in best.index else MIN_UNITS_FOR_CI
    if n < MIN_UNITS_FOR_CI:  # a range, whichever side of the bar it lies on, decides nothing
        return (f"{interval_label(low, high, n)}; a decision needs a 95% interval, from "
                f"{MIN_UNITS_FOR_CI} prompts")  # fmt: skip
    if low >= min_speedup:
        return "on"
    if high < min_speedup:
        return "off"
    return f"{interval_label(low, high, n)}: it contains {min_speedup:.2f}x"


def _load_advice(crossovers: Sequence[Any], noise: float) -> Advice:
    """One "load" item: the decision of each metric family, side by side, so a throughput
    gain and a latency loss read as a choice for the operator, not as two contradictions."""
    from ..load.claims import load_decisions

    decisions = load_decisions(crossovers, noise=noise)
    first = {"throughput": "throughput-first", "latency": "latency-first"}
    action = "; ".join(f"{first[d.family]}: {d.action()}" for d in decisions)
    reason = " | ".join(f"{d.family}: {d.numbers()}" for d in decisions)
    anywhere = any(d.status in ("on", "boundary") for d in decisions)
    return Advice("load", action, reason, "info" if anywhere else "warn", tuple(decisions))


def _statistical_advice(verdict: str | None, report: Any) -> tuple[str, Advice | None]:
    """(state, advice) of the statistical check: state is "inconsistent", "consistent" (no
    rejection and powered), "inconclusive" (no rejection, underpowered), "unknown power" (a
    bare "consistent" string) or "not run"."""
    from ..checks.report import outcome_phrase

    if report is not None:
        verdict = report.outcome  # the report's own power-aware outcome
    if verdict is None:
        return "not run", None
    if verdict == "inconsistent":
        reason = "the statistical consistency check rejected at its stated alpha"
        if report is not None:
            reason = f"{outcome_phrase(report)}, {report.n_samples} samples per arm"
        return "inconsistent", Advice(
            "consistency",
            "do not deploy: sampled outputs are not the target's distribution",
            reason,
            "stop",
        )
    if report is None:
        if verdict == "consistent":
            return "unknown power", Advice(
                "consistency",
                "statistical check: no test rejected, power not stated",
                "without its detectable TV a pass is not evidence: pass consistency=<the "
                "ConsistencyReport> to advise()",
                "warn",
            )
        return str(verdict), Advice(
            "consistency", f"statistical check: {verdict}", "see the report", "warn"
        )
    if verdict == "consistent":
        return "consistent", Advice(
            "consistency",
            "statistical check: consistent",
            f"no test rejected, and a first-token TV of {report.min_detectable_tv:.3g} or more "
            f"would have been seen (threshold {report.tv_threshold:g}), {report.n_samples} "
            f"samples per arm",
        )
    return "inconclusive", Advice(
        "consistency",
        f"statistical check: {outcome_phrase(report)}",
        f"no test rejected, but {report.n_samples} samples per arm cannot tell a lossless "
        f"sampler from one off by a first-token TV below the stated threshold "
        f"{report.tv_threshold:g}: rerun consistency_check with more samples",
        "warn",
    )


def _overall(out: Sequence[Advice], greedy: str | None, state: str, report: Any) -> Advice:
    """The one line a reader acts on: any stop wins; a statistical check that could not tell
    (or a missing check) leaves speculation *not cleared*; else cleared per the decisions."""
    stops = [a for a in out if a.severity == "stop"]
    if stops:
        why = "; ".join(f"{a.scope}: {a.action}" for a in stops)
        return Advice("overall", "do not deploy", why, "stop")
    if state == "inconclusive":
        from ..checks.report import outcome_phrase

        why = "inconclusive"
        if report is not None:
            why = f"{outcome_phrase(report)} with {report.n_samples} samples per arm"
        return Advice(
            "overall",
            "not cleared: the statistical check could not tell at this sample size",
            f"{why}; an inconclusive check is not a pass",
            "warn",
        )
    missing = []
    if greedy is None:
        missing.append("no greedy check")
    if state == "not run":
        missing.append("no statistical check")
    elif state == "unknown power":
        missing.append("the statistical check's power is not stated")
    elif state != "consistent":
        missing.append(f"statistical check: {state}")
    if missing:
        return Advice("overall", "not cleared: " + "; ".join(missing), "see above", "warn")
    spec = [a for a in out if a.scope.startswith("category ") and a.action.startswith("speculate")]
    n_cat = len({a.scope for a in out if a.scope.startswith("category ")})
    action = "cleared: speculate where the decisions above say so"
    if n_cat and not spec:
        action = "cleared, but no category gained: keep plain decoding"
    return Advice(
        "overall",
        action,
        f"greedy {greedy}; sampled law consistent at this sample size; {len(spec)} of {n_cat} "
        f"categories speculate",
    )


def claim10_verdict(
    table: Any,
    *,
    draft_cost: float | None = None,
    min_cells: int = 6,
    n_boot: int = 2000,
    seed: int = 0,
) -> Any:
    """Claim 10 (watch the mean accepted length, not only the acceptance rate; check that the
    draft is really cheaper), from :func:`category_table`: over the (category, gamma) cells,
    the rank correlation of the measured speed-up with tokens per target call against its
    correlation with the raw acceptance rate. *supported* when the mean accepted length tracks
    the speed-up at least as well (and, with ``draft_cost`` c, the draft is cheaper than the
    target: c < 1); *not supported* otherwise; *not shown* with fewer than 3 cells, and
    *cannot tell* with fewer than ``min_cells``: two rank correlations over 4 cells differ by
    chance (the demo size's 2 categories x 2 gammas printed "not supported" on 0.60 against
    1.00). Above that, the difference of the two correlations must clear its own noise: a
    seeded bootstrap over the cells (``n_boot`` resamples) gives a 95% percentile interval of
    rho(length) - rho(rate); *supported* when it lies above 0, *not supported* when below,
    *cannot tell* when it contains 0 (the committed 10 printed "supported" on 0.39 against
    -0.20 over 12 cells, an interval that contains 0). Returns a
    :class:`specviz.load.ClaimVerdict`."""
    from ..load.claims import ClaimVerdict

    cells = table[table.gamma > 0]
    cost = "" if draft_cost is None else f"; draft cost ratio c = {draft_cost:.2f}"
    if len(cells) < 3 or cells.speedup.nunique() < 2:
        return ClaimVerdict(
            10, "not shown", f"{len(cells)} (category, gamma) cells: too few to rank{cost}"
        )
    if cells.tokens_per_call.nunique() < 2 or cells.acceptance.nunique() < 2:
        return ClaimVerdict(
            10,
            "not shown",
            f"{len(cells)} (category, gamma) cells, but tokens per target call or the acceptance "
            f"rate took one value in all of them: nothing to rank{cost}",
        )
    rho_len = cells.speedup.corr(cells.tokens_per_call, method="spearman")
    rho_acc = cells.speedup.corr(cells.acceptance, method="spearman")
    why = (
        f"over {len(cells)} (category, gamma) cells the speed-up's rank correlation is "
        f"{rho_len:.2f} with tokens per target call and {rho_acc:.2f} with the acceptance "
        f"rate{cost}"
    )
    if len(cells) < min_cells:
        return ClaimVerdict(
            10,
            "cannot tell",
            why + f": {len(cells)} cells are too few to tell two rank correlations apart "
            f"(a verdict needs {min_cells})",
        )
    if draft_cost is not None and not draft_cost < 1.0:
        return ClaimVerdict(10, "not supported", why + ": the draft is not cheaper than the target")
    lo, hi = _rank_gap_interval(cells, n_boot=n_boot, seed=seed)
    gap = (
        f"; the difference {rho_len - rho_acc:+.2f} has a 95% bootstrap interval "
        f"{lo:+.2f} to {hi:+.2f} over the cells"
    )
    if lo > 0:
        return ClaimVerdict(10, "supported", why + gap + ": the accepted length tracked it better")
    if hi < 0:
        return ClaimVerdict(10, "not supported", why + gap + ": the raw rate tracked it better")
    return ClaimVerdict(
        10,
        "cannot tell",
        why + gap + ", which contains 0: at this size neither tracked the speed-up better "
        "beyond chance (more categories or prompts decide it)",
    )


def _rank_gap_interval(cells: Any, *, n_boot: int, seed: int) -> tuple[float, float]:
    """95% percentile interval of spearman(speed-up, tokens per call) - spearman(speed-up,
    acceptance) over a bootstrap of the cells (resamples where a column is constant have no
    rank correlation and are skipped)."""
    from scipy.stats import spearmanr

    rng = np.random.default_rng(seed)
    cols = cells[["speedup", "tokens_per_call", "acceptance"]].to_numpy(float)
    gaps = []
    for _ in range(n_boot):
        s, t, a = cols[rng.integers(0, len(cols), len(cols))].T
        if min(np.ptp(s), np.ptp(t), np.ptp(a)) == 0:
            continue
        gaps.append(spearmanr(s, t).statistic - spearmanr(s, a).statistic)
    lo, hi = np.quantile(gaps, [0.025, 0.975])
    return float(lo), float(hi)


def claim12_verdict(advice: Sequence[Advice]) -> Any:
    """Claim 12 (speculation needs an enabling boundary and a fallback), from
    :func:`advise`. A *fallback* is a boundary inside the measurements: a load boundary (a
    metric family that paid at low load and lost beyond the noise from some load up), or a
    task boundary (a category that speculates next to one that falls back: acceptance too
    low). A family that lost at *every* load is a choice of what to optimise, not a
    boundary. A family that paid at some loads with no clear pattern ("mixed": off at 1
    client, on at 4, tie at 16) is named where it paid, with "no boundary", and stays
    undecided. *supported* when speculation paid somewhere and such a boundary exists;
    *not supported* when it paid everywhere tested (a fixed switch would do); *not shown*
    when it paid nowhere. A decision that could not be made at this size (a category whose
    speed-up interval straddles the bar, a load family within the noise floor) could hide a
    boundary: without a boundary, any such item makes the verdict *cannot tell*. Returns a
    :class:`specviz.load.ClaimVerdict`."""
    from ..load.claims import ClaimVerdict

    cats_on = sorted({a.scope for a in advice
                      if a.scope.startswith("category ") and a.action.startswith("speculate")})  # fmt: skip
    cats_off = sorted({a.scope for a in advice
                       if a.scope.startswith("category ") and a.action == "plain decoding"})  # fmt: skip
    decisions = [d for a in advice if a.scope == "load" for d in a.decisions]
    load_on = [d for d in decisions if d.status in ("on", "boundary")]
    bounds = [d for d in decisions if d.status == "boundary"]
    on = cats_on + [f"load ({d.family})" for d in load_on]
    parts = []
    if bounds:
        parts.append("load boundary: " + "; ".join(f"{d.family}: {d.action()}" for d in bounds))
    if cats_on and cats_off:
        parts.append(f"task boundary: speculate for {', '.join(cats_on)}, plain decoding for "
                     f"{', '.join(cats_off)}")  # fmt: skip
    undecided = sorted({a.scope for a in advice if a.action == UNDECIDED})
    undecided += [f"load ({d.family})" for d in decisions if d.status not in ("on", "off", "boundary")]  # fmt: skip
    # a family that paid somewhere without a clear status (off at 1, on at 4, tie at 16) did
    # pay there: "nowhere" beside "paid beyond the noise at 4" contradicted the page
    paid = list(on)
    for d in decisions:
        if d.status not in ("on", "boundary") and d.on_levels:
            lv = ", ".join(f"{x:g}" for x in d.on_levels)
            paid.append(f"load ({d.family}) at {lv} {d.unit()} only, no boundary")
    why = f"speculation paid: {', '.join(paid) or 'nowhere'}"
    if parts:
        why += "; " + "; ".join(parts)
    if on and parts:
        return ClaimVerdict(12, "supported", why)
    if undecided:
        return ClaimVerdict(
            12,
            "cannot tell",
            why + f" -- undecided at this size: {', '.join(undecided)} (a boundary may lie "
            "there; more prompts or repeats decide it)",
        )
    if on:
        return ClaimVerdict(
            12, "not supported", why + " -- no boundary inside the tested range: no fallback needed"
        )
    return ClaimVerdict(
        12, "not shown", why + " -- nothing to turn on, so nothing to fall back from"
    )


def markdown_table(df: Any, *, digits: int = 3) -> str:
    """A DataFrame as a GitHub-flavoured markdown table (no extra dependency).

    >>> import pandas as pd
    >>> print(markdown_table(pd.DataFrame({"a": [1.23456], "b": ["x"]})))
    | a | b |
    |---|---|
    | 1.235 | x |
    """

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return (
                "nan"
                if math.isnan(v)
                else f"{v:.{digits}g}"
                if abs(v) >= 1e4
                else f"{v:.{digits}f}"
            )
        return str(v).replace("|", "\\|")

    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(lines)


def write_report(
    path: str | Path,
    *,
    title: str,
    environment: dict[str, str],
    sections: Sequence[tuple[str, Any]],
    advice: Sequence[Advice] = (),
) -> Path:
    """Write a markdown report: the pinned environment, the advice (the ``"overall"`` item
    first, in bold), then each section (a heading and markdown text or a DataFrame). Returns
    the path written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    parts = [f"# {title}", "", "## Baseline: what was fixed", ""]
    parts += [f"- **{k}**: {v}" for k, v in environment.items()]
    if advice:
        parts += ["", "## Decisions (from the measurements below)", ""]
        overall = [a for a in advice if a.scope == "overall"]
        parts += [f"**{a.line()}**" for a in overall] + ([""] if overall else [])
        parts += [f"- {a.line()}" for a in advice if a.scope != "overall"]
    for heading, body in sections:
        parts += ["", f"## {heading}", ""]
        parts.append(body if isinstance(body, str) else markdown_table(body))
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return path


def shown_path(path: str | Path, *, root: str | Path | None = None) -> str:
    """``path`` as a page may print it: relative to ``root`` (default: the repository, the
    folder above the ``specviz`` package) when it lies inside it, else relative to the
    working directory when inside that, else its file name alone. An absolute path names one
    machine's checkout (10 printed ``/work/wt/nb/reports/...``, a helper's worktree), which a
    reader's copy does not have.

    >>> shown_path("/srv/repo/reports/x.md", root="/srv/repo")
    'reports/x.md'
    >>> shown_path("/elsewhere/y.md", root="/srv/repo")
    'y.md'
    """
    p = Path(path).resolve()
    base = Path(root).resolve() if root is not None else Path(__file__).resolve().parents[2]
    for start in (base, Path.cwd().resolve()):
        try:
            return p.relative_to(start).as_posix()
        except ValueError:
            continue
    return p.name
