"""The bug zoo's effect sizes: exact first-token laws and the samples each bug needs.

Every broken verifier of :data:`specviz.verify.VERIFIERS` moves the law of the first token a
speculative step emits by a computable amount, whatever gamma is: the first token is the first
draft if accepted, else a token from the rule's correction law. :func:`first_token_law`
computes that law exactly; :func:`zoo_effects` turns it into the numbers a user plans with
(TV distance to the target, samples for 90% power one- and two-sample) and
:func:`stated_setting` fixes the toy on which specviz *states* them (the table in
``docs/bug_zoo.md``; ``tests/test_zoo.py`` checks that each bug is caught at its stated size).

Example::

    >>> from specviz.verification.zoo import stated_setting, zoo_effects
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

from ..core.sampling import SamplingParams, logits_to_probs, sample
from .base import (
    PREFIXES,
    VERIFIERS,
    Verdict,
    VerifierSpec,
    VerifyFn,
    _first_false,
    _gathered,
    _lossless_core,
)
from .trees import (
    LOSSLESS_TREE_RULES,
    SiblingRule,
    SiblingState,
    _norm,
    _remove,
    _start_p,
    chain_verifier,
    first_token_law_tree,
    tree_walk,
)

__all__ = ["ZooEffect", "first_token_law", "stated_setting", "zoo_effects"]


# -- the broken rules -----------------------------------------------------------------
def verify_always_accept(tokens, q_draft, p_target, generator) -> Verdict:
    k = tokens.numel()
    ones = torch.ones(k, device=p_target.device)
    nan = torch.full((k,), float("nan"), device=p_target.device)
    return Verdict(k, int(sample(p_target[k], generator)), "bonus", ones, nan, None)


def make_threshold(threshold: float = 0.5) -> VerifyFn:
    def verify_threshold(tokens, q_draft, p_target, generator) -> Verdict:
        _, p_x, q_x = _gathered(tokens, q_draft, p_target)
        ratio = p_x / q_x
        accept = torch.clamp(ratio, max=1.0)
        # Deterministic: accept iff the ratio clears the threshold (u fixed at the threshold).
        u = torch.full_like(accept, threshold)
        return _lossless_core(tokens, q_draft, p_target, generator, accept, u)

    return verify_threshold


def make_typical(epsilon: float = 0.3, delta: float = 0.09) -> VerifyFn:
    """Medusa typical acceptance: accept x if p(x) > min(epsilon, delta * exp(-H(p)))."""

    def verify_typical(tokens, q_draft, p_target, generator) -> Verdict:
        k = tokens.numel()
        _, p_x, _ = _gathered(tokens, q_draft, p_target)
        logp = torch.log(p_target[:k].clamp_min(1e-30))
        entropy = -(p_target[:k] * logp).sum(-1)
        cut = torch.clamp(delta * torch.exp(-entropy), max=epsilon)
        ok = p_x > cut
        n = _first_false(ok)
        nan = torch.full((k,), float("nan"), device=p_target.device)
        kind = "bonus" if n == k else "corrected"
        # Medusa resamples from the target alone at the first refusal.
        return Verdict(n, int(sample(p_target[n], generator)), kind, ok.float(), nan, p_target[n])

    return verify_typical


def _unchecked(residual_from_p: bool) -> VerifyFn:
    """The lossless formulas without the q_draft > 0 guard, as the buggy systems ran them:
    p/0 = inf accepts, 0/0 = NaN rejects."""

    def verify(tokens, q_draft, p_target, generator) -> Verdict:
        _, p_x, q_x = _gathered(tokens, q_draft, p_target)
        accept_prob = torch.clamp(p_x / q_x, max=1.0)
        u = torch.rand(tokens.numel(), generator=generator, device=p_target.device)
        return _lossless_core(tokens, q_draft, p_target, generator, accept_prob, u, residual_from_p)

    return verify


verify_residual_from_target = _unchecked(residual_from_p=True)
verify_ratio_unchecked = _unchecked(residual_from_p=False)

_BROKEN = [
    VerifierSpec(
        "always_accept",
        verify_always_accept,
        False,
        "drafts accepted without correction (cf. transformers PR #28508's match count)",
    ),
    VerifierSpec(
        "threshold",
        make_threshold(0.5),
        False,
        "accept iff p/q >= 0.5 instead of a uniform draw (approximate rule)",
    ),
    VerifierSpec(
        "typical",
        make_typical(),
        False,
        "Medusa typical acceptance, p(x) > min(0.3, 0.09*exp(-H)); lossy by design",
    ),
    VerifierSpec(
        "residual_from_target",
        verify_residual_from_target,
        False,
        "after a rejection resample from p instead of norm(max(0, p - q))",
    ),
    VerifierSpec(
        "greedy_draft_softmax_q",
        verify_ratio_unchecked,
        False,
        "draft proposes argmax but reports its softmax as q (transformers #32867)",
        draft_mode="argmax_softmax_q",
    ),
    VerifierSpec(
        "unprocessed_q",
        verify_ratio_unchecked,
        False,
        "draft samples after temperature/top-k/top-p but reports raw q (transformers #47932)",
        draft_mode="unprocessed_q",
    ),
    VerifierSpec(
        "draft_ignores_temperature",
        verify_ratio_unchecked,
        False,
        "draft sampled at T=1 while q and the target use T (cf. vLLM #9834)",
        draft_mode="ignores_temperature",
    ),
    VerifierSpec(
        "vocab_mismatch",
        verify_ratio_unchecked,
        False,
        "draft ids shifted for half the vocabulary; tokens translated, q not "
        "(what load_pair's vocabulary check refuses)",
        draft_mode="vocab_shift",
    ),
    VerifierSpec(
        "mixed_precision",
        verify_ratio_unchecked,
        False,
        "draft sampled from bf16 probabilities, ratio from fp32 (DeepSpec #31); a small "
        "bias that depends on logit magnitude (first-token TV 0.042 on the stated toy, "
        "0.017 on SmolLM2 at T=0.7: docs/bug_zoo.md)",
        draft_mode="bf16_sample",
    ),
]
for _spec in _BROKEN:
    VERIFIERS[_spec.name] = _spec


# -- the broken tree rules ------------------------------------------------------------------
# Each is a SiblingRule (acceptance given the siblings before, the law after a rejection), so
# the sampler and the exact first-token law below run the same code.

#: SGLang's TreeSpeculativeSamplingTargetOnly thresholds as shipped in the zoo member (lossless
#: only at 1.0 / 1.0).
SGLANG_THRESHOLD_ACC = 0.5
SGLANG_THRESHOLD_SINGLE = 1.0


def _sglang_rule(threshold_acc: float, threshold_single: float) -> SiblingRule:
    """One coin per level; accept x_i if coin <= prob_acc / threshold_acc (prob_acc: target
    mass of x_1..x_i) or p(x_i) >= threshold_single; final token from the target law without
    the tried candidates (relu(target - draft) with one-hot drafts)."""

    def start(p, qs):
        return SiblingState(p, extra={"p0": p, "acc": 0.0, "c": 0.0})

    def step(s, i, x, qs):
        p0, c_prev = s.extra["p0"], s.extra["c"]
        acc = s.extra["acc"] + float(p0[x])
        c = min(1.0, acc / threshold_acc)
        if float(p0[x]) >= threshold_single or c_prev >= 1.0:
            a = 1.0
        else:
            a = (c - c_prev) / (1.0 - c_prev)
        return a, SiblingState(_remove(s.p, x), extra={"p0": p0, "acc": acc, "c": c})

    return SiblingRule(f"sglang({threshold_acc},{threshold_single})", start, step, one_coin=True)


def _stale_step(s, i, x, qs):
    """SpecInfer's test with p never updated after a rejected sibling."""
    p0 = s.extra.get("p0", s.p)
    q = qs[i]
    a = min(1.0, float(p0[x]) / max(float(q[x]), 1e-30))
    return a, SiblingState(_norm(torch.clamp(p0 - q, min=0.0), p0), extra={"p0": p0})


