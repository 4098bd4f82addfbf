"""Figures of specviz.viz hold exactly the numbers of the trace / result they draw.

Every check reads ``fig.data`` of a figure built from a real (toy) trace and compares it with the
trace itself, so a figure cannot silently drift from what the engine recorded.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import specviz as sv
from specviz import views as viz
from specviz.drafting import PromptLookupDrafter
from specviz.perf.acceptance import accepted_counts, fit_alpha, per_position_acceptance
from specviz.perf.theory import expected_tokens_per_call, truncated_geometric_law
from specviz.stats import goodness_of_fit
from specviz.views.palette import PALETTE
from specviz.views.trace import STRIP_COLORS

NAMES = ["the", "cat", "sat", "on", "mat"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def trace() -> sv.Trace:
    target, draft = sv.toy_pair(5, 2, noise=1.0, seed=0)
    r = sv.speculative_generate(
        target, draft, [0], gamma=4, max_new_tokens=60, do_sample=True, seed=3
    )
    assert r.trace is not None
    return r.trace


@pytest.fixture(scope="module")
def rejection_step(trace: sv.Trace) -> int:
    return next(s.step for s in trace.steps if s.accepted < s.drafted)


@pytest.fixture(scope="module")
def bonus_step(trace: sv.Trace) -> int:
    return next(s.step for s in trace.steps if s.final_kind == "bonus" and s.drafted)


def by_name(fig, name):
    return next(t for t in fig.data if t.name == name)


# -- tokens ----------------------------------------------------------------------------------


class FakeTokenizer:
    def decode(self, ids):
        return {0: " the", 1: "\n", 2: ""}[ids[0]]


def test_token_label_sources():
    assert viz.token_label(3) == "#3"
    assert viz.token_label(1, NAMES) == "cat"
    assert viz.token_label(1, {1: "x"}) == "x"
    assert viz.token_label(4, lambda i: f"t{i}") == "t4"
    assert viz.token_label(0, FakeTokenizer()) == "·the"  # whitespace made visible
    assert viz.token_label(1, FakeTokenizer()) == "↵"
    assert viz.token_label(2, FakeTokenizer()) == "∅"
    assert viz.token_label(-1, NAMES) == "∅"
    with pytest.raises(TypeError, match="tokenizer"):
        viz.token_label(1, 3.5)


def test_slots_read_back_the_generated_text(trace):
    slots = viz.token_slots(trace)
    emitted = [s.token for s in slots if s.kind not in ("rejected", "discarded")]
    assert emitted == [t for st in trace.steps for t in st.emitted]
    kinds = {k: sum(s.kind == k for s in slots) for k in STRIP_COLORS}
    assert kinds["accepted"] == sum(st.accepted for st in trace.steps)
    # the rejected draft (tested) is told apart from the drafts after it (never tested)
    assert kinds["rejected"] == sum(st.accepted < st.drafted for st in trace.steps)
    assert kinds["rejected"] + kinds["discarded"] == sum(
        st.drafted - st.accepted for st in trace.steps
    )
    assert kinds["corrected"] == sum(st.final_kind == "corrected" for st in trace.steps)
    assert kinds["bonus"] == sum(st.final_kind == "bonus" for st in trace.steps)


def test_token_strip_cells_and_highlight(trace, rejection_step):
    fig = viz.token_strip_figure(trace, NAMES, highlight_step=rejection_step, per_row=10)
    slots = viz.token_slots(trace)
    assert {t.name for t in fig.data} == {"accepted", "rejected", "corrected", "bonus", "discarded"}
    # one colour per meaning: a rejected draft is wine, never the grey of a never-tested one
    for t in fig.data:
        assert t.marker.color == PALETTE[t.name]
    assert sum(len(t.x) for t in fig.data) == len(slots)
    # each cell sits at its reading-order index: row = i // 10, column = i % 10
    cells = sorted((int(y), int(b)) for t in fig.data for y, b in zip(t.y, t.base, strict=True))
    assert cells == [(i // 10, i % 10) for i in range(len(slots))]
    outlined = sum(w == 3 for t in fig.data for w in t.marker.line.width)
    assert outlined == sum(s.step == rejection_step for s in slots)
    corrected = by_name(fig, "corrected")
    assert all(s in NAMES for s in corrected.text)


def test_token_strip_hovers_use_one_based_draft_positions(trace):
    fig = viz.token_strip_figure(trace, NAMES)
    n_new = sum(len(st.emitted) for st in trace.steps)
    seen = set()
    for t in fig.data:
        assert t.hovertemplate == "%{customdata[7]}<extra></extra>"
        for step, row, *_, text in t.customdata:
            st = trace.steps[step]
            r = st.positions[row]
            seen.add(t.name)
            if r.draft_token < 0:  # the bonus token is no draft position
                assert f"bonus token (after all {st.drafted} drafts were accepted)" in text
                assert "draft position" not in text
            else:
                assert f"step {step}, draft position {row + 1}:" in text
            if t.name == "discarded" and not r.evaluated:
                assert f"never tested (draft position {st.accepted + 1} was rejected" in text
            if t.name in ("accepted", "corrected", "bonus"):  # the output index, labelled
                assert f"generated token {r.position + 1} of {n_new}" in text
            assert " position %" not in text and "evaluated" not in text
    assert seen >= {"accepted", "rejected", "corrected", "bonus", "discarded"}


def test_token_strip_plain_decoding_uses_target_kind():
    target, _ = sv.toy_pair(5, 2, seed=0)
    base = sv.autoregressive_generate(target, [0], max_new_tokens=7, do_sample=True, seed=0)
    fig = viz.token_strip_figure(base.trace, NAMES)
    assert [t.name for t in fig.data if len(t.x)] == ["target"]
    assert list(by_name(fig, "target").text) == [NAMES[t] for t in base.new_tokens]


# -- one position ---------------------------------------------------------------------------


def test_pq_bars_at_a_rejection(trace, rejection_step):
    step = trace.steps[rejection_step]
    row = step.positions[step.accepted]
    fig = viz.pq_figure(trace, rejection_step, tokenizer=NAMES)
    p, q = by_name(fig, "p (target)"), by_name(fig, "q (draft)")
    x = list(p.x).index(NAMES[row.draft_token])
    assert p.y[x] == pytest.approx(row.p_target)
    assert q.y[x] == pytest.approx(row.q_draft)
    assert p.marker.line.width[x] == 3 and sum(w == 3 for w in p.marker.line.width) == 1
    assert set(p.x) >= {NAMES[i] for i in row.top_p_ids}
    assert "reject" in fig.layout.title.text


def test_pq_bars_leave_out_the_padding_of_a_one_hot_p(trace, rejection_step):
    """Issue 27: a greedy p is one-hot, its top-k padded with tokens at p = 0 whose q is ~1e-8
    (special tokens on SmolLM2): those bars carry nothing and are not drawn; the drafted token
    is drawn whatever its mass, and a token with visible q stays."""
    import dataclasses

    step = trace.steps[rejection_step]
    row = step.positions[step.accepted]
    pad, kept = [i for i in range(len(NAMES)) if i != row.draft_token][:2]
    padded = dataclasses.replace(
        row,
        top_p_ids=(row.draft_token, pad, kept),
        top_p_probs=(0.0, 0.0, 0.0),
        top_q_ids=(row.draft_token, pad, kept),
        top_q_probs=(1e-9, 1e-9, 0.25),
        p_target=0.0,
        q_draft=1e-9,
    )
    positions = list(step.positions)
    positions[step.accepted] = padded
    steps = list(trace.steps)
    steps[rejection_step] = dataclasses.replace(step, positions=tuple(positions))
    fig = viz.pq_figure(sv.Trace(tuple(steps), trace.meta), rejection_step, tokenizer=NAMES)
    shown = set(by_name(fig, "p (target)").x)
    assert NAMES[pad] not in shown
    assert {NAMES[row.draft_token], NAMES[kept]} <= shown


def test_pq_bars_at_a_bonus_slot(trace, bonus_step):
    step = trace.steps[bonus_step]
    row = step.positions[-1]
    fig = viz.pq_figure(trace, bonus_step, len(step.positions) - 1, tokenizer=NAMES)
    p = by_name(fig, "p (target)")
    assert list(p.y) == pytest.approx(list(row.top_p_probs))
    k = step.drafted
    want = f"step {bonus_step}, bonus token (after all {k} drafts were accepted)"
    assert fig.layout.title.text.startswith(want)
    assert f"draft position {k + 1}" not in fig.layout.title.text  # the bonus is no draft
    for other in (
        viz.accept_test_figure(trace, bonus_step, k),
        viz.residual_figure(trace, bonus_step, k),
    ):
        assert other.layout.title.text.startswith(want)


def test_a_step_opens_on_its_rejection_else_its_first_test(trace, rejection_step, bonus_step):
    rej = trace.steps[rejection_step]
    assert viz.default_row(rej) == rej.accepted
    assert viz.default_row(trace.steps[bonus_step]) == 0  # its first test, not the bonus slot
    assert viz.pq_figure(trace, bonus_step).layout.title.text.startswith(
        f"step {bonus_step}, draft position 1:"
    )


def test_never_tested_drafts(trace):
    step = next(s for s in trace.steps if s.accepted + 1 < s.drafted)
    j = step.accepted + 1  # the draft after the rejection
    assert not step.positions[j].evaluated
    why = f"never tested: draft position {step.accepted + 1} was rejected first"
    pq = viz.pq_figure(trace, step.step, j, NAMES)
    assert why in pq.layout.title.text and "evaluated" not in pq.layout.title.text
    test = viz.accept_test_figure(trace, step.step, j)
    assert why in test.layout.title.text and why in test.layout.annotations[0].text
    res = viz.residual_figure(trace, step.step, j, NAMES)
    note = res.layout.annotations[0].text
    assert why in note and "greedy" not in note and "evaluated" not in note
    assert f"the residual of this step is at draft position {step.accepted + 1}" in note


def test_accept_test_shows_u_against_min_one_p_over_q(trace, rejection_step, bonus_step):
    for step in (rejection_step, bonus_step):
        for j, row in enumerate(trace.steps[step].positions):
            if row.draft_token < 0 or not row.evaluated:
                continue
            fig = viz.accept_test_figure(trace, step, j)
            accept = by_name(fig, "accept: u < min(1, p/q)")
            assert accept.x[0] == pytest.approx(row.accept_prob)
            u = by_name(fig, "u (uniform draw)")
            assert u.x[0] == pytest.approx(row.u)
            assert (row.u < row.accept_prob) == row.accepted
            assert ("accept" if row.accepted else "reject") in fig.layout.title.text
            # one colour per meaning: the reject region is the palette's "rejected", not black
            assert by_name(fig, "reject").marker.color == PALETTE["rejected"]
            assert accept.marker.color == PALETTE["accepted"]


def test_residual_bars(trace, rejection_step):
    step = trace.steps[rejection_step]
    row = step.positions[step.accepted]
    fig = viz.residual_figure(trace, rejection_step, tokenizer=NAMES)
    res = by_name(fig, "residual norm(max(0, p - q))")
    got = dict(zip(res.x, res.y, strict=True))
    for i, v in zip(row.residual_ids, row.residual_probs, strict=True):
        assert got[NAMES[i]] == pytest.approx(v)
    assert got[NAMES[row.draft_token]] == 0.0  # rejected because p < q there: no residual mass
    widths = dict(zip(res.x, res.marker.line.width, strict=True))
    assert widths[NAMES[row.emitted_token]] == 3
    # an accepted position has no residual: an explanatory annotation instead of bars
    acc = next((j for j, r in enumerate(step.positions) if r.accepted), None)
    if acc is not None:
        empty = viz.residual_figure(trace, rejection_step, acc)
        assert not empty.data and "no rejection" in empty.layout.annotations[0].text


def test_greedy_prompt_lookup_point_mass():
    target, _ = sv.toy_pair(5, 2, seed=0)
    r = sv.speculative_generate(target, PromptLookupDrafter(), [0, 1, 2, 0, 1], max_new_tokens=30)
    steps = [s for s in r.trace.steps if s.drafted]
    assert steps, "prompt lookup should find something to draft in a repeated prompt"
    fig = viz.pq_figure(r.trace, steps[0].step, 0, NAMES)
    q = by_name(fig, "q (draft) point mass")
    assert sorted(q.y) == [0.0] * (len(q.y) - 1) + [1.0]
    assert "no uniform draw" in viz.accept_test_figure(r.trace, steps[0].step, 0).layout.title.text


def test_row_errors(trace):
    with pytest.raises(IndexError):
        viz.pq_figure(trace, len(trace.steps))
    with pytest.raises(IndexError):
        viz.pq_figure(trace, 0, 99)


# -- acceptance, rejection points, tokens per call ------------------------------------------


def test_per_position_acceptance_matches_summary(trace):
    rate, reached = per_position_acceptance(trace)
    assert rate.tolist() == pytest.approx(list(trace.summary().per_position_acceptance))
    assert reached[0] == sum(1 for s in trace.steps if s.drafted)
    fig = viz.per_position_acceptance_figure({"toy": trace}, alpha=0.5)
    assert list(by_name(fig, "toy").y) == pytest.approx(rate.tolist())
    assert list(fig.data[-1].y) == [0.5, 0.5]


@pytest.mark.parametrize("alpha,gamma", [(0.0, 3), (0.3, 1), (0.7, 4), (0.95, 8), (1.0, 5)])
def test_theory_identities(alpha, gamma):
    law = truncated_geometric_law(alpha, gamma)
    assert law.sum() == pytest.approx(1.0)
    # E[tokens per call] = E[N] + 1 is the closed form
    mean = float((np.arange(gamma + 1) * law).sum()) + 1
    assert expected_tokens_per_call(alpha, gamma) == pytest.approx(mean)


def test_theory_input_errors():
    with pytest.raises(ValueError):
        truncated_geometric_law(1.2, 3)
    with pytest.raises(ValueError):
        truncated_geometric_law(0.5, 0)
    with pytest.raises(ValueError):
        fit_alpha([0, 5], 4)
    assert math.isnan(fit_alpha([], 4))


def test_fit_alpha_recovers_the_law():
    rng = np.random.default_rng(0)
    acc = rng.choice(5, size=20_000, p=truncated_geometric_law(0.6, 4))
    assert fit_alpha(acc, 4) == pytest.approx(0.6, abs=0.01)


def test_rejection_histogram(trace):
    acc = accepted_counts(trace, 4)
    assert acc and all(0 <= a <= 4 for a in acc)
    fig = viz.rejection_histogram_figure(acc, 4)
    obs, law = by_name(fig, "observed"), by_name(fig, "truncated geometric")
    assert list(obs.y) == pytest.approx((np.bincount(acc, minlength=5) / len(acc)).tolist())
    a = fit_alpha(acc, 4)
    assert list(law.y) == pytest.approx(truncated_geometric_law(a, 4).tolist())
    # one convention: the first drafted token is position 1
    assert list(obs.x) == ["1", "2", "3", "4", "none: all accepted"]


def test_rejection_grid():
    cells = {("a", 2): [0, 1, 2, 2], ("a", 4): [0, 4], ("b", 2): [1, 1], ("b", 4): []}
    fig = viz.rejection_grid_figure(cells)
    assert len(fig.data) == 2 * 3  # one bar + one law per populated cell
    titles = [a.text for a in fig.layout.annotations]
    assert any("no steps" in t for t in titles) and any("a, gamma=4" in t for t in titles)
    assert sum(bool(t.showlegend) for t in fig.data) == 2  # legend entries once


def test_tokens_per_call_figures():
    pts = [viz.SimPoint(0.6, g, 1.5 + 0.1 * g, 0.05, "sim") for g in (1, 2, 3)]
    fig = viz.tokens_per_call_vs_gamma_figure([0.6, 0.8], 5, pts)
    assert len(fig.data) == 3
    assert list(fig.data[1].y) == pytest.approx(
        [expected_tokens_per_call(0.8, g) for g in range(0, 6)]
    )
    assert fig.data[1].x[0] == 0 and fig.data[1].y[0] == pytest.approx(1.0)  # plain decoding
    assert list(fig.data[2].error_y.array) == pytest.approx([1.96 * 0.05] * 3)
    fig = viz.tokens_per_call_vs_alpha_figure(4, pts[:1])
    curve = fig.data[0]
    assert curve.y[0] == pytest.approx(1.0) and curve.y[-1] < 5
    assert list(by_name(fig, "simulated").x) == [0.6]


def test_laws_figure_stacks_the_two_paths():
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.5, 0.3])
    beta = np.minimum(p, q).sum()
    res = np.clip(p - q, 0, None) / np.clip(p - q, 0, None).sum()
    fig = viz.laws_figure(
        {"acc": np.minimum(p, q), "cor": (1 - beta) * res, "p": p},
        NAMES[:3],
        stacked=["acc", "cor"],
    )
    acc, cor = by_name(fig, "acc"), by_name(fig, "cor")
    assert list(cor.base) == pytest.approx(list(acc.y))
    assert (np.array(cor.base) + np.array(cor.y)).tolist() == pytest.approx(p.tolist())
    with pytest.raises(ValueError):
        viz.laws_figure({"a": [1.0], "b": [0.5, 0.5]})


def test_accept_scatter_separates_at_the_diagonal(trace):
    fig = viz.accept_scatter_figure(trace)
    acc = next(t for t in fig.data if t.name.startswith("accepted"))
    rej = next(t for t in fig.data if t.name.startswith("rejected"))
    assert all(u < a for a, u in zip(acc.x, acc.y, strict=True))
    assert all(u >= a for a, u in zip(rej.x, rej.y, strict=True))
    evaluated = sum(min(s.drafted, s.accepted + 1) for s in trace.steps)
    assert len(acc.x) + len(rej.x) == evaluated
    assert acc.marker.color == PALETTE["accepted"] and rej.marker.color == PALETTE["rejected"]
    # hovers give the 1-based draft position of each test, not the generated-token index
    assert "draft position %{customdata[1]}" in rej.hovertemplate
    for step, pos, *_ in rej.customdata:
        assert pos == trace.steps[step].accepted + 1  # the first rejection of its step


# -- statistics results ---------------------------------------------------------------------


def test_gof_figure_shows_the_tested_bins():
    p = np.array([0.5, 0.3, 0.15, 0.03, 0.02])
    obs = np.array([52, 28, 14, 4, 2])
    res = goodness_of_fit(obs, p, labels=NAMES)
    fig = viz.gof_figure(res, title="toy", label=str.upper)
    o, e = by_name(fig, "observed"), by_name(fig, "expected")
    assert list(o.y) == pytest.approx(np.asarray(res.observed).tolist())
    assert list(e.y) == pytest.approx(np.asarray(res.expected).tolist())
    assert "THE" in o.x and any("pooled" in x for x in o.x)  # sparse bins pooled by the test
    assert f"{res.pvalue:.3g}" in fig.layout.title.text


def test_verifier_report_caps_evidence():
    fig = viz.verifier_report_figure(["lossless", "bad"], [0.4, 0.0], [0.0, 0.3])
    logp = fig.data[0]
    assert logp.y[0] == pytest.approx(-math.log10(0.4))
    assert logp.y[1] == 16.0
    assert list(fig.data[1].y) == [0.0, 0.3]


# -- statistics, numerics and grid figures ------------------------------------------------------


def test_pvalue_uniformity_figure_sorts_and_counts():
    pv = {"lossless": [0.9, 0.01, 0.5, 0.2], "broken": [0.001, 0.002, 0.3]}
    fig = viz.pvalue_uniformity_figure(pv, alpha=0.05)
    ok, bad = fig.data[0], fig.data[1]
    assert list(ok.y) == sorted(pv["lossless"]) and list(ok.x) == pytest.approx(
        [0.125, 0.375, 0.625, 0.875]
    )
    assert "25% below 0.05" in ok.name and "67% below 0.05" in bad.name
    assert fig.data[-1].name == "uniform"


def test_power_curve_figure():
    fig = viz.power_curve_figure([10, 100], {"a": [0.1, 0.95]}, marks={"n": 50, "none": math.inf})
    assert list(fig.data[0].y) == [0.1, 0.95] and fig.layout.xaxis.type == "log"
    assert len(fig.layout.shapes) == 1  # the 90% line
    assert [t.name for t in fig.data] == ["a", "n"]  # the finite mark, drawn as a trace
    assert list(fig.data[1].x) == [50.0, 50.0]


def test_margin_figure_places_divergences_on_a_log_scale():
    bg = {"fp32": [1.0, 2.0, 0.01], "bf16": [0.5, 0.0]}
    div = [dict(label="a", margin=0.01), dict(label="b", margin=None)]
    fig = viz.margin_figure(bg, div, near_tie={"bf16": 0.5})
    hists = [t for t in fig.data if t.type == "histogram"]
    assert [len(h.x) for h in hists] == [3, 2]
    assert min(hists[1].x) == pytest.approx(-4.0)  # a zero margin is floored at 1e-4
    marks = fig.data[-1]
    assert list(marks.x) == pytest.approx([-2.0]) and list(marks.text) == ["a"]


def test_rejection_positions_figure_shares():
    fig = viz.rejection_positions_figure([6, 2, 0], 2, empty=5, cut_short=1, title="t")
    bar = fig.data[0]
    # every step counted once: rejections at 1..3, full drafts kept, cut short, empty
    assert list(bar.x) == [
        "1",
        "2",
        "3",
        "none: all accepted",
        "none: all accepted (cut short)",
        "nothing drafted",
    ]
    assert list(bar.customdata) == [6, 2, 0, 2, 1, 5]
    assert list(bar.y) == pytest.approx([c / 16 for c in (6, 2, 0, 2, 1, 5)])
    assert sum(bar.y) == pytest.approx(1)
    assert "16 steps" in fig.layout.title.text and "5 drafted nothing" in fig.layout.title.text


def test_metric_bars_and_cost_figures():
    import pandas as pd

    s = pd.DataFrame(
        dict(
            drafter=["a", "a", "b", "b"],
            category=["x", "all", "x", "all"],
            mean_accepted_length=[1.5, 1.4, 2.0, 2.2],
            draft_time_share=[0.01, 0.02, 0.2, 0.25],
            speedup=[1.1, 1.0, 0.9, 0.8],
        )
    )
    fig = viz.metric_bars_figure(s, "mean_accepted_length")
    assert [t.name for t in fig.data] == ["a", "b"] and list(fig.data[1].y) == [2.0, 2.2]
    with pytest.raises(KeyError, match="nope"):
        viz.metric_bars_figure(s, "nope")
    cost = viz.cost_benefit_figure(s)
    assert list(cost.data[0].marker.size) == [8, 16]  # category "all" drawn large
    assert list(cost.data[1].x) == [0.2, 0.25]
    assert [list(c) for c in cost.data[1].customdata] == [["x", 0.9], ["all", 0.8]]
    # issue 27: the speedup labels the pooled marker; drafters keep their bar colours
    assert list(cost.data[1].text) == ["", "b: 0.80x"]
    assert [t.marker.color for t in cost.data] == [t.marker.color for t in fig.data]
    assert cost.data[0].marker.color != cost.data[1].marker.color


def test_tokens_per_call_points_take_their_curves_colour():
    """03 draws a category's measured points in its theory curve's colour (issue 15: not all
    one colour), through the figure's ``labels``."""
    pts = [viz.SimPoint(0.6, 2, 2.0, 0.1, "code"), viz.SimPoint(0.8, 3, 2.9, 0.1, "chat")]
    fig = viz.tokens_per_call_vs_gamma_figure(
        [0.6, 0.8], 4, pts, labels=["code", "chat"], points_name="measured"
    )
    curves, marks = fig.data[:2], fig.data[2]
    assert [c.name for c in curves] == ["theory, code (alpha 0.60)", "theory, chat (alpha 0.80)"]
    assert list(marks.marker.color) == [curves[0].line.color, curves[1].line.color]
    assert marks.name.startswith("measured")
    # curves close together keep their markers apart: nudged sideways, the exact gamma in hover
    assert list(marks.x) == pytest.approx([1.96, 3.04])
    assert [c[2] for c in marks.customdata] == [2, 3]
    with pytest.raises(ValueError, match="labels"):
        viz.tokens_per_call_vs_gamma_figure([0.6], 4, pts, labels=["a", "b"])


