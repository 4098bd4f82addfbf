"""The "try your own" playground of notebook 02, driven headless: :meth:`PromptPlayground.run`
is what its Run button calls, so the tests call it (and click the button) as a reader would.

The models are a toy pair behind a one-character-per-token tokenizer (no chat template, so
``render_prompt`` encodes the text plainly): every run takes milliseconds.
"""

from __future__ import annotations

import html

import plotly.io as pio
import pytest
from _snapshot import snapshot_html

import specviz as sv
from specviz import lab as W
from specviz.prompts import render_prompt

pytestmark = pytest.mark.usefixtures("one_thread")

ALPHABET = " abcdefg"


class CharTokenizer:
    """One token per character of ALPHABET; other characters are dropped."""

    chat_template = None
    eos_token_id = None

    def encode(self, text: str) -> list[int]:
        return [ALPHABET.index(c) for c in text.lower() if c in ALPHABET]

    def decode(self, ids) -> str:
        return "".join(ALPHABET[int(i)] for i in ids)


class Models:  # the shape of load_models' NotebookModels
    def __init__(self) -> None:
        self.target, self.draft = sv.toy_pair(len(ALPHABET), 2, noise=1.0, seed=0)
        self.tokenizer = CharTokenizer()
        self.label = "toy + noisy toy"


@pytest.fixture(scope="module")
def models() -> Models:
    return Models()


def make(models: Models, **kw) -> W.PromptPlayground:
    kw = dict(prompt="a bad cab", gamma=3, temperature=1.0, max_new_tokens=24, seed=0) | kw
    return W.PromptPlayground(models, **kw)


def test_opens_on_a_run_of_its_default_prompt(models):
    pg = make(models)
    assert pg.error is None and pg.result is not None and pg.trace is pg.result.trace
    assert len(pg.result.new_tokens) == 24
    assert pg.strip.data and pg.strip.layout.title.text.startswith("toy + noisy toy: 24 tokens")
    sm = pg.trace.summary()
    assert f"{sm.target_calls} target calls" in pg.summary.value
    assert f"{sm.accepted} of {sm.drafted} drafts accepted (" in pg.summary.value
    assert "95% CI " in pg.summary.value and "mean accepted length" in pg.summary.value
    assert isinstance(pg.explorer, W.TraceExplorer) and pg.explorer.trace is pg.trace
    assert pg.explorer_box.children == (pg.explorer.widget,)


def test_runs_the_notebooks_code_path(models):
    """The same tokens as calling speculative_generate on the rendered prompt directly."""
    pg = make(models, top_p=0.9, seed=5)
    ids = render_prompt(models.tokenizer, "a bad cab")
    direct = sv.speculative_generate(
        models.target,
        models.draft,
        ids,
        gamma=3,
        max_new_tokens=24,
        do_sample=True,
        temperature=1.0,
        top_p=0.9,
        seed=5,
    )
    assert pg.result.new_tokens == direct.new_tokens


def test_run_updates_strip_summary_explorer_and_controls(models):
    pg = make(models)
    first, old_explorer, old_summary = pg.result, pg.explorer, pg.summary.value
    res = pg.run(prompt="dead beef", temperature=1.5, top_p=0.8, gamma=2, max_new_tokens=10)
    assert res is not None and res is pg.result and res is not first and pg.error is None
    assert len(res.new_tokens) == 10 and max(s.drafted for s in res.trace.steps) <= 2
    assert pg.strip.layout.title.text.startswith("toy + noisy toy: 10 tokens")
    assert pg.summary.value != old_summary and "gamma = 2" in pg.summary.value
    assert "T = 1.5, top-p = 0.8" in pg.summary.value
    assert pg.explorer is not old_explorer and pg.explorer.trace is res.trace
    assert (pg.prompt_box.value, pg.gamma_slider.value, pg.max_tokens_slider.value) == (
        "dead beef",
        2,
        10,
    )
    # the Run button uses the controls
    pg.seed_box.value = 7
    pg.run_button.click()
    assert pg.result is not res and pg.settings["seed"] == 7 and "seed = 7" in pg.summary.value


@pytest.mark.parametrize(
    "bad, words",
    [
        (dict(prompt="   "), "the prompt is empty"),
        (dict(gamma=0), "gamma (tokens drafted per step) must be an integer >= 1"),
        (dict(temperature=-1), "temperature must be >= 0 (0: greedy decoding)"),
        (dict(top_p=0.0), "top-p must be in (0, 1]"),
        (dict(top_p=1.5), "top-p must be in (0, 1]"),
        (dict(max_new_tokens=0), "max new tokens must be an integer >= 1"),
        (dict(seed=-1), "seed must be an integer >= 0"),
    ],
)
def test_bad_settings_are_reported_in_the_widget(models, bad, words):
    pg = make(models)
    good, summary = pg.result, pg.summary.value
    assert pg.run(**bad) is None  # no exception
    assert pg.error is not None and words in pg.error
    assert "cannot run" in pg.status.value and html.escape(words, quote=False) in pg.status.value
    assert "last successful run" in pg.status.value
    assert pg.result is good and pg.summary.value == summary  # the last run stays on screen
    assert pg.run() is not None and pg.error is None  # the controls were left valid


