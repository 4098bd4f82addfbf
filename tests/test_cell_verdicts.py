"""Verdict rules that notebooks 02, 04, 05, 06, 09 and 12 used to write in cells, now in
specviz.lab.verdicts (issue 29): each rule's branches, stated once and tested here."""

from __future__ import annotations

from types import SimpleNamespace
from unittest.mock import patch

import pandas as pd

from specviz.lab.report_index import claim_verdicts
from specviz.lab.verdicts import (
    greedy_identity_line,
    mixed_precision_line,
    read_verdict,
    sampler_check_lines,
    sequential_line,
    shipped_mistake_lines,
)


def _shipped(caught, n_to_detect, lossless=(False, False, False)):
    n = len(caught)
    return pd.DataFrame(
        {
            "lossless": list(lossless),
            "caught": list(caught),
            "n_to_detect": list(n_to_detect),
            "predicted_tv": [0.1] * n,
            "law": ["law"] * n,
            "measured_tv": [0.1] * n,
            "pvalue": [0.5] * n,
        },
        index=[f"rule{i}" for i in range(n)],
    )


def test_a_shipped_mistake_is_caught_unseeable_or_missed():
    lines = shipped_mistake_lines(_shipped([True, False, False], [10, 900, 10]), n_draws=100)
    assert lines[0].startswith("Claim 9, shipped mistakes: 1 of 3 caught")
    assert lines[0].endswith("cannot tell at this size for 1 (they need more draws)")
    fates = [line.split("draws: ")[1].split(" (p")[0] for line in lines[1:]]
    assert fates == ["caught", "cannot tell at this size", "not caught"]


def test_a_flagged_lossless_rule_is_a_false_alarm():
    table = _shipped([True, False], [10, 0], lossless=(False, True))
    lines = shipped_mistake_lines(table, n_draws=100)
    assert lines[0] == (
        "Claim 9, shipped mistakes: 1 of 1 caught at alpha = 0.01 with 100 draws of their "
        "stated outcome"
    )
    assert lines[-1].endswith(": no departure found")
    table.loc["rule1", "caught"] = True
    assert shipped_mistake_lines(table, n_draws=100)[-1].endswith("flagged in 1 of 100 runs)")


def test_a_flagged_lossless_rule_is_called_a_false_alarm_only_on_evidence():
    """Issue-27 re-review of 04: the lossless block_verify was flagged at p = 0.0012 and called
    "a false alarm" with nothing on the page to show it. A second sample decides: it must pass
    for "false alarm", and a second rejection reads as a departure (the negative control)."""
    table = _shipped([True, True], [10, 0], lossless=(False, True))
    table["pvalue"] = [1e-9, 0.0012]
    table["recheck_pvalue"] = [float("nan"), 0.62]
    line = shipped_mistake_lines(table, n_draws=100)[-1]
    assert "a false alarm" in line and "a second sample of 100 draws gives p = 0.62" in line
    table.loc["rule1", "recheck_pvalue"] = 0.003
    line = shipped_mistake_lines(table, n_draws=100)[-1]
    assert "flagged twice" in line and "false alarm" not in line


def test_shipped_measured_rechecks_only_a_flagged_lossless_member():
    from specviz.effects.shipped import shipped_measured

    t = shipped_measured(300, seed=0)
    flagged = t.lossless & t.caught
    assert t.recheck_pvalue[~flagged].isna().all()
    assert t.recheck_pvalue[flagged].notna().all()


def test_the_sampler_lines_name_the_smallest_failing_case():
    ok = SimpleNamespace(
        verdict="conforms", counterexample=None, min_detectable_tv=0.05, alpha=0.01
    )
    ce = SimpleNamespace(vocab=4, k=2, where="first token", pvalue=1e-6)
    bad = SimpleNamespace(verdict="fails", counterexample=ce)
    assert sampler_check_lines(ok, ok, n_runs=10) == [
        "Your sampler (10 runs per case): CONFORMS; transformers' installed _speculative_sampling: "
        "CONFORMS (every case's first token checked to TV >= 0.050 with 90% power, false-alarm "
        "rate <= 0.01)"
    ]
    lines = sampler_check_lines(bad, ok, n_runs=10)
    assert lines[0].startswith("Your sampler (10 runs per case): FAILS;")
    assert lines[1] == "  your smallest failing case: V = 4, k = 2 (first token, p = 1e-06)"


def test_greedy_identity_supports_claim_7_only_when_every_method_matches():
    assert greedy_identity_line({"intersection": 5, "string": 5}, 5) == (
        "Claim 7: greedy identical to plain decoding: intersection 5/5, string 5/5 -- "
        "supports claim 7: both methods verify with the target's own argmax."
    )
    assert "changed the greedy text" in greedy_identity_line({"intersection": 5, "string": 4}, 5)


