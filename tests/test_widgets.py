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

import specviz as sv
from specviz import viz
from specviz import widgets as W
from specviz.stats import goodness_of_fit, tv_distance

ALPHA = 1e-3
NAMES = ["the", "cat", "sat", "on", "mat"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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


def test_trace_explorer_refuses_plain_traces():
    target, _ = sv.toy_pair(5, 2, seed=0)
    base = sv.autoregressive_generate(target, [0], max_new_tokens=3)
    with pytest.raises(ValueError, match="speculative"):
        W.TraceExplorer(base.trace)


def test_nan_becomes_null_in_widgets(trace):
    # bonus slots carry NaN p/q; the widget comm refuses NaN, so sync_figure must drop it
    ex = W.TraceExplorer(trace, NAMES)
    bonus = next(t for t in ex.strip.data if t.name == "bonus")
    flat = [v for row in bonus.customdata for v in row]
    assert None in flat
    assert not any(isinstance(v, float) and math.isnan(v) for v in flat)


# -- toy explorer ---------------------------------------------------------------------------


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
    law = viz.truncated_geometric_law(sim.alpha, 4)
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
SAMPLED = [v for v in sv.VERIFIERS if v != "greedy"]


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
