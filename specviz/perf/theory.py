"""What speculative decoding *should* give, next to what it gives.

Leviathan et al. (2023, arXiv 2211.17192), with i.i.d. acceptance ``a`` per drafted token,
``g`` drafts per target call and draft cost ratio ``c`` (one draft step / one target step):

    tokens per target call   E(a, g) = (1 - a^(g+1)) / (1 - a)
    walltime speedup         S(a, g, c) = E(a, g) / (g c + 1)

Real acceptance is not i.i.d.: it is measured per position (``beta_i`` = P(accept draft i |
drafts 1..i-1 accepted)), which gives ``E = 1 + sum_i prod_{j<=i} beta_j``. And a verify
pass over ``g + 1`` tokens is not as cheap as one decode step (``v(g)`` below, measured with
:func:`measure_verify_cost`), which is the largest gap between the textbook speedup and the
clock on a CPU. :func:`predicted_vs_measured` puts all of it side by side.

>>> round(expected_tokens_per_call(0.8, 4), 4)
3.3616
>>> round(speedup(0.8, 4, 0.1), 3)
2.401
>>> optimal_gamma(0.8, 0.1)
6
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import torch

__all__ = [
    "truncated_geometric_law",
    "expected_tokens_per_call",
    "expected_tokens_per_call_positional",
    "accepted_count_law",
    "speedup",
    "GAMMA_SEARCH_CAP",
    "OptimalGamma",
    "search_optimal_gamma",
    "speedup_positional",
    "optimal_gamma",
    "VerifyCost",
    "measure_verify_cost",
    "measure_step_times",
    "measured_draft_cost",
    "predicted_best_gammas",
    "Prediction",
    "predicted_vs_measured",
    "above_call_bound",
    "call_bound_note",
]


def _check_rate(a: float, name: str = "acceptance") -> float:
    if not (isinstance(a, (int, float)) and 0.0 <= a <= 1.0) or math.isnan(a):
        raise ValueError(f"{name} must be a probability in [0, 1], got {a!r}")
    return float(a)


def _check_gamma(g: int) -> int:
    if isinstance(g, bool) or not isinstance(g, int) or g < 0:
        raise ValueError(f"gamma must be an integer >= 0, got {g!r}")
    return g


def expected_tokens_per_call(a: Any, gamma: int) -> Any:
    """E[tokens per target call] with i.i.d. acceptance ``a``: (1 - a^(g+1)) / (1 - a) --
    the accepted drafts plus the corrected or bonus token; ``g + 1`` at ``a = 1``. ``a`` may
    be an array (one value per entry).

    >>> expected_tokens_per_call(1.0, 4), expected_tokens_per_call(0.0, 4)
    (5.0, 1.0)
    """
    g = _check_gamma(gamma)
    if np.ndim(a):
        arr = np.asarray(a, dtype=float)
        if np.isnan(arr).any() or (arr < 0).any() or (arr > 1).any():
            raise ValueError("acceptance must be probabilities in [0, 1]")
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(arr == 1.0, g + 1.0, (1.0 - arr ** (g + 1)) / (1.0 - arr))
    a = _check_rate(float(a))
    if a == 1.0:  # the limit of the geometric sum
        return float(g + 1)
    return (1.0 - a ** (g + 1)) / (1.0 - a)


def expected_tokens_per_call_positional(betas: Sequence[float]) -> float:
    """E[tokens per call] from per-position conditional acceptance beta_1..beta_g:
    1 + sum_i prod_{j<=i} beta_j (the non-i.i.d. version; equals the formula above when all
    beta are equal).

    >>> expected_tokens_per_call_positional([0.9, 0.5])
    2.35
    """
    total, reach = 1.0, 1.0
    for i, b in enumerate(betas):
        reach *= _check_rate(b, f"betas[{i}]")
        total += reach
    return total


def accepted_count_law(a: float, gamma: int) -> tuple[float, ...]:
    """P(N = n), n = 0..g, for the number of accepted drafts: a^n (1 - a) for n < g and a^g
    for n = g (a truncated geometric law).

    >>> [round(x, 3) for x in accepted_count_law(0.5, 2)]
    [0.5, 0.25, 0.25]
    """
    a, g = _check_rate(a), _check_gamma(gamma)
    return tuple(a**n * (1.0 - a) for n in range(g)) + (a**g,)


def truncated_geometric_law(alpha: float, gamma: int) -> np.ndarray:
    """:func:`accepted_count_law` as an array (``gamma >= 1``): the exact law for a
    context-free toy model and the reference every observed rejection histogram is compared
    with; a real drafter deviates from it where acceptance is not i.i.d."""
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma must be >= 1, got {gamma!r}")
    return np.asarray(accepted_count_law(alpha, gamma))


def speedup(a: float, gamma: int, c: float, verify_cost: float = 1.0) -> float:
    """Walltime speedup over plain decoding: E(a, g) / (g c + v).

    ``verify_cost`` is v = (time of one target call on g + 1 tokens) / (time of one decode
    step); Leviathan et al. take v = 1 (memory-bound verification is free), which is the
    default. ``gamma = 0`` is plain decoding (speedup 1 when v = 1).
    """
    if not (c >= 0 and math.isfinite(c)):
        raise ValueError(f"draft cost ratio c must be finite and >= 0, got {c!r}")
    if not (verify_cost > 0 and math.isfinite(verify_cost)):
        raise ValueError(f"verify_cost must be finite and > 0, got {verify_cost!r}")
    return expected_tokens_per_call(a, gamma) / (gamma * c + verify_cost)


def speedup_positional(betas: Sequence[float], c: float, verify_cost: float = 1.0) -> float:
    """The per-position speedup: E(betas) / (g c + v) with g = len(betas)."""
    return expected_tokens_per_call_positional(betas) / (len(betas) * c + verify_cost)


def optimal_gamma(
    a: float | Sequence[float],
    c: float,
    *,
    max_gamma: int = 16,
    verify_cost: VerifyCost | None = None,
) -> int:
    """The gamma in 0..max_gamma with the largest predicted speedup (0 = don't speculate).

    ``a`` is one i.i.d. rate or per-position rates (the last one is repeated past its end).
    ``verify_cost`` (from :func:`measure_verify_cost`) makes verification grow with gamma.
    """
    best, best_s = 0, -math.inf
    for g in range(_check_gamma(max_gamma) + 1):
        betas = _betas(a, g)
        v = verify_cost.ratio(g + 1) if verify_cost is not None else 1.0
        if g == 0:
            s = 1.0 / v
        else:
            s = speedup_positional(betas, c, v)
        if s > best_s + 1e-12:
            best, best_s = g, s
    return best


#: How far :func:`search_optimal_gamma` looks: past it a best gamma is printed as "at least".
GAMMA_SEARCH_CAP = 64


@dataclass(frozen=True)
class OptimalGamma:
    """The best gamma a prediction found (0 = plain decoding), its predicted speed-up, and
    whether the search stopped at its cap while the prediction still rose there
    (``at_cap``: the optimum is at least ``gamma``, not ``gamma``)."""

    gamma: int
    speedup: float
    at_cap: bool

    @property
    def label(self) -> str:
        """``"gamma 7"``, ``"gamma 0 (plain)"``, or ``"at least gamma 64 (edge of range)"``."""
        if self.at_cap:
            return f"at least gamma {self.gamma} (edge of range)"
        return "gamma 0 (plain)" if self.gamma == 0 else f"gamma {self.gamma}"


def search_optimal_gamma(
    a: float | Sequence[float],
    c: float,
    *,
    verify_cost: VerifyCost | None = None,
    cap: int = GAMMA_SEARCH_CAP,
) -> OptimalGamma:
    """:func:`optimal_gamma` without a range that decides the answer: every gamma up to
    ``cap`` is tried, so the best one is where the prediction turns down; if it still rises
    at ``cap``, the result says so (``at_cap``) instead of passing the edge off as the optimum.

    >>> optimal_gamma(0.72, 0.01, max_gamma=6), search_optimal_gamma(0.72, 0.01).gamma
    (6, 10)
    >>> search_optimal_gamma(0.999, 0.0, cap=10).label
    'at least gamma 10 (edge of range)'
    """
    cap = _check_gamma(cap)
    best = optimal_gamma(a, c, max_gamma=cap, verify_cost=verify_cost)
    v = verify_cost.ratio(best + 1) if verify_cost is not None else 1.0
    s = 1.0 / v if best == 0 else speedup_positional(_betas(a, best), c, v)
    if best < cap:
        return OptimalGamma(best, s, False)
    prev = speedup_positional(_betas(a, cap - 1), c, _ratio(verify_cost, cap)) if cap > 1 else 1.0
    return OptimalGamma(best, s, s > prev + 1e-12)


def _ratio(verify_cost: VerifyCost | None, n: int) -> float:
    return verify_cost.ratio(n) if verify_cost is not None else 1.0


def _betas(a: float | Sequence[float], g: int) -> list[float]:
    if isinstance(a, (int, float)):
        return [float(a)] * g
    rates = list(a)
    if not rates:
        raise ValueError("per-position acceptance is empty")
    return [rates[min(i, len(rates) - 1)] for i in range(g)]


# -- measuring costs ---------------------------------------------------------------------


def _nondecreasing(ys: Sequence[float]) -> tuple[float, ...]:
    """The least-squares non-decreasing fit of ``ys`` (pool adjacent violators, equal
    weights): every run of points that decreases is replaced by its mean.

    >>> _nondecreasing([1.0, 1.53, 1.34, 1.48])
    (1.0, 1.435, 1.435, 1.48)
    """
    blocks: list[list[float]] = []  # [sum, count]
    for y in ys:
        blocks.append([float(y), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    return tuple(round(t / c, 12) for t, c in blocks for _ in range(int(c)))


@dataclass(frozen=True)
class VerifyCost:
    """Seconds of one target call as a function of how many tokens it is fed.

    ``seconds`` are the measurements (the median of the repeats at each ``tokens``);
    :meth:`time` and :meth:`ratio` -- what every prediction, replay and best gamma uses -- read
    their **non-decreasing fit** (``fitted``: least squares under the constraint, i.e. pool
    adjacent violators). A call fed more tokens does the work of a call fed fewer plus more
    rows through the same weights, so its true cost cannot be lower; a measured decrease
    (notebook 08 once timed ``v(2) = 1.53`` above ``v(3) = 1.34``) is timing noise, and a
    replay charged at it ranked gamma 1 below what the live run measured. The fit pools the
    violating points at their mean instead of raising them to the noisiest high one (a
    cumulative maximum would bias the whole curve upward); :meth:`measured_ratio` keeps the raw
    values for a figure.
    """

    tokens: tuple[int, ...]  # fed tokens, ascending, starting at 1
    seconds: tuple[float, ...]  # median time of one call, as measured
    context: int  # context length the calls were measured at

    @cached_property
    def fitted(self) -> tuple[float, ...]:
        """``seconds`` made non-decreasing in ``tokens`` (see the class docstring)."""
        return _nondecreasing(self.seconds)

    def measured_ratio(self, n: int) -> float:
        """The raw measurement at a timed ``n``: seconds(n) / seconds(1), before the fit."""
        return self.seconds[self.tokens.index(n)] / self.seconds[0]

    def describe(self, n: int) -> str:
        """``v(n)`` in words, the measurement first and the fit the predictions use named as a
        fit where it differs: ``"2.52 decode steps measured (non-decreasing fit: 2.57)"``.

        >>> VerifyCost((1, 2, 3), (1.0, 2.62, 2.52), 0).describe(3)
        '2.52 decode steps measured (non-decreasing fit: 2.57)'
        """
        fit = self.ratio(n)
        if n not in self.tokens:
            return f"{fit:.2f} decode steps (non-decreasing fit, n = {n} not timed)"
        raw = self.measured_ratio(n)
        s = f"{raw:.2f} decode steps measured"
        return s if abs(raw - fit) < 5e-3 else s + f" (non-decreasing fit: {fit:.2f})"

    def time(self, n: int) -> float:
        """Seconds for a call on ``n`` tokens, from the non-decreasing fit (linear
        interpolation; extrapolation with the mean slope, never decreasing)."""
        xs, ys = self.tokens, self.fitted
        if len(xs) == 1 or n <= xs[0]:
            return ys[0]
        for x0, y0, x1, y1 in zip(xs, ys, xs[1:], ys[1:], strict=False):
            if n <= x1:
                return y0 + (y1 - y0) * (n - x0) / (x1 - x0)
        # Past the last measurement: the mean slope over the whole range (robust to one noisy
        # point), never below the last measured time.
        slope = max(0.0, (ys[-1] - ys[0]) / (xs[-1] - xs[0]))
        return ys[-1] + slope * (n - xs[-1])

    def ratio(self, n: int) -> float:
        """time(n) / time(1): how much dearer a verify pass on n tokens is than a decode step."""
        return self.time(n) / self.time(1)

    @property
    def measured_up_to(self) -> int:
        """The largest number of fed tokens actually timed."""
        return self.tokens[-1]

    def extrapolated(self, n: int) -> bool:
        """Whether :meth:`time` of ``n`` tokens is extrapolated (past the last measurement)."""
        return n > self.tokens[-1]


def _runner(model: Any):
    from ..core.runners import as_runner

    return as_runner(model)


@torch.inference_mode()
def measure_verify_cost(
    model: Any,
    *,
    max_tokens: int = 9,
    context: int = 128,
    repeats: int = 5,
    vocab_hint: int = 1000,
    seed: int = 0,
    sizes: Sequence[int] | None = None,
) -> VerifyCost:
    """Time one target call fed 1..max_tokens tokens at a given context length.

    Each measurement extends a cache of ``context`` tokens and crops back, exactly what the
    engine's verify step does; the median of ``repeats`` is kept. ``sizes`` times only those
    token counts (1 always included; :meth:`VerifyCost.time` interpolates between them).
    """
    if max_tokens < 1 or context < 1 or repeats < 1:
        raise ValueError("max_tokens, context and repeats must all be >= 1")
    wanted = sorted({1, *(int(n) for n in sizes)}) if sizes is not None else None
    if wanted is not None and (wanted[-1] > max_tokens or wanted[0] < 1):
        raise ValueError(f"sizes must lie in 1..max_tokens={max_tokens}, got {sizes!r}")
    from ..core.runners import vocab_size_of

    runner = _runner(model)
    device = runner.device
    vocab_hint = min(vocab_hint, vocab_size_of(model) or vocab_hint)
    g = torch.Generator().manual_seed(seed)
    ctx = torch.randint(0, vocab_hint, (context,), generator=g)
    runner.extend(ctx, 1)
    tokens, seconds = [], []
    for n in wanted if wanted is not None else range(1, max_tokens + 1):
        fed = torch.randint(0, vocab_hint, (n,), generator=g)
        runner.extend(fed, n)  # warm-up for this shape
        runner.crop(context)
        times = []
        for _ in range(repeats):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            runner.extend(fed, n)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - t0)
            runner.crop(context)
        tokens.append(n)
        seconds.append(sorted(times)[len(times) // 2])
    return VerifyCost(tuple(tokens), tuple(seconds), context)


def measure_step_times(
    target: Any, draft: Any, *, context: int = 128, repeats: int = 5
) -> tuple[float, float]:
    """(target decode-step seconds, draft decode-step seconds); their ratio is c."""
    t = measure_verify_cost(target, max_tokens=1, context=context, repeats=repeats)
    d = measure_verify_cost(draft, max_tokens=1, context=context, repeats=repeats)
    return t.seconds[0], d.seconds[0]


def measured_draft_cost(spec_results: Sequence[Any], plain_results: Sequence[Any]) -> float:
    """The draft cost ratio ``c`` measured inside traced runs: (draft seconds per drafted
    token, pooled over ``spec_results``) / (plain seconds per token, pooled over
    ``plain_results``). For drafters without a model of their own (n-gram lookup) this is the
    only measurement of ``c``; theory figures take it instead of a guess.

    Raises ``ValueError`` when nothing was drafted or a result carries no trace."""
    spec, plain = list(spec_results), list(plain_results)
    if not spec or not plain:
        raise ValueError("need speculative and plain results to measure c")
    if any(r.trace is None for r in spec):
        raise ValueError("measured_draft_cost needs traced speculative results (trace=True)")
    drafted = sum(s.drafted for r in spec for s in r.trace.steps)
    if drafted == 0:
        raise ValueError("the runs drafted nothing: c cannot be measured")
    draft_time = sum(s.draft_time for r in spec for s in r.trace.steps)
    plain_tokens = sum(len(r.new_tokens) for r in plain)
    plain_time = sum(r.total_time for r in plain)
    if plain_tokens == 0 or plain_time <= 0:
        raise ValueError("the plain runs produced no timed token")
    return (draft_time / drafted) / (plain_time / plain_tokens)


def predicted_best_gammas(
    acceptances: Sequence[float],
    c: float,
    verify_cost: VerifyCost | None = None,
    *,
    max_gamma: int = GAMMA_SEARCH_CAP,
) -> list[dict[str, Any]]:
    """Per acceptance rate: the best gamma in 0..max_gamma (0 = plain decoding) by Leviathan's
    formula and with the verify cost (:func:`search_optimal_gamma`), their predicted speedups,
    whether the search reached ``max_gamma`` with the prediction still rising there
    (``*_at_edge``: the best gamma is then *at least* the printed one), and whether the verify
    cost's best rests on an extrapolated verify cost (``gamma + 1`` past the measured tokens).

    >>> predicted_best_gammas([0.1], 0.5, max_gamma=4)[0]["best_leviathan"]
    0
    >>> row = predicted_best_gammas([0.9], 0.01, max_gamma=10)[0]
    >>> row["best_leviathan"], row["leviathan_at_edge"]
    (10, True)
    """
    if c is None or not math.isfinite(c) or c < 0:
        raise ValueError(f"the theory needs the measured draft cost ratio c, got {c!r}")
    rows = []
    for a in acceptances:
        b1 = search_optimal_gamma(a, c, cap=max_gamma)
        row: dict[str, Any] = dict(
            a=a,
            c=c,
            best_leviathan=b1.gamma,
            speedup_leviathan=speedup(a, b1.gamma, c),
            leviathan_at_edge=b1.at_cap,
        )
        if verify_cost is not None:
            b2 = search_optimal_gamma(a, c, cap=max_gamma, verify_cost=verify_cost)
            row.update(
                best_with_verify=b2.gamma,
                speedup_with_verify=speedup(a, b2.gamma, c, verify_cost.ratio(b2.gamma + 1)),
                with_verify_at_edge=b2.at_cap,
                extrapolated=verify_cost.extrapolated(b2.gamma + 1),
            )
        rows.append(row)
    return rows


# -- predicted vs measured ----------------------------------------------------------------


def above_call_bound(speedup: float, tokens_per_call: float, *, tol: float = 1e-9) -> bool:
    """Whether a measured speed-up over plain decoding exceeds its tokens per target call.

    A speculative target call commits ``tokens_per_call`` tokens on average and costs at least
    one plain decode step (a verify pass on ``n >= 1`` tokens is no cheaper than one on 1
    token, ``v(n) >= 1``, and drafting costs ``c >= 0``), so a real speed-up is at most
    ``tokens_per_call``. One above it was made by the clock: the plain reference run was
    slowed (or the speculative one favoured) by the machine. NaN is never above.

    >>> above_call_bound(1.895, 1.674), above_call_bound(1.35, 1.8)
    (True, False)
    """
    return bool(
        math.isfinite(speedup)
        and math.isfinite(tokens_per_call)
        and speedup > tokens_per_call + tol
    )


def call_bound_note(speedup: float, tokens_per_call: float) -> str:
    """``""`` for a possible speed-up; for one above its tokens per call
    (:func:`above_call_bound`) a parenthesis saying it is timing noise, to print after it.

    >>> call_bound_note(1.895, 1.674)[:51]
    ' (above its 1.67 tokens per target call: impossible'
    """
    if not above_call_bound(speedup, tokens_per_call):
        return ""
    return (
        f" (above its {tokens_per_call:.2f} tokens per target call: impossible for a real "
        "speed-up, since a speculative call costs at least one plain decode step -- timing noise, "
        "not a gain)"
    )


@dataclass(frozen=True)
class Prediction:
    """Theory next to the clock for one speculative configuration."""

    gamma: int
    acceptance: float  # mean per-token acceptance (accepted / drafted)
    per_position: tuple[float, ...]  # measured beta_i
    c: float  # draft cost ratio used
    verify_ratio: float  # v(gamma + 1): a full verify pass / decode step
    tokens_per_call_iid: float  # Leviathan, i.i.d. a
    tokens_per_call_positional: float  # from per-position acceptance
    tokens_per_call_measured: float
    speedup_leviathan: float  # E_iid / (g c + 1)
    speedup_positional: float  # E_pos / (g c + 1)
    speedup_with_verify_cost: float  # E_measured / mean over steps of (d c + v(d + 1))
    speedup_measured: float  # plain seconds per token / speculative seconds per token
    overhead_fraction: float  # share of speculative wall time outside draft and verify calls
    # mean modelled cost of one target call in decode steps: d c + v(d + 1) for a step that
    # drafted d tokens (a step that drafted nothing is a plain decode step, v(1) = 1)
    call_cost: float = math.nan
    empty_steps: int = 0  # steps that drafted nothing (n-gram lookup found no match)

    @property
    def above_call_bound(self) -> bool:
        """The measured speed-up exceeds the measured tokens per call: timing noise
        (:func:`above_call_bound`)."""
        return above_call_bound(self.speedup_measured, self.tokens_per_call_measured)

    @property
    def fraction_of_predicted(self) -> float:
        """measured / Leviathan prediction (the issue's >= 90% target)."""
        return self.speedup_measured / self.speedup_leviathan

    def explain(self) -> str:
        """Where the gap between the textbook speedup and the clock went, in numbers."""
        lines = [
            f"gamma={self.gamma}: acceptance a={self.acceptance:.3f}, c={self.c:.3f}, "
            f"verify pass on {self.gamma + 1} tokens = {self.verify_ratio:.2f}x a decode step",
            f"tokens/call: i.i.d. formula {self.tokens_per_call_iid:.2f}, per-position "
            f"{self.tokens_per_call_positional:.2f}, measured {self.tokens_per_call_measured:.2f}",
            f"a target call cost {self.call_cost:.2f} decode steps on average "
            f"({self.empty_steps} step(s) drafted nothing and were charged as plain decode steps)",
            f"speedup: Leviathan {self.speedup_leviathan:.2f}x -> per-position "
            f"{self.speedup_positional:.2f}x -> with verify cost "
            f"{self.speedup_with_verify_cost:.2f}x -> measured {self.speedup_measured:.2f}x "
            f"({self.fraction_of_predicted:.0%} of Leviathan)"
            + call_bound_note(self.speedup_measured, self.tokens_per_call_measured),
            f"time outside model calls (Python, sampling, cache crops): "
            f"{self.overhead_fraction:.1%} of the speculative run",
        ]
        return "\n".join(lines)


def predicted_vs_measured(
    spec_result: Any,
    plain_result: Any,
    *,
    c: float | None = None,
    verify_cost: VerifyCost | None = None,
) -> Prediction:
    """Compare a speculative :class:`~specviz.engine.GenerationResult` (traced) with a plain
    one on the same prompt (or sequences of them over the same prompts, pooled).

    ``c`` defaults to the measured ratio (draft seconds per drafted token) / (plain seconds
    per token); ``verify_cost`` defaults to the ratio measured inside the run (mean verify
    time per call / plain seconds per token).

    The "+ verify cost" prediction charges every step what it did: a step that drafted ``d``
    tokens costs ``d c + v(d + 1)`` decode steps (``v`` from ``verify_cost``), so a step
    where the drafter proposed nothing (an n-gram lookup without a match) is a plain decode
    step, ``v(1) = 1``, and a draft cut short is verified at its length -- the same charge as
    :func:`specviz.lab.policy_lab.modelled_gamma_table`. Charging every step a full
    ``gamma + 1``-token pass would predict 0.76x where prompt lookup on code measured 0.96x
    with 74 of 127 steps empty (notebook 08).
    """
    if isinstance(spec_result, (list, tuple)):
        spec_result = _pool(spec_result)
    if isinstance(plain_result, (list, tuple)):
        plain_result = _pool(plain_result)
    if spec_result.trace is None:
        raise ValueError("predicted_vs_measured needs a traced speculative result (trace=True)")
    s = spec_result.trace.summary()
    if s.drafted == 0:
        raise ValueError("the speculative run drafted nothing; nothing to predict")
    gamma = max(st.drafted for st in spec_result.trace.steps)
    plain_step = plain_result.total_time / max(1, len(plain_result.new_tokens))
    if c is None:
        c = (s.draft_time / s.drafted) / plain_step
    steps = spec_result.trace.steps
    mean_drafted = s.drafted / s.target_calls
    if verify_cost is not None:
        v = verify_cost.ratio(gamma + 1)
        mean_verify = sum(verify_cost.ratio(st.drafted + 1) for st in steps) / len(steps)
    else:  # measured inside the run: each call's own verify time, empty steps included
        mean_verify = (s.verify_time / s.target_calls) / plain_step
        full = [st.verify_time for st in steps if st.drafted == gamma]
        v = (sum(full) / len(full)) / plain_step
    call_cost = mean_drafted * c + mean_verify
    a = s.accepted / s.drafted
    betas = [b if not math.isnan(b) else 0.0 for b in s.per_position_acceptance]
    e_iid = expected_tokens_per_call(a, gamma)
    e_pos = expected_tokens_per_call_positional(betas)
    e_meas = s.mean_accepted_length
    spec_step = spec_result.total_time / max(1, len(spec_result.new_tokens))
    overhead = spec_result.total_time - s.draft_time - s.verify_time
    return Prediction(
        gamma=gamma,
        acceptance=a,
        per_position=tuple(betas),
        c=c,
        verify_ratio=v,
        tokens_per_call_iid=e_iid,
        tokens_per_call_positional=e_pos,
        tokens_per_call_measured=e_meas,
        speedup_leviathan=e_iid / (gamma * c + 1.0),
        speedup_positional=e_pos / (gamma * c + 1.0),
        speedup_with_verify_cost=e_meas / call_cost,
        speedup_measured=plain_step / spec_step,
        overhead_fraction=max(0.0, overhead) / spec_result.total_time,
        call_cost=call_cost,
        empty_steps=sum(st.drafted == 0 for st in steps),
    )


@dataclass(frozen=True)
class _Pooled:
    new_tokens: list[int]
    trace: Any
    total_time: float


def _pool(results: Sequence[Any]) -> _Pooled:
    """Several generations as one: steps concatenated, times and tokens summed."""
    from ..core.trace import Trace

    if not results:
        raise ValueError("no results to pool")
    traced = all(r.trace is not None for r in results)
    trace = Trace(tuple(s for r in results for s in r.trace.steps)) if traced else None
    return _Pooled(
        [t for r in results for t in r.new_tokens], trace, sum(r.total_time for r in results)
    )
