"""Gamma policies: lossless live (toy exactness, SmolLM2 greedy identity), sane dynamics,
and an offline replay that reproduces live greedy runs exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import specviz as sv
from specviz.drafting import EarlyExitDrafter, ModelDrafter, PromptLookupDrafter
from specviz.drafting import policies as P
from specviz.lab import policy_lab
from specviz.perf.theory import VerifyCost
from specviz.stats import grouped_goodness_of_fit

ALPHA, CONTROL_P = 1e-3, 1e-6
PAIR = sv.toy_pair(5, 2, noise=1.0, seed=0)


pytestmark = pytest.mark.usefixtures("one_thread")


def _continuation_pvalue(make_policy, verifier, n, length=3, seed=0):
    target, draft = PAIR
    params = sv.SamplingParams(True, 1.0, None, None)
    law = sv.exact_continuation_law(target, [0], length, params)
    keys = sorted(law)
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys))
    g = torch.Generator().manual_seed(seed)
    policy = make_policy()  # one object across runs: its state carries over (start() resets)
    for _ in range(n):
        r = sv.speculative_generate(
            target,
            draft,
            [0],
            gamma=policy,
            max_new_tokens=length,
            do_sample=True,
            seed=g,
            trace=False,
            verifier=verifier,
        )
        i = index.get(tuple(r.new_tokens))
        if i is None:
            return 0.0
        counts[i] += 1
    expected = np.array([law[k] for k in keys])
    return grouped_goodness_of_fit({0: dict(enumerate(counts))}, lambda _: expected).pvalue


class _Alternating(P.ConstantGamma):
    """A policy that changes gamma every call, including plain steps (gamma 0)."""

    def __init__(self):
        super().__init__(2)
        self.name = "alternating"
        self.calls = 0

    def start(self):
        self.calls = 0

    def next_gamma(self):
        self.calls += 1
        return (0, 1, 3)[self.calls % 3]


POLICIES = {
    "heuristic": lambda: P.HeuristicGamma(1, max_gamma=3),
    "confidence": lambda: P.ConfidenceStop(3, threshold=0.5),
    "ema": lambda: P.AcceptanceEMA(3, c=0.3, prior=0.5),
    "alternating": _Alternating,
}


@pytest.mark.parametrize("name", list(POLICIES))
def test_live_policies_are_lossless_on_the_toy(name):
    p = _continuation_pvalue(POLICIES[name], "lossless", n=8000)
    assert p > ALPHA, f"{name}: continuation law deviates (p={p:.2e})"


def test_policy_does_not_hide_a_broken_verifier():
    """Negative control: the same harness rejects a lossy rule run under a policy."""
    p = _continuation_pvalue(POLICIES["heuristic"], "residual_from_target", n=8000)
    assert p < CONTROL_P, p


def test_greedy_identity_on_smollm2_with_policies(smollm2):
    model, tok = smollm2
    ids = tok("def fibonacci(n):\n    ", return_tensors="pt").input_ids
    want = sv.autoregressive_generate(model, ids, max_new_tokens=24).new_tokens
    cases = [
        (PromptLookupDrafter(), P.HeuristicGamma(2)),
        (PromptLookupDrafter(), P.AcceptanceEMA(6, c=0.0)),
        (EarlyExitDrafter(model, 24), P.ConfidenceStop(5, threshold=0.3)),
    ]
    for drafter, policy in cases:
        r = sv.speculative_generate(model, drafter, ids, gamma=policy, max_new_tokens=24)
        assert r.new_tokens == want, policy.name
        assert r.trace.meta["gamma_policy"] == policy.name


def test_heuristic_schedule():
    pol = P.HeuristicGamma(3, max_gamma=6)
    pol.start()
    seen = []
    for accepted_all in (True, True, False, False, False, False, False):
        g = pol.next_gamma()
        seen.append(g)
        pol.update(g, g if accepted_all else 0, 0.0, 0.0)
    assert seen == [3, 5, 6, 5, 4, 3, 2]
    pol.start()
    assert pol.next_gamma() == 3


def test_ema_falls_back_to_plain_decoding_and_recovers():
    pol = P.AcceptanceEMA(6, c=0.3, probe_every=4)
    assert pol.next_gamma() > 0
    for _ in range(30):  # nothing accepted: speculation cannot pay at c = 0.3
        pol.update(2, 0, 0.0, 0.0)
    plan = [pol.next_gamma() for _ in range(8)]
    assert plan.count(0) == 6 and plan.count(1) == 2, plan  # plain steps, probes every 4th
    for _ in range(30):
        pol.update(4, 4, 0.0, 0.0)
    assert pol.next_gamma() >= 3
    busy = P.AcceptanceEMA(6, c=0.0, prior=0.9, batch_size=16, max_batch=8)
    assert busy.next_gamma() == 0


def test_ema_measures_c_from_times():
    pol = P.AcceptanceEMA(6, weight=1.0)
    pol.update(0, 0, 0.0, 0.10)  # a plain step took 100 ms
    pol.update(4, 2, 0.08, 0.15)  # 20 ms per drafted token
    assert pol.c == pytest.approx(0.2)


def test_confidence_stop_needs_a_model_drafter():
    with pytest.raises(TypeError, match="model drafter"):
        sv.speculative_generate(
            PAIR[0], PromptLookupDrafter(), [0, 1], gamma=P.ConfidenceStop(3), max_new_tokens=4
        )


@pytest.mark.parametrize("bad", ["4", 0, 2.5, None])
def test_bad_gamma_is_refused(bad):
    with pytest.raises(ValueError, match="gamma must be an integer >= 1"):
        sv.speculative_generate(*PAIR, [0], gamma=bad, max_new_tokens=3)


def test_policy_returning_a_negative_gamma_is_refused():
    class Bad(P.ConstantGamma):
        def next_gamma(self):
            return -1

    with pytest.raises(ValueError, match="policy gamma"):
        sv.speculative_generate(*PAIR, [0], gamma=Bad(1), max_new_tokens=3)


@pytest.mark.parametrize(
    "make",
    [lambda: P.ConstantGamma(3), lambda: P.HeuristicGamma(2), lambda: P.ConfidenceStop(4, 0.45)],
)
def test_replay_reproduces_live_greedy_runs(make):
    """Greedy + model drafter: the teacher-forced record holds exact facts, so the replay's
    accepted counts equal the live run's, step by step."""
    target, draft = PAIR
    live = sv.speculative_generate(
        target, ModelDrafter(draft), [0], gamma=make(), max_new_tokens=60
    )
    record = policy_lab.record_teacher_forced(draft, [0], live.new_tokens)
    rep = policy_lab.replay(make(), record, policy_lab.ReplayCost(draft_step=0.1))
    assert rep.accepted_per_call == live.accepted_counts
    if not isinstance(make(), P.ConfidenceStop):  # see TokenRecord: confidence past a rejection
        assert rep.gammas == live.drafted_counts
    assert rep.accepted == sum(live.accepted_counts)
    # Negative control: a record with one flipped fact no longer reproduces the run.
    first_acc = next(i for i, a in enumerate(record.accept) if a == 1.0)
    flipped = list(record.accept)
    flipped[first_acc] = 0.0
    bad = policy_lab.replay(
        make(), policy_lab.TokenRecord(tuple(flipped), record.top_prob), policy_lab.ReplayCost(0.1)
    )
    assert bad.accepted_per_call != rep.accepted_per_call


