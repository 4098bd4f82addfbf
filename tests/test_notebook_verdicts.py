"""The verdicts notebooks 06-12 print (issue 27), computed in the package: each rule can come
out either way, and each wrong number of the review has a case here that would have caught it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from specviz.lab import checklist
from specviz.lab.verdicts import (
    claim7_verdict,
    coverage_verdict,
    exactness_lines,
    first_token_tv_note,
    next_gamma,
    ratio_verdict,
    speedup_verdict,
)
from specviz.load import find_crossover
from specviz.verification.trees import LOSSLESS_TREE_RULES, rejectable_candidates, sibling_walk

# -- ratios with an interval over prompts (11's chain vs tree, 11/12's wall clock) -------------


def test_ratio_verdict_comes_out_every_way():
    calls = {"tokens": [20, 24, 22, 18], "calls": [10, 12, 11, 9]}  # 2 tokens per call
    better = {"tokens": [20, 24, 22, 18], "calls": [5, 6, 5, 5]}
    assert ratio_verdict(better, calls, claim="Claim 1", statistic="x").verdict == "supports"
    assert ratio_verdict(calls, better, claim="Claim 1", statistic="x").verdict == "not supported"
    mixed = {"tokens": [20, 24, 22, 18], "calls": [5, 14, 6, 12]}
    assert ratio_verdict(mixed, calls, claim="Claim 1", statistic="x").verdict == "cannot tell"
    one = ratio_verdict({"t": [20], "c": [5]}, {"t": [20], "c": [10]}, claim="C", statistic="x")
    assert one.verdict == "cannot tell" and math.isnan(one.ci[0])
    assert "an interval needs at least 2" in one.sentence()


def test_speedup_needs_to_clear_the_noise_floor():
    plain = {"tokens": [24, 24, 24], "seconds": [2.0, 2.1, 1.9]}
    spec = {"tokens": [24, 24, 24], "seconds": [1.8, 1.85, 1.75]}  # ~1.1x
    assert speedup_verdict(plain, spec, claim="Claim 1", label="tree").verdict == "supports"
    v = speedup_verdict(plain, spec, claim="Claim 1", label="tree", margin=0.2)
    assert v.verdict == "cannot tell" and "over plain decoding" in v.sentence()


# -- 11: the residual walk shows only possible events -----------------------------------------


@pytest.mark.parametrize("rule", sorted(LOSSLESS_TREE_RULES))
def test_residual_walk_rejects_only_what_can_be_rejected(rule):
    """Issue 27: the without-replacement panel 'rejected' a candidate accepted with
    probability 1. Every candidate picked for the walk has acceptance probability < 1."""
    for seed in range(6):
        g = torch.Generator().manual_seed(seed)
        p = torch.softmax(torch.randn(6, generator=g) * 1.3, -1)
        q = torch.softmax(torch.randn(6, generator=g) * 1.3, -1)
        toks = rejectable_candidates(LOSSLESS_TREE_RULES[rule], p, q, 3)
        walk = sibling_walk(LOSSLESS_TREE_RULES[rule], p, q, toks)
        assert toks and all(a < 1.0 for a in walk.accept_probs), (seed, toks)
        assert any(0.0 < a for a in walk.accept_probs)  # at least one real decision
    # the review's hand-picked walk had an impossible rejection: the check sees it
    g = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(6, generator=g) * 1.3, -1)
    q = torch.softmax(torch.randn(6, generator=g) * 1.3, -1)
    old = sibling_walk(LOSSLESS_TREE_RULES["without_replacement"], p, q, [1, 3, 0])
    assert max(old.accept_probs) == 1.0


# -- 11 / 12: exactness tables ------------------------------------------------------------------


def _exact(rejected_lossless=False, missed=False):
    return pd.DataFrame(
        dict(
            lossless=[True, False, False, False],
            rejected=[rejected_lossless, True, False, not missed and False],
            pvalue=[0.4, 1e-9, 0.3, 0.5],
            first_token_tv=[0.0, 0.12, 0.001, 0.2],
            n_needed=[math.inf, 300, 1e7, 100],
        ),
        index=["lossless", "big", "tiny", "obvious"],
    )


def test_exactness_lines_name_each_outcome():
    lines = exactness_lines(_exact(), 2000, 1e-3)
    text = "\n".join(lines)
    assert "- big: caught" in text and "- tiny: not caught at this size" in text
    assert "- obvious: NOT caught although 2000 samples should suffice" in text
    assert "supports claim 6 at this size" in text and "TV 0.120" in text
    assert "supports claim 9 for 1 of 3 shortcuts" in text and "a miss although" in text
    bad = "\n".join(exactness_lines(_exact(rejected_lossless=True), 2000, 1e-3))
    assert "contradicts claim 6" in bad


# -- 06: who changed the greedy text -----------------------------------------------------------


def _greedy_rows(spec_verdict="identical", precision_differs=True):
    rows = [
        dict(prompt="a", dtype="bf16", drafter="plain", identical=not precision_differs,
             margin=0.03 if precision_differs else None, verdict="numerics"),
        dict(prompt="a", dtype="fp32", drafter="lookup", identical=True, margin=None,
             verdict="identical"),
        dict(prompt="a", dtype="bf16", drafter="lookup", identical=spec_verdict == "identical",
             margin=None if spec_verdict == "identical" else 2.5, verdict=spec_verdict),
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_claim7_separates_speculation_from_precision():
    lines = claim7_verdict(_greedy_rows())
    assert "supports claim 7: speculation itself never changed" in lines[0]
    assert "supports claim 7's condition: numerics alone" in lines[1]
    lines = claim7_verdict(_greedy_rows(spec_verdict="bug", precision_differs=False))
    assert "contradicts claim 7" in lines[0] and "cannot tell at this size" in lines[1]


def test_claim7_a_near_tie_divergence_is_not_never_changed():
    """A speculative divergence at a near tie changed the text: the line must not say that
    speculation never did (the old wording did), and it names where."""
    (line, _) = claim7_verdict(_greedy_rows(spec_verdict="numerics"))
    assert "never changed" not in line and "supports claim 7's condition" in line
    assert "bf16 lookup on a (margin 2.5)" in line and "0 of 2 runs identical" not in line


def _with_chances(table, within, flips):
    return table.assign(verify_gap=0.5, within_gap=within, verify_flips=flips, decisions=8)


def test_claim7_identity_is_a_test_only_where_rounding_could_flip_a_decision():
    """Identical texts with no decision within the verify-vs-decode gap decide nothing
    (cannot tell); with such decisions they support the identity; the direct measurement is
    printed per precision, deduplicated over drafters."""
    from specviz.lab.verdicts import read_verdict

    none = claim7_verdict(_with_chances(_greedy_rows(), within=0, flips=0))
    assert read_verdict(none[0]) == "cannot tell" and "largest 0.5" in none[0]
    some = claim7_verdict(_with_chances(_greedy_rows(), within=3, flips=0))
    assert read_verdict(some[0]) == "supports" and "; 6 greedy decisions" in some[0]  # 2 dtypes
    detail = [x for x in some if "verify vs decode" in x]
    assert [x.split(" (")[1][:4] for x in detail] == ["fp32", "bf16"]
    assert "3 of 8 greedy decisions" in detail[1] and "flipped at 0" in detail[1]
    assert read_verdict(detail[1]) is None  # a measurement, not a verdict


# -- 12: coverage per task with an interval -----------------------------------------------------


def test_coverage_verdict_depends_on_the_spread_between_tasks():
    rng = np.random.default_rng(0)
    rows = []
    for ci, (cat, mu) in enumerate([("code", 0.6), ("chat", 0.95), ("math", 0.9)]):
        for pi in range(3):
            for pos in range(10):
                rows.append(dict(category=cat, prompt=ci * 3 + pi, position=pos,
                                 coverage=float(np.clip(mu + rng.normal(0, 0.02), 0, 1))))  # fmt: skip
    table, line = coverage_verdict(pd.DataFrame(rows))
    assert "supports claim 2" in line and table.loc["code", "prompts"] == 3
    assert table.loc["code", "low"] < table.loc["code", "mean_coverage"]
    flat = pd.DataFrame(rows).assign(coverage=0.9)
    assert "cannot tell" in coverage_verdict(flat)[1]
    single = pd.DataFrame(rows)[lambda d: d.prompt % 3 == 0]
    assert "needs at least 2 prompts" in coverage_verdict(single)[1]


# -- 10: the plug-in TV's bias, the next gamma, and one load decision per family ---------------


class _Report:
    def __init__(self, a, b):
        self.first_token_counts = (list(range(len(a))), a, b)
        self.tv = pd.DataFrame([dict(position=0, estimate=0.35, low=0.19, high=0.43)])


def _tv_numbers(note):
    """(plug-in, corrected, low, high) as the note prints them."""
    plug = float(note.split("plug-in estimate ")[1].split(",")[0])
    corr = float(note.split("bootstrap bias-corrected estimate ")[1].split(" ")[0])
    lo, hi = note.split("95% basic bootstrap interval [")[1].split("]")[0].split(", ")
    return plug, corr, float(lo), float(hi)


def test_first_token_tv_note_states_the_bias_of_a_small_sample():
    """Issue 27: 'TV estimate 0.350 [0.191, 0.433]' beside 'inconclusive' read as a bug. Two
    samples of one law at 60 each: the note says identical samplers show about as much."""
    rng = np.random.default_rng(1)
    law = np.full(12, 1 / 12)
    a, b = rng.multinomial(60, law), rng.multinomial(60, law)
    note = first_token_tv_note(_Report(a, b))
    est = 0.5 * np.abs(a / 60 - b / 60).sum()
    null = float(note.split("two identical samplers show ")[1].split(" ")[0])
    assert null > 0.15 and abs(est - null) < 0.15  # the plug-in sits in its own null band
    assert "The test's outcome decides" in note and "this plug-in is below that" in note
    plug, corr, lo, hi = _tv_numbers(note)
    assert plug == pytest.approx(est, abs=5e-4)
    assert lo <= corr <= hi  # the corrected estimate lies in its own interval


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ([500, 300, 200], [420, 330, 250]),  # plug-in 0.080, as 10's committed report
        ([81, 90, 70, 79, 85, 95, 80, 76, 88, 82, 90, 84], [84] * 12),  # near-identical
    ],
)
def test_first_token_tv_note_prints_each_estimate_inside_its_own_interval(a, b):
    """Wrong numbers 6 and 7 of the issue-27 review: "plug-in estimate 0.081 (95% bootstrap
    interval [0.013, 0.080]) ... bias-corrected estimate 0.000" put both estimates outside the
    interval beside them, and called two different corrections "bias-corrected". Now the
    interval belongs to the one estimate named with it, and each number is named by what it
    is: the plug-in carries no interval, only the bootstrap bias-corrected estimate does."""
    note = first_token_tv_note(_Report(np.array(a), np.array(b)))
    plug, corr, lo, hi = _tv_numbers(note)
    assert lo <= corr <= hi
    assert note.count("bias-corrected") == 1  # one correction, one name
    assert "plug-in estimate" in note and corr <= plug + 1e-9


def test_first_token_tv_note_on_a_real_difference():
    """Negative case: a first-token TV of 0.3 at 1,000 per arm: the plug-in is above the
    identical samplers' 95% point and the corrected estimate's interval excludes 0."""
    a, b = np.array([650, 200, 150]), np.array([350, 350, 300])
    note = first_token_tv_note(_Report(a, b))
    plug, corr, lo, hi = _tv_numbers(note)
    assert plug == pytest.approx(0.3) and "this plug-in is above that" in note
    assert 0.2 < lo <= corr <= hi < 0.4


def test_next_gamma_needs_enough_drafted_tokens():
    few = next_gamma(13, 16, 0.05, gamma=2)
    assert few.suggested is None and "fewer than the 100" in few.sentence()
    many = next_gamma(130, 160, 0.05, gamma=2)
    assert many.suggested == 8 and many.across[0] <= 8
    assert "suggested gamma: 8" in many.sentence()


def test_next_gamma_is_not_the_edge_of_a_range():
    """Issue-27 leftover: next_gamma took the best gamma over 1..8, so any acceptance high
    enough printed "suggested gamma: 8" -- the range's edge. It is now searched until theory's
    prediction turns down, and a best gamma at the search cap reads "at least"."""
    from specviz.perf import theory

    high = next_gamma(150, 160, 0.05, gamma=2)
    assert high.suggested == theory.search_optimal_gamma(150 / 160, 0.05).gamma > 8
    assert next_gamma(150, 160, 0.05, gamma=2, max_gamma=8).suggested == 8  # the old answer
    s = theory.speedup
    assert s(150 / 160, high.suggested, 0.05) > s(150 / 160, 8, 0.05)
    capped = next_gamma(1599, 1600, 0.0, gamma=2)
    assert capped.suggested == theory.GAMMA_SEARCH_CAP
    assert f"suggested gamma: at least {theory.GAMMA_SEARCH_CAP}" in capped.sentence()


def test_load_advice_is_one_decision_per_family_and_claim12_needs_a_boundary():
    """The review's 10: throughput paid at every load, TTFT lost at every load, every
    category speculated -- printed as '[OK] paid up to 2 clients' next to '[WARN] keep
    speculation off' and a claim-12 'supported'. A family that loses everywhere is a
    choice, not a fallback boundary: claim 12 is not supported by it."""
    table = pd.DataFrame(dict(category=["a", "b"], gamma=[2, 2], speedup=[1.16, 1.13],
                              acceptance=[0.8, 0.7], tokens_per_call=[2.4, 2.2],
                              first_rejection_share=[0.1, 0.2]))  # fmt: skip
    xs = [
        find_crossover([1, 2], [1.23, 2.59], metric="throughput_tok_s", scenario="concurrency"),
        find_crossover([1, 2], [0.79, 0.5], metric="ttft_p50", scenario="concurrency"),
    ]
    adv = checklist.advise(table, crossovers=xs)
    load_items = [a for a in adv if a.scope == "load"]
    assert len(load_items) == 1
    assert load_items[0].action == (
        "throughput-first: speculate at every tested load (up to 2 concurrent clients); "
        "latency-first: keep speculation off (it lost at every tested load, and gained on none)"
    )
    v = checklist.claim12_verdict(adv)
    assert v.status == "not supported" and "no boundary inside the tested range" in v.reason
    # within a 30% noise floor the throughput gain at 1 client decides nothing
    noisy = checklist.advise(table, crossovers=xs, noise=0.3)
    assert [d.calls for d in noisy[-2].decisions] == [("tie", "on"), ("tie", "off")]
    assert noisy[-2].action.startswith(
        "throughput-first: speculate at 2 concurrent clients; no difference beyond the noise at 1"
    )


def test_a_latency_family_that_gains_somewhere_is_not_reported_lost():
    """Issue-27 review of 10: "latency-first: keep speculation off (it lost at every tested
    load)" beside completion_p50 1.28x at 1 client -- TTFT 0.889x (beyond the 11% floor)
    turned the whole family "off". A level where one latency gains and another loses beyond
    the floor is a trade-off; "off" needs a loss and no gain."""
    from specviz.load import load_decisions

    xs = [
        find_crossover([1, 4, 16], [0.889, 0.95, 0.97], metric="ttft_p50", scenario="concurrency"),
        find_crossover(
            [1, 4, 16], [1.28, 1.02, 0.8], metric="completion_p50", scenario="concurrency"
        ),  # fmt: skip
    ]
    (lat,) = load_decisions(xs, noise=0.11)
    assert lat.calls == ("trade-off", "tie", "off") and lat.status == "mixed"
    assert "it lost at every tested load" not in lat.action()
    assert lat.action() == "no clear boundary (trade-off at 1, tie at 4, off at 16)"
    only = load_decisions([find_crossover([1, 4], [1.28, 1.3], metric="completion_p50"),
                           find_crossover([1, 4], [0.8, 0.7], metric="ttft_p50")])  # fmt: skip
    assert only[0].status == "trade-off" and only[0].action() == (
        "a trade-off at every tested load: speculation gained on completion_p50 and lost on "
        "ttft_p50 -- choose by the latency that matters"
    )
    # negative case: losses and no gain are still "off"
    off = load_decisions([find_crossover([1, 4], [0.8, 0.7], metric="ttft_p50")])[0]
    assert off.status == "off" and "it lost at every tested load" in off.action()
    # 10 (2026-12-06 regeneration): throughput 1.02x (inside its 12% floor), 0.81x, 0.67x at
    # 1, 4, 16 clients printed "it lost at every tested load": it tied at 1
    tied = load_decisions(
        [find_crossover([1, 4, 16], [1.02, 0.81, 0.67], metric="throughput_tok_s")], noise=0.12
    )[0]
    assert tied.status == "off" and "every tested load" not in tied.action()
    assert tied.action() == (
        "keep speculation off (it lost beyond the noise at 4, 16 concurrent clients and gained "
        "at none; no difference beyond the noise at 1)"
    )


def test_category_decisions_need_an_interval_and_claim12_can_be_undecided():
    """The review's small 10: one prompt per category, 8 tokens, and "[OK] speculate" on a
    single timed run, then claim 12 "not supported" built on it. With the interval over
    prompts a category is decided only when the interval lies on one side of the bar; one
    prompt (no interval) or a straddling interval is "cannot tell", and so is claim 12 when
    no boundary was found but an undecided item could hide one."""
    nan = float("nan")
    table = pd.DataFrame(dict(category=["a", "b", "c", "d"], gamma=[2] * 4, prompts=[3, 3, 1, 3],
                              speedup=[1.3, 1.1, 1.36, 0.8], speedup_ci_low=[1.1, 0.9, nan, 0.6],
                              speedup_ci_high=[1.5, 1.3, nan, 0.9], acceptance=[0.6] * 4,
                              tokens_per_call=[2.0] * 4, first_rejection_share=[0.1] * 4))  # fmt: skip
    adv = checklist.advise(table)
    acts = {a.scope: a.action for a in adv if a.scope.startswith("category ")}
    assert acts == {"category a": "speculate with gamma 2", "category b": checklist.UNDECIDED,
                    "category c": checklist.UNDECIDED, "category d": "plain decoding"}  # fmt: skip
    why = {a.scope: a.reason for a in adv}
    assert "contains 1.00x" in why["category b"] and "1 prompt: no interval" in why["category c"]
    assert checklist.claim12_verdict(adv).status == "supported"  # a on, d off: a task boundary
    # the demo's case: nothing decided beyond the point estimates -> cannot tell, not "not supported"
    one = checklist.advise(table.iloc[[1, 2]])
    v = checklist.claim12_verdict(one)
    assert v.status == "cannot tell" and "category b, category c" in v.reason
    # negative control: the same point estimates with decided intervals are "not supported"
    sure = table.iloc[[0]].copy()
    assert checklist.claim12_verdict(checklist.advise(sure)).status == "not supported"
    # a table without interval columns keeps the point-estimate rule
    bare = table.drop(columns=["speedup_ci_low", "speedup_ci_high"])
    assert [a.action for a in checklist.advise(bare)][:4] == ["speculate with gamma 2"] * 3 + [
        "plain decoding"
    ]


def test_claim10_does_not_rank_a_constant():
    """The review's small 10: every cell had 1.60 tokens per call, the rank correlation was
    NaN and the verdict read 'the raw rate tracked it better'. Nothing varied: not shown."""
    table = pd.DataFrame(dict(category=["a", "a", "b", "b"], gamma=[2, 4, 2, 4],
                              speedup=[1.47, 1.2, 1.05, 0.92], acceptance=[0.38, 0.21, 0.43, 0.25],
                              tokens_per_call=[1.6] * 4))  # fmt: skip
    v = checklist.claim10_verdict(table, draft_cost=0.04)
    assert v.status == "not shown" and "nothing to rank" in v.reason


def test_claim1_is_about_calls_and_the_speed_is_reported_apart():
    """11's review: no plain baseline. A slower wall clock with fewer, dearer calls supports
    claim 1 (that is its point); the speed-up is printed as a measurement, not as claim 1."""
    from specviz.lab.verdicts import claim1_lines

    plain = {"tokens": [24, 24, 24], "calls": [24, 24, 24], "seconds": [2.0, 2.2, 2.1]}
    tree = {"tokens": [24, 24, 24], "calls": [14, 15, 13], "seconds": [3.0, 3.4, 3.1]}
    first, speed = claim1_lines(plain, tree, "tree")
    assert "supports claim 1 at this size: fewer serial calls, each one dearer" in first
    assert speed.startswith("Speed, tree: wall-clock speed-up of the tree over plain decoding")
    assert "below 1 at this size" in speed and "claim 1 not supported" not in speed
    same = {"tokens": [24, 24, 24], "calls": [25, 26, 27], "seconds": [2.0, 2.2, 2.1]}
    assert "claim 1 not supported" in claim1_lines(plain, same, "chain")[0]


def test_tree_figure_keeps_the_corrected_token_off_the_candidates():
    """11's review: the corrected-token diamond hid a rejected node's label, and the committed
    text had no text."""
    import specviz as sv
    from specviz.views import tree_figure

    target, draft = sv.toy_pair(6, 2, seed=0)
    run = sv.speculative_generate(target, sv.TreeDrafter(draft, (3, 2), "independent"), [0, 1],
                                  gamma=3, max_new_tokens=8, do_sample=True, seed=1)  # fmt: skip
    step = next(s for s in run.trace.steps if s.tree and len(s.emitted) > len(s.path))
    fig = tree_figure(step, context="the committed text")
    nodes = {(x, y) for t in fig.data if t.name in ("accepted", "rejected", "unvisited")
             for x, y in zip(t.x, t.y, strict=True)}  # fmt: skip
    diamond = next(t for t in fig.data if (t.name or "").endswith(" token"))
    assert (diamond.x[0], diamond.y[0]) not in nodes
    square = next(t for t in fig.data if t.name == "committed text")
    assert square.text[0].endswith("the committed text")


def test_tree_figure_rows_leave_room_for_each_label():
    """11's re-review: leaf labels touched the next node's marker (60 px of figure height per
    leaf, margins included: under 50 px per row on screen for a 16-leaf tree). Every row is
    now at least ROW_PX apart inside the plot area, and the top row's label is inside it."""
    import specviz as sv
    from specviz.views import tree_figure
    from specviz.views.trees import ROW_PX

    target, draft = sv.toy_pair(8, 2, seed=0)
    for shape in ((4, 4), (3, 2), (2,)):
        run = sv.speculative_generate(target, sv.TreeDrafter(draft, shape, "independent"), [0, 1],
                                      gamma=3, max_new_tokens=6, do_sample=True, seed=1)  # fmt: skip
        step = max((s for s in run.trace.steps if s.tree), key=lambda s: len(s.tree))
        lay = tree_figure(step).layout
        lo, hi = lay.yaxis.range
        rows_px = (lay.height - lay.margin.t - lay.margin.b) / (hi - lo)
        assert rows_px >= ROW_PX >= 56, (shape, rows_px)
        ys = [y for t in tree_figure(step).data for y in (t.y or ()) if y is not None]
        assert lo < min(ys) and max(ys) + 0.6 <= hi  # the top label is drawn, not clipped


