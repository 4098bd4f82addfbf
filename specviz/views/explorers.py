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
import json
from collections.abc import Iterator, Sequence
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go
import torch

from .. import views as viz
from ..core.trace import Trace

__all__ = ["sync_figure", "TraceExplorer", "FigureSelector"]


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
