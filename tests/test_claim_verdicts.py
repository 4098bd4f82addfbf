"""The claim verdicts the notebooks print (issues 15 and 19): computed from the run, with a
stated 95% interval, and able to come out every way -- "supports ... at this size" when
the claim holds, "not supported" when the data say the reverse, "cannot tell at this size" when
the interval is too wide or there are too few prompts.

Claims 3 and 10 of notebook 03 (:func:`diminishing_returns`, :func:`first_rejection_excess`) on
synthetic per-prompt counts, and seeded runs of the real engine on toy pairs in which a claim is
not supported and the sentence says so.
"""

from __future__ import annotations

import numpy as np
import pytest

from specviz.lab.analysis import (
    CANNOT_TELL,
    NOT_SUPPORTED,
    SUPPORTS,
    diminishing_returns,
    first_rejection_excess,
    task_type_effect,
)
from specviz.lab.experiments import simulate_toy

HOLDS = "at this size"
CANNOT = "cannot tell at this size"


def _geometric(alpha: float, gamma: int, steps: int, rng: np.random.Generator) -> list[int]:
    """Accepted counts of ``steps`` full-gamma steps under i.i.d. acceptance ``alpha``."""
    out = []
    for _ in range(steps):
        n = 0
        while n < gamma and rng.random() < alpha:
            n += 1
        out.append(n)
    return out


def _prompts(make, n: int) -> dict[str, dict[int, list[int]]]:
    return {f"p{i}": make(i) for i in range(n)}


# -- claim 3 (03): tokens per call grow ever more slowly ---------------------------------------


def test_claim_3_holds_on_iid_acceptance():
    rng = np.random.default_rng(0)
    counts = _prompts(lambda i: {g: _geometric(0.6, g, 30, rng) for g in (2, 4)}, 6)
    v = diminishing_returns(counts)
    assert v.verdict == SUPPORTS and v.ci[1] < 0
    s = v.sentence()
    assert s.startswith("Claim 3: ") and f"supports claim 3 {HOLDS}" in s and "95% CI" in s
    assert "over 6 prompts" in s


def test_claim_3_reversed_prints_not_supported():
    # gamma 2 gains nothing, gamma 4 keeps everything: tokens per call grew faster than linearly
    counts = _prompts(lambda i: {2: [0, 0, 1, 0] * 5, 4: [4, 4, 3, 4] * 5}, 4)
    v = diminishing_returns(counts)
    assert v.verdict == NOT_SUPPORTED and v.ci[0] > 0
    assert f"claim 3 not supported {HOLDS}" in v.sentence()
    assert "grew at least linearly" in v.sentence()


def test_claim_3_too_noisy_or_too_small_cannot_tell():
    # two prompts that disagree, a handful of steps each: the interval straddles 0
    noisy = {"a": {2: [2, 2], 4: [4, 4]}, "b": {2: [0, 0], 4: [0, 0]}}
    v = diminishing_returns(noisy)
    assert v.verdict == CANNOT_TELL and CANNOT in v.sentence()
    one = diminishing_returns({"a": {2: [2, 1], 4: [3, 1]}})
    assert one.verdict == CANNOT_TELL and "at least 2" in one.sentence()
    single_gamma = diminishing_returns(_prompts(lambda i: {4: [1, 2, 3]}, 3))
    assert single_gamma.verdict == CANNOT_TELL and "at least 2" in single_gamma.reason


def test_claim_3_is_seeded():
    rng = np.random.default_rng(1)
    counts = _prompts(lambda i: {g: _geometric(0.7, g, 10, rng) for g in (2, 4, 6)}, 4)
    assert diminishing_returns(counts, seed=3).ci == diminishing_returns(counts, seed=3).ci


# -- claim 10 (03): an excess of first-position rejections -------------------------------------


def test_claim_10_excess_is_reported():
    # half the steps reject the first draft, the rest keep all three: far from geometric
    counts = _prompts(lambda i: {3: [0, 3] * 10}, 5)
    v = first_rejection_excess(counts)
    assert v.verdict == SUPPORTS and v.ci[0] > 0
    assert f"supports claim 10 {HOLDS}" in v.sentence()
    assert "shorten gamma or change the drafter" in v.sentence()


def test_claim_10_reversed_prints_not_supported():
    # every step keeps exactly one draft: never a first-position rejection, law says 50%
    v = first_rejection_excess(_prompts(lambda i: {3: [1] * 12}, 4))
    assert v.verdict == NOT_SUPPORTED and v.estimate == pytest.approx(-0.5)
    assert f"claim 10 not supported {HOLDS}" in v.sentence()


def test_claim_10_cannot_tell_on_few_steps():
    v = first_rejection_excess({"a": {3: [0, 3]}, "b": {3: [1, 2]}})
    assert v.verdict == CANNOT_TELL and CANNOT in v.sentence()
    assert first_rejection_excess({"a": {3: [0, 0, 3]}}).verdict == CANNOT_TELL


def test_claim_10_on_a_seeded_iid_run_is_not_supported():
    """The toy control of 03: acceptance i.i.d. by construction, through the real engine; the
    excess is not there, and the sentence does not claim it."""
    sims = {g: simulate_toy(1.0, 0.7, g, tokens=300) for g in (2, 4)}
    steps = {f"{g}:{i}": {g: [a]} for g, s in sims.items() for i, a in enumerate(s.accepted)}
    v = first_rejection_excess(steps, unit="step")
    assert v.verdict != SUPPORTS
    assert v.ci[0] < 0 < v.ci[1] or v.verdict == NOT_SUPPORTED
    assert "over" in v.sentence() and "steps" in v.sentence()