def test_claim11_costs_need_separated_intervals():
    """07's review: no claim-11 verdict. Drafting milliseconds per accepted token, with an
    interval over prompts; 'supports' only when the cheapest and dearest are apart."""
    from specviz.lab.verdicts import claim11_costs

    def cells(name, ms, acc):
        return [dict(drafter=name, gamma=3, mode="greedy", prompt_id=f"p{i}",
                     draft_time=ms[i] / 1e3, accepted=acc[i]) for i in range(len(ms))]  # fmt: skip

    grid = pd.DataFrame(
        cells("lookup", [1, 1, 2], [5, 6, 5]) + cells("head", [40, 50, 45], [8, 9, 7])
    )
    lines = claim11_costs(grid, gamma=3, mode="greedy")
    assert lines[0].startswith("Claim 11, lookup: 0.25 ms of drafting per accepted token")
    assert "supports claim 11 at this size: lookup is the cheapest" in lines[-1]
    close = pd.DataFrame(cells("a", [10, 30, 20], [5, 6, 5]) + cells("b", [12, 28, 22], [5, 6, 5]))
    assert "cannot tell" in claim11_costs(close, gamma=3, mode="greedy")[-1]
    never = pd.DataFrame(cells("a", [1, 1, 1], [5, 6, 5]) + cells("b", [9, 9, 9], [0, 0, 0]))
    assert "a is the cheapest per accepted token, and b the dearest" in claim11_costs(
        never, gamma=3, mode="greedy")[-1]  # fmt: skip