def _unrenormalized_step(s, i, x, qs):
    """Without-replacement siblings tested against the original q (not q_i)."""
    q0 = s.extra.get("q0", qs[0])
    a = min(1.0, float(s.p[x]) / max(float(q0[x]), 1e-30))
    rejected = SiblingState(
        _norm(torch.clamp(s.p - s.q, min=0.0), s.p), _remove(s.q, x), {"q0": q0}
    )
    return a, rejected


TREE_ZOO = {
    "tree_threshold": (
        _sglang_rule(SGLANG_THRESHOLD_ACC, SGLANG_THRESHOLD_SINGLE),
        "deterministic",
        f"SGLang's tree kernel: one coin per level, accept if coin <= prob_acc / "
        f"{SGLANG_THRESHOLD_ACC} or p >= {SGLANG_THRESHOLD_SINGLE} (lossless only at thresholds 1)",
    ),
    "tree_stale_residual": (
        SiblingRule("stale_residual", _start_p, _stale_step),
        "independent",
        "independent drafts; p not updated after a rejected sibling",
    ),
    "tree_unrenormalized_q": (
        SiblingRule(
            "unrenormalized_q",
            lambda p, qs: SiblingState(p, qs[0].clone(), {"q0": qs[0]}),
            _unrenormalized_step,
        ),  # fmt: skip
        "without_replacement",
        "without-replacement siblings verified against the original q, not q_i",
    ),
    "tree_independent_rule_on_dependent_drafts": (
        LOSSLESS_TREE_RULES["independent"],
        "without_replacement",
        "the independent-draft rule applied to drafts drawn without replacement",
    ),
    "tree_ratio_on_deterministic": (
        LOSSLESS_TREE_RULES["independent"],
        "deterministic",
        "the p/q ratio used for top-k candidates (treating them as sampled; EAGLE #93-style)",
    ),
}


