"""A real browser: JupyterLab serves a notebook with widgets, headless Chromium runs all of its
cells, and the plotly figures and ipywidgets must render -- with no console errors -- and
respond to a slider.

This is what the headless widget tests cannot see: that JupyterLab 4 finds the prebuilt plotly,
anywidget and widget-manager extensions, that FigureWidget traffic survives the comm round
trip (NaN, for instance, does not), and that a slider in the page reaches the Python callback
and comes back as a redrawn figure.

Chromium is Debian's package (``make test`` installs it), driven by the ``playwright`` Python
package through ``executable_path`` -- playwright's own browser download does not work here.
Without chromium the test skips, except under ``CI=1`` (or ``CI=true``), where it fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "01_how_it_works_exactly.ipynb"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# The notebook shows 5 static figures, a TraceExplorer (4 FigureWidgets) and a ToyExplorer (2).
MIN_PLOTS = 11
MIN_SLIDERS = 4


def _require(what: str, ok: bool) -> None:
    if ok:
        return
    reason = f"{what} not available"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason}; under CI=1 the browser test must run (make test installs it)")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_server(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"JupyterLab exited with code {proc.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"JupyterLab did not answer {url} within {timeout:.0f} s")


@pytest.fixture
def chromium() -> str:
    """Path of Debian's chromium; checked before JupyterLab starts, so a skip costs nothing."""
    path = shutil.which("chromium")
    _require("chromium (apt-get install chromium)", path is not None)
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _require("the playwright python package (pip install 'specviz[dev]')", False)
    return str(path)