def test_claim11_names_the_cheapest_only_when_it_is_apart():
    """Issue-27 review of 07: "suffix is the cheapest per accepted token and early_exit:4 the
    dearest, intervals apart" while suffix (1.02 ms, 95% CI 0.28-3.48) and prompt lookup
    (1.21 ms, 0.49-5.48) overlap almost entirely: only "both below early exit" was shown."""
    from specviz.lab.verdicts import claim11_costs

    def cells(name, ms, acc):
        return [dict(drafter=name, gamma=3, mode="greedy", prompt_id=f"p{i}",
                     draft_time=ms[i] / 1e3, accepted=acc[i]) for i in range(len(ms))]  # fmt: skip

    grid = pd.DataFrame(
        cells("suffix", [1, 4, 2], [5, 4, 6])
        + cells("lookup", [2, 4, 1], [5, 4, 6])
        + cells("early_exit", [400, 500, 450], [5, 4, 6])
    )
    last = claim11_costs(grid, gamma=3, mode="greedy")[-1]
    assert "suffix is the cheapest" not in last and "lookup is the cheapest" not in last
    assert "are the cheapest per accepted token, not told apart from each other" in last
    assert "early_exit the dearest" in last and last.count("supports claim 11") == 1
    # negative case: a cheapest drafter apart from every other is still named alone
    apart = pd.DataFrame(
        cells("suffix", [1, 1, 1], [5, 4, 6])
        + cells("lookup", [40, 50, 45], [5, 4, 6])
        + cells("early_exit", [400, 500, 450], [5, 4, 6])
    )
    assert (
        "suffix is the cheapest per accepted token, and early_exit the dearest"
        in (claim11_costs(apart, gamma=3, mode="greedy")[-1])
    )


