"""Interactive explorers (ipywidgets + plotly ``FigureWidget``) and the experiments behind them.

Each explorer is a class whose widget tree is ``.widget`` and whose state changes go through
one method (:meth:`TraceExplorer.show_step`, :meth:`ToyExplorer.update`,
:meth:`PromptPlayground.run`). The sliders and
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
import math
from collections.abc import Iterator, Sequence
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go
import torch

from .. import views as viz
from ..core.trace import DraftPosition, Step, Trace
from .position import greedy_matching

__all__ = [
    "BORDERLINE",
    "figure_widget",
    "sync_figure",
    "TraceExplorer",
    "FigureSelector",
    "borderline_tests",
    "most_borderline",
    "opening_row",
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
    layout = clean.get("layout", {})
    # The front end applies a new layout as a relayout, which leaves out empty lists: the
    # notes of the previous figure would stay on screen (a "no rejection" note over the next
    # step's bars). Clear them first.
    stale = {k: [] for k in ("annotations", "shapes") if fw.layout[k] and not layout.get(k)}
    if stale:
        fw.plotly_relayout(stale)
    with fw.batch_update():
        fw.data = []
        fw.add_traces(clean.get("data", []))
        fw.layout = layout


def figure_widget(fig: go.Figure) -> go.FigureWidget:
    """A ``FigureWidget`` born showing ``fig`` (NaN made null, as in :func:`sync_figure`).

    An explorer's first figures go into the widget's opening state rather than into update
    messages sent right after it: JupyterLab can still be creating the widget's model when
    those arrive, and drops them -- the panel then stays blank until the next redraw."""
    import plotly.io as pio

    return go.FigureWidget(json.loads(pio.to_json(fig, validate=False)))


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

BORDERLINE = (0.05, 0.95)
"""A test is *borderline* (a real decision, not a foregone one) when 0.05 < min(1, p/q) < 0.95."""


def _tested(r: DraftPosition) -> bool:
    """A drafted position that went through a uniform-draw test."""
    return r.draft_token >= 0 and r.evaluated and not math.isnan(r.u)


def borderline_tests(trace: Trace, bounds: tuple[float, float] = BORDERLINE) -> list[tuple]:
    """(step, row, min(1, p/q)) of every tested draft with ``lo < min(1, p/q) < hi``, in trace
    order (``row`` 0-based in the step, i.e. draft position ``row + 1``)."""
    lo, hi = bounds
    return [
        (s.step, j, r.accept_prob)
        for s in trace.steps
        for j, r in enumerate(s.positions)
        if _tested(r) and lo < r.accept_prob < hi
    ]


def most_borderline(trace: Trace) -> tuple[int, int] | None:
    """(step, row) of the tested draft whose min(1, p/q) is closest to 1/2 -- the decision the
    uniform draw was least sure about -- or None when nothing was tested."""
    best: tuple[float, int, int] | None = None
    for s in trace.steps:
        for j, r in enumerate(s.positions):
            if _tested(r) and not math.isnan(r.accept_prob):
                key = (abs(r.accept_prob - 0.5), s.step, j)
                best = key if best is None or key < best else best
    return None if best is None else (best[1], best[2])


def opening_row(step: Step) -> int:
    """The row a step opens on: its rejection if it had one, else its first test (draft
    position 1); a step that drafted nothing has only its bonus slot."""
    j = viz.default_row(step)
    r = step.positions[j] if step.positions else None
    if r is not None and r.draft_token >= 0 and r.evaluated and not r.accepted:
        return j
    return 0


def _num(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:.3g}"


def _fate(s: Step, j: int) -> str:
    """What happened at row ``j`` of step ``s``, in the words every explorer label uses."""
    r = s.positions[j]
    if r.draft_token < 0:
        return "bonus token" if s.drafted else "target token (nothing drafted)"
    if not r.evaluated:
        return "never tested"
    if r.accepted:
        return "accepted" if r.emitted_token >= 0 else "accepted, cut by EOS / length"
    return "rejected, corrected" if r.emitted_token >= 0 else "rejected"


def _never_tested_why(s: Step) -> str:
    return f"draft position {s.accepted + 1} was rejected first, so the step ended there"


def _verdict(r: DraftPosition, s: Step) -> str:
    if r.draft_token < 0:
        return (
            f"bonus slot: all {s.drafted} drafts accepted, token drawn from p"
            if s.drafted
            else "nothing drafted: the target's own token"
        )
    if not r.evaluated:
        return f"never tested: {_never_tested_why(s)}"
    verdict = "accept" if r.accepted else "reject"
    if math.isnan(r.u):
        return f"no uniform draw (greedy matching or a deterministic rule) -> {verdict}"
    sign = "<" if r.u < r.accept_prob else ">="
    return f"u = {r.u:.3f} {sign} min(1, p/q) = {r.accept_prob:.3f} -> {verdict}"


def _slot_hover(trace: Trace, slot: viz.Slot, tokenizer: Any) -> str:
    """One hover text of the token strip: what the slot is, at which draft position (1-based,
    the convention of every title), and the numbers of its decision."""
    s = trace.steps[slot.step]
    label = viz.token_label(slot.token, tokenizer)
    head = f"<b>{slot.kind}</b> {label!r} (id {slot.token})<br>step {s.step}"
    if not s.positions:
        return head + " (plain decoding)"
    j = slot.index_in_step
    r = s.positions[j]
    if r.draft_token < 0:
        where = f", after draft position {s.drafted}" if s.drafted else ", nothing drafted"
        p = dict(zip(r.top_p_ids, r.top_p_probs, strict=True)).get(slot.token, math.nan)
        return f"{head}{where}<br>drawn from p: p = {_num(p)}"
    if slot.kind == "corrected":
        p = dict(zip(r.top_p_ids, r.top_p_probs, strict=True)).get(slot.token, math.nan)
        res = dict(zip(r.residual_ids, r.residual_probs, strict=True)).get(slot.token, math.nan)
        return (
            f"{head}, draft position {j + 1}<br>replaced the rejected draft "
            f"{viz.token_label(r.draft_token, tokenizer)!r}: residual = {_num(res)}, "
            f"p = {_num(p)}"
        )
    return (
        f"{head}, draft position {j + 1}: {_fate(s, j)}<br>p = {_num(r.p_target)}, "
        f"q = {_num(r.q_draft)}<br>{_verdict(r, s)}"
    )


def _note_figure(title: str, text: str, height: int) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(
        title=title, height=height, xaxis=dict(visible=False), yaxis=dict(visible=False)
    )
    return fig


class TraceExplorer:
    """Scrub through the steps of a speculative trace.

    A step slider (previous / next buttons, a play button that walks the steps) moves the
    highlight in the token strip and shows, for one slot of that step (a dropdown of draft
    positions, 1-based as in every title and hover; a step opens on its rejection, else on its
    first test), the target p vs draft q bars, the uniform draw u against min(1, p/q), and the
    residual law the corrected token came from. Clicking a token of the strip opens its step
    at its slot; "most borderline test" jumps to the test whose min(1, p/q) was closest to
    1/2; "log scale" puts the probability axes on a log scale (tiny p next to large q).
    Drafts after a rejection are marked *never tested*: no uniform draw decided them.

    A greedy trace (:func:`~specviz.views.position.greedy_matching`) has no residual law: the
    residual panel would be an empty box at every step, so it is left out (live and in the
    static snapshot) and the info line says which argmax replaced a rejected draft.
    """

    def __init__(
        self,
        trace: Trace,
        tokenizer: Any = None,
        *,
        per_row: int = 16,
        panel_width: int = 480,
        play_interval: int = 1500,
        step: int | None = None,
    ) -> None:
        """``step``: the step to open on (default: the first that drafted anything)."""
        self.trace = trace
        self.tokenizer = tokenizer
        self.per_row = per_row
        self.panel_width = panel_width  # p/q and residual sit side by side
        self.steps = [s.step for s in trace.steps if s.positions]
        if not self.steps:
            raise ValueError("the trace has no drafted positions: pass a speculative trace")
        drafting = [st for st in self.steps if trace.steps[st].drafted]
        if step is not None and step not in self.steps:
            raise ValueError(f"step {step!r} has no drafted positions; choose from {self.steps}")
        self.step = step if step is not None else (drafting or self.steps)[0]
        self.row = opening_row(trace.steps[self.step])
        self.log_scale = False
        self.borderline = most_borderline(trace)
        self.greedy = greedy_matching(trace)  # no residual law: no residual panel
        self.strip, self.pq, self.accept, self.residual = map(figure_widget, self.figures())
        self.slider = widgets.IntSlider(
            value=self.steps.index(self.step),
            min=0,
            max=len(self.steps) - 1,
            description="step",
            continuous_update=False,
            layout=widgets.Layout(width="55%"),
        )
        self.prev_button = widgets.Button(description="◀ prev", layout=widgets.Layout(width="80px"))
        self.next_button = widgets.Button(description="next ▶", layout=widgets.Layout(width="80px"))
        self.play = widgets.Play(
            value=self.steps.index(self.step),
            min=0,
            max=len(self.steps) - 1,
            interval=play_interval,
            description="play",
            show_repeat=False,
            tooltip="walk through the steps",
        )
        widgets.link((self.play, "value"), (self.slider, "value"))
        self.row_select = widgets.Dropdown(
            description="draft position",
            style={"description_width": "95px"},
            layout=widgets.Layout(width="400px"),
        )
        self.borderline_button = widgets.Button(
            description="most borderline test",
            tooltip="the test whose min(1, p/q) was closest to 1/2",
            disabled=self.borderline is None,
            layout=widgets.Layout(width="170px"),
        )
        self.log_toggle = widgets.ToggleButton(
            value=False,
            description="log scale",
            tooltip="probability axes on a log scale",
            layout=widgets.Layout(width="100px"),
        )
        self.info = widgets.HTML()
        self._syncing = False
        self.slider.observe(self._on_slider, names="value")
        self.row_select.observe(self._on_row, names="value")
        self.prev_button.on_click(lambda _: self.show_step(self._prev()))
        self.next_button.on_click(lambda _: self.show_step(self._next()))
        self.borderline_button.on_click(lambda _: self.show_borderline())
        self.log_toggle.observe(lambda ch: self.set_log_scale(ch["new"]), names="value")
        self.widget = widgets.VBox(
            [
                widgets.HBox([self.prev_button, self.slider, self.next_button, self.play]),
                widgets.HBox([self.row_select, self.borderline_button, self.log_toggle]),
                self.info,
                self.strip,
                widgets.HBox([self.pq] if self.greedy else [self.pq, self.residual]),
                self.accept,
            ]
        )
        self.show_step(self.step, self.row, redraw=False)  # the widgets were born with it

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

    def _on_token_click(self, trace: Any, points: Any, state: Any = None) -> None:
        """A click on a token of the strip: open its step at its slot."""
        for i in points.point_inds:
            step, row = trace.customdata[i][:2]
            if int(step) in self.steps:
                self.show_step(int(step), int(row))
            return

    def show_borderline(self) -> tuple[int, int] | None:
        """Open the most borderline test (min(1, p/q) closest to 1/2); None when none."""
        if self.borderline is not None:
            self.show_step(*self.borderline)
        return self.borderline

    def set_log_scale(self, on: bool = True) -> None:
        """Probability axes of the p/q and residual panels on a log scale (or back)."""
        self.log_scale = bool(on)
        if self.log_toggle.value != self.log_scale:
            self.log_toggle.value = self.log_scale  # re-enters through the observer
            return
        self.show_step(self.step, self.row)

    def show_step(self, step: int, row: int | None = None, *, redraw: bool = True) -> None:
        """Show trace step ``step`` (its ``Step.step`` number) at row ``row`` (0-based in the
        step: draft position ``row + 1``; default: the rejection, else the first test).
        ``redraw=False`` moves the controls only (the figures already show this state)."""
        if step not in self.steps:
            raise IndexError(f"step {step} is not a speculative step of this trace")
        s = self.trace.steps[step]
        if row is not None and not 0 <= row < len(s.positions):
            raise IndexError(f"row {row} out of range [0, {len(s.positions)}) in step {step}")
        self.step = step
        self.row = opening_row(s) if row is None else row
        self._syncing = True
        try:
            self.slider.value = self.steps.index(step)
            self.row_select.options = [(self._row_label(s, j), j) for j in range(len(s.positions))]
            self.row_select.value = self.row
        finally:
            self._syncing = False
        if redraw:
            for fw, fig in zip(
                (self.strip, self.pq, self.accept, self.residual), self.figures(), strict=True
            ):
                sync_figure(fw, fig)
        for tr in self.strip.data:  # new traces: the click handlers go with the old ones
            tr.on_click(self._on_token_click)
        r = s.positions[self.row]
        where = f"draft position {self.row + 1}" if r.draft_token >= 0 else "bonus slot"
        hint = ""
        if self.borderline is not None:
            bs, bj = self.borderline
            a = self.trace.steps[bs].positions[bj].accept_prob
            hint = (
                f"<br>most borderline test: step {bs}, draft position {bj + 1}, "
                f"min(1, p/q) = {a:.3f}; {len(borderline_tests(self.trace))} test(s) with "
                f"{BORDERLINE[0]} &lt; min(1, p/q) &lt; {BORDERLINE[1]}"
            )
        self.info.value = (
            f"<b>step {s.step}</b>: drafted {s.drafted}, accepted {s.accepted}, emitted "
            f"{len(s.emitted)} token(s), final token {s.final_kind}; "
            f"draft {1e3 * s.draft_time:.1f} ms, verify {1e3 * s.verify_time:.1f} ms"
            f"<br><b>{where}</b>: {_verdict(r, s)}{self._greedy_note(r)}{hint}"
        )

    def _greedy_note(self, r: DraftPosition) -> str:
        """Under greedy matching, what the (hidden) residual panel would have had to say: the
        target's argmax replaced the rejected draft, no law was drawn from."""
        if not (self.greedy and r.draft_token >= 0 and r.evaluated and not r.accepted):
            return ""
        if r.emitted_token < 0:
            return ""
        tok = self.tokenizer
        return (
            f"<br>greedy matching: the target's top token "
            f"{viz.token_label(r.emitted_token, tok)!r} replaced the draft "
            f"{viz.token_label(r.draft_token, tok)!r} (no residual law to draw from, so no "
            "residual panel; with sampling the correction is drawn from norm(max(0, p - q)))"
        )

    def _row_label(self, s: Step, j: int) -> str:
        r = s.positions[j]
        if r.draft_token < 0:
            tok = viz.token_label(r.emitted_token, self.tokenizer)
            return f"{j + 1}: {_fate(s, j)} {tok!r}" if r.emitted_token >= 0 else f"{j + 1}: bonus"
        return f"{j + 1}: {_fate(s, j)} (draft {viz.token_label(r.draft_token, self.tokenizer)!r})"

    def figures(self) -> tuple[go.Figure, go.Figure, go.Figure, go.Figure]:
        """The four figures of the current state (strip, p vs q, accept test, residual)."""
        tr, st, row, tok = self.trace, self.step, self.row, self.tokenizer
        w = self.panel_width
        s = tr.steps[st]
        r = s.positions[row]
        strip = viz.token_strip_figure(tr, tok, highlight_step=st, per_row=self.per_row)
        self._strip_hovers(strip)
        pq = viz.pq_figure(tr, st, row, tok)
        accept = viz.accept_test_figure(tr, st, row)
        residual = viz.residual_figure(tr, st, row, tok)
        if r.draft_token < 0:  # the bonus slot is no draft position: say what it is
            where = f"bonus slot after draft position {s.drafted}" if s.drafted else "no draft"
            kind = "bonus token" if s.drafted else "the target's own token"
            label = viz.token_label(r.emitted_token, tok)
            pq.update_layout(
                title=f"step {s.step}, {where}: {kind} {label!r}<br><sup>{_verdict(r, s)}</sup>"
            )
            accept.update_layout(title=f"step {s.step}, {where}: no acceptance test")
            residual.update_layout(title=f"step {s.step}, {where}: residual")
        elif not r.evaluated:  # after the rejection: nothing was tested
            label = viz.token_label(r.draft_token, tok)
            title = f"step {s.step}, draft position {row + 1}: draft {label!r}, never tested"
            pq.update_layout(title=f"{title}<br><sup>{_never_tested_why(s)}</sup>")
            for t in accept.data:
                if t.type == "scatter":
                    t.x, t.y = [], []  # no u: an unused draw is no decision
            accept.update_layout(title=title, annotations=[])
            accept.add_annotation(
                text=f"never tested: {_never_tested_why(s)}",
                showarrow=False,
                x=0.5,
                y=0.5,
                xref="paper",
                yref="paper",
            )
            residual = _note_figure(
                f"step {s.step}, draft position {row + 1}: residual",
                f"never tested; the residual of this step is at draft position {s.accepted + 1}",
                height=380,
            )
        for fig in (pq, residual):
            for t in fig.data:
                if t.hovertemplate:  # small probabilities stay readable
                    t.hovertemplate = t.hovertemplate.replace(":.4f}", ":.3g}")
            if self.log_scale and fig.data:
                fig.update_yaxes(type="log", range=None, autorange=True)
                fig.update_yaxes(title="probability (log scale)")
        return (
            strip.update_layout(width=2 * w),
            pq.update_layout(width=2 * w if self.greedy else w),  # alone in its row
            accept.update_layout(width=2 * w),
            residual.update_layout(width=w),
        )

    def _strip_hovers(self, fig: go.Figure) -> None:
        """Hovers of the token strip in the explorer's words (1-based draft positions), and
        (step, row) first in each bar's customdata, for the click handler."""
        slots = viz.token_slots(self.trace)
        for t in fig.data:
            sl = [x for x in slots if x.kind == t.name]
            t.customdata = [
                [x.step, x.index_in_step, _slot_hover(self.trace, x, self.tokenizer)] for x in sl
            ]
            t.hovertemplate = "%{customdata[2]}<extra></extra>"

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        bundle = _bundle(self.widget, self.shown_figures(), "TraceExplorer", **kwargs)
        if "text/html" in bundle:  # the snapshot cannot show the widgets: say what they are
            bundle["text/html"] = self.controls_html() + bundle["text/html"]
        return bundle

    def controls_html(self) -> str:
        """One line for the static snapshot (an offline HTML export has no widgets): which
        step it froze and the controls the live explorer has in JupyterLab."""
        s = self.trace.steps[self.step]
        where = (
            f"draft position {self.row + 1}"
            if s.positions[self.row].draft_token >= 0
            else "its bonus slot"
        )
        controls = (
            "a step slider over its {n} steps, ◀ prev / next ▶, a play button that walks them, "
            "a draft-position menu, <i>most borderline test</i>{b}, <i>log scale</i>, and a "
            "click on a token of the strip opens its step"
        ).format(
            n=len(self.steps),
            b=""
            if self.borderline is not None
            else (
                " (disabled: greedy matching draws no uniform, so no test is borderline)"
                if self.greedy
                else " (disabled: no draft went through a uniform draw)"
            ),
        )
        return (
            f"<p><b>Trace explorer</b> (static snapshot of step {s.step}, {where}; live in "
            f"JupyterLab with {controls})</p>"
        )

    def shown_figures(self) -> tuple[go.Figure, ...]:
        """The figures a reader sees (the static snapshot's too): :meth:`figures` less the
        residual panel under greedy matching, where it could only be empty."""
        strip, pq, accept, residual = self.figures()
        return (strip, pq, accept) if self.greedy else (strip, pq, accept, residual)


class FigureSelector:
    """A dropdown over named figures (e.g. one goodness-of-fit figure per verifier): the
    notebook computes all of them once, the reader flips through them."""

    def __init__(self, figures: dict[str, go.Figure], *, description: str = "show") -> None:
        if not figures:
            raise ValueError("FigureSelector needs at least one figure")
        self.figures_by_name = dict(figures)
        first = next(iter(self.figures_by_name))
        self.dropdown = widgets.Dropdown(
            options=list(self.figures_by_name), value=first, description=description
        )
        # born showing the first figure: an update sent right after creation can be dropped
        self.figure = figure_widget(self.figures_by_name[first])
        self.dropdown.observe(lambda ch: self.select(ch["new"]), names="value")
        self.widget = widgets.VBox([self.dropdown, self.figure])

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
