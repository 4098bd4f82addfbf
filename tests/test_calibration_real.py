"""consistency_check and its tests, calibrated on real transformers models (issue 13).

The toys of ``test_consistency.py`` share none of a transformer's numerics. Here the models
are tiny random ``LlamaForCausalLM`` pairs (:mod:`specviz.tiny_llama`): real attention, real
KV caches, a (k+1)-token verify pass in one arm against 1-token decode passes in the other.

False-positive rates, stated per test:

* calibration: each (prompt, test) row must have its rejection count at alpha = 0.05 inside
  the central 99% binomial interval over 200 null replicates (a calibrated test fails this
  with probability ~1%; about ten rows per setting), and the verdict's false alarms at
  alpha = 0.01 must stay under their 99% bound. Fixed seeds make every run identical;
* the negative controls must fail: a broken verifier through the same harness comes out
  uncalibrated, and the raw per-arm log-probabilities (what the report used before) reject
  a correct sampler at the check's alpha = 0.01 (how far below depends on the kernels: the
  arms' float drift is what splits the atoms; p 2e-7 with SDPA in both arms, 2e-4 since
  the batched verify attends with two matmuls);
* the bug zoo at its stated size on this pair: >= 15 of 20 seeded replicates reject at
  alpha = 0.01 (a true 90% power falls below 15/20 with probability 1.1%).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specviz import stats
from specviz.checks import calibrate_check, consistency_check, greedy_check
from specviz.core.sampling import SamplingParams
from specviz.decoding import autoregressive_generate_batch, speculative_generate_batch
from specviz.effects.zoo import zoo_effects
from specviz.fixtures.llamas import tiny_llama_pair
from specviz.fixtures.toy import exact_continuation_law

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = [2, 5, 1]
SETTINGS = [
    dict(temperature=1.0),
    dict(temperature=0.7),
    dict(top_k=4),
    dict(top_p=0.8),
]


@pytest.fixture(scope="module")
def pair7():
    return tiny_llama_pair(7, seed=0, peak=8.0)


@pytest.mark.parametrize("setting", SETTINGS, ids=str)
def test_the_reported_case_is_consistent_and_its_old_failure_is_the_control(pair7, setting):
    """The issue's call: vocabulary 7, 1500 samples, 2 new tokens, four sampling settings."""
    target, draft = pair7
    report = consistency_check(
        target,
        draft,
        [PROMPT],
        n_samples=1500,
        max_new_tokens=2,
        do_sample=True,
        verifier="lossless",
        progress=False,
        **setting,
    )
    assert report.verdict == "consistent", report.summary()
    assert {"logprob KS", "logprob AD"} <= set(report.tests.test)
    # the drift is reported, and it is float noise
    (numerics,) = report.numerics
    assert numerics.shared > 0 and 0 <= numerics.max_gap < 1e-4, numerics
    assert "numerics: up to" in report.summary()

    # The samples themselves follow the exactly enumerated law of the target ...
    kw = dict(max_new_tokens=2, do_sample=True, record=True, **setting)
    spec = speculative_generate_batch(target, draft, PROMPT, num_sequences=1500, seed=7, **kw)
    std = autoregressive_generate_batch(target, PROMPT, num_sequences=1500, seed=8, **kw)
    params = SamplingParams(True, **setting)
    law = exact_continuation_law(target, PROMPT, 2, params)
    outcomes = sorted(law)
    counts = [sum(tuple(s) == o for s in spec.sequences) for o in outcomes]
    assert sum(counts) == 1500
    assert stats.goodness_of_fit(counts, [law[o] for o in outcomes]).pvalue > 1e-3
    # ... while the raw per-arm log-probabilities split every atom in two: the old KS input.
    raw = [np.log(np.asarray(r.token_probs, dtype=float)).sum(1) for r in (spec, std)]
    assert stats.ks_2sample(*raw).pvalue < 0.01


CALIBRATION = {
    "V7-T0.7-eos": (7, dict(max_new_tokens=3, temperature=0.7, eos_token_id=3)),
    "V50-topk-topp": (50, dict(max_new_tokens=3, temperature=0.9, top_k=20, top_p=0.8)),
}


@pytest.mark.parametrize("name", sorted(CALIBRATION))
def test_every_test_of_the_report_is_calibrated_on_a_tiny_llama(name):
    vocab, setting = CALIBRATION[name]
    target, draft = tiny_llama_pair(vocab, seed=1, peak=6.0)
    cal = calibrate_check(
        target,
        draft,
        [PROMPT],
        replicates=200,
        seed=3,
        n_samples=300,
        batch_size=300,
        n_boot=20,
        **setting,
    )
    assert cal.calibrated, cal.summary() + "\n" + cal.table.to_string()
    names = set(cal.table.test)
    assert {"token@0", "continuation", "logprob KS", "logprob AD", "PIT uniformity"} <= names
    if "eos_token_id" in setting:
        assert "length KS" in names


def test_the_calibration_harness_catches_a_broken_verifier():
    target, draft = tiny_llama_pair(7, seed=1, peak=6.0)
    cal = calibrate_check(
        target,
        draft,
        [PROMPT],
        replicates=30,
        seed=3,
        n_samples=300,
        batch_size=300,
        n_boot=20,
        max_new_tokens=2,
        top_k=4,
        verifier="residual_from_target",
    )
    assert not cal.calibrated
    assert cal.false_alarms >= 20, cal.summary()


@pytest.mark.parametrize(
    "verifier", ["always_accept", "typical", "residual_from_target", "unprocessed_q"]
)
def test_broken_verifiers_are_caught_at_their_stated_size_on_a_tiny_llama(pair7, verifier):
    """The stated size: zoo_effects' two-sample n for 90% power at alpha = 0.01 on this pair's
    exact first-token laws (what a user planning a check would compute)."""
    target, draft = pair7
    params = SamplingParams(True, 0.7, 4, 0.8)
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        effects = zoo_effects(target(ids).logits[0, -1], draft(ids).logits[0, -1], params)
    n = int(effects.loc[verifier, "n_two_sample"])
    assert 10 <= n <= 2000, effects
    hits = 0
    for seed in range(20):
        report = consistency_check(
            target,
            draft,
            [PROMPT],
            n_samples=n,
            max_new_tokens=2,
            temperature=0.7,
            top_k=4,
            top_p=0.8,
            verifier=verifier,
            seed=seed,
            n_boot=20,
            progress=False,
        )
        hits += float(report.tests.set_index("test").loc["token@0", "pvalue"]) < 0.01
    assert hits >= 15, (verifier, n, hits)


def test_greedy_check_on_tiny_llamas_never_blames_the_lossless_rule():
    prompts = [
        [int(x) for x in np.random.default_rng(i).integers(0, 20, size=4)] for i in range(12)
    ]
    for seed in (0, 1):
        target, draft = tiny_llama_pair(20, seed=seed, peak=6.0)
        lossless = greedy_check(target, draft, prompts, max_new_tokens=12, progress=False)
        assert lossless.verdict in ("identical", "numerics"), lossless.result
        broken = greedy_check(
            target, draft, prompts, max_new_tokens=12, verifier="always_accept", progress=False
        )
        assert broken.verdict == "bug", broken.result