def test_grid_speedup_needs_an_interval_over_prompts():
    """07's review: "1.08x the speed of plain decoding (faster on this run)" from one timed
    run, next to 09's 1.45x. The speed-up is pooled per prompt with an interval; a clear gain
    is "above 1", the same gain with one slow prompt (negative control) cannot be told."""
    from specviz.lab.verdicts import grid_speedup

    def cells(spec_s, plain_s):
        return pd.DataFrame([dict(drafter="head", gamma=3, mode="greedy", prompt_id=f"p{i}",
                                  new_tokens=12, total_time=t, baseline_new_tokens=12,
                                  baseline_time=b) for i, (t, b) in enumerate(zip(spec_s, plain_s, strict=True))])  # fmt: skip

    fast = grid_speedup(
        cells([1.0, 1.1, 0.9, 1.0], [1.5, 1.6, 1.4, 1.5]), "head", gamma=3, mode="greedy"
    )
    assert fast.verdict == "supports" and fast.estimate == pytest.approx(1.5)
    assert "above 1 at this size" in fast.sentence()
    mixed = grid_speedup(
        cells([1.0, 1.1, 2.5, 1.0], [1.5, 1.6, 1.4, 1.2]), "head", gamma=3, mode="greedy"
    )
    assert mixed.verdict == "cannot tell" and "cannot tell at this size" in mixed.sentence()
    with pytest.raises(ValueError, match="no cells"):
        grid_speedup(cells([1.0], [1.5]), "lookup", gamma=3, mode="greedy")


