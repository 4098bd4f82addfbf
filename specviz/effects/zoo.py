"""The bug zoo's effect sizes: exact first-token laws and the samples each bug needs.

Every broken verifier of :data:`specviz.verification.VERIFIERS` moves the law of the first token
a speculative step emits by a computable amount, whatever gamma is: the first token is the first
draft if accepted, else a token from the rule's correction law. :func:`first_token_law`
computes that law exactly; :func:`zoo_effects` turns it into the numbers a user plans with
(TV distance to the target, samples for 90% power one- and two-sample) and
:func:`stated_setting` fixes the toy on which specviz *states* them (the table in
``docs/bug_zoo.md``; ``tests/test_zoo.py`` checks that each bug is caught at its stated size).

Example::

    >>> from specviz.effects.zoo import stated_setting, zoo_effects
    >>> target, draft, context, params = stated_setting()
    >>> table = zoo_effects(target.next_logits(context), draft.next_logits(context), params)
    >>> float(table.loc["lossless", "tv"])
    0.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..core.sampling import SamplingParams, logits_to_probs
from ..drafting.modes import shifted_ids
from ..fixtures.toy import ToyLM, toy_pair
from ..stats import sample_size_for_laws, tv_distance
from ..verification.base import VERIFIERS
from ..verification.zoo import TREE_ZOO

__all__ = [
    "ZooEffect",
    "first_token_law",
    "markdown_table",
    "stated_setting",
    "zoo_effects",
]


# Verifiers whose acceptance is min(1, p/q) with the (possibly wrong) reported q and whose
# correction is the residual of that q; they differ only in how the draft misbehaves.
_RATIO_RULES = (
    "lossless",
    "greedy_draft_softmax_q",
    "unprocessed_q",
    "draft_ignores_temperature",
    "mixed_precision",
    "vocab_mismatch",
)


def _ratio_accept(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """min(1, p/q) as the unguarded verifiers compute it: p/0 = inf accepts, 0/0 = NaN rejects."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = p / q
    return np.where(np.isnan(ratio), 0.0, np.minimum(ratio, 1.0))


def _residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    r = np.clip(p - q, 0.0, None)
    return r / r.sum() if r.sum() > 0 else p


def first_token_law(
    verifier: str, target_logits: torch.Tensor, draft_logits: torch.Tensor, params: SamplingParams
) -> np.ndarray:
    """Exact law of the first token a speculative step emits under a named verifier.

    ``sum_x s(x) [a(x) delta_x + (1 - a(x)) r]`` with ``s`` the law the drafter samples from,
    ``a`` the rule's acceptance probability and ``r`` its correction law. The lossless rule
    gives exactly the target law ``p``. Mirrors the drafter modes of :mod:`specviz.drafting.modes`
    and the rules of :mod:`specviz.verification` (``tests/test_zoo.py`` checks the mirror against the
    engine by simulation).
    """
    if params.is_greedy:
        raise ValueError("first_token_law is for sampling (do_sample=True)")
    if verifier in TREE_ZOO:
        raise ValueError(
            f"{verifier!r} is a tree rule: its first-token law depends on how many siblings are "
            "drawn and how; use tree_zoo_effects or specviz.verification.trees.first_token_law_tree"
        )
    if verifier not in VERIFIERS:
        raise ValueError(f"unknown verifier {verifier!r}; choose from {sorted(VERIFIERS)}")
    p = logits_to_probs(target_logits.float(), params).double().numpy()
    q_np = logits_to_probs(draft_logits.float(), params).double().numpy()
    sampled, reported = q_np, q_np
    mode = VERIFIERS[verifier].draft_mode
    if mode == "argmax_softmax_q":
        sampled = np.zeros_like(q_np)
        sampled[int(draft_logits.argmax())] = 1.0
    elif mode == "unprocessed_q":
        reported = torch.softmax(draft_logits.float(), dim=-1).double().numpy()
    elif mode == "ignores_temperature":
        t1 = SamplingParams(True, 1.0, params.top_k, params.top_p)
        sampled = logits_to_probs(draft_logits.float(), t1).double().numpy()
    elif mode == "vocab_shift":  # tokens translated correctly, q reported in draft ids
        reported = q_np[shifted_ids(len(q_np)).numpy()]
    elif mode == "bf16_sample":
        q16 = logits_to_probs(draft_logits.float().to(torch.bfloat16), params)
        q16 = q16.to(torch.bfloat16).float().double().numpy()
        sampled = q16 / q16.sum()

    if verifier in _RATIO_RULES:
        accept, residual = _ratio_accept(p, reported), _residual(p, reported)
    elif verifier == "residual_from_target":
        accept, residual = _ratio_accept(p, reported), p
    elif verifier == "threshold":  # u fixed at 0.5: accept iff 0.5 < min(1, p/q)
        accept, residual = (_ratio_accept(p, reported) > 0.5).astype(float), _residual(p, reported)
    elif verifier == "always_accept":
        accept, residual = np.ones_like(p), p
    elif verifier == "typical":  # Medusa: p(x) > min(0.3, 0.09 * exp(-H(p))), then sample p
        entropy = -(p * np.log(np.clip(p, 1e-30, None))).sum()
        accept, residual = (p > min(0.3, 0.09 * math.exp(-entropy))).astype(float), p
    else:
        raise ValueError(f"no exact first-token law for verifier {verifier!r}")
    law = sampled * accept + (sampled * (1.0 - accept)).sum() * residual
    return law / law.sum()


