"""The experiments the notebooks run, kept here (tested) so the notebooks stay thin."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .. import views as viz
from ..core.sampling import SamplingParams, logits_to_probs
from ..core.trace import Trace
from ..decoding.serial import GenerationResult, speculative_generate
from ..drafting.lookup import PromptLookupDrafter
from ..drafting.model import EarlyExitDrafter
from ..fixtures.toy import ToyLM, exact_continuation_law
from ..perf.theory import expected_tokens_per_call
from ..views.explorers import _one_thread

# notebook 06's numerics and notebook 07's drafter sets have their own modules; named here too
from .drafter_sets import grid_drafters, pooled_cells, precision_drafters
from .numerics import logit_margins, precision_greedy

__all__ = [
    "toy_alpha",
    "ToySimulation",
    "simulate_toy",
    "samples_to_detect",
    "sample_continuations",
    "continuation_table",
    "NotebookModels",
    "load_models",
    "PromptRun",
    "run_prompts",
    "run_timings",
    "PlainComparison",
    "compare_with_plain",
    "acceptance_at",
    "calibration_on_toy",
    "SeedComparison",
    "same_seed_runs",
    "power_curves",
    "samples_for_power",
    "logit_margins",
    "precision_greedy",
    "grid_drafters",
    "pooled_cells",
    "precision_drafters",
]


# -------------------------------------------------------------------------------------------
# toy model explorer
# -------------------------------------------------------------------------------------------


def toy_alpha(target: ToyLM, draft: ToyLM, params: SamplingParams) -> float:
    """Exact per-position acceptance ``sum_x min(p, q) = 1 - TV(p, q)`` of a context-free
    (order-0) toy pair: the alpha of the truncated-geometric law, no estimate involved."""
    if target.order != 0 or draft.order != 0:
        raise ValueError("toy_alpha needs context-free (order=0) toy models")
    p = target.next_probs([], params)
    q = draft.next_probs([], params)
    return float(torch.minimum(p, q).sum())


@dataclass(frozen=True)
class ToySimulation:
    """One simulated run of a context-free toy pair."""

    noise: float
    temperature: float
    gamma: int
    alpha: float  # exact
    accepted: tuple[int, ...]  # per full-length step
    target_calls: int
    new_tokens: int

    @property
    def tokens_per_call(self) -> float:
        return float(np.mean(self.accepted)) + 1.0 if self.accepted else math.nan

    @property
    def tokens_per_call_se(self) -> float:
        n = len(self.accepted)
        return float(np.std(self.accepted, ddof=1) / math.sqrt(n)) if n > 1 else math.nan

    @property
    def theory(self) -> float:
        return float(expected_tokens_per_call(self.alpha, self.gamma))

    def point(self, label: str = "simulated") -> viz.SimPoint:
        return viz.SimPoint(
            self.alpha, self.gamma, self.tokens_per_call, self.tokens_per_call_se, label
        )


def simulate_toy(
    noise: float,
    temperature: float,
    gamma: int,
    *,
    vocab_size: int = 6,
    tokens: int = 2000,
    seed: int = 1,
) -> ToySimulation:
    """Speculative sampling on a context-free toy pair whose draft is the target plus
    Gaussian logit noise of scale ``noise``: one long generation of ``tokens`` tokens through
    the real engine and lossless verifier. Context-free means acceptance is i.i.d., so the
    truncated-geometric law and the tokens-per-call formula hold exactly -- any gap between
    theory and this simulation is sampling noise (or a bug). The default toy (6 tokens, seed 1)
    has a fairly flat law, so noise 0.5 / 1 / 2 give alpha of about 0.86 / 0.72 / 0.52."""
    target = ToyLM.random(vocab_size, order=0, seed=seed)
    draft = target.perturbed(noise, seed=seed + 1)
    params = SamplingParams(True, float(temperature), None, None)
    with _one_thread():
        r = speculative_generate(
            target,
            draft,
            [0],
            gamma=gamma,
            max_new_tokens=tokens,
            do_sample=True,
            temperature=float(temperature),
            seed=seed,
            trace=False,
        )
    full = tuple(a for a, d in zip(r.accepted_counts, r.drafted_counts, strict=True) if d == gamma)
    return ToySimulation(
        float(noise),
        float(temperature),
        int(gamma),
        toy_alpha(target, draft, params),
        full,
        r.target_calls,
        len(r.new_tokens),
    )


# -------------------------------------------------------------------------------------------
# exact laws under (broken) verifiers
# -------------------------------------------------------------------------------------------


def samples_to_detect(p: Any, tv: float, *, alpha: float = 1e-3, power: float = 0.9) -> float:
    """Samples a one-sample chi-square test at level ``alpha`` needs to detect, with the given
    power, a TV-``tv`` departure from the law ``p`` (:func:`specviz.stats.sample_size_for_tv`
    on the support of ``p``). ``inf`` for ``tv = 0``; ``nan`` where the stats model has no
    alternative of that size (e.g. a TV larger than the law's head mass) -- such departures are
    large and show up at any sample size this module uses."""
    from ..stats import sample_size_for_tv

    probs = np.asarray(p, dtype=float)
    probs = probs[probs > 0]
    if tv <= 1e-12:
        return math.inf
    try:
        return float(sample_size_for_tv(probs / probs.sum(), float(tv), alpha=alpha, power=power))
    except ValueError:
        return math.nan


def sample_continuations(
    target: Any,
    draft: Any,
    *,
    verifier: str,
    params: SamplingParams,
    prompt: Sequence[int],
    length: int,
    gamma: int,
    n: int,
    seed: int = 0,
) -> Counter:
    """``n`` speculative continuations of ``length`` tokens (as tuples), counted; one
    generator threads all of them so the sample is reproducible from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    counts: Counter = Counter()
    with _one_thread():
        for _ in range(n):
            counts[
                _one_continuation(target, draft, verifier, params, prompt, length, gamma, gen)
            ] += 1
    return counts


def _one_continuation(
    target: Any,
    draft: Any,
    verifier: str,
    params: SamplingParams,
    prompt: Sequence[int],
    length: int,
    gamma: int,
    gen: torch.Generator,
) -> tuple[int, ...]:
    r = speculative_generate(
        target,
        draft,
        list(prompt),
        gamma=gamma,
        max_new_tokens=length,
        do_sample=True,
        temperature=params.temperature,
        top_k=params.top_k,
        top_p=params.top_p,
        seed=gen,
        trace=False,
        verifier=verifier,
    )
    return tuple(r.new_tokens)


def continuation_table(
    counts: Counter, target: ToyLM, prompt: Sequence[int], length: int, params: SamplingParams
) -> tuple[list[tuple[int, ...]], np.ndarray, np.ndarray]:
    """``(outcomes, observed, expected_probs)`` over every continuation the exact law or the
    sample contains (an outcome of probability 0 stays in, so the test can flag it)."""
    law = exact_continuation_law(target, list(prompt), length, params)
    keys = sorted(set(law) | set(counts))
    return (
        keys,
        np.array([counts.get(k, 0) for k in keys], dtype=float),
        np.array([law.get(k, 0.0) for k in keys]),
    )


# -------------------------------------------------------------------------------------------
# real models
# -------------------------------------------------------------------------------------------


@dataclass
class NotebookModels:
    target: Any
    draft: Any  # a model or a drafter object: what speculative_generate takes
    tokenizer: Any
    label: str
    load_seconds: float = 0.0


def load_models(
    target: str = "smollm2-135m", draft: str = "prompt_lookup", **kw: Any
) -> NotebookModels:
    """Target model, drafter and tokenizer from two short names, so a notebook's parameter
    cell can switch pairs with an environment variable.

    ``draft`` is ``prompt_lookup`` (n-gram copy, no draft model), ``self`` (the target drafts
    for itself: acceptance 1, an upper bound), ``early_exit:L`` (the target's first L layers),
    ``eagle_head`` (the trained EAGLE-style head on the target's features,
    :meth:`~specviz.drafting.heads.HeadDrafter.from_pretrained`; shipped for SmolLM2-135M),
    ``eagle_head+lookup`` (prompt lookup first, the head where nothing repeats)
    or a model name for :func:`specviz.models.load_pair` (e.g. ``qwen2.5-coder-0.5b`` with
    target ``qwen2.5-coder-1.5b``). Extra keywords (dtype, device) go to the loaders.
    """
    from ..models import load_model, load_pair, load_tokenizer

    t0 = time.perf_counter()
    kw.setdefault("progress", False)
    heads = ("eagle_head", "eagle_head+lookup")
    if draft in ("prompt_lookup", "self", *heads) or draft.startswith("early_exit:"):
        model = load_model(target, **kw)
        tok = load_tokenizer(target, progress=kw["progress"])
        if draft == "prompt_lookup":
            d: Any = PromptLookupDrafter()
        elif draft == "self":
            d = model
        elif draft in heads:
            from ..drafting.heads import HeadDrafter

            # "+lookup": copy where the text repeats (point masses), the head elsewhere
            lookup = PromptLookupDrafter(min_ngram=2) if draft.endswith("+lookup") else None
            d = HeadDrafter.from_pretrained(model, lookup=lookup)
        else:
            d = EarlyExitDrafter(model, int(draft.split(":", 1)[1]))
        label = f"{target} + {draft}"
    else:
        model, d, tok = load_pair(target, draft, **kw)
        label = f"{target} + draft model {draft}"
    return NotebookModels(model, d, tok, label, time.perf_counter() - t0)


@dataclass(frozen=True)
class PromptRun:
    prompt_id: str
    category: str
    gamma: int
    result: GenerationResult = field(repr=False)

    @property
    def trace(self) -> Trace:
        assert self.result.trace is not None
        return self.result.trace


def run_prompts(
    models: NotebookModels,
    prompts: Sequence[Any],
    *,
    gammas: Sequence[int],
    max_new_tokens: int,
    do_sample: bool = True,
    temperature: float = 1.0,
    top_p: float | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> list[PromptRun]:
    """Speculative decoding of every prompt at every gamma, traced (same seed per prompt, so
    the gammas differ only in the draft length)."""
    from ..prompts import render_prompt

    runs = []
    for p in prompts:
        ids = render_prompt(models.tokenizer, p)
        for g in gammas:
            t0 = time.perf_counter()
            r = speculative_generate(
                models.target,
                models.draft,
                ids,
                gamma=g,
                max_new_tokens=max_new_tokens,
                do_sample=do_sample,
                temperature=temperature,
                top_p=top_p,
                seed=seed,
                eos_token_id=models.tokenizer.eos_token_id,
            )
            runs.append(PromptRun(p.id, p.category, g, r))
            if progress is not None:
                progress(
                    f"{p.id} gamma={g}: {len(r.new_tokens)} tokens, {r.target_calls} calls, "
                    f"{time.perf_counter() - t0:.1f} s"
                )
    return runs


def run_timings(runs: Sequence[PromptRun]) -> dict[tuple[str, int], dict[str, float]]:
    """Per (category, gamma) of :func:`run_prompts`'s runs: ``tokens_per_s`` and
    ``draft_share`` (the drafter's share of the wall time), each the *median over the cell's
    runs* (one per prompt), ``draft_ms`` (the median draft time of a full-gamma step) and
    ``runs``. Medians, not pooled sums or means: on a shared machine one run paused by the OS
    (another job, a SIGSTOP) takes minutes, which a pooled sum or a mean passes on to the whole
    cell, and the fastest gamma or the draft cost per step then read backwards.

    >>> from types import SimpleNamespace as NS
    >>> def run(g, seconds, draft):
    ...     steps = [NS(drafted=g, draft_time=draft)] * 4
    ...     res = NS(total_time=seconds, new_tokens=[0] * 10)
    ...     return NS(category="c", gamma=g, result=res, trace=NS(steps=steps))
    >>> t = run_timings([run(2, 1.0, 0.01), run(2, 1.1, 0.01), run(2, 200.0, 50.0)])
    >>> round(t["c", 2]["tokens_per_s"], 2), round(t["c", 2]["draft_ms"], 1), t["c", 2]["runs"]
    (9.09, 10.0, 3)
    """
    cells: dict[tuple[str, int], list[Any]] = {}
    for r in runs:
        cells.setdefault((r.category, r.gamma), []).append(r)
    out = {}
    for key, rs in cells.items():
        tps = [
            len(r.result.new_tokens) / r.result.total_time for r in rs if r.result.total_time > 0
        ]
        share = [
            sum(s.draft_time for s in r.trace.steps) / r.result.total_time
            for r in rs
            if r.result.total_time > 0
        ]
        full = [s.draft_time for r in rs for s in r.trace.steps if s.drafted == key[1]]
        out[key] = {
            "tokens_per_s": float(np.median(tps)) if tps else float("nan"),
            "draft_share": float(np.median(share)) if share else float("nan"),
            "draft_ms": 1e3 * float(np.median(full)) if full else float("nan"),
            "runs": len(rs),
        }
    return out


@dataclass(frozen=True)
class PlainComparison:
    """Plain greedy decoding and speculative arms on the same prompts (notebooks 11 and 12):
    ``per[arm]`` holds, prompt by prompt, ``tokens``, ``calls`` (target calls), ``seconds``
    and ``identical`` (the arm's text equals plain decoding's; always true for ``plain``) --
    the per-prompt lists :func:`specviz.lab.verdicts.ratio_verdict` and
    :func:`~specviz.lab.verdicts.claim1_lines` take; ``plain`` the plain runs themselves."""

    per: dict[str, dict[str, list[Any]]]
    plain: list[GenerationResult] = field(repr=False)

    def table(self) -> Any:
        """One row per arm: tokens per target call, tokens per second, "k/n" greedy identical."""
        import pandas as pd

        rows = {
            name: {
                "tokens per target call": sum(d["tokens"]) / max(1, sum(d["calls"])),
                "tokens per second": sum(d["tokens"]) / max(1e-12, sum(d["seconds"])),
                "greedy identical": f"{sum(d['identical'])}/{len(d['identical'])}",
            }
            for name, d in self.per.items()
        }
        return pd.DataFrame(rows).T


def compare_with_plain(
    target: Any,
    prompts: Sequence[Sequence[int]],
    arms: dict[str, tuple[Callable[[], Any], int]],
    *,
    max_new_tokens: int,
    eos_token_id: int | None = None,
) -> PlainComparison:
    """Greedy decoding of every prompt plainly and with every arm (``name -> (make_drafter,
    gamma)``; ``make_drafter()`` is called once per prompt, so a drafter with state starts
    fresh), interleaved prompt by prompt -- plain, then each arm in order -- so that a slow
    spell of a shared machine falls on every arm alike. The repeated loop of notebooks 11
    and 12, in one tested place.

    >>> import specviz as sv
    >>> t, d = sv.toy_pair(6, 2, seed=0)
    >>> cmp = compare_with_plain(t, [[0, 1], [2]], {"chain": (lambda: sv.ModelDrafter(d), 3)},
    ...                          max_new_tokens=6)
    >>> cmp.per["chain"]["identical"], cmp.per["plain"]["calls"]
    ([True, True], [6, 6])
    """
    from ..decoding.serial import autoregressive_generate

    if not arms:
        raise ValueError("no speculative arm to compare with plain decoding")
    if "plain" in arms:
        raise ValueError("'plain' is the baseline's name; give the arm another one")
    if not prompts:
        raise ValueError("no prompts")
    kw = dict(max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
    keys = ("tokens", "calls", "seconds", "identical")
    per: dict[str, dict[str, list[Any]]] = {n: {k: [] for k in keys} for n in ("plain", *arms)}
    plain_runs: list[GenerationResult] = []

    def add(name: str, r: GenerationResult, same: bool) -> None:
        for k, v in zip(keys, (len(r.new_tokens), r.target_calls, r.total_time, same), strict=True):
            per[name][k].append(v)

    for ids in prompts:
        ref = autoregressive_generate(target, ids, **kw)
        plain_runs.append(ref)
        add("plain", ref, True)
        for name, (make, gamma) in arms.items():
            r = speculative_generate(target, make(), ids, gamma=gamma, trace=False, **kw)
            add(name, r, list(r.new_tokens) == list(ref.new_tokens))
    return PlainComparison(per, plain_runs)


# -------------------------------------------------------------------------------------------
# lossless statistics on a real vocabulary (notebook 05)
# -------------------------------------------------------------------------------------------


def acceptance_at(target: Any, draft: Any, prefix: Sequence[int], params: SamplingParams) -> float:
    """Exact per-position acceptance ``sum_x min(p, q) = 1 - TV(p, q)`` of the token after
    ``prefix`` (one forward pass each; models or anything with ``next_logits``)."""
    p = logits_to_probs(_next_logits(target, prefix), params)
    q = logits_to_probs(_next_logits(draft, prefix), params)
    return float(torch.minimum(p, q).sum())


@torch.inference_mode()
def _next_logits(model: Any, prefix: Sequence[int]) -> torch.Tensor:
    if hasattr(model, "next_logits"):
        return model.next_logits(list(prefix)).float()
    ids = torch.tensor([list(prefix)], device=model.device)
    return model(input_ids=ids, logits_to_keep=1).logits[0, -1].float().cpu()


def calibration_on_toy(
    verifier: str = "lossless",
    *,
    replicates: int = 200,
    n_samples: int = 200,
    length: int = 3,
    gamma: int = 2,
    params: SamplingParams | None = None,
    alpha: float = 0.05,
    vocab_size: int = 5,
    order: int = 2,
    noise: float = 1.0,
    seed: int = 0,
) -> Any:
    """Does the goodness-of-fit test reject a true null at its nominal rate?

    ``replicates`` independent data sets of ``n_samples`` speculative continuations of a toy
    pair (context-dependent laws, exact continuation law), each tested against the exact law
    (Pearson, sparse bins pooled). Under the lossless rule the p-values are uniform; a broken
    rule makes them pile up near 0 -- the negative control. One torch Generator threads
    through every replicate (never reseeded). Returns a
    :class:`~specviz.stats.CalibrationResult`.
    """
    from ..fixtures.toy import toy_pair
    from ..stats import calibrate, goodness_of_fit

    if replicates < 1 or n_samples < 1:
        raise ValueError("replicates and n_samples must be >= 1")
    params = params or SamplingParams(True, 0.7, None, 0.9)
    target, draft = toy_pair(vocab_size, order, noise=noise, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    prompt = [0]
    law = exact_continuation_law(target, prompt, length, params)

    def one(rng: np.random.Generator) -> float:
        counts: Counter = Counter()
        for _ in range(n_samples):
            counts[
                _one_continuation(target, draft, verifier, params, prompt, length, gamma, gen)
            ] += 1
        keys = sorted(set(law) | set(counts))
        obs = np.array([counts.get(k, 0) for k in keys], dtype=float)
        exp = np.array([law.get(k, 0.0) for k in keys])
        return goodness_of_fit(obs, exp, rng=rng).pvalue

    with _one_thread():
        return calibrate(one, replicates=replicates, seed=seed, alpha=alpha)


@dataclass(frozen=True)
class SeedComparison:
    """Speculative and plain sampling of one prompt with the same seed."""

    seed: int
    speculative: tuple[int, ...]
    plain: tuple[int, ...]

    @property
    def identical(self) -> bool:
        return self.speculative == self.plain

    @property
    def first_difference(self) -> int | None:
        """Index of the first differing token (None when identical)."""
        pairs = zip(self.speculative, self.plain, strict=False)
        i = next((j for j, (a, b) in enumerate(pairs) if a != b), None)
        if i is None and not self.identical:
            i = min(len(self.speculative), len(self.plain))
        return i


def same_seed_runs(
    target: Any,
    draft: Any,
    prompt: Sequence[int],
    *,
    seeds: Sequence[int],
    max_new_tokens: int,
    gamma: int = 4,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | Sequence[int] | None = None,
) -> list[SeedComparison]:
    """For each seed: speculative and plain sampling of ``prompt`` with that same seed.

    The two consume random numbers differently (drafts, uniforms, residual draws vs one draw
    per token), so the same seed generally gives different text -- while the *law* of the text
    is the same, which only a statistical test can show (:func:`specviz.consistency_check`)."""
    from ..decoding.serial import autoregressive_generate

    out = []
    kw = dict(
        max_new_tokens=max_new_tokens,
        do_sample=True,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        eos_token_id=eos_token_id,
    )
    for s in seeds:
        spec = speculative_generate(
            target, draft, list(prompt), gamma=gamma, seed=int(s), trace=False, **kw
        )
        plain = autoregressive_generate(target, list(prompt), seed=int(s), **kw)
        out.append(SeedComparison(int(s), tuple(spec.new_tokens), tuple(plain.new_tokens)))
    return out


def power_curves(
    p: Any,
    laws: dict[str, Any],
    ns: Sequence[int],
    *,
    spread_tvs: Sequence[float] = (),
    alpha: float = 0.01,
    two_sample: bool = True,
) -> dict[str, np.ndarray]:
    """Analytic power of the first-token test against each alternative law, at each sample
    size (per arm when ``two_sample``): :func:`specviz.stats.power_homogeneity` /
    :func:`specviz.stats.power_gof` with the pooling the test would apply.

    ``spread_tvs`` adds, per TV value, the alternative of :func:`specviz.stats.tv_alternative`
    on the support of ``p`` (mass moved from the likelier half of the tokens to the rest),
    labelled ``"TV x (spread)"``: a yardstick next to the named laws.

    Example::

        curves = power_curves(p, {"bug": law}, [100, 1000, 10000], spread_tvs=[0.05])
    """
    from ..stats import power_gof, power_homogeneity, tv_alternative

    P = np.asarray(p, dtype=float)
    alternatives = {name: np.asarray(law, dtype=float) for name, law in laws.items()}
    support = P > 0
    for tv in spread_tvs:
        q = np.zeros_like(P)
        q[support] = tv_alternative(P[support] / P[support].sum(), float(tv))
        alternatives[f"TV {tv:g} (spread)"] = q
    out = {}
    for name, Q in alternatives.items():
        if Q.shape != P.shape:
            raise ValueError(f"law {name!r} has shape {Q.shape}, p has {P.shape}")
        if two_sample:
            out[name] = np.array([power_homogeneity(P, Q, int(n), alpha) for n in ns])
        else:
            out[name] = np.array([power_gof(P, Q, int(n), alpha=alpha) for n in ns])
    return out


def samples_for_power(
    p: Any, law: Any, *, alpha: float = 0.01, power: float = 0.9, two_sample: bool = True
) -> float:
    """Smallest sample size (per arm when ``two_sample``) at which the first-token test
    reaches ``power`` against ``law`` (doubling then bisection on the analytic power);
    ``inf`` when ``law`` equals ``p`` or more than 1e10 samples would be needed."""
    from ..stats import tv_distance

    P, Q = np.asarray(p, dtype=float), np.asarray(law, dtype=float)
    if tv_distance(P, Q) < 1e-12:
        return math.inf

    def ok(n: int) -> bool:
        return bool(
            power_curves(P, {"x": Q}, [n], alpha=alpha, two_sample=two_sample)["x"][0] >= power
        )

    hi = 2
    while not ok(hi):
        hi *= 2
        if hi > 10**10:
            return math.inf
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        hi, lo = (mid, lo) if ok(mid) else (hi, mid)
    return float(hi)
