"""Explorers driven headless (ipywidgets callbacks run without a front end), and the
experiments behind them checked against exact laws.

The statistical checks use fixed seeds and a Pearson chi-square at alpha = 0.001 (a 0.1%
false-positive rate); the mirror of the bug zoo (``first_token_law``) has a negative control:
the same samples tested against the *target* law must be rejected for the broken rules.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest
import torch
from _snapshot import snapshot_html

import specviz as sv
from specviz import lab as W
from specviz import views as viz
from specviz.perf.theory import truncated_geometric_law
from specviz.stats import goodness_of_fit, tv_distance

ALPHA = 1e-3
NAMES = ["the", "cat", "sat", "on", "mat"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def trace() -> sv.Trace:
    target, draft = sv.toy_pair(5, 2, noise=1.0, seed=0)
    r = sv.speculative_generate(
        target, draft, [0], gamma=4, max_new_tokens=60, do_sample=True, seed=3
    )
    return r.trace


def title(fw: go.FigureWidget) -> str:
    return fw.layout.title.text


# -- trace explorer -------------------------------------------------------------------------


def test_trace_explorer_slider_moves_every_figure(trace):
    ex = W.TraceExplorer(trace, NAMES)
    assert ex.step == 0 and ex.slider.max == len(trace.steps) - 1
    before = [title(f) for f in (ex.pq, ex.accept, ex.residual)]
    strip_before = [list(t.marker.line.width) for t in ex.strip.data]
    ex.slider.value = 3  # what dragging the slider does
    assert ex.step == 3
    after = [title(f) for f in (ex.pq, ex.accept, ex.residual)]
    assert all(a != b for a, b in zip(after, before, strict=True))
    assert all("step 3" in t for t in after)
    assert [list(t.marker.line.width) for t in ex.strip.data] != strip_before
    outlined = sum(w == 3 for t in ex.strip.data for w in t.marker.line.width)
    assert outlined == sum(s.step == 3 for s in viz.token_slots(trace))


def test_trace_explorer_buttons_and_position(trace):
    ex = W.TraceExplorer(trace, NAMES)
    ex.next_button.click()
    ex.next_button.click()
    assert ex.step == 2 and ex.slider.value == 2
    ex.prev_button.click()
    assert ex.step == 1
    ex.prev_button.click()
    ex.prev_button.click()  # clamps at the first step
    assert ex.step == 0
    options = [v for _, v in ex.row_select.options]
    assert options == list(range(len(trace.steps[0].positions)))
    ex.row_select.value = options[0]
    assert ex.row == 0 and "draft position 1" in title(ex.pq)
    ex.show_step(len(trace.steps) - 1)
    assert ex.slider.value == len(trace.steps) - 1
    with pytest.raises(IndexError):
        ex.show_step(len(trace.steps))


def test_trace_explorer_matches_viz(trace):
    ex = W.TraceExplorer(trace, NAMES)
    ex.show_step(2, 0)
    expected = viz.pq_figure(trace, 2, 0, NAMES)
    got = ex.pq.data[0]
    assert list(got.x) == list(expected.data[0].x)
    assert list(got.y) == pytest.approx(list(expected.data[0].y))


def _rows(trace, pred):
    return [(s.step, j) for s in trace.steps for j, r in enumerate(s.positions) if pred(s, r)]


def test_trace_explorer_opens_on_the_rejection_else_the_first_test(trace):
    ex = W.TraceExplorer(trace, NAMES)
    first = next(s for s in trace.steps if s.drafted)
    assert ex.step == first.step
    full = next(s for s in trace.steps if s.drafted and s.accepted == s.drafted)
    ex.show_step(full.step)
    assert ex.row == 0 and "draft position 1:" in title(ex.pq)  # its first test, not the bonus
    assert "accept" in title(ex.accept)
    rej = next(s for s in trace.steps if s.accepted < s.drafted)
    ex.show_step(rej.step)
    assert ex.row == rej.accepted and "reject" in title(ex.accept)
    assert f"draft position {rej.accepted + 1}:" in title(ex.residual)


def test_trace_explorer_marks_never_tested_drafts(trace):
    step, row = _rows(trace, lambda s, r: r.draft_token >= 0 and not r.evaluated)[0]
    ex = W.TraceExplorer(trace, NAMES)
    ex.show_step(step, row)
    s = trace.steps[step]
    labels = dict((v, k) for k, v in ex.row_select.options)
    assert "never tested" in labels[row] and "rejected" in labels[s.accepted]
    assert "never tested" in title(ex.pq) and "never tested" in title(ex.accept)
    u = next(t for t in ex.accept.data if t.name == "u (uniform draw)")
    assert len(u.x) == 0  # no u marker: the draw decided nothing
    note = ex.residual.layout.annotations[0].text
    assert "never tested" in note and "greedy" not in note
    assert f"draft position {s.accepted + 1}" in note
    assert "never tested" in ex.info.value


def test_trace_explorer_uses_one_based_draft_positions_in_hovers(trace):
    ex = W.TraceExplorer(trace, NAMES)
    for t in ex.strip.data:
        for step, row, text in t.customdata:
            r = trace.steps[step].positions[row]
            if r.draft_token >= 0:
                assert f"step {step}, draft position {row + 1}" in text
            elif trace.steps[step].drafted:
                assert f"after draft position {trace.steps[step].drafted}" in text
        assert t.hovertemplate == "%{customdata[2]}<extra></extra>"


def test_trace_explorer_jumps_to_the_most_borderline_test(trace):
    tested = [
        (abs(r.accept_prob - 0.5), s.step, j)
        for s in trace.steps
        for j, r in enumerate(s.positions)
        if r.draft_token >= 0 and r.evaluated and not math.isnan(r.u)
    ]
    _, step, row = min(tested)
    ex = W.TraceExplorer(trace, NAMES)
    assert ex.borderline == (step, row) and not ex.borderline_button.disabled
    ex.borderline_button.click()
    assert (ex.step, ex.row) == (step, row)
    assert title(ex.pq).startswith(f"step {step}, draft position {row + 1}:")
    a = trace.steps[step].positions[row].accept_prob
    assert f"min(1, p/q) = {a:.3f}" in title(ex.accept)
    found = W.borderline_tests(trace)
    assert found and all(0.05 < x < 0.95 for _, _, x in found)
    assert len(found) == sum(d < 0.45 for d, _, _ in tested)


def test_trace_explorer_click_a_token_opens_its_step(trace):
    from plotly.callbacks import InputDeviceState, Points

    ex = W.TraceExplorer(trace, NAMES)
    t = next(t for t in ex.strip.data if t.name == "corrected")
    i = len(t.x) - 1
    step, row = t.customdata[i][:2]
    assert step != ex.step
    k = list(ex.strip.data).index(t)
    t._dispatch_on_click(Points([i], [t.x[i]], [t.y[i]], t.name, k), InputDeviceState())
    assert (ex.step, ex.row) == (step, row)
    assert ex.slider.value == ex.steps.index(step)
    assert "reject" in title(ex.accept)
    # the handlers survive the redraw: a second click works too
    b = next(t for t in ex.strip.data if t.name == "bonus")
    step2, row2 = b.customdata[0][:2]
    b._dispatch_on_click(Points([0], [b.x[0]], [b.y[0]], b.name, 0), InputDeviceState())
    assert (ex.step, ex.row) == (step2, row2) and "bonus" in title(ex.pq)


def test_trace_explorer_play_walks_the_steps(trace):
    ex = W.TraceExplorer(trace, NAMES)
    assert ex.play.max == ex.slider.max and ex.play.value == ex.slider.value
    ex.play.value = 3  # what a tick of the play button does
    assert ex.step == ex.steps[3] and ex.slider.value == 3
    ex.prev_button.click()
    assert ex.play.value == 2  # and the play button follows the other controls


def test_trace_explorer_log_scale_toggle(trace):
    ex = W.TraceExplorer(trace, NAMES)
    rej = next(s for s in trace.steps if s.accepted < s.drafted)
    ex.show_step(rej.step)
    assert ex.pq.layout.yaxis.type in (None, "linear", "-")
    ex.log_toggle.value = True
    assert ex.log_scale and ex.pq.layout.yaxis.type == "log"
    assert ex.residual.layout.yaxis.type == "log"
    ex.next_button.click()  # stays on while scrubbing
    assert ex.pq.layout.yaxis.type == "log"
    ex.set_log_scale(False)
    assert not ex.log_toggle.value and ex.pq.layout.yaxis.type != "log"


def test_trace_explorer_refuses_plain_traces():
    target, _ = sv.toy_pair(5, 2, seed=0)
    base = sv.autoregressive_generate(target, [0], max_new_tokens=3)
    with pytest.raises(ValueError, match="speculative"):
        W.TraceExplorer(base.trace)


def test_nan_becomes_null_in_widgets(trace):
    # bonus slots carry NaN p/q; the widget comm refuses NaN, so sync_figure must drop it
    fw = go.FigureWidget()
    W.sync_figure(fw, viz.token_strip_figure(trace, NAMES))
    bonus = next(t for t in fw.data if t.name == "bonus")
    flat = [v for row in bonus.customdata for v in row]
    assert None in flat
    assert not any(isinstance(v, float) and math.isnan(v) for v in flat)


# -- toy explorer ---------------------------------------------------------------------------


def test_explorers_are_born_holding_their_first_figures(monkeypatch, grid):
    # JupyterLab can drop updates sent right after a widget is created (blank panels): the
    # first figures go into the FigureWidgets' opening state, no sync_figure at creation
    import specviz.lab.explorers as lab

    calls = []
    monkeypatch.setattr(lab, "sync_figure", lambda fw, fig: calls.append(fw))
    toy = W.ToyExplorer(tokens=300)
    assert not calls and "gamma = 4" in title(toy.curve) and toy.histogram.data
    assert [title(toy.curve), title(toy.histogram)] == [f.layout.title.text for f in toy.figures()]
    ex = W.GridExplorer(grid)
    assert not calls and ex.rejections.data and ex.positions.data
    assert title(ex.rejections) == ex.figures()[0].layout.title.text
    assert "mean accepted length" in ex.info.value
    toy.update(gamma=3)
    ex.select(gamma=3)
    assert len(calls) == 4  # later changes go through sync_figure


def test_toy_explorer_sliders_resimulate():
    ex = W.ToyExplorer(tokens=600)
    first = ex.result
    assert first is not None and first.gamma == 4
    assert "gamma = 4" in title(ex.curve)
    ex.gamma_slider.value = 6  # slider -> update()
    assert ex.result.gamma == 6 and "gamma = 6" in title(ex.curve)
    assert len(ex.histogram.data[0].x) == 7  # n = 0..6
    ex.noise_slider.value = 2.5
    assert ex.result.noise == 2.5 and ex.result.alpha < first.alpha
    sim = ex.update(noise=0.5, temperature=1.5, gamma=2)
    assert (ex.noise_slider.value, ex.temperature_slider.value, ex.gamma_slider.value) == (
        0.5,
        1.5,
        2,
    )
    assert sim is ex.result and sim.temperature == 1.5
    point = next(t for t in ex.curve.data if t.name == "simulated")
    assert point.x[0] == pytest.approx(sim.alpha) and point.y[0] == pytest.approx(
        sim.tokens_per_call
    )
    assert "alpha (exact)" in ex.info.value


def test_simulate_toy_follows_theory():
    sim = W.simulate_toy(1.0, 1.0, 4, tokens=4000)
    assert abs(sim.tokens_per_call - sim.theory) < 4 * sim.tokens_per_call_se
    counts = np.bincount(sim.accepted, minlength=5)
    law = truncated_geometric_law(sim.alpha, 4)
    assert goodness_of_fit(counts, law).pvalue > ALPHA
    assert sim.new_tokens == 4000 and sim.target_calls >= len(sim.accepted)


def test_toy_alpha_is_one_minus_tv():
    target = sv.ToyLM.random(6, order=0, seed=1)
    draft = target.perturbed(1.0, seed=2)
    params = sv.SamplingParams(True, 1.0)
    p, q = target.next_probs([], params).numpy(), draft.next_probs([], params).numpy()
    assert W.toy_alpha(target, draft, params) == pytest.approx(1 - tv_distance(p, q), abs=1e-6)
    with pytest.raises(ValueError, match="order=0"):
        W.toy_alpha(*sv.toy_pair(5, 2), params)


# -- figure selector and display --------------------------------------------------------------


def test_figure_selector():
    figs = {
        "a": go.Figure(go.Bar(x=[1], y=[1]), layout=dict(title="A")),
        "b": go.Figure(go.Bar(x=[1], y=[2]), layout=dict(title="B")),
    }
    sel = W.FigureSelector(figs)
    assert title(sel.figure) == "A"
    sel.dropdown.value = "b"
    assert title(sel.figure) == "B" and list(sel.figure.data[0].y) == [2]
    sel.select("a")
    assert sel.dropdown.value == "a" and title(sel.figure) == "A"
    with pytest.raises(KeyError):
        sel.select("c")


def test_display_bundle_has_widget_and_static_snapshot(trace):
    ex = W.TraceExplorer(trace, NAMES)
    before = pio.renderers.default
    try:
        pio.renderers.default = "plotly_mimetype"
        plain = ex._repr_mimebundle_()
        assert "application/vnd.jupyter.widget-view+json" in plain
        assert "text/html" not in plain  # JupyterLab needs no snapshot
        pio.renderers.default = "notebook"
        bundle = ex._repr_mimebundle_()
        assert "application/vnd.jupyter.widget-view+json" in bundle
        assert bundle["text/html"].count("Plotly.newPlot") == 4  # strip, p/q, test, residual
        assert bundle["text/plain"].startswith("TraceExplorer")
    finally:
        pio.renderers.default = before


# -- exact laws under the verifiers ---------------------------------------------------------


PAIR = sv.toy_pair(5, 2, noise=1.0, seed=0)
PARAMS = sv.SamplingParams(True, 0.7, None, 0.9)
SAMPLED = [v for v in sv.VERIFIERS if v != "greedy" and sv.VERIFIERS[v].tree_sampling is None]


def first_tokens(verifier: str, n: int, seed: int) -> np.ndarray:
    target, draft = PAIR
    counts = W.sample_continuations(
        target,
        draft,
        verifier=verifier,
        params=PARAMS,
        prompt=[0],
        length=2,
        gamma=2,
        n=n,
        seed=seed,
    )
    out = np.zeros(5)
    for k, c in counts.items():
        out[k[0]] += c
    return out


def test_first_token_law_of_the_lossless_rule_is_p():
    target, draft = PAIR
    p = target.next_probs([0], PARAMS).double().numpy()
    law = W.first_token_law("lossless", target.next_logits([0]), draft.next_logits([0]), PARAMS)
    assert law == pytest.approx(p, abs=1e-12)


@pytest.mark.parametrize("verifier", SAMPLED)
def test_first_token_law_matches_the_engine(verifier):
    """The analytic mirror of each rule vs 2,000 first tokens from the real engine."""
    target, draft = PAIR
    law = W.first_token_law(verifier, target.next_logits([0]), draft.next_logits([0]), PARAMS)
    obs = first_tokens(verifier, 2000, seed=11)
    assert goodness_of_fit(obs, law).pvalue > ALPHA
    p = target.next_probs([0], PARAMS).double().numpy()
    if tv_distance(p, law) > 0.1:  # negative control: the same sample refutes the target law
        assert goodness_of_fit(obs, p).pvalue < 1e-6


def test_first_token_law_errors():
    target, draft = PAIR
    args = (target.next_logits([0]), draft.next_logits([0]))
    with pytest.raises(ValueError, match="unknown verifier"):
        W.first_token_law("nope", *args, PARAMS)
    with pytest.raises(ValueError, match="sampling"):
        W.first_token_law("lossless", *args, sv.SamplingParams())


def test_continuation_table_keeps_impossible_outcomes():
    target, _ = PAIR
    counts = {(0, 0): 3, (9, 9): 1}
    keys, obs, exp = W.continuation_table(counts, target, [0], 2, PARAMS)
    assert (9, 9) in keys and exp[keys.index((9, 9))] == 0.0
    assert obs.sum() == 4 and exp.sum() == pytest.approx(1.0)
    assert goodness_of_fit(obs, exp).pvalue == 0.0


def test_samples_to_detect():
    p = np.array([0.5, 0.3, 0.2, 0.0])
    assert W.samples_to_detect(p, 0.0) == math.inf
    small, big = W.samples_to_detect(p, 0.05), W.samples_to_detect(p, 0.02)
    assert 10 < small < big
    assert math.isnan(W.samples_to_detect(p, 0.9))  # no such alternative in the power model


# -- lossless statistics helpers (notebook 05) ------------------------------------------------


def test_memo_lm_is_the_model_and_the_noisy_copy_is_fixed_noise(smollm2):
    from specviz.prompts import render_prompt

    model, tok = smollm2
    ids = render_prompt(tok, "Say hi.")
    target, draft = W.memo_pair(model, 1.0, seed=3)
    with torch.inference_mode():
        direct = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    assert torch.allclose(target.next_logits(ids), direct, atol=1e-4)
    assert len(target.memo) == 1
    noise = draft.next_logits(ids) - target.next_logits(ids)
    assert len(target.memo) == 1  # the copy shares the memo
    assert torch.allclose(noise, draft.noise, atol=1e-4) and 0.8 < float(noise.std()) < 1.2
    params = sv.SamplingParams(True, 0.7, 20, None)
    a = W.acceptance_at(target, draft, ids, params)
    assert 0.05 < a < 0.99  # both paths of the rule get exercised
    assert W.acceptance_at(target, target.noisy_copy(0.0), ids, params) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="sigma"):
        target.noisy_copy(-1.0)
    # a runner over the memo reproduces next_logits position by position
    run = target.make_runner()
    out = run.extend(torch.tensor(ids), 2)
    assert torch.allclose(out[-1], direct, atol=1e-4) and run.length == len(ids)
    run.crop(3)
    assert run.length == 3


def test_calibration_on_toy_lossless_passes_threshold_fails():
    """30 null replicates of 60 continuations (fixed seed). A calibrated test fails this check
    with probability ~1.1% (99% binomial interval + KS at 0.001); the threshold rule is the
    negative control and must come out uncalibrated."""
    ok = W.calibration_on_toy("lossless", replicates=30, n_samples=60, seed=0)
    assert ok.calibrated, ok.method
    assert ok.pvalues.shape == (30,) and ok.replicates == 30
    bad = W.calibration_on_toy("threshold", replicates=30, n_samples=60, seed=0)
    assert not bad.calibrated and bad.rejection_rate > 0.5
    with pytest.raises(ValueError, match=">= 1"):
        W.calibration_on_toy(replicates=0)


def test_same_seed_runs_reproduce_and_differ():
    target, draft = PAIR
    kw = dict(seeds=range(5), max_new_tokens=6, gamma=2, temperature=0.7, top_p=0.9)
    runs = W.same_seed_runs(target, draft, [0], **kw)
    again = W.same_seed_runs(target, draft, [0], **kw)
    assert runs == again  # the seed fixes both texts
    plain = sv.autoregressive_generate(
        target, [0], max_new_tokens=6, do_sample=True, temperature=0.7, top_p=0.9, seed=3
    )
    assert runs[3].plain == tuple(plain.new_tokens)
    assert any(not r.identical for r in runs)  # random numbers are consumed differently
    assert W.SeedComparison(0, (1, 2, 3), (1, 2, 4)).first_difference == 2
    assert W.SeedComparison(0, (1, 2), (1, 2, 4)).first_difference == 2
    assert W.SeedComparison(0, (1, 2), (1, 2)).first_difference is None


def test_power_curves_and_samples_for_power():
    p = np.array([0.4, 0.3, 0.2, 0.1, 0.0])
    q = np.array([0.3, 0.3, 0.2, 0.2, 0.0])
    ns = [10, 100, 1000, 10000]
    curves = W.power_curves(p, {"q": q}, ns, spread_tvs=[0.05])
    assert set(curves) == {"q", "TV 0.05 (spread)"}
    assert np.all(np.diff(curves["q"]) >= -1e-9) and curves["q"][-1] > 0.99
    n = W.samples_for_power(p, q, alpha=0.01)
    at = W.power_curves(p, {"q": q}, [int(n) - 1, int(n)], alpha=0.01)["q"]
    assert at[0] < 0.9 <= at[1]
    one = W.samples_for_power(p, q, alpha=0.01, two_sample=False)
    assert one < n  # a known law needs about half the samples
    assert W.samples_for_power(p, p) == math.inf
    with pytest.raises(ValueError, match="shape"):
        W.power_curves(p, {"bad": q[:3]}, ns)


# -- numerics (notebook 06) ------------------------------------------------------------------


def test_logit_margins_are_top1_minus_top2_of_greedy_steps(smollm2):
    from specviz.prompts import render_prompt

    model, tok = smollm2
    ids = render_prompt(tok, "Count to three.")
    out = sv.autoregressive_generate(model, ids, max_new_tokens=4).new_tokens
    m = W.logit_margins(model, ids, out)
    assert m.shape == (4,) and np.all(m >= 0)
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids + out[:2]])).logits[0, -1]
    top = torch.topk(logits, 2).values
    assert m[2] == pytest.approx(float(top[0] - top[1]), abs=1e-3)
    assert W.logit_margins(model, ids, []).size == 0


def test_precision_greedy_identical_and_a_negative_control(smollm2):
    """Same model under two labels: every row identical. A different model as the second
    'precision' (the target's first 20 layers): plain text diverges with a clear margin, which
    the verdict must call a bug, not numerics."""
    from specviz.drafting import early_exit_model
    from specviz.prompts import Prompt

    model, tok = smollm2
    # its first greedy token has a clear margin (0.70 logits; "Say hi." starts at a near tie, 0.04)
    text = "Count to three."
    prompt = Prompt(id="t-1", category="test", messages=({"role": "user", "content": text},))
    drafters = W.precision_drafters(["prompt_lookup", "early_exit:2"], {"fp32": model})
    table, margins = W.precision_greedy(
        {"fp32": model, "same": model}, drafters, [prompt], tok, max_new_tokens=5
    )
    assert len(table) == 1 * (2 + 3)  # fp32: 2 drafters; same: plain + 2 drafters
    assert table.identical.all() and set(table.verdict) == {"identical"}
    # could speculation have changed the text: measured per (prompt, dtype), fp32 rounding only
    assert (table.verify_gap < 1e-2).all() and (table.verify_flips == 0).all()
    assert (table.decisions == 5).all() and table.within_gap.between(0, 5).all()
    assert margins["fp32"].shape == (5,) and np.allclose(margins["fp32"], margins["same"])
    bad, _ = W.precision_greedy(
        {"fp32": model, "cut": early_exit_model(model, 20)}, {}, [prompt], tok, max_new_tokens=5
    )
    row = bad[bad.drafter == "plain"].iloc[0]
    assert not row.identical and row.verdict == "bug" and row.margin > 0.05
    with pytest.raises(ValueError, match="empty"):
        W.precision_greedy({}, {}, [prompt], tok, max_new_tokens=2)


def test_verify_decode_gaps_small_in_fp32_and_a_verify_pass_that_flips():
    """On a tiny fp32 llama the verify pass (gamma + 1 positions per call) and plain decoding
    (one per call) agree to rounding and flip nothing; a model whose multi-position calls add
    a penalty to their argmax (the negative control) flips every decision after the prefill."""
    from specviz.fixtures.llamas import tiny_llama

    model = tiny_llama(11, seed=3)
    prompt, tokens = [1, 2, 3], [4, 5, 6, 7, 8, 9, 10]
    g = W.verify_decode_gaps
    out = g(model, prompt, tokens, gamma=3)
    assert out["gap"].shape == out["margin"].shape == out["flip"].shape == (7,)
    assert out["gap"].max() < 1e-4 and not out["flip"].any() and (out["margin"] > 0).all()

    class Biased:
        device = model.device

        def __call__(self, input_ids, use_cache, **cache):
            res = model(input_ids=input_ids, use_cache=True, **cache)
            (kv,) = cache.values()
            if input_ids.shape[1] > 1 and kv.get_seq_length() > input_ids.shape[1]:
                top = res.logits.argmax(-1, keepdim=True)  # only verify calls after the prefill
                res.logits.scatter_add_(-1, top, torch.full(top.shape, -1e3))
            return res

    bad = g(Biased(), prompt, tokens, gamma=3)
    assert bad["flip"][0] == False and bad["flip"][1:].all()  # noqa: E712
    assert bad["gap"][1:].min() >= 999
    with pytest.raises(ValueError, match="gamma"):
        g(model, prompt, tokens, gamma=0)


# -- drafters x task types (notebook 07) -----------------------------------------------------


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """A real run_grid on the toy pair: two 'categories', two drafters, two gammas, both modes."""
    from specviz.lab.analysis import run_grid

    target, draft = PAIR
    prompts = [[0, 1, 2, 0, 1, 2, 0, 1], [1, 2, 3], [2, 2, 2, 2]]
    df = run_grid(
        target,
        {"prompt_lookup": sv.PromptLookupDrafter, "toy_draft": draft},
        prompts,
        gammas=[2, 3],
        max_new_tokens=12,
        cache_dir=tmp_path_factory.mktemp("grid"),
        model_name="toy",
        progress=False,
    )
    df["category"] = df.prompt_id.map({"p000": "repetitive", "p001": "open", "p002": "open"})
    return df


def test_pooled_cells_sum_the_grid(grid):
    cells = W.pooled_cells(grid)
    row = cells[
        (cells.drafter == "toy_draft")
        & (cells.category == "open")
        & (cells.gamma == 3)
        & (cells["mode"] == "sampled")
    ].iloc[0]
    sel = grid[
        (grid.drafter == "toy_draft")
        & (grid.category == "open")
        & (grid.gamma == 3)
        & (grid["mode"] == "sampled")
    ]
    assert list(row.accepted_hist) == list(np.sum(list(sel.accepted_hist), axis=0))
    assert list(row.rejection_hist) == list(np.sum(list(sel.rejection_hist), axis=0))
    assert row.steps == sel.target_calls.sum()
    everything = cells[(cells.category == "all")]
    assert everything.steps.sum() == grid.target_calls.sum()


def test_grid_explorer_dropdowns_redraw(grid):
    from specviz.lab.analysis import summarize

    ex = W.GridExplorer(grid)
    assert ex.state["category"] == "all"
    first = title(ex.rejections)
    ex.drafter_select.value = "toy_draft"  # what picking in the dropdown does
    assert "toy_draft" in title(ex.rejections) and title(ex.rejections) != first
    ex.gamma_select.value = 3
    # positions 1..3, "all accepted", "cut short" (+ "nothing drafted" when a step drafted
    # nothing): every step of the cell has a bar
    bars = ex.rejections.data[0]
    assert list(bars.x)[:5] == [
        "1",
        "2",
        "3",
        "none: all accepted",
        "none: all accepted (cut short)",
    ]
    assert set(list(bars.x)[5:]) <= {"nothing drafted"}
    cells = W.pooled_cells(grid)
    c = cells[
        (cells.drafter == "toy_draft")
        & (cells.category == "all")
        & (cells.gamma == 3)
        & (cells["mode"] == ex.state["mode"])
    ].iloc[0]
    assert sum(bars.customdata) == c.outcomes.steps == c.steps  # no step counted nowhere
    assert bars.customdata[4] == c.outcomes.cut_short
    assert "not counted" not in title(ex.rejections)
    row = ex.select(category="open", mode="sampled")
    assert (ex.category_select.value, ex.mode_select.value) == ("open", "sampled")
    s = summarize(grid)
    want = s[
        (s.drafter == "toy_draft")
        & (s.category == "open")
        & (s.gamma == 3)
        & (s["mode"] == "sampled")
    ].iloc[0]
    assert row["mean_accepted_length"] == pytest.approx(want.mean_accepted_length)
    assert f"{want.mean_accepted_length:.2f}" in ex.info.value
    sel = grid[
        (grid.drafter == "toy_draft") & (grid.category == "open") & (grid.gamma == 3)
        & (grid["mode"] == "sampled")
    ]  # fmt: skip
    rej = np.sum(list(sel.rejection_hist), axis=0)
    assert list(ex.rejections.data[0].customdata[:3]) == list(rej)
    bold = [t.line.width for t in ex.positions.data if t.name == "toy_draft"]
    assert bold == [4]
    with pytest.raises(ValueError, match="no gamma"):
        ex.select(gamma=9)
    with pytest.raises(TypeError, match="unknown"):
        ex.select(colour="red")
    with pytest.raises(ValueError, match="non-empty"):
        W.GridExplorer(grid.iloc[:0])


def test_grid_drafters(smollm2):
    from specviz.drafting.heads import default_head_path

    model, _ = smollm2
    specs, skipped = W.grid_drafters(
        model, ["prompt_lookup", "suffix", "early_exit:3", "eagle_head"]
    )
    weights = default_head_path().with_name(default_head_path().name + ".safetensors")
    assert ("eagle_head" in specs) == weights.is_file() and (
        "eagle_head" in skipped
    ) != weights.is_file()
    assert specs["early_exit:3"]().num_layers == 3
    with pytest.raises(ValueError, match="unknown drafter"):
        W.grid_drafters(model, ["medusa"])
    toy_specs, toy_skipped = W.grid_drafters(PAIR[0], ["eagle_head"])
    assert not toy_specs and "eagle_head" in toy_skipped  # a toy has no hidden states


def test_a_greedy_explorer_leaves_out_the_residual_panel():
    # issue 27 re-review (00): under greedy matching the residual panel could only be empty;
    # it is left out, live and in the snapshot, and the info line names the replacement
    target, draft = sv.toy_pair(5, 2, noise=1.0, seed=0)
    r = sv.speculative_generate(target, draft, [0], gamma=4, max_new_tokens=40)
    step = next(s for s in r.trace.steps if s.accepted < s.drafted)
    row = step.positions[step.accepted]
    ex = W.TraceExplorer(r.trace, NAMES, step=step.step)
    assert ex.greedy and ex.residual not in ex.widget.children[4].children
    assert len(ex.shown_figures()) == 3 and len(ex.figures()) == 4
    assert f"top token {NAMES[row.emitted_token]!r} replaced the draft" in ex.info.value
    html = snapshot_html(ex)
    assert html.count("Plotly.newPlot") == 3  # strip, p/q, test: no empty residual box
    assert html.startswith("<p><b>Trace explorer</b> (static snapshot of step ")
    assert "a draft-position menu" in html and "log scale" in html
    # greedy drafts were compared, not drawn against a uniform: not "nothing was tested"
    assert ex.borderline is None and "nothing was tested" not in html
    assert "(disabled: greedy matching draws no uniform, so no test is borderline)" in html


def test_a_sampled_explorer_keeps_its_residual_panel(trace):
    ex = W.TraceExplorer(trace, NAMES)
    assert not ex.greedy and ex.residual in ex.widget.children[4].children
    assert len(ex.shown_figures()) == 4 and "replaced the draft" not in ex.info.value
