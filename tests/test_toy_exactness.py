"""Exactness of speculative sampling on toy models with known, context-dependent laws.

Each lossless check is a Pearson chi-square at alpha = 0.001 with a fixed seed (so its
false-positive rate is 0.1% and the outcome is reproducible); each has a negative control --
a broken rule that must be rejected at p < 1e-6 with the same sample size.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch

import specviz as sv
from specviz.fixtures.toy import ToyLM
from specviz.stats import grouped_goodness_of_fit
from specviz.verification.base import VerifierSpec, _gathered, _lossless_core

ALPHA = 1e-3


pytestmark = pytest.mark.usefixtures("one_thread")


CONTROL_P = 1e-6
N = 20_000


def grouped_chisquare(groups: dict, law_of) -> float:
    return grouped_goodness_of_fit(groups, law_of).pvalue


def continuation_pvalue(
    target, draft, verifier, params, *, gamma, length, prompt=(0,), n=N, seed=0
):
    law = sv.exact_continuation_law(target, list(prompt), length, params)
    keys = sorted(law)
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys))
    g = torch.Generator().manual_seed(seed)
    impossible = 0
    for _ in range(n):
        r = sv.speculative_generate(
            target,
            draft,
            list(prompt),
            gamma=gamma,
            max_new_tokens=length,
            do_sample=True,
            temperature=params.temperature,
            top_k=params.top_k,
            top_p=params.top_p,
            seed=g,
            trace=False,
            verifier=verifier,
        )
        i = index.get(tuple(r.new_tokens))
        if i is None:
            impossible += 1
        else:
            counts[i] += 1
    if impossible:
        return 0.0
    expected = np.array([law[k] for k in keys])
    return grouped_chisquare({0: dict(enumerate(counts))}, lambda _: expected / expected.sum())


PAIR = sv.toy_pair(5, 2, noise=1.0, seed=0)
SETTINGS = {
    "T1": sv.SamplingParams(True, 1.0, None, None),
    "T0.7-k3-p0.9": sv.SamplingParams(True, 0.7, 3, 0.9),
}


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("gamma", [1, 3])
def test_continuation_law_is_exact(setting, gamma):
    p = continuation_pvalue(*PAIR, "lossless", SETTINGS[setting], gamma=gamma, length=3)
    assert p > ALPHA, f"lossless speculative sampling deviates from the exact law (p={p:.2e})"


@pytest.mark.parametrize(
    "verifier, setting",
    [
        ("always_accept", "T1"),
        ("threshold", "T1"),
        ("typical", "T1"),
        ("residual_from_target", "T1"),
        ("greedy_draft_softmax_q", "T1"),
        ("unprocessed_q", "T0.7-k3-p0.9"),
        ("draft_ignores_temperature", "T0.7-k3-p0.9"),
        ("vocab_mismatch", "T1"),
    ],
)
def test_broken_verifiers_are_caught(verifier, setting):
    p = continuation_pvalue(*PAIR, verifier, SETTINGS[setting], gamma=3, length=3, n=N)
    assert p < CONTROL_P, f"{verifier} should be rejected at n={N} but p={p:.3g}"


def test_point_mass_drafter_is_exact():
    """A deterministic drafter (no q) must be verified as a point mass."""

    class FixedDrafter:
        name = "fixed"

        def propose(self, context, k, generator):
            # Deterministic, context-dependent guess: (last token + 1) mod V, repeated.
            last = int(context[-1])
            return sv.Draft(torch.tensor([(last + 1 + i) % 5 for i in range(k)]), None)

        def feedback(self, num_accepted):
            pass

    target, _ = PAIR
    p = continuation_pvalue(target, FixedDrafter(), "lossless", SETTINGS["T1"], gamma=2, length=3)
    assert p > ALPHA


def _first_step_samples(target, draft, verifier, gamma, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        r = sv.speculative_generate(
            target,
            draft,
            [0],
            gamma=gamma,
            max_new_tokens=gamma + 1,
            do_sample=True,
            seed=g,
            verifier=verifier,
        )
        out.append(r.trace.steps[0])
    return out


def _residual_law(target, draft, context, params):
    p = target.next_probs(context, params)
    q = draft.next_probs(context, params)
    r = torch.clamp(p - q, min=0)
    return (r / r.sum()).numpy()


@pytest.mark.parametrize("verifier, ok", [("lossless", True), ("residual_from_target", False)])
def test_token_after_rejection_follows_the_residual(verifier, ok):
    target, draft = PAIR
    params = SETTINGS["T1"]
    groups: dict = collections.defaultdict(collections.Counter)
    for s in _first_step_samples(target, draft, verifier, gamma=3, n=N):
        if s.accepted < s.drafted:
            prefix = (0, *s.emitted[: s.accepted])
            groups[prefix][s.emitted[s.accepted]] += 1
    assert len({len(k) for k in groups}) == 3, "rejections at every draft position"
    p = grouped_chisquare(groups, lambda ctx: _residual_law(target, draft, list(ctx), params))
    assert (p > ALPHA) if ok else (p < CONTROL_P), p


def _bonus_off_by_one(tokens, q_draft, p_target, generator):
    """A plausible indexing bug: the bonus token drawn from p at the last *drafted* slot."""
    k = tokens.numel()
    _, p_x, q_x = _gathered(tokens, q_draft, p_target)
    acc = torch.clamp(p_x / q_x, max=1.0)
    u = torch.rand(k, generator=generator)
    v = _lossless_core(tokens, q_draft, p_target, generator, acc, u)
    if v.next_kind == "bonus":
        tok = int(torch.multinomial(p_target[k - 1], 1, generator=generator))
        return type(v)(k, tok, "bonus", v.accept_prob, v.u, None)
    return v


@pytest.mark.parametrize(
    "verifier, ok",
    [
        ("lossless", True),
        (VerifierSpec("bonus_off_by_one", _bonus_off_by_one, False, "test"), False),
    ],
)
def test_bonus_token_follows_the_target(verifier, ok):
    target, draft = PAIR
    params = SETTINGS["T1"]
    groups: dict = collections.defaultdict(collections.Counter)
    for s in _first_step_samples(target, draft, verifier, gamma=2, n=N):
        if s.accepted == s.drafted:
            groups[(0, *s.emitted[:-1])][s.emitted[-1]] += 1
    p = grouped_chisquare(groups, lambda ctx: target.next_probs(list(ctx), params).numpy())
    assert (p > ALPHA) if ok else (p < CONTROL_P), p


@pytest.mark.parametrize("verifier, ok", [("lossless", True), ("threshold", False)])
def test_accepted_count_is_truncated_geometric(verifier, ok):
    """Context-free models: N ~ alpha^n (1 - alpha) for n < gamma, alpha^gamma at gamma."""
    g = torch.Generator().manual_seed(3)
    target = ToyLM(torch.randn(1, 6, generator=g) * 1.5, 6, order=0)
    draft = ToyLM(target.table + torch.randn(1, 6, generator=g), 6, order=0)
    params = sv.SamplingParams(True)
    p, q = target.next_probs([], params), draft.next_probs([], params)
    alpha = float(torch.minimum(p, q).sum())
    gamma = 4
    law = [alpha**n * (1 - alpha) for n in range(gamma)] + [alpha**gamma]
    steps = _first_step_samples(target, draft, verifier, gamma=gamma, n=N)
    counts = collections.Counter(s.accepted for s in steps)
    pv = grouped_chisquare({0: counts}, lambda _: law)
    assert (pv > ALPHA) if ok else (pv < CONTROL_P), (alpha, counts, pv)