@dataclass(frozen=True)
class ZooEffect:
    """How far one verifier moves the first-token law, and what it takes to see it."""

    verifier: str
    lossless: bool
    tv: float  # exact TV distance between the emitted first-token law and the target's
    n_one_sample: float  # samples for `power` (GOF against the exact law); inf when tv == 0
    n_two_sample: float  # samples per arm (speculative vs standard sampling); inf when tv == 0
    mistake: str


def zoo_effects(
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor,
    params: SamplingParams,
    *,
    verifiers: list[str] | None = None,
    alpha: float = 0.01,
    power: float = 0.9,
) -> Any:
    """A DataFrame (index: verifier) of :class:`ZooEffect` rows for one context.

    Sample sizes are the analytic Pearson power of the actual alternative (the bug's exact
    law against the target's), with the pooling the test would apply, so they are what the
    tests of :mod:`specviz.stats` need at level ``alpha``.
    """
    import pandas as pd

    names = verifiers or [v for v in VERIFIERS if v != "greedy" and v not in TREE_ZOO]
    p = first_token_law("lossless", target_logits, draft_logits, params)
    rows = []
    for name in names:
        law = first_token_law(name, target_logits, draft_logits, params)
        tv = float(tv_distance(p, law))
        if tv < 1e-12:
            n1 = n2 = math.inf
            tv = 0.0
        else:
            n1 = sample_size_for_laws(p, law, alpha=alpha, power=power)
            n2 = sample_size_for_laws(p, law, alpha=alpha, power=power, two_sample=True)
        spec = VERIFIERS[name]
        rows.append(ZooEffect(name, spec.lossless, tv, n1, n2, spec.description))
    return pd.DataFrame([r.__dict__ for r in rows]).set_index("verifier")


def stated_setting() -> tuple[Any, Any, tuple[int, ...], SamplingParams]:
    """The toy on which specviz states each bug's effect: (target, draft, context, params).

    An 8-token vocabulary; logits shifted by +24, the size of a real LM's top logits (a shift
    changes no probability, but bf16 rounds a logit of 24 to a multiple of 0.125, which is what
    makes ``mixed_precision`` visible); temperature 0.6, top-k 6 and top-p 0.95 so that the
    processing-related bugs (``unprocessed_q``, ``draft_ignores_temperature``) have something
    to get wrong. Draft = target + N(0, 0.25) logit noise.
    """
    target, draft = (
        ToyLM(m.table + 24.0, m.vocab_size, m.order, name=f"{m.name}+24")
        for m in toy_pair(8, 1, noise=0.5, seed=2)
    )
    return target, draft, (1,), SamplingParams(True, 0.6, 6, 0.95)


def _sample_size_cells(row: Any) -> tuple[str, str]:
    """A table row's one- and two-sample sizes as table cells ("-" for a lossless rule)."""
    return tuple(
        "-" if math.isinf(n) else f"{int(n):,}" for n in (row.n_one_sample, row.n_two_sample)
    )


def markdown_table(alpha: float = 0.01, power: float = 0.9) -> str:
    """The stated table (docs/bug_zoo.md): ``python -m specviz.effects`` prints it."""
    target, draft, context, params = stated_setting()
    table = zoo_effects(
        target.next_logits(context), draft.next_logits(context), params, alpha=alpha, power=power
    )
    lines = [
        "| verifier | first-token TV | n one-sample | n per arm, two-sample | mistake |",
        "|---|---:|---:|---:|---|",
    ]
    for name, row in table.iterrows():
        n1, n2 = _sample_size_cells(row)
        lines.append(f"| `{name}` | {row.tv:.4f} | {n1} | {n2} | {row.mistake} |")
    return "\n".join(lines)