# -- claim 2: a seeded run in which it is reversed ---------------------------------------------


def test_claim_2_reversed_on_seeded_toy_runs_prints_not_supported():
    """ "Formatted" prompts drafted by a noisy toy draft, "open writing" by an accurate one, each
    prompt one seeded generation through the real engine: the verdict says not supported."""

    def prompt(noise: float, seed: int) -> tuple[int, int]:
        s = simulate_toy(noise, 1.0, 3, tokens=120, seed=seed)
        return sum(s.accepted), sum(min(a + 1, 3) for a in s.accepted)

    weak = [prompt(3.0, s) for s in (1, 3, 5)]
    strong = [prompt(0.3, s) for s in (1, 3, 5)]
    e = task_type_effect(weak, strong, drafter="toy")
    assert e.verdict == NOT_SUPPORTED and e.ci[1] < 0
    assert "claim 2 not supported at this size" in e.sentence()
    assert task_type_effect(strong, weak, drafter="toy").verdict == SUPPORTS


# -- issue 27 (rereview 03): a fall is not slower growth; claim 10 per category; the clock -----


def test_claim_3_a_fall_in_tokens_per_call_is_not_support():
    """03's structured cell: tokens per call 1.74 -> 1.69 -> 1.57 over gammas 2/4/6 (each gamma's
    run sampled its own texts). The second difference is negative -- the old rule said
    "supports" -- but tokens per call fell, which slower growth is not."""
    counts = _prompts(
        lambda i: {2: [1, 1, 0, 2, 1] * 6, 4: [1, 0, 2, 1, 0] * 6, 6: [0, 1, 0, 2, 0] * 6}, 5
    )
    v = diminishing_returns(counts)
    assert v.estimate < 0 and v.ci[1] < 0  # the second difference alone: "supports"
    assert v.verdict == CANNOT_TELL
    assert "tokens per call fell from gamma 2 to 4" in v.reason
    assert "acceptance differed between the gamma runs (gamma 2: " in v.reason
    assert "supports" not in v.sentence()


def test_claim_3_growth_inside_the_noise_is_not_support():
    # prompt by prompt, gamma 6 gains over gamma 4 for half the prompts and loses for the other
    # half: the pooled gain is positive but its interval holds 0 -- no growth shown at that step
    up = {2: [2, 2, 1, 2] * 8, 4: [3, 2, 2, 3] * 8, 6: [4, 3, 2, 4] * 8}
    down = {2: [2, 2, 1, 2] * 8, 4: [3, 2, 2, 3] * 8, 6: [2, 2, 2, 2] * 8}
    counts = {f"p{i}": (up if i % 2 else down) for i in range(6)}
    v = diminishing_returns(counts)
    assert v.verdict == CANNOT_TELL
    assert "did not grow beyond the noise" in v.reason


def test_claim_10_per_category_does_not_inherit_the_pooled_cue():
    from specviz.lab.analysis import first_rejection_share, per_group_verdicts

    heavy = {f"h{i}": {2: [0, 0, 0, 0, 0, 2]} for i in range(10)}
    light = {f"c{i}": {2: [0, 2, 1, 2, 2, 1]} for i in range(3)}
    counts = {**heavy, **light}
    assert first_rejection_share(counts).verdict == SUPPORTS  # pooled: the cue fires
    cat = {u: ("heavy" if u.startswith("h") else "code") for u in counts}
    vs = per_group_verdicts(first_rejection_share, counts, cat)
    assert vs["heavy"].verdict == SUPPORTS
    assert vs["code"].verdict == NOT_SUPPORTED
    assert vs["code"].sentence().startswith("Claim 10 (code): ")
    assert "no cue to shorten gamma here" in vs["code"].sentence()


def test_gamma_speed_ratio_says_inside_the_noise():
    from specviz.lab.analysis import gamma_speed_ratio

    # math at gamma 2 vs 6 on the page: 12.1 vs 11.7 median tok/s, prompts either way
    sp = {"m0": {2: 12.1, 6: 11.7}, "m1": {2: 10.5, 6: 11.9}, "m2": {2: 12.6, 6: 11.5},
          "m3": {2: 11.0, 6: 11.8}, "m4": {2: 12.3, 6: 11.6}}  # fmt: skip
    r = gamma_speed_ratio(sp, 2, 6)
    assert r.verdict == "inside the noise" and r.ci[0] < 1 < r.ci[1]
    assert "95% CI " in r.phrase() and "over 5 prompts" in r.phrase()
    fast = {f"s{i}": {2: 13.0 + 0.2 * i, 6: 9.9} for i in range(5)}
    assert gamma_speed_ratio(fast, 2, 6).verdict == "gamma 2 faster"
    assert gamma_speed_ratio(fast, 6, 2).verdict == "gamma 2 faster"
    two = gamma_speed_ratio({"a": {2: 10.0, 6: 9.0}, "b": {2: 11.0, 6: 9.5}}, 2, 6)
    assert "range " in two.phrase() and "too few for a 95% interval" in two.phrase()
