"""Verdict rules that notebooks 04 and 12 used to write in cells, now in specviz.lab.verdicts
(issue 29): each rule's branches, stated once and tested here."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from specviz.lab.verdicts import greedy_identity_line, sampler_check_lines, shipped_mistake_lines


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
    assert shipped_mistake_lines(table, n_draws=100)[-1].endswith("false alarm at alpha = 0.01)")


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