def test_mean_accepted_length_gets_an_interval_over_prompts():
    """07's review: no error bars on the mean accepted length."""
    from specviz.lab.verdicts import accepted_length_intervals
    from specviz.views import metric_bars_figure

    grid = pd.DataFrame(
        [dict(drafter="a", category=c, gamma=3, mode="greedy", prompt_id=f"{c}{i}",
              new_tokens=20, target_calls=calls)
         for c, callss in (("x", (10, 8, 12)), ("y", (5, 6, 4))) for i, calls in enumerate(callss)]
    )  # fmt: skip
    ci = accepted_length_intervals(grid, gamma=3, mode="greedy")
    assert set(ci) == {("a", "x"), ("a", "y"), ("a", "all")}
    lo, hi = ci[("a", "x")]
    assert lo < 2.0 < hi and lo >= 20 / 12
    summary = pd.DataFrame(dict(drafter=["a", "a"], category=["x", "y"],
                                mean_accepted_length=[2.0, 4.0]))  # fmt: skip
    fig = metric_bars_figure(summary, "mean_accepted_length", intervals=ci)
    assert fig.data[0].error_y.visible and fig.data[0].error_y.array[0] == pytest.approx(hi - 2.0)


def test_gamma_figures_use_the_palette_and_show_their_numbers():
    """08 and 10's figures (issue 27): plotly's default blue gone, values on the figure,
    intervals drawn where the table has them."""
    from specviz.perf.theory import VerifyCost
    from specviz.views import category_speedup_figure, policy_speedup_figure, verify_cost_figure
    from specviz.views.palette import PALETTE

    vc = VerifyCost((1, 2, 3), (1.0, 1.3, 1.6), 16)
    fig = verify_cost_figure({"packed kernels": vc, "stock kernels": vc})
    assert list(fig.data[0].text) == ["1.00", "1.30", "1.60"]
    assert fig.data[0].line.color != fig.data[1].line.color
    # close values of two curves: labels on opposite sides; the highest label is not clipped
    assert fig.data[0].textposition != fig.data[1].textposition
    assert fig.layout.yaxis.range[1] > 1.6 * 1.1
    # issue-27 re-review of 08: where the curves cross, each label stays on its own point's
    # side (the higher one above, the lower one below), in its curve's colour
    cross = verify_cost_figure({"packed": VerifyCost((1, 2, 3), (1.0, 1.5, 1.6), 16),
                                "stock": VerifyCost((1, 2, 3), (1.0, 1.3, 1.9), 16)})  # fmt: skip
    assert list(cross.data[0].textposition) == ["top center", "top center", "bottom center"]
    assert list(cross.data[1].textposition) == ["bottom center", "bottom center", "top center"]
    assert cross.data[0].textfont.color == cross.data[0].line.color
    lab = pd.DataFrame(dict(policy=["constant(1)", "ema"], speedup=[0.89, 1.25],
                            tokens_per_call=[1.2, 1.9]))  # fmt: skip
    bars = policy_speedup_figure(lab)
    assert bars.data[0].marker.color == PALETTE["speculative"]
    assert bars.layout.yaxis.range[1] > 1.25  # the tallest bar and its label fit
    # the plain-decoding line is named in the legend, not by a label over a bar
    assert not bars.layout.annotations and bars.data[0].insidetextanchor == "start"
    assert [t.name for t in bars.data][1:] == ["plain decoding (1x)"]
    table = pd.DataFrame(dict(category=["a", "b", "a", "b"], gamma=[2, 2, 4, 4],
                              speedup=[1.2, 0.9, 1.1, 0.8], speedup_ci_low=[1.0, 0.7, np.nan, 0.6],
                              speedup_ci_high=[1.4, 1.1, np.nan, 1.0]))  # fmt: skip
    cat = category_speedup_figure(table)
    assert [t.name for t in cat.data] == ["gamma 2", "gamma 4"]
    assert list(cat.data[0].error_y.array) == pytest.approx([0.2, 0.2])
    assert cat.data[1].error_y.array[0] is None  # one prompt: no interval, none drawn