@contextlib.contextmanager
def _lab(tmp_path: Path, notebook: Path, **env_extra: str):
    """JupyterLab on 127.0.0.1:<random port> with a token, serving a *copy* of the notebook
    (Lab autosaves; the repository's notebooks must stay stripped), with user settings,
    workspaces and runtime files under tmp_path and news/update checks off."""
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(notebook, root / notebook.name)
    settings = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        SPECVIZ_NB_SMALL="1",
        OMP_NUM_THREADS="1",
        JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        IPYTHONDIR=str(tmp_path / "ipython"),
        **env_extra,
    )
    env.pop("PLOTLY_RENDERER", None)  # JupyterLab's own default: the plotly mimetype
    log = (tmp_path / "lab.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.news_url=",
            "--LabApp.extension_manager=readonly",  # no PyPI queries
            "--allow-root",  # CI containers run as root; harmless otherwise
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(f"{base}/api/status?token={token}", proc, tmp_path / "lab.log")
        yield base, token, tmp_path / "lab.log"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


@pytest.fixture
def lab(tmp_path):
    with _lab(tmp_path, NOTEBOOK) as served:
        yield served


def _plot_titles(page) -> list[str]:
    return page.eval_on_selector_all(
        ".js-plotly-plot .gtitle", "els => els.map(e => e.textContent)"
    )


def _wait_all_executed(page, timeout_s: float) -> None:
    """Every code cell shows an execution count, none is still running ([*])."""
    page.wait_for_function(
        """() => {
            const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
            return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
        }""",
        timeout=timeout_s * 1000,
        polling=500,
    )


def _open_and_run_all(browser, base: str, token: str, name: str, min_plots: int):
    """Open notebook ``name`` in JupyterLab, wait for its kernel, run every cell as a reader
    would (Run > Run All Cells) and wait for ``min_plots`` plotly figures. Returns the page and
    the list that collects console errors and page errors."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    problems: list[str] = []
    page.on(
        "console",
        lambda m: problems.append(f"console.{m.type}: {m.text}") if m.type == "error" else None,
    )
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.goto(f"{base}/lab/tree/{name}?token={token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    page.wait_for_function(
        "() => window.jupyterapp && window.jupyterapp.shell.currentWidget", timeout=60_000
    )
    page.wait_for_function(
        """() => {
            const w = window.jupyterapp.shell.currentWidget;
            const k = w && w.sessionContext && w.sessionContext.session
                && w.sessionContext.session.kernel;
            return k && k.status === 'idle';
        }""",
        timeout=120_000,
    )
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    _wait_all_executed(page, timeout_s=300)
    page.wait_for_function(
        f"() => document.querySelectorAll('.js-plotly-plot').length >= {min_plots}",
        timeout=60_000,
    )
    page.wait_for_timeout(1500)  # let the last plots finish drawing
    return page, problems


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_widget_notebook_renders_and_reacts_in_chromium(chromium, lab):
    from playwright.sync_api import sync_playwright

    base, token, lab_log = lab
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"browser_{NOTEBOOK.stem}"

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS, headless=True)
        try:
            page, problems = _open_and_run_all(browser, base, token, NOTEBOOK.name, MIN_PLOTS)
            errors = page.locator(".jp-OutputArea-output[data-mime-type*='error']").count()
            assert errors == 0, "a cell raised"
            assert page.locator(".js-plotly-plot").count() >= MIN_PLOTS
            assert page.locator(".js-plotly-plot .main-svg").count() >= MIN_PLOTS
            sliders = page.locator(".widget-slider")
            assert sliders.count() >= MIN_SLIDERS
            body = page.inner_text(".jp-Notebook")
            assert "Error displaying widget" not in body
            assert "Loading widget" not in body

            # the TraceExplorer: move its step slider with the keyboard
            before = _plot_titles(page)
            assert any(t.startswith("step 0,") for t in before)
            handle = sliders.first.locator(".noUi-handle")
            # outputs holding sliders, in notebook order: the TraceExplorer, then the ToyExplorer
            with_sliders = page.locator(".jp-OutputArea-output").filter(
                has=page.locator(".widget-slider")
            )
            explorer = with_sliders.first
            explorer.scroll_into_view_if_needed()
            explorer.screenshot(path=f"{shot}_before.png")
            handle.focus()
            page.keyboard.press("ArrowRight")
            # the explorer's panels are separate figure widgets that redraw one after another:
            # wait until every one has left step 0, not just the first to redraw
            page.wait_for_function(
                """() => {
                    const titles = [...document.querySelectorAll('.js-plotly-plot .gtitle')]
                        .map(e => e.textContent);
                    return titles.some(t => t.startsWith('step 1,'))
                        && !titles.some(t => t.startsWith('step 0,'));
                }""",
                timeout=60_000,
            )
            after = _plot_titles(page)
            assert after != before
            assert not any(t.startswith("step 0,") for t in after)
            explorer.screenshot(path=f"{shot}_after_slider.png")

            # the ToyExplorer: raise gamma, the curve is recomputed for the new gamma
            gamma = next(
                i
                for i in range(sliders.count())
                if "gamma" in (sliders.nth(i).text_content() or "")
            )
            old = int(
                re.search(
                    r"\d+", sliders.nth(gamma).locator(".widget-readout").text_content()
                ).group()
            )
            toy = with_sliders.last
            toy.scroll_into_view_if_needed()
            sliders.nth(gamma).locator(".noUi-handle").focus()
            page.keyboard.press("ArrowRight")
            page.wait_for_function(
                f"""() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]
                        .some(e => e.textContent.includes('gamma = {old + 1}'))""",
                timeout=60_000,
            )
            page.wait_for_timeout(500)
            toy.screenshot(path=f"{shot}_after_gamma.png")
        finally:
            browser.close()
    assert not problems, (
        "browser console errors:\n" + "\n".join(problems) + (f"\n(JupyterLab log: {lab_log})")
    )


GRID_NOTEBOOK = ROOT / "notebooks" / "07_drafters_and_task_types.ipynb"
# two metric bar charts, the cost figure, the rejection FigureSelector, the GridExplorer's two
GRID_MIN_PLOTS = 6


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_grid_explorer_dropdown_redraws_in_chromium(chromium, tmp_path):
    """Notebook 07 (two cheap drafters, one category, so the grid takes seconds): its
    GridExplorer renders, and picking another drafter in its dropdown -- an HTML select, unlike
    the sliders of the first test -- comes back as redrawn figures."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"browser_{GRID_NOTEBOOK.stem}"
    small = dict(SPECVIZ_NB_DRAFTERS="prompt_lookup,suffix", SPECVIZ_NB_CATEGORIES="structured")
    with _lab(tmp_path, GRID_NOTEBOOK, **small) as (base, token, lab_log):
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=chromium, args=CHROMIUM_FLAGS, headless=True
            )
            try:
                page, problems = _open_and_run_all(
                    browser, base, token, GRID_NOTEBOOK.name, GRID_MIN_PLOTS
                )
                errors = page.locator(".jp-OutputArea-output[data-mime-type*='error']").count()
                assert errors == 0, "a cell raised"
                assert page.locator(".js-plotly-plot .main-svg").count() >= GRID_MIN_PLOTS
                body = page.inner_text(".jp-Notebook")
                assert "Error displaying widget" not in body
                assert "Loading widget" not in body
                # outputs holding dropdowns, in notebook order: the FigureSelector, the explorer
                explorer = (
                    page.locator(".jp-OutputArea-output")
                    .filter(has=page.locator(".widget-dropdown"))
                    .last
                )
                assert explorer.locator(".widget-dropdown select").count() == 4
                assert any(
                    t.startswith("prompt_lookup, structured, gamma=") for t in _plot_titles(page)
                )
                explorer.scroll_into_view_if_needed()
                explorer.screenshot(path=f"{shot}_before.png")
                explorer.locator(".widget-dropdown select").first.select_option("suffix")
                page.wait_for_function(
                    """() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]
                            .some(e => e.textContent.startsWith('suffix, structured, gamma='))""",
                    timeout=60_000,
                )
                page.wait_for_timeout(500)
                assert "suffix" in explorer.inner_text()
                explorer.screenshot(path=f"{shot}_after_dropdown.png")
            finally:
                browser.close()
    assert not problems, (
        "browser console errors:\n" + "\n".join(problems) + (f"\n(JupyterLab log: {lab_log})")
    )


