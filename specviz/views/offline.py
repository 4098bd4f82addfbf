"""Does an exported notebook work with no network? Opened in headless Chromium with every
request outside the file blocked, each plotly figure of the page (static figures and the
explorers' snapshots alike) must be drawn by the plotly.js inlined in the page, and every
formula of its markdown typeset by the MathJax inlined in it (:mod:`specviz.views.export`):
no TeX source (``$...$``, ``\\frac``...) may be left visible, and no formula may fail.

``make demo`` runs this on every report it writes; ``tests/test_notebooks.py`` on every
notebook's small configuration. Needs the ``playwright`` package (``specviz[dev]``) and a
Chromium binary (Debian's ``chromium``; playwright's own browser download is not used).

>>> OfflineCheck("a.html", 3 * 2**20, figures=4, rendered=4, blocked=(), errors=()).ok
True
>>> print(OfflineCheck("a.html", 9 * 2**20, figures=4, rendered=3, blocked=(), errors=()))
a.html: 9.0 MB (over 8 MB), 3 of 4 figures drawn offline
>>> bad = OfflineCheck("b.html", 2**20, 1, 1, (), (), formulas=0, tex_source=("$p(x)$",))
>>> bad.ok, str(bad)
(False, 'b.html: 1.0 MB, 1 of 1 figures drawn offline, 0 formulas typeset; TeX source visible: $p(x)$')
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_REPORT_BYTES",
    "OfflineCheck",
    "check_offline_html",
    "check_reports",
    "offline_browser",
]

#: The largest report a notebook may export (issue 15: "under 8 MB per notebook").
MAX_REPORT_BYTES = 8 * 2**20

# Chromium in containers: no sandbox (root), no GPU, nothing that phones home.
_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
_ARGS += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]


@dataclass(frozen=True)
class OfflineCheck:
    """One report opened offline: its size, its plotly figures and how many were drawn, the
    network requests that were blocked (CDN scripts the page tried) and the page's errors."""

    path: str
    size_bytes: int
    figures: int  # plotly figure divs in the page
    rendered: int  # of those, drawn by the inlined plotly.js
    blocked: tuple[str, ...]  # requests outside the file, refused
    errors: tuple[str, ...]  # uncaught exceptions in the page
    formulas: int = 0  # formulas typeset by the inlined MathJax
    tex_source: tuple[str, ...] = ()  # TeX still visible as text (or formulas MathJax refused)

    @property
    def ok(self) -> bool:
        """Small enough, every figure drawn and every formula typeset with no network."""
        return (
            self.size_bytes < MAX_REPORT_BYTES
            and self.figures == self.rendered
            and not self.tex_source
        )

    def __str__(self) -> str:
        size = f"{self.size_bytes / 2**20:.1f} MB"
        if self.size_bytes >= MAX_REPORT_BYTES:
            size += f" (over {MAX_REPORT_BYTES // 2**20} MB)"
        text = f"{self.path}: {size}, {self.rendered} of {self.figures} figures drawn offline"
        if self.formulas or self.tex_source:
            text += f", {self.formulas} formulas typeset"
        if self.tex_source:
            text += f"; TeX source visible: {'; '.join(self.tex_source[:3])}"
        if self.errors:
            text += f"; page errors: {'; '.join(self.errors[:3])}"
        return text


# In the page: wait for the inlined MathJax (window.specvizMath, see specviz.views.export), then
# count the typeset formulas and look for TeX left as text in the rendered markdown (code and
# typeset math removed) and for formulas MathJax could not parse.
_MATH_JS = r"""async () => {
  for (const p of [window.specvizMath, window.MathJax && window.MathJax.startup &&
                   window.MathJax.startup.promise]) {
    if (p) { try { await p; } catch (e) { /* reported below as TeX left visible */ } }
  }
  const tex = /\$\$[^]*?\$\$|\$[^$\n]+\$|\\[()[\]]|\\[A-Za-z]{2,}/g;
  const seen = [];
  const roots = document.querySelectorAll(
    ".jp-RenderedMarkdown, .jp-RenderedLatex, .jp-MarkdownOutput, .rendered_html");
  for (const root of roots) {
    const copy = root.cloneNode(true);
    copy.querySelectorAll("code, pre, script, style, mjx-container").forEach((n) => n.remove());
    for (const m of copy.textContent.matchAll(tex)) seen.push(m[0].slice(0, 60));
  }
  for (const e of document.querySelectorAll("mjx-merror, [data-mjx-error]")) {
    seen.push("MathJax error: " + (e.getAttribute("data-mjx-error") || e.textContent));
  }
  return {formulas: document.querySelectorAll("mjx-container").length, tex: seen};
}"""