def test_bad_controls_and_failed_runs_show_no_traceback(models):
    pg = make(models)
    pg.gamma_slider.value = 1
    pg.max_tokens_slider.value = 1
    pg.prompt_box.value = "   "
    pg.run_button.click()
    assert "the prompt is empty" in pg.status.value
    # a prompt the tokenizer drops entirely: the generator refuses it, the widget says why
    assert pg.run(prompt="xyz", temperature=1.0) is None
    assert pg.error.startswith("the run failed: ") and "cannot run" in pg.status.value
    # bad settings at construction: the playground opens empty, with the reason
    empty = W.PromptPlayground(models, prompt="")
    assert empty.result is None and "the prompt is empty" in empty.status.value
    assert empty.explorer is None and empty.strip.layout.annotations[0].text == (
        "press Run to generate"
    )
    assert empty.run(prompt="a cab") is not None and empty.explorer is not None


def test_temperature_zero_is_greedy_decoding(models):
    """Issue 27: the playground contrasts greedy and sampled tests -- at T = 0 it decodes
    greedily (the very tokens of plain greedy decoding; no uniform draw decides a draft)."""
    pg = make(models, temperature=0.0)
    assert pg.error is None and pg.result is not None
    ids = render_prompt(models.tokenizer, "a bad cab")
    plain = sv.autoregressive_generate(models.target, ids, max_new_tokens=24)
    assert pg.result.new_tokens == plain.new_tokens
    tests = [r for s in pg.trace.steps for r in s.positions if r.evaluated and r.draft_token >= 0]
    assert tests and all(r.u != r.u for r in tests)  # NaN: no draw
    assert "T = 0 (greedy" in pg.summary.value


def test_snapshot_html_shows_the_run(models):
    pg = make(models)
    before = pio.renderers.default
    try:
        pio.renderers.default = "plotly_mimetype"
        plain = pg._repr_mimebundle_()
        assert "application/vnd.jupyter.widget-view+json" in plain
        assert "text/html" not in plain  # JupyterLab needs no snapshot
        pio.renderers.default = "notebook"
        bundle = pg._repr_mimebundle_()
        assert "application/vnd.jupyter.widget-view+json" in bundle
        snap = bundle["text/html"]
        # the explorer's panels, its strip first: the run's strip once, no residual panel when
        # greedy (issue 27 re-review of 02: four strips for two runs, an empty residual box)
        shown = pg.explorer.shown_figures()
        assert snap.count("Plotly.newPlot") == len(shown) == (3 if pg.explorer.greedy else 4)
        assert pg.figures() == shown
        assert "Try your own" in snap and "a bad cab" in snap and "target calls" in snap
        # the controls a reader gets in JupyterLab, listed (the snapshot has no widgets)
        for control in ("temperature", "top-p", "gamma (drafts)", "max new tokens", "seed"):
            assert f"<b>{control}</b>" in snap
        assert "0: greedy decoding" in snap
        assert bundle["text/plain"].startswith("PromptPlayground")
    finally:
        pio.renderers.default = before


def test_acceptance_text_counts_and_wilson_interval():
    assert W.acceptance_text(23, 40, what="drafts accepted") == (
        "23 of 40 drafts accepted (57.5%, 95% CI 42.2-71.5%)"
    )
    assert W.acceptance_text(5, 5).endswith("(100.0%, 95% CI 56.6-100.0%)")
    lo, hi = W.acceptance_interval(23, 40)
    assert lo < 23 / 40 < hi and (round(lo, 3), round(hi, 3)) == (0.422, 0.715)
    assert all(x != x for x in W.acceptance_interval(0, 0))  # nan: no trials
    with pytest.raises(ValueError):
        W.acceptance_text(3, 2)


def test_bad_models_and_settings_are_named(models):
    """Issue 28 (C20): the Python API names what is wrong instead of unpacking errors, and a
    seed the seed box cannot hold is refused rather than clamped at the next Run."""
    for bad in ((models.target,), None, (models.target, models.draft, models.tokenizer)):
        with pytest.raises(TypeError, match=r"needs the models: a \(target, draft\) pair"):
            W.PromptPlayground(bad, models.tokenizer, run=False)
    pg = make(models, run=False)
    assert pg.run(prompt=123) is None
    assert "the prompt must be text (a string), got int 123" in pg.error
    assert pg.run(seed=2**40) is None
    assert (
        f"seed must be an integer >= 0 and <= {2**31 - 1} (what the seed box holds), got {2**40}"
        in pg.error
    )
    # legal: a numpy seed, the largest seed the box holds
    import numpy as np

    assert pg.run(seed=np.int64(5)) is not None and pg.seed_box.value == 5
    assert pg.run(seed=2**31 - 1) is not None and pg.seed_box.value == 2**31 - 1


def test_a_greedy_snapshot_has_no_residual_panel_and_one_strip(models):
    # issue 27 re-review of 02: the greedy playground drew an empty residual panel and its strip
    # twice; its snapshot shows the explorer's strip, p/q and test panels only
    pg = make(models, temperature=0.0)
    snap = snapshot_html(pg)
    assert pg.explorer.greedy and len(pg.figures()) == 3
    assert (
        snap.count("Plotly.newPlot") == 3 and "residual" not in pg.figures()[-1].layout.title.text
    )