def test_predicted_speedup_figure_marks_no_best_gamma_at_the_edge_of_its_axis():
    """Issue 27 (08): the best gamma is searched past the axis; where it lies beyond, no
    black marker sits on the axis's last gamma as if that were the optimum."""
    from specviz.views.perf import predicted_speedup_figure

    fig = predicted_speedup_figure((0.5, 0.9), 0.01, max_gamma=6)  # a = 0.9: best gamma 24
    marks = [list(t.x) for t in fig.data if t.mode == "markers"]
    assert marks == [[5]]  # a = 0.5's optimum, on the axis; none for a = 0.9


def test_compare_with_plain_interleaves_and_sees_a_changed_text(monkeypatch):
    """11 and 12's repeated loop, in the package: plain then each arm, prompt by prompt (a
    slow spell falls on every arm alike), a fresh drafter per prompt, and an arm whose text
    differs from plain decoding's is counted as not identical."""
    import dataclasses

    import specviz as sv
    from specviz.lab import experiments

    target, draft = sv.toy_pair(6, 2, seed=0)
    order, real = [], experiments.speculative_generate

    def made(name):
        def make():
            order.append(name)
            return sv.ModelDrafter(draft)

        return make

    def spec(t, d, ids, **kw):  # the "broken" arm appends a token plain decoding never made
        r = real(t, d, ids, **kw)
        if order[-1] == "broken":
            r = dataclasses.replace(r, new_tokens=[*r.new_tokens[:-1], 5 - r.new_tokens[-1]])
        return r

    monkeypatch.setattr(experiments, "speculative_generate", spec)
    cmp = experiments.compare_with_plain(
        target, [[0, 1], [2], [3, 3]], {"ok": (made("ok"), 3), "broken": (made("broken"), 2)},
        max_new_tokens=5,
    )  # fmt: skip
    assert order == ["ok", "broken"] * 3
    assert cmp.per["ok"]["identical"] == [True] * 3
    assert cmp.per["broken"]["identical"] == [False] * 3
    assert cmp.per["plain"]["calls"] == [len(r.new_tokens) for r in cmp.plain] == [5, 5, 5]
    table = cmp.table()
    assert table.loc["plain", "tokens per target call"] == 1.0
    assert table.loc["broken", "greedy identical"] == "0/3"
    assert table.loc["ok", "tokens per target call"] > 1.0
    with pytest.raises(ValueError, match="baseline's name"):
        experiments.compare_with_plain(target, [[0]], {"plain": (made("x"), 2)}, max_new_tokens=2)


