"""Explorers that run experiments as the reader moves a slider: the toy simulator and the
drafter grid.

Each explorer's ``FigureWidget`` objects are born holding their first figures
(:func:`specviz.views.explorers.figure_widget`); only later changes go through
:func:`~specviz.views.explorers.sync_figure` -- JupyterLab can drop updates sent right after a
widget is created, which left panels blank.
"""

from __future__ import annotations

import time
from typing import Any

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go

from .. import views as viz
from ..views.explorers import (
    _bundle,
    figure_widget,
    sync_figure,
)
from ..views.perf import StepOutcomes
from .experiments import ToySimulation, pooled_cells, simulate_toy
from .playground import PromptPlayground

__all__ = ["ToyExplorer", "GridExplorer", "PromptPlayground"]  # the playground: .playground


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
        self.info = widgets.HTML()
        self._holding = False
        self.result: ToySimulation | None = None
        took = self._simulate()
        # the widgets are born with the first figures (no update right after creation)
        self.curve, self.histogram = map(figure_widget, self.figures())
        self._show_info(took)
        for s in (self.noise_slider, self.temperature_slider, self.gamma_slider):
            s.observe(self._on_change, names="value")
        self.widget = widgets.VBox(
            [
                widgets.HBox([self.noise_slider, self.temperature_slider, self.gamma_slider]),
                self.info,
                widgets.HBox([self.curve, self.histogram]),
            ]
        )

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
        took = self._simulate()
        for fw, fig in zip((self.curve, self.histogram), self.figures(), strict=True):
            sync_figure(fw, fig)
        self._show_info(took)
        assert self.result is not None
        return self.result

    def _simulate(self) -> float:
        """Simulate at the sliders' values into ``self.result``; the seconds it took."""
        t0 = time.perf_counter()
        self.result = simulate_toy(
            self.noise_slider.value,
            self.temperature_slider.value,
            self.gamma_slider.value,
            vocab_size=self.vocab_size,
            tokens=self.tokens,
            seed=self.seed,
        )
        return time.perf_counter() - t0

    def _show_info(self, took: float) -> None:
        sim = self.result
        assert sim is not None
        self.info.value = (
            f"alpha (exact) = <b>{sim.alpha:.3f}</b>; tokens per target call: theory "
            f"<b>{sim.theory:.3f}</b>, simulated <b>{sim.tokens_per_call:.3f}</b> "
            f"± {1.96 * sim.tokens_per_call_se:.3f} (95%), {sim.target_calls} target calls for "
            f"{sim.new_tokens} tokens ({took:.2f} s)"
        )

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


class GridExplorer:
    """Pick a drafter, a task category, a gamma and a mode of a finished grid
    (:func:`specviz.analysis.run_grid`); see where its drafts are rejected and what it costs.

    Left: how every step of the cell ended (:func:`specviz.views.perf.rejection_positions_figure`
    of the cell's ``outcomes``): the share of steps whose first rejection was at draft position
    1..gamma (1 = the first drafted token), that kept a full draft, that kept a draft cut short
    (by ``max_new_tokens``, or a lookup that found fewer tokens), and that drafted nothing; the
    bars add up to every step. Right: P(accept | reached) per draft position,
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
        # the widgets are born with the first figures (no update right after creation)
        self.rejections, self.positions = map(figure_widget, self.figures())
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
        self._show_info()

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
        return self._show_info()

    def _show_info(self) -> dict[str, Any]:
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
        if len(cell):  # every step: rejections, full drafts, cut-short drafts, empty drafts
            rej = viz.rejection_positions_figure(cell.iloc[0].outcomes, title=title)
        else:
            none = StepOutcomes(int(s["gamma"]), (0,) * int(s["gamma"]))
            rej = viz.rejection_positions_figure(none, title=f"{title}: no cell")
        same = self._match(self.cells, category=s["category"], gamma=s["gamma"], mode=s["mode"])
        # the cell rows carry their histograms: counts and 95% intervals per position
        series = {r.drafter: r for r in same.itertuples()}
        pos = viz.per_position_acceptance_figure(
            series or {s["drafter"]: []},
            title=f"Acceptance per position: {s['category']}, gamma={s['gamma']}, {s['mode']}",
        )
        for tr in pos.data:
            tr.line.width = 4 if tr.name == s["drafter"] else 1.5
        return rej.update_layout(width=w), pos.update_layout(width=w)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        return _bundle(self.widget, self.figures(), "GridExplorer", **kwargs)