def _run(decision):
    return SimpleNamespace(
        decision=decision, samples_per_arm=300, fixed_n=600, e_value=250.0, tv_upper=0.04, cap=900
    )


def test_a_sequential_run_is_caught_equivalent_or_inconclusive():
    lines = [
        sequential_line("rule", _run(d), exact_tv=0.1, tolerance=0.05, level=0.01)
        for d in ("inconsistent", "equivalent", "inconclusive")
    ]
    assert lines[0] == (
        "Sequential, rule (exact first-token TV 0.100): caught after 300 samples per arm, 0.50x "
        "the fixed-n design for TV 0.05 (600); e-value 250 >= 100."
    )
    assert ": equivalent within 0.05 after 300 samples per arm (0.50x" in lines[1]
    assert ": inconclusive at the cap (900 per arm)" in lines[2]


def test_the_mixed_precision_check_is_caught_unseeable_or_a_miss():
    def line(outcome):
        report = SimpleNamespace(outcome=outcome)
        with patch("specviz.lab.verdicts._experiments.outcome_phrase", lambda r: r.outcome):
            return mixed_precision_line(report, n_samples=150, exact_tv=0.02, samples_needed=4000)

    assert str(line("inconsistent")) == (
        "Claim 9, consistency_check of mixed_precision with 150 samples per arm: inconsistent "
        "-- caught the bug: supports claim 9 at this sample size."
    )
    assert "cannot tell at this size (the bug's TV 0.0200 needs ~4000" in str(line("inconclusive"))
    assert "(a miss: contradicts" in str(line("consistent"))
    # issue 27: the demo index reads a verdict from each outcome's line
    for outcome, verdict in [
        ("inconsistent", "supports"),
        ("inconclusive", "cannot tell"),
        ("consistent", "contradicts"),
    ]:
        got = line(outcome)
        assert (got.claim, got.verdict) == (9, verdict)
        assert read_verdict(str(got)) == verdict
        assert claim_verdicts([str(got)]) == {9: verdict}


# issue 27: notebook 02's and 06's "What we saw" lines, moved out of the cells


def _toy_trace():
    import specviz as sv

    target, draft = sv.toy_pair(5, 2, noise=1.0, seed=0)
    r = sv.speculative_generate(
        target, draft, [0], gamma=3, max_new_tokens=40, do_sample=True, seed=3
    )
    return r.trace


def test_acceptance_by_position_counts_the_tests_that_reached_each_position():
    from specviz.lab.verdicts import acceptance_by_position

    trace = _toy_trace()
    line = acceptance_by_position(trace, 3)
    reached = [
        sum(
            1
            for s in trace.steps
            for r in s.positions[j : j + 1]
            if r.evaluated and r.draft_token >= 0
        )
        for j in range(3)
    ]
    assert reached[0] >= reached[1] >= reached[2]  # a position is reached only past the last
    for j, n in enumerate(reached):
        assert f"position {j + 1}: " in line and f" of {n} " in line.split(f"position {j + 1}: ")[1]


def test_first_rejection_names_the_first_rejected_draft_or_none():
    from specviz.lab.verdicts import first_rejection

    trace = _toy_trace()
    s = next(s for s in trace.steps if s.drafted and s.accepted < s.drafted)
    r = s.positions[s.accepted]
    line = first_rejection(trace, "abcde")
    assert line.startswith(f"First rejection (step {s.step}, draft position {s.accepted + 1}): ")
    assert f"draft '{'abcde'[r.draft_token]}' had p = {r.p_target:.3g}" in line
    assert f"u = {r.u:.3f} rejected it" in line
    none = SimpleNamespace(steps=[s for s in trace.steps if s.accepted == s.drafted])
    assert first_rejection(none) == "No draft was rejected in this run."


def test_precision_detail_lines_count_ties_and_divergences():
    import numpy as np

    from specviz.lab.verdicts import precision_detail_lines

    table = pd.DataFrame(
        dict(
            dtype=["fp32", "bf16", "bf16"],
            drafter=["lookup", "lookup", "plain"],
            identical=[True, False, True],
            margin=[None, 0.3, None],
            verdict=[None, "numerics", None],
            exact_tie=[False, False, False],
        )
    )
    margins = {"fp32": np.array([1.0, 2.0]), "bf16": np.array([0.1, 0.3, 5.0])}
    lines = precision_detail_lines(table, margins, near_tie={"fp32": 0.05, "bf16": 0.5}, tokens=8)
    assert "Claim 7, bf16 lookup (speculative vs plain bf16): 0 of 1 prompts identical" in lines[1]
    assert "verdicts {'numerics': 1}" in lines[1]
    assert "no exact ties (margin 0)." in lines[3]
    assert "66.7% below the near-tie threshold 0.5" in lines[4]
    assert lines[-1] == "The 1 divergence margins sit at percentiles [20] of all greedy margins."