TRACE_NOTEBOOK = ROOT / "notebooks" / "02_trace_explorer.ipynb"
# the token strip, the explorer's 4 FigureWidgets, the 3 figures of all tests, the first
# rejection's 3, the most borderline test's 2 and the playground's 4 (strip and greedy explorer); a
# lower bound: JupyterLab need not draw the cells out of view
TRACE_MIN_PLOTS = 10

_EXPLORER_TITLES = (
    "el => [...el.querySelectorAll('.js-plotly-plot .gtitle')].map(e => e.textContent)"
)
# pixel centre of the first strip token of the earliest step other than `current`, and its slot
_OTHER_TOKEN = """([el, current]) => {
    const gd = el.querySelectorAll('.js-plotly-plot')[0];
    const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
    const box = gd.getBoundingClientRect();
    let best = null;
    for (const tr of gd.data) {
        const cd = tr.customdata || [];
        for (let i = 0; i < cd.length; i++) {
            if (cd[i][0] === current || (best && best.step <= cd[i][0])) continue;
            best = {
                step: cd[i][0], row: cd[i][1],
                x: box.left + xa._offset + xa.l2p(tr.base[i] + tr.x[i] / 2),
                y: box.top + ya._offset + ya.l2p(tr.y[i]),
            };
        }
    }
    return best;
}"""


# every panel of the explorer drawn again after a redraw (the strip and p/q have bars)
_SETTLED = """el => {
    const gds = [...el.querySelectorAll('.js-plotly-plot')];
    const titled = g => g.layout && g.layout.title && g.layout.title.text;
    return gds.length === 4 && gds.every(titled)
        && gds[0].data.length > 0 && gds[1].data.length > 0;
}"""


# a tested draft's accept panel carries no note: a note of an earlier step must not linger
_STALE_NOTE = """el => {
    const acc = el.querySelectorAll('.js-plotly-plot')[3];
    const tested = / -> (accept|reject)$/.test(acc.layout.title.text);
    return tested && acc.querySelectorAll('.annotation').length > 0;
}"""


_PANELS = """el => [...el.querySelectorAll('.js-plotly-plot')].map(g => [
    (g.layout && g.layout.title && g.layout.title.text) || null, (g.data || []).length])"""


def _settle(page, el, path: str) -> None:
    """Wait until the explorer's figures are redrawn, then screenshot it to ``path``."""
    try:
        page.wait_for_function(_SETTLED, arg=el, timeout=60_000)
    except Exception as e:  # say what the panels show
        el.screenshot(path=path)
        raise AssertionError(f"explorer not redrawn ({path}): {page.evaluate(_PANELS, el)}") from e
    page.wait_for_timeout(500)
    el.screenshot(path=path)
    assert not page.evaluate(_STALE_NOTE, el), f"a stale note is drawn ({path})"