def test_two_prompts_give_a_range_not_a_95_percent_interval():
    """Issue-27 review: "95% CI 1.29x to 1.64x over 2 prompts" (11) and "95% CI 0.86x-0.86x"
    (09): a percentile bootstrap over 2 units is their range, nowhere near 95% coverage. The
    same numbers are printed as a range; 3 prompts still get their 95% interval."""
    from specviz.lab.verdicts import alone_sentence, claim1_lines, interval_label

    two = ratio_verdict({"t": [10, 12], "c": [4, 5]}, {"t": [10, 12], "c": [8, 9]},
                        claim="Claim 2", statistic="tokens per call")  # fmt: skip
    s = two.sentence()
    assert "95% CI" not in s and "over 2 prompts, too few for a 95% interval" in s
    assert s.startswith("Claim 2: tokens per call 1.89x (range 1.80x to 2.00x ")
    three = ratio_verdict({"t": [10, 12, 9], "c": [4, 5, 4]}, {"t": [10, 12, 9], "c": [8, 9, 8]},
                          claim="Claim 2", statistic="tokens per call")  # fmt: skip
    assert "(95% CI " in three.sentence() and "over 3 prompts)" in three.sentence()
    per = {"tokens": [10, 12], "calls": [4, 5], "seconds": [1.0, 1.1]}
    plain = {"tokens": [10, 12], "calls": [10, 12], "seconds": [1.2, 1.5]}
    assert all("95% CI" not in line for line in claim1_lines(plain, per, "tree"))
    rows = pd.DataFrame(
        [dict(mode=m, tokens=10, seconds=t, accepted=3, drafted=6, target_calls=c)
         for m, t, c in (("plain", 1.0, 10), ("speculative", 0.9, 5)) for _ in range(2)]
    )  # fmt: skip
    assert "95% CI" not in alone_sentence(rows, "split 'heldout'")
    assert interval_label(0.86, 0.86, 2).startswith("range 0.86x-0.86x over 2 prompts")


# 12's committed default report, the per-prompt table (plain tokens, calls, seconds;
# intersection tokens, calls, seconds): one intersection run at 12.6 s per call (translation)
_NB12_RUNS = """32 32 19.044 32 10 13.193|32 32 24.918 32 16 33.020|22 22 29.948 22 16 200.947
16 16 14.463 16 10 16.858|32 32 22.145 32 12 15.668|32 32 17.880 32 8 12.002
32 32 14.725 32 15 15.255|32 32 15.220 32 14 14.195|32 32 15.270 32 13 13.570
32 32 15.137 32 11 11.750|22 22 13.286 22 7 10.180|32 32 16.969 32 11 12.354
32 32 15.075 32 17 16.611|32 32 15.621 32 13 13.469|32 32 17.043 32 15 17.255
32 32 17.170 32 17 18.438"""