def _tree_spec(name: str, rule: SiblingRule, sampling: str, description: str) -> VerifierSpec:
    def verify_tree(tree, p_nodes, generator):
        return tree_walk(tree, p_nodes, generator, rule)

    verify_tree.__name__ = f"verify_{name}"
    return VerifierSpec(
        name, chain_verifier(verify_tree), False, description,
        verify_tree=verify_tree, tree_sampling=sampling,
    )  # fmt: skip


for _name, (_rule, _sampling, _desc) in TREE_ZOO.items():
    VERIFIERS[_name] = _tree_spec(_name, _rule, _sampling, _desc)


# -- their exact first-token laws -------------------------------------------------------

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
    gives exactly the target law ``p``. Mirrors the drafter modes of :mod:`specviz.drafters`
    and the rules of :mod:`specviz.verify` (``tests/test_zoo.py`` checks the mirror against the
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
        from ..drafting.modes import shifted_ids

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

    from ..stats import sample_size_for_laws, tv_distance

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
    from ..fixtures.toy import ToyLM, toy_pair

    target, draft = (
        ToyLM(m.table + 24.0, m.vocab_size, m.order, name=f"{m.name}+24")
        for m in toy_pair(8, 1, noise=0.5, seed=2)
    )
    return target, draft, (1,), SamplingParams(True, 0.6, 6, 0.95)


def tree_zoo_effects(
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor,
    params: SamplingParams,
    *,
    children: int = 3,
    alpha: float = 0.01,
    power: float = 0.9,
) -> Any:
    """Like :func:`zoo_effects` for the tree rules: the root has ``children`` candidates drawn
    from the draft's processed law the way each rule's drafter draws them (its
    ``tree_sampling``); the lossless rows apply the right rule to each sampling. Exact by
    enumeration of the sibling draws (:func:`~specviz.verification.trees.first_token_law_tree`),
    the same rule functions the sampler runs."""
    import pandas as pd

    from ..stats import sample_size_for_laws, tv_distance

    p = logits_to_probs(target_logits.float(), params).double()
    q = logits_to_probs(draft_logits.float(), params).double()
    rows = []
    cases = [(f"lossless[{s}]", LOSSLESS_TREE_RULES[s], s, True, "the lossless rule for " + s)
             for s in LOSSLESS_TREE_RULES]  # fmt: skip
    cases += [(n, r, s, False, d) for n, (r, s, d) in TREE_ZOO.items()]
    for name, rule, sampling, lossless, desc in cases:
        law = first_token_law_tree(rule, p, q, children, sampling)
        tv = float(tv_distance(p.numpy(), law.numpy()))
        if tv < 1e-7:  # float32 laws: anything smaller is rounding
            n1 = n2 = math.inf
            tv = 0.0
        else:
            pn, ln = p.numpy(), (law / law.sum()).numpy()
            n1 = sample_size_for_laws(pn, ln, alpha=alpha, power=power)
            n2 = sample_size_for_laws(pn, ln, alpha=alpha, power=power, two_sample=True)
        rows.append(dict(verifier=name, sampling=sampling, lossless=lossless, tv=tv,
                         n_one_sample=n1, n_two_sample=n2, mistake=desc))  # fmt: skip
    return pd.DataFrame(rows).set_index("verifier")


def stated_tree_setting() -> tuple[Any, Any, tuple[int, ...], SamplingParams]:
    """The toy on which specviz states the tree rules' effects: an 8-token context-free toy at
    temperature 1 without top-k / top-p (so a root can have three distinct sampled children),
    the draft the target plus unit logit noise (``toy_pair(8, 1, noise=1.0, seed=3)``)."""
    from ..fixtures.toy import toy_pair

    target, draft = toy_pair(8, 1, noise=1.0, seed=3)
    return target, draft, (1,), SamplingParams(True, 1.0)


def _sample_size_cells(row: Any) -> tuple[str, str]:
    """A table row's one- and two-sample sizes as table cells ("-" for a lossless rule)."""
    return tuple(
        "-" if math.isinf(n) else f"{int(n):,}" for n in (row.n_one_sample, row.n_two_sample)
    )


def markdown_table_trees(alpha: float = 0.01, power: float = 0.9, children: int = 3) -> str:
    """The stated tree table (docs/bug_zoo.md), on :func:`stated_tree_setting`, 3 children."""
    target, draft, context, params = stated_tree_setting()
    table = tree_zoo_effects(target.next_logits(context), draft.next_logits(context), params,
                             children=children, alpha=alpha, power=power)  # fmt: skip
    lines = [
        "| verifier | siblings drawn | first-token TV | n one-sample | n per arm, two-sample | mistake |",
        "|---|---|---:|---:|---:|---|",
    ]
    for name, row in table.iterrows():
        n1, n2 = _sample_size_cells(row)
        lines.append(f"| `{name}` | {row.sampling} | {row.tv:.4f} | {n1} | {n2} | {row.mistake} |")
    return "\n".join(lines)


def markdown_table(alpha: float = 0.01, power: float = 0.9) -> str:
    """The stated table (docs/bug_zoo.md): ``python -m specviz.zoo`` prints it."""
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


# -- the cross-vocabulary shortcuts -----------------------------------------------------------
# A draft with another tokenizer (specviz.drafting.cross_vocab) proposes through a map from its
# vocabulary to the target's; each shortcut gets the map or its law wrong. They need a
# CrossVocabDrafter (which honours the spec's draft_mode), so they resolve by name through
# PREFIXES and stay out of VERIFIERS, whose chain members every same-vocabulary zoo table, test
# and notebook runs with a model draft.

#: The stated cross-vocabulary toy: two small vocabularies that share "a", "b", "c" and " "; the
#: target also has "ab" and " a", the draft "ba" and " b" (so text moves token boundaries).
CROSS_VOCAB_TARGET_STRINGS = ("a", "b", "ab", "c", " a", " ")
CROSS_VOCAB_DRAFT_STRINGS = ("a", "b", "c", "ba", " b", " ")
#: ToyLM.random seeds of the stated target and draft (picked so every shortcut's TV is > 0.05).
CROSS_VOCAB_SEEDS = (5, 1)

CROSS_VOCAB_ZOO: dict[str, VerifierSpec] = {
    spec.name: spec
    for spec in [
        VerifierSpec(
            "vocab_map_unrenormalized",
            verify_ratio_unchecked,
            False,
            "token-level intersection without renormalising: q_draft restricted to the shared "
            "tokens keeps its lost mass (sampling renormalises silently), so p/q is inflated",
            draft_mode="vocab_map_unrenormalized",
        ),
        VerifierSpec(
            "vocab_map_by_id",
            verify_ratio_unchecked,
            False,
            "the drafted id passed to the target as the same number (q_draft translated by "
            "string): the token proposed is not the one whose q is reported",
            draft_mode="vocab_map_by_id",
        ),
        VerifierSpec(
            "vocab_map_lossy_strings",
            verify_ratio_unchecked,
            False,
            "tokens matched after stripping the leading-space marker ('Ġ'): different strings "
            "merge and each target id reports one draft string's q, not their sum",
            draft_mode="vocab_map_lossy_strings",
        ),
    ]
}


def _cross_vocab_spec(verifier: str) -> VerifierSpec:
    if verifier not in CROSS_VOCAB_ZOO:
        raise ValueError(
            f"unknown verifier {verifier!r}: the cross-vocabulary shortcuts take no parameter; "
            f"choose from {sorted(CROSS_VOCAB_ZOO)}"
        )
    return CROSS_VOCAB_ZOO[verifier]


for _name in CROSS_VOCAB_ZOO:
    PREFIXES[_name] = _cross_vocab_spec


def cross_vocab_first_token_law(
    verifier: str, target_logits: torch.Tensor, drafter: Any, context: Any, params: SamplingParams
) -> np.ndarray:
    """Exact law of the first token a speculative step emits with a cross-vocabulary drafter
    (:class:`~specviz.drafting.CrossVocabDrafter`) after ``context``, under ``"lossless"`` or a
    shortcut of :data:`CROSS_VOCAB_ZOO`: ``sum_x s(x) [a(x) delta_x + (1 - a(x)) r]`` with ``s``
    the law of the proposed target id and ``a``, ``r`` the ratio rule's acceptance and residual
    on the reported q. Both come from the drafter's own :meth:`~CrossVocabDrafter.laws`, the
    function its sampler runs."""
    if params.is_greedy:
        raise ValueError("cross_vocab_first_token_law is for sampling (do_sample=True)")
    if verifier != "lossless" and verifier not in CROSS_VOCAB_ZOO:
        raise ValueError(
            f"no cross-vocabulary first-token law for {verifier!r}; choose 'lossless' or one of "
            f"{sorted(CROSS_VOCAB_ZOO)}"
        )
    mode = "exact" if verifier == "lossless" else CROSS_VOCAB_ZOO[verifier].draft_mode
    s, reported = drafter.proposal_law(context, params, mode)
    p = logits_to_probs(target_logits.float(), params).double().cpu().numpy()
    s, reported = s.numpy(), reported.numpy()
    accept = _ratio_accept(p, reported)
    law = s * accept + (s * (1.0 - accept)).sum() * _residual(p, reported)
    return law / law.sum()


def cross_vocab_zoo_effects(
    target_logits: torch.Tensor,
    drafter: Any,
    context: Any,
    params: SamplingParams,
    *,
    alpha: float = 0.01,
    power: float = 0.9,
) -> Any:
    """Like :func:`zoo_effects` for the cross-vocabulary shortcuts (and the lossless rule):
    a DataFrame (index: verifier) of exact first-token TVs and the samples a test needs."""
    import pandas as pd

    from ..stats import sample_size_for_laws, tv_distance

    p = logits_to_probs(target_logits.float(), params).double().cpu().numpy()
    rows = []
    for name in ["lossless", *CROSS_VOCAB_ZOO]:
        law = cross_vocab_first_token_law(name, target_logits, drafter, context, params)
        tv = float(tv_distance(p, law))
        if tv < 1e-7:  # float32 laws: anything smaller is rounding
            n1 = n2 = math.inf
            tv = 0.0
        else:
            try:
                n1 = sample_size_for_laws(p, law, alpha=alpha, power=power)
                n2 = sample_size_for_laws(p, law, alpha=alpha, power=power, two_sample=True)
            except ValueError:  # beyond 1e10 samples: invisible in practice
                n1 = n2 = math.inf
        spec = VERIFIERS["lossless"] if name == "lossless" else CROSS_VOCAB_ZOO[name]
        rows.append(ZooEffect(name, spec.lossless, tv, n1, n2, spec.description))
    return pd.DataFrame([r.__dict__ for r in rows]).set_index("verifier")


def stated_cross_vocab_setting() -> tuple[Any, Any, tuple[int, ...], SamplingParams]:
    """The toy on which specviz states the cross-vocabulary shortcuts' effects: (target,
    intersection drafter, context, params). Order-2 toys over
    :data:`CROSS_VOCAB_TARGET_STRINGS` and :data:`CROSS_VOCAB_DRAFT_STRINGS`
    (6 tokens each), at temperature 1, context ``(0,)`` ("a")."""
    from ..drafting.cross_vocab import CrossVocabDrafter, StringTokenizer
    from ..fixtures.toy import ToyLM

    target_tok = StringTokenizer(CROSS_VOCAB_TARGET_STRINGS)
    draft_tok = StringTokenizer(CROSS_VOCAB_DRAFT_STRINGS)
    target = ToyLM.random(len(target_tok), 2, seed=CROSS_VOCAB_SEEDS[0])
    draft = ToyLM.random(len(draft_tok), 2, seed=CROSS_VOCAB_SEEDS[1])
    drafter = CrossVocabDrafter(draft, draft_tok, target_tok)
    return target, drafter, (0,), SamplingParams(True, 1.0)


def markdown_table_cross_vocab(alpha: float = 0.01, power: float = 0.9) -> str:
    """The stated cross-vocabulary table (docs/drafters.md), on :func:`stated_cross_vocab_setting`."""
    target, drafter, context, params = stated_cross_vocab_setting()
    table = cross_vocab_zoo_effects(target.next_logits(context), drafter, context, params,
                                    alpha=alpha, power=power)  # fmt: skip
    lines = [
        "| verifier | first-token TV | n one-sample | n per arm, two-sample | mistake |",
        "|---|---:|---:|---:|---|",
    ]
    for name, row in table.iterrows():
        n1, n2 = _sample_size_cells(row)
        lines.append(f"| `{name}` | {row.tv:.4f} | {n1} | {n2} | {row.mistake} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
    print()
    print(markdown_table_trees())
    print()
    print(markdown_table_cross_vocab())
