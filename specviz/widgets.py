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
:func:`sample_continuations`, :func:`run_prompts`, :func:`load_models`) are what the notebooks
run; they live here, not in the notebooks, so they are tested and the notebooks stay thin.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
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
from .sampling import SamplingParams, logits_to_probs
from .toy import ToyLM, exact_continuation_law
from .trace import Trace
from .verify import VERIFIERS

__all__ = [
    "FigureSelector",
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


def _ratio_accept(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """min(1, p/q) as the unguarded verifiers compute it: p/0 = inf accepts, 0/0 = NaN rejects."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = p / q
    return np.where(np.isnan(ratio), 0.0, np.minimum(ratio, 1.0))


def _residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    r = np.clip(p - q, 0.0, None)
    return r / r.sum() if r.sum() > 0 else p


def first_token_law(
    verifier: str, target_logits: torch.Tensor, draft_logits: torch.Tensor, params: SamplingParams
) -> np.ndarray:
    """Exact law of the first token a speculative step emits under a named verifier.

    The first token is the first draft if accepted, else a token from the rule's correction
    law, whatever gamma is, so it is a one-position computation:
    ``sum_x s(x) [a(x) delta_x + (1 - a(x)) r]`` with ``s`` the law the drafter samples from,
    ``a`` the rule's acceptance probability and ``r`` its correction law. The lossless rule
    gives exactly the target law ``p``; every broken rule of :data:`specviz.VERIFIERS` moves it
    by a computable TV distance -- the effect size a test has to detect. Mirrors the drafter
    modes of :mod:`specviz.drafters` and the rules of :mod:`specviz.verify` (tests check the
    mirror against the engine by simulation).
    """
    if params.is_greedy:
        raise ValueError("first_token_law is for sampling (do_sample=True)")
    p = logits_to_probs(target_logits.float(), params).double().numpy()
    q = logits_to_probs(draft_logits.float(), params)
    q_np = q.double().numpy()
    sampled, reported = q_np, q_np
    if verifier not in VERIFIERS:
        raise ValueError(f"unknown verifier {verifier!r}; choose from {sorted(VERIFIERS)}")
    mode = VERIFIERS[verifier].draft_mode
    if mode == "argmax_softmax_q":
        sampled = np.zeros_like(q_np)
        sampled[int(draft_logits.argmax())] = 1.0
    elif mode == "unprocessed_q":
        reported = torch.softmax(draft_logits.float(), dim=-1).double().numpy()
    elif mode == "ignores_temperature":
        t1 = SamplingParams(True, 1.0, params.top_k, params.top_p)
        sampled = logits_to_probs(draft_logits.float(), t1).double().numpy()
    elif mode == "vocab_shift":  # tokens translated correctly, q reported in draft ids
        from .drafters import shifted_ids

        reported = q_np[shifted_ids(len(q_np)).numpy()]
    elif mode == "bf16_sample":
        q16 = logits_to_probs(draft_logits.float().to(torch.bfloat16), params)
        q16 = q16.to(torch.bfloat16).float().double().numpy()
        sampled = q16 / q16.sum()

    if verifier in (
        "lossless",
        "greedy_draft_softmax_q",
        "unprocessed_q",
        "draft_ignores_temperature",
        "mixed_precision",
        "vocab_mismatch",
    ):
        accept, residual = _ratio_accept(p, reported), _residual(p, reported)
    elif verifier == "residual_from_target":
        accept, residual = _ratio_accept(p, reported), p
    elif verifier == "threshold":  # u fixed at 0.5: accept iff 0.5 < min(1, p/q)
        accept, residual = (_ratio_accept(p, reported) > 0.5).astype(float), _residual(p, reported)
    elif verifier == "always_accept":
        accept, residual = np.ones_like(p), p
    elif verifier == "typical":  # Medusa: p(x) > min(0.3, 0.09 * exp(-H(p))), then sample p
        entropy = -(p * np.log(np.clip(p, 1e-30, None))).sum()
        accept, residual = (p > min(0.3, 0.09 * math.exp(-entropy))).astype(float), p
    else:
        raise ValueError(f"no exact first-token law for verifier {verifier!r}")
    law = sampled * accept + (sampled * (1.0 - accept)).sum() * residual
    return law / law.sum()


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
