"""Interactive explorers (ipywidgets + plotly ``FigureWidget``) and the experiments behind them.

Each explorer is a class whose widget tree is ``.widget`` and whose state changes go through
one method (:meth:`TraceExplorer.show_step`, :meth:`ToyExplorer.update`). The sliders and
buttons only call that method, so a test can drive an explorer headless exactly as a reader
does in JupyterLab, and read the resulting ``FigureWidget.data``. The figures themselves come
from :mod:`specviz.viz`; an explorer copies them into its ``FigureWidget`` objects.

Displayed in a notebook, an explorer offers the live widget *and* a static HTML snapshot of its
figures (when plotly's renderer produces HTML, e.g. ``PLOTLY_RENDERER=plotly_mimetype+notebook``).
JupyterLab shows the widget; an nbconvert HTML export without widget state -- which needs a CDN
to come alive and so is useless offline -- falls back to the snapshot.

The experiment helpers (:func:`simulate_toy`, :func:`first_token_law`,
:func:`sample_continuations`, :func:`run_prompts`, :func:`load_models`; for notebook 05
:func:`memo_pair`, :func:`calibration_on_toy`, :func:`same_seed_runs`, :func:`power_curves`;
for notebook 06 :func:`precision_greedy`, :func:`logit_margins`; for notebook 07
:func:`grid_drafters`, :func:`pooled_cells` and the :class:`GridExplorer`) are what the
notebooks run; they live here, not in the notebooks, so they are tested and the notebooks stay
thin.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go
import torch

from . import viz
from .drafters import EarlyExitDrafter, PromptLookupDrafter
from .engine import GenerationResult, speculative_generate
from .memo import MemoLM, memo_pair
from .sampling import SamplingParams, logits_to_probs
from .toy import ToyLM, exact_continuation_law
from .trace import Trace
from .zoo import first_token_law

__all__ = [
    "FigureSelector",
    "GridExplorer",
    "MemoLM",
    "SeedComparison",
    "acceptance_at",
    "calibration_on_toy",
    "grid_drafters",
    "logit_margins",
    "memo_pair",
    "pooled_cells",
    "power_curves",
    "precision_drafters",
    "precision_greedy",
    "same_seed_runs",
    "samples_for_power",
    "NotebookModels",
    "PromptRun",
    "ToyExplorer",
    "ToySimulation",
    "TraceExplorer",
    "continuation_table",
    "first_token_law",
    "load_models",
    "run_prompts",
    "sample_continuations",
    "samples_to_detect",
    "simulate_toy",
    "sync_figure",
    "toy_alpha",
]


# -------------------------------------------------------------------------------------------
# plumbing
# -------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Toy tensors have a handful of entries: torch's intra-op threads only add wake-up
    latency, and on a shared 2-core machine they make a toy simulation several times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def sync_figure(fw: go.FigureWidget, fig: go.Figure) -> None:
    """Make ``fw`` show ``fig`` (traces and layout replaced in one batched update), so every
    explorer figure is exactly what the pure :mod:`specviz.viz` function returns."""
    import plotly.io as pio

    # NaN (a bonus slot has no q, a run no steps) is not valid JSON: the widget comm would
    # refuse the message. plotly's own serializer turns NaN into null, which plotly.js skips.
    clean = json.loads(pio.to_json(fig, validate=False))
    with fw.batch_update():
        fw.data = []
        fw.add_traces(clean.get("data", []))
        fw.layout = clean.get("layout", {})


def _static_html(figures: Sequence[go.Figure]) -> str | None:
    """HTML of the figures under plotly's current default renderer, or None when that renderer
    makes no HTML (plain JupyterLab uses the plotly mimetype, which needs no snapshot)."""
    try:
        import plotly.io as pio

        parts = []
        for f in figures:
            bundle = pio.renderers._build_mime_bundle(f.to_dict())  # activates "notebook" once
            if "text/html" not in bundle:
                return None
            parts.append(bundle["text/html"])
        return "\n".join(parts)
    except Exception:  # a private plotly helper: never let a snapshot break the display
        return None


def _bundle(widget: widgets.Widget, figures: Sequence[go.Figure], name: str, **kw: Any) -> dict:
    bundle = dict(widget._repr_mimebundle_(**kw) or {})
    bundle["text/plain"] = f"{name} (interactive: run the notebook in JupyterLab)"
    html = _static_html(figures)
    if html:
        bundle["text/html"] = html
    return bundle


# -------------------------------------------------------------------------------------------
# trace explorer
# -------------------------------------------------------------------------------------------


class TraceExplorer:
    """Scrub through the steps of a speculative trace.

    A step slider (plus previous/next buttons) moves the highlight in the token strip and
    shows, for one drafted position of that step (a dropdown; default: the rejection), the
    target p vs draft q bars, the uniform draw u against min(1, p/q), and the residual law the
    corrected token came from.
    """

    def __init__(
        self, trace: Trace, tokenizer: Any = None, *, per_row: int = 16, panel_width: int = 480
    ) -> None:
        self.trace = trace
        self.tokenizer = tokenizer
        self.per_row = per_row
        self.panel_width = panel_width  # p/q and residual sit side by side
        self.steps = [s.step for s in trace.steps if s.positions]
        if not self.steps:
            raise ValueError("the trace has no drafted positions: pass a speculative trace")
        self.step = self.steps[0]
        self.row = viz.default_row(trace.steps[self.step])
        self.strip = go.FigureWidget()
        self.pq = go.FigureWidget()
        self.accept = go.FigureWidget()
        self.residual = go.FigureWidget()
        self.slider = widgets.IntSlider(
            value=0,
            min=0,
            max=len(self.steps) - 1,
            description="step",
            continuous_update=False,
            layout=widgets.Layout(width="60%"),
        )
        self.prev_button = widgets.Button(description="◀ prev", layout=widgets.Layout(width="80px"))
        self.next_button = widgets.Button(description="next ▶", layout=widgets.Layout(width="80px"))
        self.row_select = widgets.Dropdown(
            description="position", layout=widgets.Layout(width="320px")
        )
        self.info = widgets.HTML()
        self._syncing = False
        self.slider.observe(self._on_slider, names="value")
        self.row_select.observe(self._on_row, names="value")
        self.prev_button.on_click(lambda _: self.show_step(self._prev()))
        self.next_button.on_click(lambda _: self.show_step(self._next()))
        self.widget = widgets.VBox(
            [
                widgets.HBox([self.prev_button, self.slider, self.next_button, self.row_select]),
                self.info,
                self.strip,
                widgets.HBox([self.pq, self.residual]),
                self.accept,
            ]
        )
        self.show_step(self.step)

    # navigation -------------------------------------------------------------------------
    def _prev(self) -> int:
        k = self.steps.index(self.step)
        return self.steps[max(0, k - 1)]

    def _next(self) -> int:
        k = self.steps.index(self.step)
        return self.steps[min(len(self.steps) - 1, k + 1)]

    def _on_slider(self, change: dict) -> None:
        if not self._syncing:
            self.show_step(self.steps[change["new"]])

    def _on_row(self, change: dict) -> None:
        if not self._syncing and change["new"] is not None:
            self.show_step(self.step, change["new"])

    def show_step(self, step: int, row: int | None = None) -> None:
        """Show trace step ``step`` (its ``Step.step`` number) at drafted position ``row``
        (0-based within the step; default: the rejection, else the bonus slot)."""
        if step not in self.steps:
            raise IndexError(f"step {step} is not a speculative step of this trace")
        s = self.trace.steps[step]
        self.step = step
        self.row = viz.default_row(s) if row is None else row
        self._syncing = True
        try:
            self.slider.value = self.steps.index(step)
            options = [
                (
                    f"{j + 1}: {r.emitted_kind}"
                    + (
                        ""
                        if r.draft_token < 0
                        else f" (draft {viz.token_label(r.draft_token, self.tokenizer)!r})"
                    ),
                    j,
                )
                for j, r in enumerate(s.positions)
            ]
            self.row_select.options = options
            self.row_select.value = self.row
        finally:
            self._syncing = False
        for fw, fig in zip(
            (self.strip, self.pq, self.accept, self.residual), self.figures(), strict=True
        ):
            sync_figure(fw, fig)
        self.info.value = (
            f"<b>step {s.step}</b>: drafted {s.drafted}, accepted {s.accepted}, emitted "
            f"{len(s.emitted)} token(s), final token {s.final_kind}; "
            f"draft {1e3 * s.draft_time:.1f} ms, verify {1e3 * s.verify_time:.1f} ms"
        )

    def figures(self) -> tuple[go.Figure, go.Figure, go.Figure, go.Figure]:
        """The four figures of the current state (strip, p vs q, accept test, residual)."""
        tr, st, row, tok = self.trace, self.step, self.row, self.tokenizer
        w = self.panel_width
        return (
            viz.token_strip_figure(tr, tok, highlight_step=st, per_row=self.per_row).update_layout(
                width=2 * w
            ),
            viz.pq_figure(tr, st, row, tok).update_layout(width=w),
            viz.accept_test_figure(tr, st, row).update_layout(width=2 * w),
            viz.residual_figure(tr, st, row, tok).update_layout(width=w),
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        return _bundle(self.widget, self.figures(), "TraceExplorer", **kwargs)


# -------------------------------------------------------------------------------------------
# toy model explorer
# -------------------------------------------------------------------------------------------


def toy_alpha(target: ToyLM, draft: ToyLM, params: SamplingParams) -> float:
    """Exact per-position acceptance ``sum_x min(p, q) = 1 - TV(p, q)`` of a context-free
    (order-0) toy pair: the alpha of the truncated-geometric law, no estimate involved."""
    if target.order != 0 or draft.order != 0:
        raise ValueError("toy_alpha needs context-free (order=0) toy models")
    p = target.next_probs([], params)
    q = draft.next_probs([], params)
    return float(torch.minimum(p, q).sum())


@dataclass(frozen=True)
class ToySimulation:
    """One simulated run of a context-free toy pair."""

    noise: float
    temperature: float
    gamma: int
    alpha: float  # exact
    accepted: tuple[int, ...]  # per full-length step
    target_calls: int
    new_tokens: int

    @property
    def tokens_per_call(self) -> float:
        return float(np.mean(self.accepted)) + 1.0 if self.accepted else math.nan

    @property
    def tokens_per_call_se(self) -> float:
        n = len(self.accepted)
        return float(np.std(self.accepted, ddof=1) / math.sqrt(n)) if n > 1 else math.nan

    @property
    def theory(self) -> float:
        return float(viz.expected_tokens_per_call(self.alpha, self.gamma))

    def point(self, label: str = "simulated") -> viz.SimPoint:
        return viz.SimPoint(
            self.alpha, self.gamma, self.tokens_per_call, self.tokens_per_call_se, label
        )


def simulate_toy(
    noise: float,
    temperature: float,
    gamma: int,
    *,
    vocab_size: int = 6,
    tokens: int = 2000,
    seed: int = 1,
) -> ToySimulation:
    """Speculative sampling on a context-free toy pair whose draft is the target plus
    Gaussian logit noise of scale ``noise``: one long generation of ``tokens`` tokens through
    the real engine and lossless verifier. Context-free means acceptance is i.i.d., so the
    truncated-geometric law and the tokens-per-call formula hold exactly -- any gap between
    theory and this simulation is sampling noise (or a bug). The default toy (6 tokens, seed 1)
    has a fairly flat law, so noise 0.5 / 1 / 2 give alpha of about 0.86 / 0.72 / 0.52."""
    target = ToyLM.random(vocab_size, order=0, seed=seed)
    draft = target.perturbed(noise, seed=seed + 1)
    params = SamplingParams(True, float(temperature), None, None)
    with _one_thread():
        r = speculative_generate(
            target,
            draft,
            [0],
            gamma=gamma,
            max_new_tokens=tokens,
            do_sample=True,
            temperature=float(temperature),
            seed=seed,
            trace=False,
        )
    full = tuple(a for a, d in zip(r.accepted_counts, r.drafted_counts, strict=True) if d == gamma)
    return ToySimulation(
        float(noise),
        float(temperature),
        int(gamma),
        toy_alpha(target, draft, params),
        full,
        r.target_calls,
        len(r.new_tokens),
    )


class ToyExplorer:
    """Sliders for draft noise, temperature and gamma on a context-free toy pair; each change
    runs a fresh simulation and redraws tokens per call (theory curve vs the simulated point)
    and the accepted-count law (truncated geometric vs the simulated histogram)."""

    def __init__(
        self,
        *,
        noise: float = 1.0,
        temperature: float = 1.0,
        gamma: int = 4,
        tokens: int = 2000,
        vocab_size: int = 6,
        seed: int = 1,
        panel_width: int = 480,
    ) -> None:
        self.tokens = tokens
        self.panel_width = panel_width  # the two figures sit side by side
        self.vocab_size = vocab_size
        self.seed = seed
        style = {"description_width": "110px"}
        self.noise_slider = widgets.FloatSlider(
            value=noise,
            min=0.0,
            max=4.0,
            step=0.1,
            description="draft noise",
            continuous_update=False,
            style=style,
        )
        self.temperature_slider = widgets.FloatSlider(
            value=temperature,
            min=0.2,
            max=2.0,
            step=0.1,
            description="temperature",
            continuous_update=False,
            style=style,
        )
        self.gamma_slider = widgets.IntSlider(
            value=gamma, min=1, max=12, description="gamma", continuous_update=False, style=style
        )
        self.curve = go.FigureWidget()
        self.histogram = go.FigureWidget()
        self.info = widgets.HTML()
        self._holding = False
        for s in (self.noise_slider, self.temperature_slider, self.gamma_slider):
            s.observe(self._on_change, names="value")
        self.widget = widgets.VBox(
            [
                widgets.HBox([self.noise_slider, self.temperature_slider, self.gamma_slider]),
                self.info,
                widgets.HBox([self.curve, self.histogram]),
            ]
        )
        self.result: ToySimulation | None = None
        self.update()

    def _on_change(self, change: dict) -> None:
        if not self._holding:
            self.update()

    def update(
        self,
        noise: float | None = None,
        temperature: float | None = None,
        gamma: int | None = None,
    ) -> ToySimulation:
        """Set any of the three parameters (the sliders follow), simulate, redraw."""
        self._holding = True
        try:
            if noise is not None:
                self.noise_slider.value = noise
            if temperature is not None:
                self.temperature_slider.value = temperature
            if gamma is not None:
                self.gamma_slider.value = gamma
        finally:
            self._holding = False
        t0 = time.perf_counter()
        self.result = sim = simulate_toy(
            self.noise_slider.value,
            self.temperature_slider.value,
            self.gamma_slider.value,
            vocab_size=self.vocab_size,
            tokens=self.tokens,
            seed=self.seed,
        )
        took = time.perf_counter() - t0
        for fw, fig in zip((self.curve, self.histogram), self.figures(), strict=True):
            sync_figure(fw, fig)
        self.info.value = (
            f"alpha (exact) = <b>{sim.alpha:.3f}</b>; tokens per target call: theory "
            f"<b>{sim.theory:.3f}</b>, simulated <b>{sim.tokens_per_call:.3f}</b> "
            f"± {1.96 * sim.tokens_per_call_se:.3f} (95%), {sim.target_calls} target calls for "
            f"{sim.new_tokens} tokens ({took:.2f} s)"
        )
        return sim

    def figures(self) -> tuple[go.Figure, go.Figure]:
        sim = self.result
        assert sim is not None
        curve = viz.tokens_per_call_vs_alpha_figure(sim.gamma, [sim.point()])
        hist = viz.rejection_histogram_figure(sim.accepted, sim.gamma, alpha=sim.alpha)
        hist.update_layout(
            title=f"Accepted drafts per step vs alpha^n (1 - alpha)<br><sup>alpha = {sim.alpha:.3f}, "
            f"{len(sim.accepted)} steps</sup>"
        )
        return curve.update_layout(width=self.panel_width), hist.update_layout(
            width=self.panel_width
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        return _bundle(self.widget, self.figures(), "ToyExplorer", **kwargs)


class FigureSelector:
    """A dropdown over named figures (e.g. one goodness-of-fit figure per verifier): the
    notebook computes all of them once, the reader flips through them."""

    def __init__(self, figures: dict[str, go.Figure], *, description: str = "show") -> None:
        if not figures:
            raise ValueError("FigureSelector needs at least one figure")
        self.figures_by_name = dict(figures)
        self.dropdown = widgets.Dropdown(
            options=list(self.figures_by_name), description=description
        )
        self.figure = go.FigureWidget()
        self.dropdown.observe(lambda ch: self.select(ch["new"]), names="value")
        self.widget = widgets.VBox([self.dropdown, self.figure])
        self.select(self.dropdown.value)

    def select(self, name: str) -> None:
        """Show the figure called ``name`` (the dropdown follows)."""
        if name not in self.figures_by_name:
            raise KeyError(f"no figure {name!r}; have {list(self.figures_by_name)}")
        if self.dropdown.value != name:
            self.dropdown.value = name  # re-enters select() through the observer
            return
        sync_figure(self.figure, self.figures_by_name[name])

    def figures(self) -> tuple[go.Figure, ...]:
        return (self.figures_by_name[self.dropdown.value],)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        return _bundle(self.widget, self.figures(), "FigureSelector", **kwargs)


# -------------------------------------------------------------------------------------------
# exact laws under (broken) verifiers
# -------------------------------------------------------------------------------------------


def samples_to_detect(p: Any, tv: float, *, alpha: float = 1e-3, power: float = 0.9) -> float:
    """Samples a one-sample chi-square test at level ``alpha`` needs to detect, with the given
    power, a TV-``tv`` departure from the law ``p`` (:func:`specviz.stats.sample_size_for_tv`
    on the support of ``p``). ``inf`` for ``tv = 0``; ``nan`` where the stats model has no
    alternative of that size (e.g. a TV larger than the law's head mass) -- such departures are
    large and show up at any sample size this module uses."""
    from .stats import sample_size_for_tv

    probs = np.asarray(p, dtype=float)
    probs = probs[probs > 0]
    if tv <= 1e-12:
        return math.inf
    try:
        return float(sample_size_for_tv(probs / probs.sum(), float(tv), alpha=alpha, power=power))
    except ValueError:
        return math.nan


def sample_continuations(
    target: Any,
    draft: Any,
    *,
    verifier: str,
    params: SamplingParams,
    prompt: Sequence[int],
    length: int,
    gamma: int,
    n: int,
    seed: int = 0,
) -> Counter:
    """``n`` speculative continuations of ``length`` tokens (as tuples), counted; one
    generator threads all of them so the sample is reproducible from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    counts: Counter = Counter()
    with _one_thread():
        for _ in range(n):
            counts[
                _one_continuation(target, draft, verifier, params, prompt, length, gamma, gen)
            ] += 1
    return counts


def _one_continuation(
    target: Any,
    draft: Any,
    verifier: str,
    params: SamplingParams,
    prompt: Sequence[int],
    length: int,
    gamma: int,
    gen: torch.Generator,
) -> tuple[int, ...]:
    r = speculative_generate(
        target,
        draft,
        list(prompt),
        gamma=gamma,
        max_new_tokens=length,
        do_sample=True,
        temperature=params.temperature,
        top_k=params.top_k,
        top_p=params.top_p,
        seed=gen,
        trace=False,
        verifier=verifier,
    )
    return tuple(r.new_tokens)


def continuation_table(
    counts: Counter, target: ToyLM, prompt: Sequence[int], length: int, params: SamplingParams
) -> tuple[list[tuple[int, ...]], np.ndarray, np.ndarray]:
    """``(outcomes, observed, expected_probs)`` over every continuation the exact law or the
    sample contains (an outcome of probability 0 stays in, so the test can flag it)."""
    law = exact_continuation_law(target, list(prompt), length, params)
    keys = sorted(set(law) | set(counts))
    return (
        keys,
        np.array([counts.get(k, 0) for k in keys], dtype=float),
        np.array([law.get(k, 0.0) for k in keys]),
    )


# -------------------------------------------------------------------------------------------
# real models
# -------------------------------------------------------------------------------------------


@dataclass
class NotebookModels:
    target: Any
    draft: Any  # a model or a drafter object: what speculative_generate takes
    tokenizer: Any
    label: str
    load_seconds: float = 0.0


def load_models(
    target: str = "smollm2-135m", draft: str = "prompt_lookup", **kw: Any
) -> NotebookModels:
    """Target model, drafter and tokenizer from two short names, so a notebook's parameter
    cell can switch pairs with an environment variable.

    ``draft`` is ``prompt_lookup`` (n-gram copy, no draft model), ``self`` (the target drafts
    for itself: acceptance 1, an upper bound), ``early_exit:L`` (the target's first L layers)
    or a model name for :func:`specviz.models.load_pair` (e.g. ``qwen2.5-coder-0.5b`` with
    target ``qwen2.5-coder-1.5b``). Extra keywords (dtype, device) go to the loaders.
    """
    from .models import load_model, load_pair, load_tokenizer

    t0 = time.perf_counter()
    kw.setdefault("progress", False)
    if draft in ("prompt_lookup", "self") or draft.startswith("early_exit:"):
        model = load_model(target, **kw)
        tok = load_tokenizer(target, progress=kw["progress"])
        if draft == "prompt_lookup":
            d: Any = PromptLookupDrafter()
        elif draft == "self":
            d = model
        else:
            d = EarlyExitDrafter(model, int(draft.split(":", 1)[1]))
        label = f"{target} + {draft}"
    else:
        model, d, tok = load_pair(target, draft, **kw)
        label = f"{target} + draft model {draft}"
    return NotebookModels(model, d, tok, label, time.perf_counter() - t0)


@dataclass(frozen=True)
class PromptRun:
    prompt_id: str
    category: str
    gamma: int
    result: GenerationResult = field(repr=False)

    @property
    def trace(self) -> Trace:
        assert self.result.trace is not None
        return self.result.trace


def run_prompts(
    models: NotebookModels,
    prompts: Sequence[Any],
    *,
    gammas: Sequence[int],
    max_new_tokens: int,
    do_sample: bool = True,
    temperature: float = 1.0,
    top_p: float | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> list[PromptRun]:
    """Speculative decoding of every prompt at every gamma, traced (same seed per prompt, so
    the gammas differ only in the draft length)."""
    from .prompts import render_prompt

    runs = []
    for p in prompts:
        ids = render_prompt(models.tokenizer, p)
        for g in gammas:
            t0 = time.perf_counter()
            r = speculative_generate(
                models.target,
                models.draft,
                ids,
                gamma=g,
                max_new_tokens=max_new_tokens,
                do_sample=do_sample,
                temperature=temperature,
                top_p=top_p,
                seed=seed,
                eos_token_id=models.tokenizer.eos_token_id,
            )
            runs.append(PromptRun(p.id, p.category, g, r))
            if progress is not None:
                progress(
                    f"{p.id} gamma={g}: {len(r.new_tokens)} tokens, {r.target_calls} calls, "
                    f"{time.perf_counter() - t0:.1f} s"
                )
    return runs


# -------------------------------------------------------------------------------------------
# lossless statistics on a real vocabulary (notebook 05)
# -------------------------------------------------------------------------------------------


def acceptance_at(target: Any, draft: Any, prefix: Sequence[int], params: SamplingParams) -> float:
    """Exact per-position acceptance ``sum_x min(p, q) = 1 - TV(p, q)`` of the token after
    ``prefix`` (one forward pass each; models or anything with ``next_logits``)."""
    p = logits_to_probs(_next_logits(target, prefix), params)
    q = logits_to_probs(_next_logits(draft, prefix), params)
    return float(torch.minimum(p, q).sum())


@torch.inference_mode()
def _next_logits(model: Any, prefix: Sequence[int]) -> torch.Tensor:
    if hasattr(model, "next_logits"):
        return model.next_logits(list(prefix)).float()
    ids = torch.tensor([list(prefix)], device=model.device)
    return model(input_ids=ids, logits_to_keep=1).logits[0, -1].float().cpu()


def calibration_on_toy(
    verifier: str = "lossless",
    *,
    replicates: int = 200,
    n_samples: int = 200,
    length: int = 3,
    gamma: int = 2,
    params: SamplingParams | None = None,
    alpha: float = 0.05,
    vocab_size: int = 5,
    order: int = 2,
    noise: float = 1.0,
    seed: int = 0,
) -> Any:
    """Does the goodness-of-fit test reject a true null at its nominal rate?

    ``replicates`` independent data sets of ``n_samples`` speculative continuations of a toy
    pair (context-dependent laws, exact continuation law), each tested against the exact law
    (Pearson, sparse bins pooled). Under the lossless rule the p-values are uniform; a broken
    rule makes them pile up near 0 -- the negative control. One torch Generator threads
    through every replicate (never reseeded). Returns a
    :class:`~specviz.stats.CalibrationResult`.
    """
    from .stats import calibrate, goodness_of_fit
    from .toy import toy_pair

    if replicates < 1 or n_samples < 1:
        raise ValueError("replicates and n_samples must be >= 1")
    params = params or SamplingParams(True, 0.7, None, 0.9)
    target, draft = toy_pair(vocab_size, order, noise=noise, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    prompt = [0]
    law = exact_continuation_law(target, prompt, length, params)

    def one(rng: np.random.Generator) -> float:
        counts: Counter = Counter()
        for _ in range(n_samples):
            counts[
                _one_continuation(target, draft, verifier, params, prompt, length, gamma, gen)
            ] += 1
        keys = sorted(set(law) | set(counts))
        obs = np.array([counts.get(k, 0) for k in keys], dtype=float)
        exp = np.array([law.get(k, 0.0) for k in keys])
        return goodness_of_fit(obs, exp, rng=rng).pvalue

    with _one_thread():
        return calibrate(one, replicates=replicates, seed=seed, alpha=alpha)


@dataclass(frozen=True)
class SeedComparison:
    """Speculative and plain sampling of one prompt with the same seed."""

    seed: int
    speculative: tuple[int, ...]
    plain: tuple[int, ...]

    @property
    def identical(self) -> bool:
        return self.speculative == self.plain

    @property
    def first_difference(self) -> int | None:
        """Index of the first differing token (None when identical)."""
        pairs = zip(self.speculative, self.plain, strict=False)
        i = next((j for j, (a, b) in enumerate(pairs) if a != b), None)
        if i is None and not self.identical:
            i = min(len(self.speculative), len(self.plain))
        return i


def same_seed_runs(
    target: Any,
    draft: Any,
    prompt: Sequence[int],
    *,
    seeds: Sequence[int],
    max_new_tokens: int,
    gamma: int = 4,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | Sequence[int] | None = None,
) -> list[SeedComparison]:
    """For each seed: speculative and plain sampling of ``prompt`` with that same seed.

    The two consume random numbers differently (drafts, uniforms, residual draws vs one draw
    per token), so the same seed generally gives different text -- while the *law* of the text
    is the same, which only a statistical test can show (:func:`specviz.consistency_check`)."""
    from .engine import autoregressive_generate

    out = []
    kw = dict(
        max_new_tokens=max_new_tokens,
        do_sample=True,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        eos_token_id=eos_token_id,
    )
    for s in seeds:
        spec = speculative_generate(
            target, draft, list(prompt), gamma=gamma, seed=int(s), trace=False, **kw
        )
        plain = autoregressive_generate(target, list(prompt), seed=int(s), **kw)
        out.append(SeedComparison(int(s), tuple(spec.new_tokens), tuple(plain.new_tokens)))
    return out


def power_curves(
    p: Any,
    laws: dict[str, Any],
    ns: Sequence[int],
    *,
    spread_tvs: Sequence[float] = (),
    alpha: float = 0.01,
    two_sample: bool = True,
) -> dict[str, np.ndarray]:
    """Analytic power of the first-token test against each alternative law, at each sample
    size (per arm when ``two_sample``): :func:`specviz.stats.power_homogeneity` /
    :func:`specviz.stats.power_gof` with the pooling the test would apply.

    ``spread_tvs`` adds, per TV value, the alternative of :func:`specviz.stats.tv_alternative`
    on the support of ``p`` (mass moved from the likelier half of the tokens to the rest),
    labelled ``"TV x (spread)"``: a yardstick next to the named laws.

    Example::

        curves = power_curves(p, {"bug": law}, [100, 1000, 10000], spread_tvs=[0.05])
    """
    from .stats import power_gof, power_homogeneity, tv_alternative

    P = np.asarray(p, dtype=float)
    alternatives = {name: np.asarray(law, dtype=float) for name, law in laws.items()}
    support = P > 0
    for tv in spread_tvs:
        q = np.zeros_like(P)
        q[support] = tv_alternative(P[support] / P[support].sum(), float(tv))
        alternatives[f"TV {tv:g} (spread)"] = q
    out = {}
    for name, Q in alternatives.items():
        if Q.shape != P.shape:
            raise ValueError(f"law {name!r} has shape {Q.shape}, p has {P.shape}")
        if two_sample:
            out[name] = np.array([power_homogeneity(P, Q, int(n), alpha) for n in ns])
        else:
            out[name] = np.array([power_gof(P, Q, int(n), alpha=alpha) for n in ns])
    return out


def samples_for_power(
    p: Any, law: Any, *, alpha: float = 0.01, power: float = 0.9, two_sample: bool = True
) -> float:
    """Smallest sample size (per arm when ``two_sample``) at which the first-token test
    reaches ``power`` against ``law`` (doubling then bisection on the analytic power);
    ``inf`` when ``law`` equals ``p`` or more than 1e10 samples would be needed."""
    from .stats import tv_distance

    P, Q = np.asarray(p, dtype=float), np.asarray(law, dtype=float)
    if tv_distance(P, Q) < 1e-12:
        return math.inf

    def ok(n: int) -> bool:
        return bool(
            power_curves(P, {"x": Q}, [n], alpha=alpha, two_sample=two_sample)["x"][0] >= power
        )

    hi = 2
    while not ok(hi):
        hi *= 2
        if hi > 10**10:
            return math.inf
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        hi, lo = (mid, lo) if ok(mid) else (hi, mid)
    return float(hi)


# -------------------------------------------------------------------------------------------
# numerics: greedy decoding in fp32 vs bf16 (notebook 06)
# -------------------------------------------------------------------------------------------


@torch.inference_mode()
def logit_margins(model: Any, prompt: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
    """Top-1 minus top-2 logit of the target before each of ``tokens`` (teacher forcing, one
    forward pass over prompt + tokens, in the model's own dtype): ``m[i]`` is the margin of
    the decision that produced ``tokens[i]``. A greedy divergence at a small margin is a near
    tie that numerics can flip; at a large margin it is a bug."""
    if not tokens:
        return np.zeros(0)
    ids = torch.tensor([list(prompt) + list(tokens)], device=model.device)
    logits = model(input_ids=ids, logits_to_keep=len(tokens) + 1).logits[0, :-1].float()
    top = torch.topk(logits, 2, dim=-1).values  # [len(tokens), 2]
    return (top[:, 0] - top[:, 1]).cpu().numpy()


def _first_diff(a: Sequence[int], b: Sequence[int]) -> int | None:
    i = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if i is None and len(a) != len(b):
        i = min(len(a), len(b))
    return i


def precision_greedy(
    targets: dict[str, Any],
    drafters: dict[str, Callable[[Any], Any]],
    prompts: Sequence[Any],
    tokenizer: Any,
    *,
    max_new_tokens: int,
    gamma: int = 4,
    near_tie: dict[str, float] | None = None,
    reference: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[Any, dict[str, np.ndarray]]:
    """Greedy plain and speculative decoding of every prompt with the same target in several
    precisions (``targets``: dtype label -> model; the first is the reference, normally fp32).

    Returns ``(table, margins)``. ``table`` has one row per (prompt, dtype, drafter): drafter
    ``"plain"`` compares plain greedy in this dtype with plain greedy in the reference dtype;
    every other drafter compares its speculative output with plain greedy *in the same dtype*.
    At the first divergence: the margin (top-1 minus top-2 logit) of the model that produced
    the reference text there, the reference dtype's margin at the same prefix, and a verdict
    (:func:`specviz.stats.greedy_consistency`: "numerics" below ``near_tie[dtype]``, else
    "bug"). ``margins[dtype]`` holds the margins at every generated position of the plain
    outputs: the background the divergence margins are compared with.
    """
    import pandas as pd

    from .engine import autoregressive_generate
    from .prompts import render_prompt
    from .stats import DEFAULT_NEAR_TIE, greedy_consistency

    if not targets:
        raise ValueError("targets is empty")
    ref_name = reference or next(iter(targets))
    ties = {k: (near_tie or {}).get(k, DEFAULT_NEAR_TIE) for k in targets}
    rows, margins = [], {k: [] for k in targets}
    eos = tokenizer.eos_token_id
    for pr in prompts:
        ids = render_prompt(tokenizer, pr)
        pid = getattr(pr, "id", str(pr)[:20])
        cat = getattr(pr, "category", "unknown")
        plain = {}
        for dt, model in targets.items():
            plain[dt] = autoregressive_generate(
                model, ids, max_new_tokens=max_new_tokens, eos_token_id=eos
            ).new_tokens
            margins[dt].append(logit_margins(model, ids, plain[dt]))
        ref_model = targets[ref_name]
        for dt, model in targets.items():
            cands: list[tuple[str, list[int], list[int], Any]] = []
            if dt != ref_name:
                cands.append(("plain", plain[ref_name], plain[dt], ref_model))
            for dname, make in drafters.items():
                t0 = time.perf_counter()
                spec = speculative_generate(
                    model, make(model), ids, gamma=gamma, max_new_tokens=max_new_tokens,
                    eos_token_id=eos, trace=False,
                ).new_tokens  # fmt: skip
                cands.append((dname, plain[dt], spec, model))
                if progress is not None:
                    progress(f"{pid} {dt} {dname}: {time.perf_counter() - t0:.1f} s")
            for dname, ref, cand, ref_producer in cands:
                i = _first_diff(ref, cand)
                m = mref = None
                if i is not None and i < len(ref):
                    m = float(logit_margins(ref_producer, ids, ref[: i + 1])[i])
                    mref = float(logit_margins(ref_model, ids, ref[: i + 1])[i])
                res = greedy_consistency([ref], [cand], [m], near_tie=ties[dt])
                rows.append(
                    dict(
                        prompt=pid,
                        category=cat,
                        dtype=dt,
                        drafter=dname,
                        identical=i is None,
                        first_divergence=i,
                        margin=m,
                        margin_reference=mref,
                        verdict=res.verdicts[0],
                        reference_token=ref[i] if i is not None and i < len(ref) else None,
                        candidate_token=cand[i] if i is not None and i < len(cand) else None,
                        new_tokens=len(cand),
                    )
                )
    flat = {k: np.concatenate(v) if v else np.zeros(0) for k, v in margins.items()}
    return pd.DataFrame(rows), flat


# -------------------------------------------------------------------------------------------
# drafters x task types (notebook 07)
# -------------------------------------------------------------------------------------------


def grid_drafters(model: Any, names: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Drafter specs for :func:`specviz.analysis.run_grid` from short names, and the names
    that could not be built with the reason (e.g. no trained head weights).

    ``prompt_lookup`` (n-gram copy from the context), ``suffix`` (a suffix trie over the
    session's earlier prompts and outputs, one per (gamma, mode) session), ``early_exit:L``
    (the target's first L layers), ``eagle_head`` (the trained EAGLE-style head shipped in
    ``data/heads/``, when its weights exist).
    """
    from .analysis import session
    from .heads import HeadDrafter
    from .suffix import SuffixDrafter

    specs: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for name in names:
        if name == "prompt_lookup":
            specs[name] = PromptLookupDrafter
        elif name == "suffix":
            specs[name] = session(SuffixDrafter)
        elif name.startswith("early_exit:"):
            layers = int(name.split(":", 1)[1])
            specs[name] = functools.partial(EarlyExitDrafter, model, layers)
        elif name == "eagle_head":
            factory = functools.partial(HeadDrafter.from_pretrained, model)
            try:
                # fail here (no weights, wrong model), not in the middle of the grid
                factory.cache_tag = factory().cache_tag  # grid cells keyed to the weights
            except (
                OSError,
                ValueError,
                AttributeError,
                TypeError,
            ) as e:  # no weights / no HF model
                skipped[name] = f"{type(e).__name__}: {e}"
                continue
            specs[name] = factory
        else:
            raise ValueError(
                f"unknown drafter {name!r}; use prompt_lookup, suffix, early_exit:<L>, eagle_head"
            )
    return specs, skipped


def pooled_cells(df: Any, by: Sequence[str] = ("drafter", "category", "gamma", "mode")) -> Any:
    """Per group of the grid (default drafter x category x gamma x mode, plus category
    ``all``): the summed accepted-count and rejection-position histograms, empty drafts, and
    the per-position acceptance averaged over prompts. The counts :func:`specviz.analysis.summarize`
    does not keep, for the rejection figures."""
    import pandas as pd

    by = list(by)
    data = pd.concat([df, df.assign(category="all")], ignore_index=True) if "category" in by else df
    rows = []
    for key, g in data.groupby(by, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        width = max(len(h) for h in g["accepted_hist"])
        acc = np.zeros(width, dtype=int)
        rej = np.zeros(max(1, width - 1), dtype=int)
        for h in g["accepted_hist"]:
            acc[: len(h)] += np.asarray(h, dtype=int)
        for h in g["rejection_hist"]:
            rej[: len(h)] += np.asarray(h, dtype=int)
        ppa = np.array([list(x) for x in g["per_position_acceptance"]], dtype=float)
        with warnings.catch_warnings():  # a position no prompt reached: NaN, not a warning
            warnings.simplefilter("ignore", RuntimeWarning)
            mean_ppa = np.nanmean(ppa, axis=0) if ppa.size else np.zeros(0)
        rows.append(
            dict(
                zip(by, key, strict=True),
                accepted_hist=acc,
                rejection_hist=rej,
                empty_drafts=int(g["empty_drafts"].sum()),
                steps=int(g["target_calls"].sum()),
                per_position_acceptance=mean_ppa,
            )
        )
    return pd.DataFrame(rows)


class GridExplorer:
    """Pick a drafter, a task category, a gamma and a mode of a finished grid
    (:func:`specviz.analysis.run_grid`); see where its drafts are rejected and what it costs.

    Left: the share of rejecting steps that stopped at each draft position, next to the share
    of steps that accepted the whole draft. Right: P(accept | reached) per draft position,
    for every drafter at the chosen category/gamma/mode (the chosen one bold). The info line
    holds the pooled numbers of :func:`specviz.analysis.summarize`.
    """

    def __init__(self, grid: Any, *, panel_width: int = 480) -> None:
        from .analysis import summarize

        if grid is None or len(grid) == 0:
            raise ValueError("GridExplorer needs a non-empty run_grid DataFrame")
        self.grid = grid
        self.panel_width = panel_width
        self.summary = summarize(grid)
        self.cells = pooled_cells(grid)
        opts = {
            k: list(dict.fromkeys(self.cells[k])) for k in ("drafter", "category", "gamma", "mode")
        }
        self.drafter_select = widgets.Dropdown(options=opts["drafter"], description="drafter")
        self.category_select = widgets.Dropdown(
            options=opts["category"], value="all", description="category"
        )
        self.gamma_select = widgets.Dropdown(options=sorted(opts["gamma"]), description="gamma")
        self.mode_select = widgets.Dropdown(options=opts["mode"], description="mode")
        self.rejections = go.FigureWidget()
        self.positions = go.FigureWidget()
        self.info = widgets.HTML()
        self._holding = False
        for w in (self.drafter_select, self.category_select, self.gamma_select, self.mode_select):
            w.observe(self._on_change, names="value")
        self.widget = widgets.VBox(
            [
                widgets.HBox(
                    [self.drafter_select, self.category_select, self.gamma_select, self.mode_select]
                ),
                self.info,
                widgets.HBox([self.rejections, self.positions]),
            ]
        )
        self.select()

    def _on_change(self, change: dict) -> None:
        if not self._holding:
            self.select()

    @property
    def state(self) -> dict[str, Any]:
        return dict(
            drafter=self.drafter_select.value,
            category=self.category_select.value,
            gamma=self.gamma_select.value,
            mode=self.mode_select.value,
        )

    def select(self, **choice: Any) -> dict[str, Any]:
        """Set any of drafter / category / gamma / mode (the dropdowns follow), redraw, and
        return the pooled summary row of the selection (empty dict: no such cell)."""
        unknown = set(choice) - {"drafter", "category", "gamma", "mode"}
        if unknown:
            raise TypeError(f"unknown selection keys {sorted(unknown)}")
        boxes = dict(
            drafter=self.drafter_select,
            category=self.category_select,
            gamma=self.gamma_select,
            mode=self.mode_select,
        )
        self._holding = True
        try:
            for k, v in choice.items():
                if v not in boxes[k].options:
                    raise ValueError(f"no {k} {v!r} in this grid; have {list(boxes[k].options)}")
                boxes[k].value = v
        finally:
            self._holding = False
        for fw, fig in zip((self.rejections, self.positions), self.figures(), strict=True):
            sync_figure(fw, fig)
        row = self.current_summary()
        s = self.state
        if row:
            self.info.value = (
                f"<b>{s['drafter']}</b>, {s['category']}, gamma {s['gamma']}, {s['mode']}: "
                f"mean accepted length <b>{row['mean_accepted_length']:.2f}</b> tokens per target "
                f"call, acceptance {row['acceptance_rate']:.1%}, draft time "
                f"{row['draft_time_share']:.1%} of the run, speedup {row['speedup']:.2f}x vs plain "
                f"({int(row['prompts'])} prompts, {int(row['new_tokens'])} tokens)"
            )
        else:
            self.info.value = "no cell with this selection"
        return row

    def _match(self, df: Any, **fix: Any) -> Any:
        sel = np.ones(len(df), dtype=bool)
        for k, v in fix.items():
            sel &= (df[k] == v).to_numpy()
        return df[sel]

    def current_summary(self) -> dict[str, Any]:
        sub = self._match(self.summary, **self.state)
        return sub.iloc[0].to_dict() if len(sub) else {}

    def figures(self) -> tuple[go.Figure, go.Figure]:
        s = self.state
        cell = self._match(self.cells, **s)
        w = self.panel_width
        title = f"{s['drafter']}, {s['category']}, gamma={s['gamma']}, {s['mode']}"
        if len(cell):
            c = cell.iloc[0]
            full = int(c.accepted_hist[s["gamma"]]) if len(c.accepted_hist) > s["gamma"] else 0
            rej = viz.rejection_positions_figure(
                c.rejection_hist, full, empty=c.empty_drafts, title=title
            )
        else:
            rej = viz.rejection_positions_figure([0] * s["gamma"], 0, title=f"{title}: no cell")
        same = self._match(self.cells, category=s["category"], gamma=s["gamma"], mode=s["mode"])
        series = {r.drafter: list(r.per_position_acceptance) for r in same.itertuples()}
        pos = viz.per_position_acceptance_figure(
            series or {s["drafter"]: []},
            title=f"Acceptance per position: {s['category']}, gamma={s['gamma']}, {s['mode']}",
        )
        for tr in pos.data:
            tr.line.width = 4 if tr.name == s["drafter"] else 1.5
        return rej.update_layout(width=w), pos.update_layout(width=w)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        return _bundle(self.widget, self.figures(), "GridExplorer", **kwargs)


def precision_drafters(
    names: Sequence[str], targets: dict[str, Any], **load_kw: Any
) -> dict[str, Callable[[Any], Any]]:
    """Drafter factories for :func:`precision_greedy`, each called with the target it drafts
    for: ``prompt_lookup``, ``early_exit:L`` (that target's first L layers, so in its dtype),
    or a draft model name, loaded once per target dtype (``targets``: dtype label -> model)
    and matched to the target by its dtype."""
    from .models import load_model

    out: dict[str, Callable[[Any], Any]] = {}
    for name in names:
        if name == "prompt_lookup":
            out[name] = lambda m: PromptLookupDrafter()
        elif name.startswith("early_exit:"):
            layers = int(name.split(":", 1)[1])
            out[name] = functools.partial(_early_exit, layers=layers)
        else:
            by_dtype = {
                m.dtype: load_model(name, dtype=m.dtype, progress=False, **load_kw)
                for m in targets.values()
            }
            out[name] = functools.partial(_model_draft, by_dtype=by_dtype)
    return out


def _early_exit(model: Any, *, layers: int) -> EarlyExitDrafter:
    return EarlyExitDrafter(model, layers)


def _model_draft(model: Any, *, by_dtype: dict[Any, Any]) -> Any:
    from .drafters import ModelDrafter

    return ModelDrafter(by_dtype[model.dtype])