def _current_step(titles: list[str]) -> int:
    return int(next(m.group(1) for t in titles if (m := re.match(r"step (\d+), ", t))))


_GENERATED = "el => (el.querySelector('pre') || {}).textContent || ''"
# the tokens of the playground's explorer strip (its second figure), as the page has them
_EXPLORER_STRIP = """el => {
    const gd = el.querySelectorAll('.js-plotly-plot')[1];
    return JSON.stringify(gd && gd.data ? gd.data.map(t => t.customdata || []) : null);
}"""


def _poll(pg, js: str, arg, timeout_s: float) -> None:
    """Wait until ``js(el, arg)`` is true for the element ``pg`` locates *now*. JupyterLab
    may detach an output while it is out of view and attach a new node later, so a handle
    taken earlier can go stale: each poll finds the element afresh."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(Exception):  # the node is being replaced: try again
            if pg.evaluate(js, arg):
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {js[:80]!r}")
        time.sleep(0.25)


def _try_your_own(page, shot) -> None:
    """Notebook 02's PromptPlayground: it opened on a run (the strip and a TraceExplorer), an
    empty prompt is reported under the controls, and a new prompt comes back as a new run."""
    pg = page.locator(".jp-OutputArea-output").filter(has=page.locator(".widget-textarea")).first
    pg.scroll_into_view_if_needed()
    # the strip and the greedy explorer's 3 panels (no residual panel under greedy matching;
    # drawn again when the output comes back into view)
    _poll(pg, "(el, _) => el.querySelectorAll('.js-plotly-plot').length === 4", None, 60)
    before = pg.evaluate(_GENERATED)
    assert before, "the playground did not run at construction"
    strip_before = pg.evaluate(_EXPLORER_STRIP)
    run = pg.locator("button", has_text=re.compile(r"^\s*Run\s*$"))
    box = pg.locator(".widget-textarea textarea")
    box.fill("")
    run.click()
    _poll(pg, "(el, _) => el.textContent.includes('the prompt is empty')", None, 60)
    assert "cannot run: the prompt is empty" in pg.inner_text()
    pg.screenshot(path=f"{shot}_playground_error.png")
    box.fill("Write one sentence about the sea.")
    run.click()
    _poll(
        pg,
        """(el, before) => {
            const pre = el.querySelector('pre');
            return pre && pre.textContent !== before && el.textContent.includes('ran in ')
                && el.querySelectorAll('.js-plotly-plot').length === 4;
        }""",
        before,
        120,
    )
    # the new run's TraceExplorer replaced the old one (its strip shows the new tokens)
    # (a greedy run draws no uniforms: some panels may be empty, the strip never is)
    strip_changed = f"""(el, old) => {{
        const now = ({_EXPLORER_STRIP})(el);
        return now !== old && now !== 'null' && now !== '[]';
    }}"""
    try:
        _poll(pg, strip_changed, strip_before, 60)
    except AssertionError:
        now = pg.evaluate(_EXPLORER_STRIP)
        raise AssertionError(
            f"the strip did not change: before {strip_before[:300]}, now {now[:300]}"
        ) from None
    page.wait_for_timeout(1000)
    assert "cannot run" not in pg.inner_text()
    pg.screenshot(path=f"{shot}_playground_run.png")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_trace_explorer_controls_in_chromium(chromium, tmp_path):
    """Notebook 02 on SmolLM2-135M with its trained head (small configuration): the explorer's
    "most borderline test" jumps to an open decision (0.05 < min(1, p/q) < 0.95), a click on a
    token of the strip opens that token's step, the play button walks the steps, and the log
    toggle puts the p/q axis on a log scale; the "try your own" playground refuses an empty
    prompt and runs a new one; a screenshot after each, no console errors."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"browser_{TRACE_NOTEBOOK.stem}"
    with _lab(tmp_path, TRACE_NOTEBOOK) as (base, token, lab_log):
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=chromium, args=CHROMIUM_FLAGS, headless=True
            )
            try:
                page, problems = _open_and_run_all(
                    browser, base, token, TRACE_NOTEBOOK.name, TRACE_MIN_PLOTS
                )
                errors = page.locator(".jp-OutputArea-output[data-mime-type*='error']").count()
                assert errors == 0, "a cell raised"
                body = page.inner_text(".jp-Notebook")
                assert "Error displaying widget" not in body
                assert "Loading widget" not in body
                # the notebook's own check (text_content: cells out of view are not rendered)
                assert "Real decisions: " in (page.text_content(".jp-Notebook") or "")
                explorer = (
                    page.locator(".jp-OutputArea-output")
                    .filter(has=page.locator(".widget-play"))
                    .first
                )
                assert explorer.locator(".js-plotly-plot").count() == 4
                explorer.scroll_into_view_if_needed()
                el = explorer.element_handle()
                _settle(page, el, f"{shot}_opened.png")

                # 1. the most borderline test: the info line names it, the button opens it
                m = re.search(
                    r"most borderline test: step (\d+), draft position (\d+), "
                    r"min\(1, p/q\) = ([0-9.]+)",
                    explorer.inner_text(),
                )
                assert m, "the info line names no borderline test"
                b_step, b_pos, b_a = int(m.group(1)), int(m.group(2)), float(m.group(3))
                assert 0.05 < b_a < 0.95
                explorer.locator("button", has_text="most borderline test").click()
                page.wait_for_function(
                    """([el, head, a]) => [...el.querySelectorAll('.js-plotly-plot .gtitle')]
                        .some(t => t.textContent.startsWith(head)
                                   && t.textContent.includes('min(1, p/q) = ' + a))""",
                    arg=[el, f"step {b_step}, draft position {b_pos}:", m.group(3)],
                    timeout=60_000,
                )
                _settle(page, el, f"{shot}_borderline.png")

                # 2. click a token of another step: the explorer opens that step at that token
                current = _current_step(page.evaluate(_EXPLORER_TITLES, el))
                target = page.evaluate(_OTHER_TOKEN, [el, current])
                assert target is not None, "the strip has a single step"
                page.mouse.move(target["x"], target["y"])
                page.wait_for_timeout(300)
                page.mouse.click(target["x"], target["y"])
                page.wait_for_function(
                    """([el, head]) => [...el.querySelectorAll('.js-plotly-plot .gtitle')]
                        .some(t => t.textContent.startsWith(head))""",
                    arg=[el, f"step {target['step']}, "],
                    timeout=60_000,
                )
                _settle(page, el, f"{shot}_clicked.png")

                # 3. play: the steps advance on their own (the slider follows), then pause
                start = int(explorer.locator(".widget-slider .widget-readout").first.inner_text())
                handle = explorer.locator(".widget-slider .noUi-handle").first
                last = int(float(handle.get_attribute("aria-valuemax") or 0))
                assert last > start, "nothing left to play"
                goal = min(start + 2, last)
                buttons = explorer.locator(".widget-play button")
                buttons.nth(0).click()
                page.wait_for_function(
                    """([el, goal]) => {
                        const r = el.querySelector('.widget-slider .widget-readout');
                        return r && parseInt(r.textContent) >= goal;
                    }""",
                    arg=[el, goal],
                    timeout=60_000,
                )
                buttons.nth(0).click()  # the play button turned into pause
                page.wait_for_timeout(1500)
                _settle(page, el, f"{shot}_played.png")
                played = _current_step(page.evaluate(_EXPLORER_TITLES, el))
                assert played >= goal > start, (start, goal, played, last)

                # 4. the log toggle: the p/q panel's probability axis becomes logarithmic
                is_log = """el => {
                    const gd = el.querySelectorAll('.js-plotly-plot')[1];
                    return gd._fullLayout.yaxis.type === 'log';
                }"""
                assert not page.evaluate(is_log, el)
                explorer.locator("button", has_text="log scale").click()
                page.wait_for_function(is_log, arg=el, timeout=60_000)
                _settle(page, el, f"{shot}_log.png")

                # 5. try your own: an empty prompt is refused in the widget, a new one runs
                _try_your_own(page, shot)
            finally:
                browser.close()
    assert not problems, (
        "browser console errors:\n" + "\n".join(problems) + (f"\n(JupyterLab log: {lab_log})")
    )
