"""Issue 27: exported reports render their formulas with no network. The exporter inlines
MathJax (``specviz.views.export``); the offline check (``specviz.views.offline``) opens a page
in Chromium with the network blocked and fails while TeX source is still visible -- plain
nbconvert's export (MathJax from a CDN) is the negative control that must fail."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from specviz.views import export
from specviz.views.export import OfflineHTMLExporter, export_html, has_math, inline_mathjax

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = sorted((ROOT / "reports").glob("[0-9][0-9]_*.html"))
FORMULAS = [r"$x$", r"$\min\left(1, \frac{p(x)}{q(x)}\right)$", r"$u \sim U(0, 1)$"]


def _notebook(markdown: str) -> nbformat.NotebookNode:
    nb = new_notebook()
    code = new_code_cell(
        "print('costs $5 and $6')  # the verdict logic",
        outputs=[new_output("stream", name="stdout", text="Claim 1: costs $5 and $6\n")],
    )
    code.metadata["tags"] = ["hide-input"]
    nb.cells = [new_markdown_cell(markdown), code, new_code_cell("x = 1  # kept visible")]
    return nb


MATH_NB = (
    "# Rule\nAccept " + FORMULAS[0] + " with probability " + FORMULAS[1] + ", " + FORMULAS[2]
    + ".\n\n$$\n\\text{speedup} = \\underbrace{\\frac{N_\\text{plain}}{N_\\text{spec}}}"
    "_{\\text{fewer calls}}\n$$\n"
)  # fmt: skip


def _chromium() -> None:
    if shutil.which("chromium") is None:
        assert os.environ.get("CI", "").lower() not in ("1", "true", "yes"), "no chromium"
        pytest.skip("chromium not installed (apt-get install chromium)")


def test_export_inlines_mathjax_and_hides_tagged_inputs():
    body = export_html(_notebook(MATH_NB))
    assert "window.specvizMath" in body and "ajax/libs/mathjax" not in body  # no CDN MathJax
    assert "the verdict logic" not in body  # the tagged cell's input is left out ...
    assert "Claim 1: costs $5 and $6" in body  # ... its output is not
    assert "# kept visible" in body  # untagged inputs stay (a comment is one span)
    plain = export_html(_notebook("# No formula here, 5$ only"))
    assert "window.specvizMath" not in plain  # a page without math pays nothing
    assert 0.5e6 < len(body) - len(plain) < 1.2e6  # MathJax gzipped: ~0.9 MB, not 2.1 MB


def test_has_math_reads_what_nbconvert_leaves_for_mathjax():
    assert all(has_math(f"a {f} b") for f in FORMULAS)
    assert has_math("$$\nE = mc^2\n$$") and has_math(r"\(x\)") and has_math(r"\begin{align}")
    assert not has_math("5$ and a `code` span") and not has_math("plain text")


def test_mathjax_is_checked_when_read(monkeypatch):
    """A MathJax file that is not the pinned release is refused, with the reinstall command."""
    export._mathjax_js.cache_clear()
    export.mathjax_head.cache_clear()
    monkeypatch.setattr(export, "_MATHJAX_SHA256", "0" * 64)
    try:
        with pytest.raises(ValueError, match="SHA-256 .* reinstall it: pip install"):
            export.mathjax_head()
    finally:
        export._mathjax_js.cache_clear()
        export.mathjax_head.cache_clear()


def test_inline_mathjax_refuses_a_page_it_cannot_fix():
    with pytest.raises(ValueError, match="no nbconvert MathJax block"):
        inline_mathjax("<html><body>$x$</body></html>")


def test_formulas_render_offline_and_plain_nbconvert_does_not(tmp_path):
    """The offline check in Chromium: the inlined page typesets every formula and shows no
    TeX; nbconvert's own export (the negative control) shows the TeX source; the same page
    with its MathJax swapped by ``inline_mathjax`` (how a committed report is fixed) passes."""
    from nbconvert import HTMLExporter

    from specviz.views.offline import check_reports

    _chromium()
    nb = _notebook(MATH_NB)
    ours, theirs, fixed = (tmp_path / f"{n}.html" for n in ("ours", "theirs", "fixed"))
    ours.write_text(export_html(nb), encoding="utf-8")
    plain, _ = HTMLExporter().from_notebook_node(nb)
    theirs.write_text(plain, encoding="utf-8")
    fixed.write_text(inline_mathjax(plain), encoding="utf-8")
    good, bad, mended = check_reports([ours, theirs, fixed])
    assert good.ok and good.formulas == 4 and not good.blocked, str(good)  # nothing requested
    assert not bad.ok and bad.formulas == 0, str(bad)
    assert {"$x$", FORMULAS[2]} <= set(bad.tex_source), bad.tex_source
    assert any("mathjax" in url for url in bad.blocked)  # it tried the CDN
    assert mended.ok and mended.formulas == 4, str(mended)


def test_plotly_figures_bring_no_cdn_mathjax():
    """plotly's notebook renderer tags every figure with a CDN MathJax; the export drops it
    (the inlined MathJax serves the page), so an online reader does not load MathJax twice."""
    import plotly.graph_objects as go
    import plotly.io as pio

    nb = _notebook(MATH_NB)
    html = pio.renderers["notebook"].to_mimebundle(go.Figure(go.Bar(y=[1, 2])).to_dict())
    assert "ajax/libs/mathjax" in html["text/html"]  # what plotly writes
    nb.cells[2].outputs = [new_output("display_data", data=html)]
    body = export_html(nb)
    assert "ajax/libs/mathjax" not in body and "plotly-graph-div" in body


def test_exporter_is_nbconverts_html_exporter():
    """`jupyter nbconvert --to specviz.views.export.OfflineHTMLExporter` (make demo, make
    reports) finds it by import path: a subclass of nbconvert's HTML exporter."""
    from nbconvert.exporters import HTMLExporter, get_exporter

    found = get_exporter("specviz.views.export.OfflineHTMLExporter")
    assert found.__name__ == "OfflineHTMLExporter" and issubclass(found, HTMLExporter)
    assert issubclass(OfflineHTMLExporter, HTMLExporter)
    assert OfflineHTMLExporter().file_extension == ".html"


@pytest.mark.slow
@pytest.mark.skipif(not COMMITTED, reason="no committed report")
def test_committed_reports_render_offline():
    """Every committed default-size report (reports/NN_*.html) opens offline under 8 MB, draws
    every figure and typesets every formula."""
    from specviz.views.offline import check_reports

    _chromium()
    checks = check_reports(COMMITTED)
    bad = [str(c) for c in checks if not c.ok or c.figures == 0]
    assert not bad, bad
    with_math = [c for c in checks if c.formulas]
    assert with_math, "no committed report typesets a formula"