def _executable(chromium: str | None) -> str:
    path = chromium or shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        raise FileNotFoundError(
            "no chromium on PATH: install Debian's chromium (apt-get install chromium) or pass "
            "chromium=<path of the binary>"
        )
    return path


@contextmanager
def offline_browser(chromium: str | None = None) -> Iterator[Any]:
    """A headless Chromium (playwright ``Browser``) for :func:`check_offline_html`."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as err:
        raise ImportError(
            "checking reports offline needs playwright: pip install 'specviz[dev]'"
        ) from err
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_executable(chromium), args=_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def check_offline_html(
    path: str | Path, *, browser: Any = None, chromium: str | None = None, timeout_s: float = 60
) -> OfflineCheck:
    """Open ``path`` with every non-``file:`` request blocked and count the plotly figures
    drawn (plotly.js marks a drawn figure's div ``js-plotly-plot``). ``browser`` (from
    :func:`offline_browser`) is reused when given, so many reports share one Chromium."""
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no report at {path}")
    if browser is None:
        with offline_browser(chromium) as own:
            return check_offline_html(path, browser=own, timeout_s=timeout_s)
    blocked: list[str] = []
    errors: list[str] = []
    page = browser.new_page()
    try:

        def route(r: Any) -> None:
            if r.request.url.startswith(("file:", "data:", "blob:", "about:")):
                r.continue_()
            else:
                blocked.append(r.request.url)
                r.abort()

        page.route("**/*", route)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.as_uri(), wait_until="load", timeout=timeout_s * 1000)
        figures = page.locator("div.plotly-graph-div").count()
        deadline = time.monotonic() + timeout_s
        rendered = 0
        while True:  # plotly draws asynchronously; wait until every figure is drawn or time out
            rendered = page.locator("div.plotly-graph-div.js-plotly-plot").count()
            if rendered >= figures or time.monotonic() > deadline:
                break
            page.wait_for_timeout(250)
        math = page.evaluate(_MATH_JS)
    finally:
        page.close()
    return OfflineCheck(
        str(path.name),
        path.stat().st_size,
        figures,
        rendered,
        tuple(blocked),
        tuple(errors),
        formulas=int(math["formulas"]),
        tex_source=tuple(dict.fromkeys(math["tex"])),  # each snippet once, in page order
    )


def check_reports(
    paths: Iterable[str | Path], *, chromium: str | None = None
) -> list[OfflineCheck]:
    """:func:`check_offline_html` for several reports in one browser."""
    with offline_browser(chromium) as browser:
        return [check_offline_html(p, browser=browser) for p in paths]


def main(argv: list[str] | None = None) -> int:
    """``python -m specviz.views.offline REPORT.html ...``: one line per report; exit 1 if one
    is over 8 MB, draws fewer figures offline than it holds or leaves TeX source visible."""
    import argparse

    ap = argparse.ArgumentParser(description="check exported notebooks offline in Chromium")
    ap.add_argument("reports", nargs="+", type=Path)
    ap.add_argument("--chromium", default=None, help="the Chromium binary (default: on PATH)")
    args = ap.parse_args(argv)
    checks = check_reports(args.reports, chromium=args.chromium)
    for check in checks:
        print(f"{'ok' if check.ok else 'FAILED':<6} {check}")
    return 0 if all(c.ok for c in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