def test_record_from_trace_and_compare():
    target, draft = PAIR
    live = sv.speculative_generate(
        target, draft, [0], gamma=3, max_new_tokens=50, seed=0, do_sample=True
    )
    record = policy_lab.record_from_trace(live.trace)
    assert len(record.accept) == 50
    assert all(0.0 <= a <= 1.0 for a in record.accept)
    rows = policy_lab.compare_policies(
        [1, 3, P.HeuristicGamma(2), P.AcceptanceEMA(6, c=0.1)], [record], policy_lab.ReplayCost(0.1)
    )
    assert [r["policy"] for r in rows][:2] == ["constant(1)", "constant(3)"]
    assert all(r["tokens"] == 50 for r in rows)


LOOKUP_PAIR = sv.toy_pair(8, 2, noise=1.0, seed=0)
LOOKUP_PROMPT = [0, 1, 2, 3, 1, 2]


def _lookup_run(gamma, n=60):
    target, _ = LOOKUP_PAIR
    return sv.speculative_generate(
        target, PromptLookupDrafter(), LOOKUP_PROMPT, gamma=gamma, max_new_tokens=n
    )


def test_trace_record_replays_empty_lookup_steps_as_plain_decode_steps():
    """Issue 27: prompt lookup drafts nothing where it finds no match, and live such a step is
    one plain decode step (v(1)). A replay of the same constant gamma from the run's own
    record must take the same steps and charge them the same: the old replay drafted gamma
    tokens at every step and paid a verify pass on gamma + 1 tokens there."""
    live = _lookup_run(4)
    assert 0 in live.drafted_counts and 4 in live.drafted_counts  # both kinds of step
    record = policy_lab.record_from_trace(live.trace)
    v = lambda n: 1.0 + 0.5 * (n - 1)  # noqa: E731 -- a verify pass that costs real time
    ns = tuple(range(1, 10))
    cost = policy_lab.ReplayCost(0.05, VerifyCost(ns, tuple(v(n) for n in ns), context=0))
    rep = policy_lab.replay(P.ConstantGamma(4), record, cost)
    assert rep.gammas == live.drafted_counts
    assert rep.accepted_per_call == live.accepted_counts
    want = sum(d * 0.05 + v(d + 1) for d in live.drafted_counts)
    assert rep.time == pytest.approx(want)


@pytest.mark.parametrize(
    "make",
    [
        lambda: P.ConstantGamma(1),
        lambda: P.ConstantGamma(3),
        lambda: P.ConstantGamma(6),
        lambda: P.HeuristicGamma(2, max_gamma=8),
        lambda: P.AcceptanceEMA(8, c=0.05),
    ],
)
def test_drafter_record_reproduces_live_lookup_runs(make):
    """A drafter that reads only the context (prompt lookup): its exact record gives every
    policy the live run's steps -- drafted and accepted counts, step by step, including the
    steps where it proposed nothing."""
    live = _lookup_run(make())
    record = policy_lab.record_from_drafter(
        PromptLookupDrafter(), LOOKUP_PROMPT, live.new_tokens, max_gamma=8
    )
    rep = policy_lab.replay(make(), record, policy_lab.ReplayCost(draft_step=0.05))
    assert rep.gammas == live.drafted_counts
    assert rep.accepted_per_call == live.accepted_counts
    with pytest.raises(ValueError, match="at most 8"):
        policy_lab.replay(P.ConstantGamma(9), record, policy_lab.ReplayCost(0.05))