def test_a_greedy_rejection_says_what_replaced_the_draft():
    # issue 27 re-review: 00's explorer showed an empty residual box under greedy matching
    target, draft = sv.toy_pair(5, 2, noise=1.0, seed=0)
    r = sv.speculative_generate(target, draft, [0], gamma=4, max_new_tokens=40)
    step = next(s for s in r.trace.steps if s.accepted < s.drafted)
    row = step.positions[step.accepted]
    fig = viz.residual_figure(r.trace, step.step, tokenizer=NAMES)
    text = fig.layout.annotations[0].text
    assert not fig.data and text.startswith("greedy matching: the draft ")
    assert repr(NAMES[row.draft_token]) in text and repr(NAMES[row.emitted_token]) in text


def test_the_rejection_histogram_says_which_steps_it_counts():
    """Issue-27 re-review of 02: the histogram counted 45 full-gamma steps (46 of 88 drafts)
    beside the run's 48 calls (48 of 91) without saying so."""
    fig = viz.rejection_histogram_figure([0, 1, 4, 2], 4, of_steps=6)
    assert "the 4 of 6 steps that drafted all 4 tokens" in fig.layout.title.text
    assert "(n = 4 steps)" in viz.rejection_histogram_figure([0, 1, 4, 2], 4).layout.title.text
