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
            page.wait_for_function(
                """() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]
                        .some(e => e.textContent.startsWith('step 1,'))""",
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
                assert any(t.startswith("prompt_lookup, all, gamma=") for t in _plot_titles(page))
                explorer.scroll_into_view_if_needed()
                explorer.screenshot(path=f"{shot}_before.png")
                explorer.locator(".widget-dropdown select").first.select_option("suffix")
                page.wait_for_function(
                    """() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]
                            .some(e => e.textContent.startsWith('suffix, all, gamma='))""",
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
