"""Issue 27 re-review (notebooks 00, 02, 04): claim 1 from timed repeats, claim 10's
"cannot tell" with the size that would decide, and the shipped mistakes' measured TV read
against its expected plug-in value."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from specviz.effects.shipped import expected_plugin_tv
from specviz.lab.verdicts import (
    CANNOT_TELL,
    SUPPORTS,
    calls_vs_speed,
    first_token_rejections,
    shipped_mistake_lines,
    steps_to_decide,
)
from specviz.lab.verdicts._single_run import acceptance_interval
from specviz.views.conformance import predicted_vs_measured_figure
from specviz.views.palette import PALETTE


def _run(calls: int, seconds: float, *, tokens: int = 32, verify: float = 0.0):
    summary = SimpleNamespace(verify_time=verify or seconds, draft_time=0.0)
    return SimpleNamespace(
        new_tokens=list(range(tokens)),
        target_calls=calls,
        total_time=seconds,
        summary=lambda: summary,
    )


def test_claim1_from_repeats_prints_the_median_and_the_range():
    plains = [_run(32, t) for t in (3.2, 3.4, 3.0)]
    specs = [_run(12, t) for t in (2.6, 2.5, 2.7)]  # fewer, dearer calls every time
    head, split = calls_vs_speed(plains, specs, gamma=4)
    assert head.verdict == split.verdict == SUPPORTS
    assert "the median of 3 timed repeats" in split.text
    assert "speedup range 1.11-1.36x" in split.text and "all 3 repeats" in split.text
    assert "one timed run" not in split.text and "supports claim 1 in every repeat" in split.text
    one = calls_vs_speed(plains[0], specs[0], gamma=4)[1]  # a single run: as before
    assert one.text.endswith("(one timed run on this machine, no interval).")


def test_claim1_repeats_that_disagree_cannot_tell():
    # the second repeat's speculative call was not dearer: timing noise in one repeat
    plains = [_run(32, 3.2), _run(32, 3.2), _run(32, 3.2)]
    specs = [_run(12, 2.6), _run(12, 1.0), _run(12, 2.5)]
    lines = calls_vs_speed(plains, specs, gamma=4)
    assert [x.verdict for x in lines] == [CANNOT_TELL, CANNOT_TELL]
    assert "the timed repeats disagree" in lines[1].text
    with pytest.raises(ValueError, match="as many plain as speculative"):
        calls_vs_speed(plains, specs[:2], gamma=4)


def test_claim10_cannot_tell_says_what_size_would_decide():
    assert steps_to_decide(5, 16) == 29 and steps_to_decide(8, 16) is None
    line = first_token_rejections([5, 4, 5, 2], larger_size="the default size: 96 tokens")
    assert line.verdict == CANNOT_TELL
    assert "about 29 rejecting steps would decide (this run had 16)" in line.text
    assert line.text.endswith("-- the default size: 96 tokens.")
    even = first_token_rejections([3, 1, 1, 1])
    assert "no practical run size would decide" in even.text
    assert "about" not in first_token_rejections([9, 1, 0, 0]).text  # decided: no size note


def test_the_size_that_decides_keeps_deciding():
    """Issue-27 re-review of 08: "at the measured share (64%) about 43 rejecting steps would
    decide (this run had 45)" -- 43 cleared 50% by rounding luck (28 of 43), while 44, 45 and
    47 do not. The size printed is the one from which every larger run decides."""
    n = steps_to_decide(29, 45)
    assert n == 48
    for m in range(n, 2 * n):
        lo, _ = acceptance_interval(round(m * 29 / 45), m)
        assert lo > 0.5, m
    assert acceptance_interval(round(47 * 29 / 45), 47)[0] < 0.5  # just below: a miss


def test_expected_plugin_tv_matches_a_simulation():
    rng = np.random.default_rng(0)
    law = np.array([0.5, 0.3, 0.15, 0.05, 0.0])
    ref = np.array([0.4, 0.3, 0.2, 0.05, 0.05])
    sims = [0.5 * np.abs(rng.multinomial(400, law) / 400 - ref).sum() for _ in range(4000)]
    assert expected_plugin_tv(law, ref, 400) == pytest.approx(np.mean(sims), abs=0.002)
    # the bias: a sampler that follows the law exactly still measures a TV well above 0
    assert expected_plugin_tv(ref, ref, 400) > 0.02


def _shipped():
    return pd.DataFrame(
        {
            "lossless": [False, False, True],
            "caught": [True, True, False],
            "n_to_detect": [300, 60, float("inf")],
            "predicted_tv": [0.0075, 0.2, 0.0],
            "law": ["exact"] * 3,
            "measured_tv": [0.057, 0.21, 0.0645],
            "expected_measured_tv": [0.029, 0.205, 0.0418],
            "impossible": [6, 0, 0],
            "pvalue": [0.0, 1e-9, 0.6],
        },
        index=["quantized", "late", "block"],
    )


def test_shipped_lines_read_measured_against_expected_and_name_impossible_outcomes():
    lines = shipped_mistake_lines(_shipped(), n_draws=400)
    assert "biased upward" in lines[1]
    assert "measured 0.0570 (expected 0.0290)" in lines[2]
    assert "an impossible outcome was seen: 6 of 400 draws" in lines[2]
    assert "impossible" not in lines[3]
    assert lines[4].endswith("measured 0.0645 (expected 0.0418): no departure found")


def test_shipped_figure_marks_the_expected_value_and_keeps_its_legend_off_the_panels():
    t = _shipped()
    fig = predicted_vs_measured_figure(
        t.index, t.predicted_tv, t.measured_tv, t.n_to_detect, 400,
        expected=t.expected_measured_tv,
    )  # fmt: skip
    pred, meas, exp = fig.data[:3]
    assert list(exp.x) == list(meas.x) and list(exp.y) == list(t.expected_measured_tv)
    assert fig.layout.legend.x > 1  # right of both panels, over no title or bar
    taken = {PALETTE["plain"], PALETTE["speculative"]}
    assert pred.marker.color not in taken and meas.marker.color not in taken
    assert list(fig.layout.xaxis.ticktext) == list(t.index)


def test_shipped_figure_whiskers_the_expected_mark_and_ticks_decades():
    # re-review 27d of 04: two measured bars outside an unmarked spread; log ticks 2, 5, 1000
    t = _shipped()
    low, high = [0.02, 0.19, 0.03], [0.04, 0.22, 0.055]
    fig = predicted_vs_measured_figure(
        t.index, t.predicted_tv, t.measured_tv, t.n_to_detect, 400,
        expected=t.expected_measured_tv, expected_range=(low, high),
    )  # fmt: skip
    exp = fig.data[2]
    assert exp.error_y.array == pytest.approx(
        [h - e for h, e in zip(high, t.expected_measured_tv, strict=True)]
    )
    assert exp.error_y.arrayminus == pytest.approx(
        [e - lo for lo, e in zip(low, t.expected_measured_tv, strict=True)]
    )
    assert "whisker: 90% of runs" in exp.name and fig.layout.yaxis2.dtick == 1
    label = fig.layout.annotations[-1]
    assert label.text == "400 draws (this run)"
    assert label.yref == "y2" and label.y == pytest.approx(math.log10(400))  # log axis: log10
    bare = predicted_vs_measured_figure(
        t.index, t.predicted_tv, t.measured_tv, t.n_to_detect, 400,
        expected=t.expected_measured_tv,
    )  # fmt: skip
    assert bare.data[2].error_y.array is None  # no range given: no whisker drawn


def test_the_plug_in_range_holds_ninety_percent_of_runs():
    from specviz.effects.shipped import expected_plugin_tv, plugin_tv_range

    law = np.array([0.5, 0.3, 0.2])
    low, high = plugin_tv_range(law, law, 400, seed=0)
    assert low < expected_plugin_tv(law, law, 400) < high
    rng = np.random.default_rng(1)  # fresh runs, another seed: about 90% land inside
    tvs = 0.5 * np.abs(rng.multinomial(400, law, size=4000) / 400 - law).sum(axis=1)
    inside = np.mean((tvs >= low) & (tvs <= high))
    assert 0.87 < inside < 0.93
    # a law that departs from the expected one sits outside the lossless range (the control)
    assert plugin_tv_range(np.array([0.6, 0.3, 0.1]), law, 400, seed=0)[0] > high


def test_a_cut_answer_that_loops_says_so():
    """Issue-27 re-review of 00: a greedy repetition loop cut at the token budget was labelled
    "before the model finished its answer". A text ending in a repeated phrase says it looped;
    one that does not keeps the old label (the negative control)."""
    from specviz.lab.verdicts._single_run import answer_text

    class Tok:
        def decode(self, ids, skip_special_tokens=False):
            return " ".join(map(str, ids))

    looping = answer_text(Tok(), [7, 8] + [1, 2, 3] * 6, max_new_tokens=20)
    assert "last 15 tokens repeat, word for word" in looping
    assert "before the model finished" not in looping
    # 00's committed answer: a sentence, another, then the first one again, cut mid-way
    s1, s2 = list(range(10, 30)), [40, 41] + list(range(12, 30))
    again = answer_text(Tok(), s1 + s2 + s1[:10], max_new_tokens=50)
    assert "last 10 tokens repeat, word for word" in again
    plain = answer_text(Tok(), list(range(20)), max_new_tokens=20)
    assert "before the model finished its answer" in plain and "looping" not in plain


def test_residuals_axis_names_a_rest_bar_only_when_there_is_one():
    # re-review 27d of 04: "the 17 most expected, then the rest" over 17 bars and no rest bar
    from specviz.stats import goodness_of_fit
    from specviz.views.stats import gof_residuals_figure

    r = goodness_of_fit(np.array([40, 30, 30]), np.array([0.4, 0.3, 0.3]))
    assert (
        gof_residuals_figure(r).layout.xaxis.title.text
        == "outcome (the 3 most expected: every outcome)"
    )
    cut = gof_residuals_figure(r, top=2)
    assert cut.layout.xaxis.title.text == "outcome (the 2 most expected, then the rest)"
    assert len(cut.data[0].x) == 3  # two named bars and the rest's


def test_shipped_lines_name_a_measurement_outside_its_range_and_never_print_p_0_for_underflow():
    # re-review 27e-A of 04: three measured TVs above their whiskers, unnamed; "p = 0" printed
    # for an underflowed p beside "p < 1e-300" in the zoo lines
    t = _shipped().assign(expected_low=[0.02, 0.19, 0.03], expected_high=[0.04, 0.22, 0.055])
    t.loc["late", "pvalue"] = 0.0  # underflow, no impossible outcome
    lines = shipped_mistake_lines(t, n_draws=400)
    quantized, late, block = lines[2], lines[3], lines[4]
    assert "above the 0.0200-0.0400 that 90% of runs" in quantized
    assert "(p = 0; an impossible outcome was seen" in quantized  # exactly 0: impossible
    assert "(p < 1e-300)" in late and "p = 0" not in late and "90% of runs" not in late
    assert "above the 0.0300-0.0550" in block
    inside = shipped_mistake_lines(t.assign(expected_high=1.0), n_draws=400)
    assert not any("90% of runs" in s for s in inside[2:])  # the control: inside, no note
