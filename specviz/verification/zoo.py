"""The bug zoo: deliberately broken verification rules, each a mistake a real system shipped.

The chain rules (:data:`BROKEN`), the tree rules (:data:`TREE_ZOO`, :data:`TREE_SPECS`) and the
cross-vocabulary shortcuts (:data:`CROSS_VOCAB_ZOO`); :mod:`specviz.verification.base` lists
them all by name. Their exact first-token laws, effect sizes and stated settings -- analysis
on top of the rules, with toys and statistics -- live in :mod:`specviz.effects`
(``python -m specviz.effects`` prints the stated tables of ``docs/bug_zoo.md``); their old
names here still resolve, with a DeprecationWarning, until specviz 0.5.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import torch

from ..core.sampling import sample
from .lossless import _first_false, _gathered, _lossless_core
from .trees import (
    LOSSLESS_TREE_RULES,
    SiblingRule,
    SiblingState,
    _norm,
    _remove,
    _start_p,
    chain_verifier,
    tree_walk,
)
from .verdict import Verdict, VerifierSpec, VerifyFn

__all__ = [
    "BROKEN",
    "CROSS_VOCAB_ZOO",
    "TREE_SPECS",
    "TREE_ZOO",
    "cross_vocab_spec",
    "make_threshold",
    "make_typical",
    "verify_always_accept",
    "verify_ratio_unchecked",
    "verify_residual_from_target",
]


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

#: The broken chain rules (listed in :data:`~specviz.verification.base.VERIFIERS`).
BROKEN: tuple[VerifierSpec, ...] = (
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
)
_BROKEN = list(BROKEN)  # the former name


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


#: The broken tree rules as specs, by name (listed in :data:`~specviz.verification.base.VERIFIERS`).
TREE_SPECS: dict[str, VerifierSpec] = {
    _name: _tree_spec(_name, _rule, _sampling, _desc)
    for _name, (_rule, _sampling, _desc) in TREE_ZOO.items()
}


# -- the cross-vocabulary shortcuts -----------------------------------------------------------
# A draft with another tokenizer (:mod:`specviz.drafting.cross_vocab`) proposes through a map from its
# vocabulary to the target's; each shortcut gets the map or its law wrong. They need a
# CrossVocabDrafter (which honours the spec's draft_mode), so they resolve by name through
# PREFIXES and stay out of VERIFIERS, whose chain members every same-vocabulary zoo table, test
# and notebook runs with a model draft.

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


def cross_vocab_spec(verifier: str) -> VerifierSpec:
    """The spec of a cross-vocabulary shortcut by name (each listed in
    :data:`~specviz.verification.base.PREFIXES`)."""
    if verifier not in CROSS_VOCAB_ZOO:
        raise ValueError(
            f"unknown verifier {verifier!r}: the cross-vocabulary shortcuts take no parameter; "
            f"choose from {sorted(CROSS_VOCAB_ZOO)}"
        )
    return CROSS_VOCAB_ZOO[verifier]


_cross_vocab_spec = cross_vocab_spec  # the former name


# -- names that moved to specviz.effects (issue 29) ---------------------------------------------
#: name -> its new module. The laws and effect sizes are analysis over the rules (they need the
#: toys, the statistics and the drafters), so they sit above verification; the old import path
#: resolves them on first use, through importlib as scipy's deprecated paths do, and warns.
_MOVED = {
    **dict.fromkeys(
        ("ZooEffect", "first_token_law", "markdown_table", "stated_setting", "zoo_effects"),
        "specviz.effects.zoo",
    ),
    **dict.fromkeys(
        ("markdown_table_trees", "stated_tree_setting", "tree_zoo_effects"),
        "specviz.effects.trees",
    ),
    **dict.fromkeys(
        (
            "CROSS_VOCAB_DRAFT_STRINGS",
            "CROSS_VOCAB_SEEDS",
            "CROSS_VOCAB_TARGET_STRINGS",
            "cross_vocab_first_token_law",
            "cross_vocab_zoo_effects",
            "markdown_table_cross_vocab",
            "stated_cross_vocab_setting",
        ),
        "specviz.effects.cross_vocab",
    ),
}


def __getattr__(name: str) -> Any:
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"specviz.verification.zoo.{name} moved to {home} and the old path will be removed in "
        f"specviz 0.5; import it from {home}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(home), name)


if __name__ == "__main__":  # ``python -m specviz.zoo``: the stated tables (docs/bug_zoo.md)
    importlib.import_module("specviz.effects.__main__").main([])