def test_one_slow_run_cannot_move_the_speed_up():
    """Issue-27 re-review of 12, wrong number 8: "Speed, intersection: 0.65x" was set by one
    run at 12.6 s per call against 1.0-2.1 s in the other 15 (a ratio of summed seconds).
    The run is flagged (over 3x its arm's median seconds per call), its prompt leaves the
    timing line with a printed note, and the per-prompt median is printed beside it."""
    from specviz.lab.verdicts import claim1_lines, slow_runs, speed_lines

    rows = [[float(x) for x in r.split()] for r in _NB12_RUNS.replace("\n", "|").split("|")]
    plain = {k: [r[i] for r in rows] for i, k in enumerate(("tokens", "calls", "seconds"))}
    inter = {k: [r[3 + i] for r in rows] for i, k in enumerate(("tokens", "calls", "seconds"))}
    assert list(slow_runs(inter["seconds"], inter["calls"])) == [2]
    assert slow_runs(plain["seconds"], plain["calls"]) == {}  # 2.5x: slow, not flagged
    names = [f"cat{i}" for i in range(len(rows))]
    speed, note = speed_lines(plain, inter, "intersection", names=names)
    assert "1.09x" in speed and "over 15 prompts" in speed and "0.65x" not in speed
    assert "median of the per-prompt speed-ups 1.13x" in speed
    assert "prompt 3 (cat2): intersection 12.56 s per target call" in note
    assert "over 3x the median" in note and "would read 0.65x" in note
    # claim 1's seconds-per-call ratio leaves it out too; its count of calls keeps it
    lines = claim1_lines(plain, inter, "intersection", names=names)
    assert len(lines) == 3 and lines[1] == speed and lines[2] == note
    assert "2.32x the tokens per target call" in lines[0]
    # a quiet run is untouched: no note, every prompt timed
    quiet = dict(inter, seconds=[*inter["seconds"][:2], 20.0, *inter["seconds"][3:]])
    assert len(speed_lines(plain, quiet, "intersection")) == 1


# -- issue 27 (rereview 12): coverage over 2 prompts is a range; claim 2's power; on the toy ---


def _coverage_rows(per_category: int, categories: int = 8) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    rows = [dict(category=f"c{c}", prompt=f"c{c}-{p}", position=k, coverage=float(rng.random()))
            for c in range(categories) for p in range(per_category) for k in range(12)]  # fmt: skip
    return pd.DataFrame(rows)


def test_coverage_over_two_prompts_is_a_range_not_a_95_interval():
    cov = _coverage_rows(2)
    table, line = coverage_verdict(cov)
    means = cov.groupby(["category", "prompt"]).coverage.mean()
    for cat, r in table.iterrows():
        assert r.interval.startswith("range ") and "over 2 prompts, too few for a 95%" in r.interval
        assert (r.low, r.high) == pytest.approx((means[cat].min(), means[cat].max()))
    three, _ = coverage_verdict(_coverage_rows(3))
    assert all(s.startswith("95% CI ") and "over 3 prompts" in s for s in three.interval)


def test_claim_2_says_two_prompts_per_category_can_hardly_decide():
    from specviz.lab.verdicts import kruskal_best_p

    _, line = coverage_verdict(_coverage_rows(2))
    assert "cannot tell" in line
    assert "even categories that never overlap would give p = 0.0383 at best" in line
    assert "2 per category can hardly decide" in line and "from 3 prompts per category" in line
    assert kruskal_best_p([2] * 2) > 0.05  # 2 categories x 2 prompts: cannot decide at all
    _, line2 = coverage_verdict(_coverage_rows(2, categories=2))
    assert "this design cannot decide at all" in line2


def test_exactness_lines_say_what_they_were_measured_on():
    lines = exactness_lines(_exact(), 2000, 1e-3, on="the toy (target over a b ab)")
    c6 = next(s for s in lines if s.startswith("Claim 6: "))
    c9 = next(s for s in lines if s.startswith("Claim 9: "))
    assert "consistent with the exact law on the toy (target over a b ab) at alpha" in c6
    assert "shortcuts rejected on the toy (target over a b ab) at alpha" in c9
    assert "on the toy" not in "\n".join(exactness_lines(_exact(), 2000, 1e-3))


def test_a_p_value_that_underflowed_is_not_printed_as_zero():
    # a shortcut caught so hard that the chi-square p underflows the double: "p < 1e-300",
    # never "p = 0" (a test finds data unlikely, not impossible)
    lines = exactness_lines(_exact().assign(pvalue=[0.4, 0.0, 0.3, 0.5]), 2000, 1e-3)
    caught = next(s for s in lines if s.startswith("- big: caught"))
    assert "(p < 1e-300;" in caught and "p = 0" not in caught
    assert "(p = 1e-09;" in exactness_lines(_exact(), 2000, 1e-3)[0]


def test_coverage_interval_over_3_prompts_holds_the_mean_near_95_percent():
    # re-review 27e-B of 12: "95% CI over 3 prompts" was the percentile bootstrap, which over 3
    # prompts is their min-max range (it held the mean ~70% of the time). The jackknife t
    # interval holds it about 95% of the time; the min-max range is the negative control.
    rng = np.random.default_rng(0)
    mu, runs, held, ranged = 0.8, 300, 0, 0
    for _ in range(runs):
        rows = [dict(category="c", prompt=f"p{p}", coverage=float(np.clip(m + e, 0, 1)))
                for p, m in enumerate(rng.beta(8.0, 2.0, size=3))
                for e in rng.normal(0, 0.05, size=int(rng.integers(20, 40)))]  # fmt: skip
        table, _ = coverage_verdict(pd.DataFrame(rows))
        held += table.loc["c", "low"] <= mu <= table.loc["c", "high"]
        per = pd.DataFrame(rows).groupby("prompt").coverage.mean()
        ranged += per.min() <= mu <= per.max()
    assert held / runs >= 0.88 and ranged / runs <= 0.80
    assert table.loc["c", "interval"].startswith("95% CI ")
