"""Try your own prompt: :class:`PromptPlayground` runs one speculative generation on the
reader's prompt, temperature, gamma and seed, and shows its trace (notebook 02's "try your own"
box). Cut from :mod:`specviz.lab.explorers`, which still exports it."""

from __future__ import annotations

import math
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go

from .. import views as viz
from ..core.trace import Trace
from ..views.explorers import (
    BORDERLINE,
    TraceExplorer,
    _bundle,
    _note_figure,
    _tested,
    borderline_tests,
    figure_widget,
    sync_figure,
)
from ..views.trace import acceptance_text


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _int_or_none(x: Any) -> int | None:
    if isinstance(x, bool):
        return None
    try:
        v = int(x)
    except (TypeError, ValueError):
        return None
    return v if v == x else None


def _float_or_none(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


#: The largest seed the playground's seed box holds (a 32-bit widget value).
SEED_MAX = 2**31 - 1


class PromptPlayground:
    """Try your own prompt on the real model: a prompt box, temperature / top-p / gamma / max new
    tokens / seed controls and a *Run* button. A run goes through the same code path as the
    notebook -- the prompt rendered with the model's chat template (:func:`specviz.prompts.
    render_prompt`), then :func:`specviz.speculative_generate` with ``do_sample=True``, or
    greedy decoding (``do_sample=False``, no draw decides a draft) at temperature 0 -- and
    shows the token strip, a summary line (tokens, target calls, mean accepted length, "k of n"
    drafts accepted with a 95% interval) and a :class:`TraceExplorer` of the new trace.

    ``models`` is what :func:`~specviz.lab.experiments.load_models` returns (anything with
    ``target`` and ``draft``; ``tokenizer`` and ``label`` are used when present) or a
    ``(target, draft)`` pair. :meth:`run` is what the button calls, so Python (a test, a
    notebook cell) drives the playground exactly as a reader does. Bad settings (an empty
    prompt, gamma < 1, temperature < 0, top-p outside (0, 1], max new tokens < 1) and a failed
    run are reported in the widget's status line, not as a traceback; the figures then still
    show the last successful run. With ``run=True`` (the default) the playground runs once at
    construction, so its widgets are born with content and the static HTML snapshot of an
    export without widget state shows that run.
    """

    def __init__(
        self,
        models: Any,
        tokenizer: Any = None,
        *,
        prompt: str = "",
        gamma: int = 4,
        temperature: float = 0.7,
        top_p: float = 1.0,
        max_new_tokens: int = 32,
        seed: int = 0,
        eos_token_id: Any = ...,
        run: bool = True,
        label: str | None = None,
        per_row: int = 16,
        panel_width: int = 480,
    ) -> None:
        if isinstance(models, tuple | list) and len(models) == 2:
            self.target, self.draft = models
        elif hasattr(models, "target") and hasattr(models, "draft"):
            self.target, self.draft = models.target, models.draft
        else:
            got = (
                f"a {type(models).__name__} of {len(models)}"
                if isinstance(models, tuple | list)
                else type(models).__name__
            )
            raise TypeError(
                "PromptPlayground needs the models: a (target, draft) pair or what "
                f"specviz.lab.load_models returns (with .target and .draft), got {got}"
            )
        if self.target is None or self.draft is None:
            raise TypeError(
                f"PromptPlayground: the {'target' if self.target is None else 'draft'} is None"
            )
        self.tokenizer = tokenizer if tokenizer is not None else getattr(models, "tokenizer", None)
        if self.tokenizer is None:
            raise ValueError("PromptPlayground needs a tokenizer (to encode the prompt)")
        self.label = label or getattr(models, "label", None) or "target + draft"
        self.eos_token_id = (
            getattr(self.tokenizer, "eos_token_id", None) if eos_token_id is ... else eos_token_id
        )
        self.per_row = per_row
        self.panel_width = panel_width
        self.result: Any = None  # the GenerationResult of the last successful run
        self.trace: Trace | None = None
        self.explorer: TraceExplorer | None = None
        self.error: str | None = None  # the message of the last failed run, None after success
        self.settings: dict[str, Any] = {}  # the settings of the last successful run
        self._strip_fig: go.Figure | None = None
        self.strip: go.FigureWidget | None = None

        wide = widgets.Layout(width="48%")
        style = {"description_width": "110px"}
        self.prompt_box = widgets.Textarea(
            value=str(prompt),
            placeholder="type a prompt (a user message; the chat template is applied)",
            description="prompt",
            rows=3,
            layout=widgets.Layout(width="98%"),
            style=style,
        )
        self.temperature_slider = widgets.FloatSlider(
            value=_float_or_none(temperature) or 0.0,
            min=0.0,
            max=2.0,
            step=0.05,
            description="temperature",
            readout_format=".2f",
            continuous_update=False,
            layout=wide,
            style=style,
        )
        self.top_p_slider = widgets.FloatSlider(
            value=min(1.0, max(0.0, _float_or_none(top_p) or 0.0)),
            min=0.0,
            max=1.0,
            step=0.05,
            description="top-p",
            readout_format=".2f",
            continuous_update=False,
            layout=wide,
            style=style,
        )
        self.gamma_slider = widgets.IntSlider(
            value=max(1, _int_or_none(gamma) or 1),
            min=1,
            max=max(8, _int_or_none(gamma) or 1),
            description="gamma (drafts)",
            continuous_update=False,
            layout=wide,
            style=style,
        )
        self.max_tokens_slider = widgets.IntSlider(
            value=max(1, _int_or_none(max_new_tokens) or 1),
            min=1,
            max=max(128, _int_or_none(max_new_tokens) or 1),
            description="max new tokens",
            continuous_update=False,
            layout=wide,
            style=style,
        )
        self.seed_box = widgets.BoundedIntText(
            value=min(SEED_MAX, max(0, _int_or_none(seed) or 0)),
            min=0,
            max=SEED_MAX,
            description="seed",
            layout=widgets.Layout(width="220px"),
            style=style,
        )
        self.run_button = widgets.Button(
            description="Run",
            button_style="primary",
            tooltip="generate with these settings",
            icon="play",
            layout=widgets.Layout(width="100px"),
        )
        self.status = widgets.HTML()
        self.summary = widgets.HTML()
        self.explorer_box = widgets.VBox()
        self.run_button.on_click(lambda _: self.run())

        if run:  # the Python values, not the clamped control values: a bad one is reported
            self.run(
                prompt,
                gamma=gamma,
                temperature=temperature,
                top_p=top_p,
                max_new_tokens=max_new_tokens,
                seed=seed,
            )
        if self.strip is None:
            self._strip_fig = _note_figure(
                "token strip", "press Run to generate", height=160
            ).update_layout(width=2 * panel_width)
            self.strip = figure_widget(self._strip_fig)
        self.widget = widgets.VBox(
            [
                self.prompt_box,
                widgets.HBox([self.temperature_slider, self.top_p_slider]),
                widgets.HBox([self.gamma_slider, self.max_tokens_slider]),
                widgets.HBox([self.seed_box, self.run_button, self.status]),
                self.summary,
                self.strip,
                self.explorer_box,
            ]
        )

    # settings ---------------------------------------------------------------------------
    def current_settings(self) -> dict[str, Any]:
        """The settings the controls show now (what the Run button uses)."""
        return dict(
            prompt=self.prompt_box.value,
            gamma=self.gamma_slider.value,
            temperature=self.temperature_slider.value,
            top_p=self.top_p_slider.value,
            max_new_tokens=self.max_tokens_slider.value,
            seed=self.seed_box.value,
        )

    @staticmethod
    def check(settings: dict[str, Any]) -> list[str]:
        """What is wrong with ``settings`` (one sentence each); empty when they can run."""
        problems = []
        prompt = settings.get("prompt")
        if not isinstance(prompt, str):
            problems.append(
                f"the prompt must be text (a string), got {type(prompt).__name__} {prompt!r}"
            )
        elif not prompt.strip():
            problems.append("the prompt is empty: type a prompt in the box")
        g = _int_or_none(settings.get("gamma"))
        if g is None or g < 1:
            problems.append(
                f"gamma (tokens drafted per step) must be an integer >= 1, got "
                f"{settings.get('gamma')!r}"
            )
        t = _float_or_none(settings.get("temperature"))
        if t is None or t < 0:
            problems.append(
                f"temperature must be >= 0 (0: greedy decoding), got "
                f"{settings.get('temperature')!r}"
            )
        p = _float_or_none(settings.get("top_p"))
        if p is None or not 0 < p <= 1:
            problems.append(f"top-p must be in (0, 1], got {settings.get('top_p')!r}")
        m = _int_or_none(settings.get("max_new_tokens"))
        if m is None or m < 1:
            problems.append(
                f"max new tokens must be an integer >= 1, got {settings.get('max_new_tokens')!r}"
            )
        s = _int_or_none(settings.get("seed"))
        if s is None or not 0 <= s <= SEED_MAX:
            # the seed box holds [0, SEED_MAX]: a larger seed would be clamped at the next Run
            problems.append(
                f"seed must be an integer >= 0 and <= {SEED_MAX} (what the seed box holds), got "
                f"{settings.get('seed')!r}"
            )
        return problems

    def _show_error(self, message: str) -> None:
        self.error = message
        last = " The figures below show the last successful run." if self.result else ""
        self.status.value = (
            f'<span style="color:#b00020"><b>cannot run:</b> {_escape(message)}.{last}</span>'
        )

    # running ----------------------------------------------------------------------------
    def run(
        self,
        prompt: str | None = None,
        *,
        gamma: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        max_new_tokens: int | None = None,
        seed: int | None = None,
    ) -> Any:
        """Generate with the controls' settings, each overridden by an argument given here;
        returns the ``GenerationResult``, or None when the settings are invalid or the run
        failed (the reason is in :attr:`error` and in the widget's status line). On success the
        controls are set to the settings used, and the strip, summary and explorer show the
        new trace."""
        given = dict(
            prompt=prompt,
            gamma=gamma,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            seed=seed,
        )
        settings = self.current_settings()
        settings.update({k: v for k, v in given.items() if v is not None})
        problems = self.check(settings)
        if problems:
            self._show_error("; ".join(problems))
            return None
        cfg = dict(
            prompt=settings["prompt"],
            gamma=int(settings["gamma"]),
            temperature=float(settings["temperature"]),
            top_p=float(settings["top_p"]),
            max_new_tokens=int(settings["max_new_tokens"]),
            seed=int(settings["seed"]),
        )
        self.status.value = "<i>running…</i>"
        self.run_button.disabled = True
        try:
            from ..decoding.serial import speculative_generate
            from ..prompts import render_prompt

            ids = render_prompt(self.tokenizer, cfg["prompt"])
            sampling = cfg["temperature"] > 0  # temperature 0: greedy decoding
            res = speculative_generate(
                self.target,
                self.draft,
                ids,
                gamma=cfg["gamma"],
                max_new_tokens=cfg["max_new_tokens"],
                do_sample=sampling,
                temperature=cfg["temperature"] if sampling else 1.0,  # unused when greedy
                top_p=cfg["top_p"] if sampling and cfg["top_p"] < 1 else None,  # 1: every token
                seed=cfg["seed"],
                eos_token_id=self.eos_token_id,
            )
        except Exception as e:  # a reader's input must not end in a traceback
            self._show_error(f"the run failed: {type(e).__name__}: {e}")
            return None
        finally:
            self.run_button.disabled = False
        self._set_controls(cfg)
        self.result, self.trace, self.settings, self.error = res, res.trace, cfg, None
        self._show_result(res, cfg)
        return res

    def _set_controls(self, cfg: dict[str, Any]) -> None:
        self.prompt_box.value = cfg["prompt"]
        self.gamma_slider.max = max(self.gamma_slider.max, cfg["gamma"])
        self.gamma_slider.value = cfg["gamma"]
        self.max_tokens_slider.max = max(self.max_tokens_slider.max, cfg["max_new_tokens"])
        self.max_tokens_slider.value = cfg["max_new_tokens"]
        self.temperature_slider.max = max(self.temperature_slider.max, cfg["temperature"])
        self.temperature_slider.value = cfg["temperature"]
        self.top_p_slider.value = cfg["top_p"]
        self.seed_box.value = cfg["seed"]

    def _show_result(self, res: Any, cfg: dict[str, Any]) -> None:
        trace, tok = res.trace, self.tokenizer
        sm = trace.summary()
        n = len(res.new_tokens)
        self._strip_fig = viz.token_strip_figure(
            trace,
            tok,
            per_row=self.per_row,
            title=f"{self.label}: {_plural(n, 'token')} in "
            f"{_plural(sm.target_calls, 'target call')}",
        ).update_layout(width=2 * self.panel_width)
        if self.strip is None:
            self.strip = figure_widget(self._strip_fig)
        else:
            sync_figure(self.strip, self._strip_fig)
        tests = [r for s in trace.steps for r in s.positions if _tested(r)]
        n_borderline = len(borderline_tests(trace))
        text = (
            tok.decode(list(res.new_tokens))
            if hasattr(tok, "decode")
            else "".join(viz.token_label(t, tok) for t in res.new_tokens)
        )
        mean_len = sm.mean_accepted_length
        self.summary.value = (
            f"<b>{_escape(self.label)}</b>, "
            + (
                f"T = {cfg['temperature']:g}, top-p = {cfg['top_p']:g}, "
                if cfg["temperature"] > 0
                else "T = 0 (greedy: no draw decides a draft), "
            )
            + f"gamma = {cfg['gamma']}, seed = {cfg['seed']}: "
            f"<b>{_plural(n, 'token')} in {_plural(sm.target_calls, 'target call')}</b>, "
            f"mean accepted length "
            f"{'n/a' if math.isnan(mean_len) else f'{mean_len:.2f}'} tokens per call; "
            f"{acceptance_text(sm.accepted, sm.drafted, what='drafts accepted')}; "
            + (
                f"{n_borderline} of {len(tests)} tests were real decisions "
                f"({BORDERLINE[0]} &lt; min(1, p/q) &lt; {BORDERLINE[1]})"
                if cfg["temperature"] > 0
                else "no test was a real decision: greedy compares each draft with the "
                "target's argmax, with no uniform draw"
            )
            + f'<pre style="white-space: pre-wrap; margin: 4px 0">{_escape(text)}</pre>'
        )
        self.status.value = f"ran in {res.total_time:.1f} s"
        # The old explorer is dropped, not closed: its views are still on the page, and a
        # closed model's view that sends a message (a resize) raises "no comm channel".
        try:
            self.explorer = TraceExplorer(
                trace, tok, per_row=self.per_row, panel_width=self.panel_width
            )
        except ValueError:  # nothing drafted (e.g. one token): no decision to explore
            self.explorer = None
            self.explorer_box.children = [
                widgets.HTML("<i>nothing was drafted in this run: no decision to explore</i>")
            ]
        else:
            self.explorer_box.children = [self.explorer.widget]

    # display ----------------------------------------------------------------------------
    def figures(self) -> tuple[go.Figure, ...]:
        """The figures of the current state as the static snapshot shows them: the explorer's
        (its strip first; no residual panel under greedy matching, where it could only be
        empty), or the token strip alone when nothing was drafted -- the run's strip once,
        not again above the explorer's copy."""
        if self.explorer is not None:
            return self.explorer.shown_figures()
        return (self._strip_fig,) if self._strip_fig is not None else ()

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        bundle = _bundle(self.widget, self.figures(), "PromptPlayground", **kwargs)
        if "text/html" in bundle:  # the snapshot says what was run and what came out
            head = "<p><b>Try your own</b> (static snapshot: run the notebook to edit the prompt)"
            prompt = _escape(self.settings.get("prompt", self.prompt_box.value))
            bundle["text/html"] = (
                f"{head}<br>prompt: <code>{prompt}</code></p>{self.controls_html()}"
                f"<p>{self.status.value}</p>{self.summary.value}" + bundle["text/html"]
            )
        return bundle

    def controls_html(self) -> str:
        """The controls a reader gets in JupyterLab, with their ranges and current values (the
        static snapshot cannot show the widgets themselves)."""
        c = self.current_settings()
        rows = [
            ("prompt", "a text box (a user message; the chat template is applied)"),
            ("temperature", f"0 to {self.temperature_slider.max:g}, now {c['temperature']:g} "
             "(0: greedy decoding, no uniform draw)"),
            ("top-p", f"0.05 to 1, now {c['top_p']:g} (1 keeps every token; sampling only)"),
            ("gamma (drafts)", f"1 to {self.gamma_slider.max}, now {c['gamma']}"),
            ("max new tokens", f"1 to {self.max_tokens_slider.max}, now {c['max_new_tokens']}"),
            ("seed", f"an integer >= 0, now {c['seed']}"),
            ("Run", "generates with these settings and redraws the strip and the explorer"),
            ("the explorer below the strip", "a step slider, ◀ prev / next ▶, play, a "
             "draft-position menu, most borderline test, log scale; a click on a token opens "
             "its step (a greedy run has no residual panel: no law is drawn from)"),
        ]  # fmt: skip
        items = "".join(f"<li><b>{k}</b>: {_escape(v)}</li>" for k, v in rows)
        return f"<p>Controls:</p><ul>{items}</ul>"


def _escape(text: str) -> str:
    import html

    return html.escape(str(text), quote=False)
