"""Notebook reports that read offline: formulas typeset with no network, code hidden where a
cell is tagged ``hide-input``.

nbconvert's HTML leaves every ``$...$`` of the markdown for MathJax, which it loads from a CDN:
offline, the reader sees TeX source. :class:`OfflineHTMLExporter` puts MathJax 3 (its
``tex-svg`` component, from the ``django-static-mathjax`` wheel on PyPI, SHA-256 checked) into
the page itself, gzipped (0.9 MB instead of 2.1 MB) and unpacked by the browser's own
``DecompressionStream``; the SVG output needs no font files. Use it wherever nbconvert's
``--to html`` would go::

    jupyter nbconvert --to specviz.views.export.OfflineHTMLExporter --execute notebooks/00_quick_start.ipynb

``python -m specviz.views.export REPORT.html ...`` swaps the CDN MathJax of a report already
exported by plain nbconvert for the inlined one (the markdown's math is the same in both), so
a committed report renders its formulas offline without executing its notebook again.
:func:`specviz.views.offline.check_offline_html` checks the result in Chromium: every formula
typeset, no TeX source left visible.

>>> has_math("The rule keeps $x$ with probability $\\\\min(1, p/q)$.")
True
>>> has_math("It costs 5 dollars, not 5$.")
False
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import os
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from jinja2 import DictLoader
from nbconvert.exporters import HTMLExporter
from traitlets import default
from traitlets.config import Config

__all__ = [
    "MATHJAX_VERSION",
    "OfflineHTMLExporter",
    "export_html",
    "has_math",
    "inline_mathjax",
    "mathjax_head",
]

#: MathJax release inlined in every report, and its ``es5/tex-svg.js`` as shipped by
#: ``django-static-mathjax==3.2.2.1`` (the npm package ``mathjax-full@3.2.2``, repackaged).
MATHJAX_VERSION = "3.2.2"
_MATHJAX_FILE = "static/mathjax/es5/tex-svg.js"
_MATHJAX_SHA256 = "2af9375000b5a3669be94d436ae1c61159855283cd18b3ee9817fb71c8f94c84"
_INSTALL = "pip install 'django-static-mathjax==3.2.2.1' (part of 'specviz[notebooks]')"

# What nbconvert's markdown parser reads as math (MarkdownWithMath): $...$, $$...$$, \(...\),
# \[...\] and \begin{env}...\end{env}.
_MATH = re.compile(r"\$\$|(?<![\\$])\$[^$\n]+?(?<![\\$])\$|\\\(|\\\[|\\begin\{[a-z]+\*?\}")

# MathJax 3 as nbconvert configures MathJax 2 (the same delimiters, AMS environments), with
# SVG output (paths, no font files) and no context menu (its extras would load from a CDN).
_CONFIG = """window.MathJax = {
  tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']], displayMath: [['$$', '$$'], ['\\\\[', '\\\\]']],
        processEscapes: true, processEnvironments: true, tags: 'ams'},
  svg: {fontCache: 'global'},
  options: {enableMenu: false}
};"""
# window.specvizMath resolves once every formula is typeset (the offline check waits on it).
_LOADER = """window.specvizMath = (async () => {
  const packed = Uint8Array.from(atob("%s"), (c) => c.charCodeAt(0));
  const unpacked = new Blob([packed]).stream().pipeThrough(new DecompressionStream("gzip"));
  (0, eval)(await new Response(unpacked).text());
  await window.MathJax.startup.promise;
})();"""
# plotly's "notebook" renderer adds a CDN MathJax tag to every figure (for LaTeX in labels,
# which specviz figures do not use); the inlined MathJax serves the page instead.
_PLOTLY_CDN_MATHJAX = re.compile(
    r'<script src="https://cdnjs\.cloudflare\.com/ajax/libs/mathjax/[^"]*"></script>'
)
_BEGIN, _END = "<!-- Load mathjax -->", "<!-- End of mathjax configuration -->"
_TEMPLATE = "specviz_offline.html.j2"
# require.js (from a CDN) serves only stored widget state, which the reports do not keep.
_TEMPLATE_SOURCE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}
{%- if "widgets" in nb.metadata -%}{{ super() }}{%- endif -%}
{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}
{{ resources.specviz_mathjax }}
{%- endblock html_head_js_mathjax -%}
"""


def has_math(markdown: str) -> bool:
    """Whether ``markdown`` holds a formula nbconvert would leave for MathJax."""
    return _MATH.search(markdown) is not None


@lru_cache(maxsize=1)
def _mathjax_js() -> bytes:
    try:
        path = resources.files("mathjax").joinpath(_MATHJAX_FILE)
        data = path.read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as err:
        raise ImportError(
            f"rendering formulas offline needs MathJax {MATHJAX_VERSION}: {_INSTALL}"
        ) from err
    digest = hashlib.sha256(data).hexdigest()
    if digest != _MATHJAX_SHA256:
        raise ValueError(
            f"{path}: SHA-256 {digest[:16]}... is not MathJax {MATHJAX_VERSION}'s tex-svg.js "
            f"({_MATHJAX_SHA256[:16]}...); reinstall it: {_INSTALL}"
        )
    return data


@lru_cache(maxsize=1)
def mathjax_head() -> str:
    """The ``<script>`` tags that typeset a page's formulas with no network (about 0.9 MB)."""
    packed = base64.b64encode(gzip.compress(_mathjax_js(), compresslevel=9, mtime=0))
    return (
        f"{_BEGIN}\n<script>\n{_CONFIG}\n</script>\n"
        f"<script>\n{_LOADER % packed.decode('ascii')}\n</script>\n{_END}"
    )


def inline_mathjax(page: str) -> str:
    """``page`` (HTML exported by nbconvert's ``lab`` template) with its CDN MathJax block
    replaced by :func:`mathjax_head` and plotly's CDN MathJax tags removed; a clear error when
    the page has no such block."""
    start, end = page.find(_BEGIN), page.find(_END)
    if start < 0 or end < start:
        if "window.specvizMath" in page:
            return page  # already inlined
        raise ValueError("no nbconvert MathJax block in this page (not an nbconvert lab export?)")
    page = page[:start] + mathjax_head() + page[end + len(_END) :]
    return _PLOTLY_CDN_MATHJAX.sub("", page)


class OfflineHTMLExporter(HTMLExporter):
    """nbconvert's HTML exporter (``lab`` template), with MathJax inlined in every page that
    has a formula and the input of cells tagged ``hide-input`` left out."""

    export_from_notebook = "HTML, offline formulas (specviz)"

    @default("extra_loaders")
    def _loaders(self) -> list:
        return [DictLoader({_TEMPLATE: _TEMPLATE_SOURCE})]

    @default("template_file")
    def _template(self) -> str:
        return _TEMPLATE

    @property
    def default_config(self) -> Config:
        config = super().default_config
        config.merge(Config({"TagRemovePreprocessor": {"remove_input_tags": {"hide-input"}}}))
        return config

    def from_notebook_node(self, nb: Any, resources: dict | None = None, **kw: Any) -> Any:
        resources = dict(resources or {})
        markdown = (c.source for c in nb.cells if c.cell_type == "markdown")
        resources["specviz_mathjax"] = mathjax_head() if any(map(has_math, markdown)) else ""
        body, resources = super().from_notebook_node(nb, resources, **kw)
        return _PLOTLY_CDN_MATHJAX.sub("", body), resources


def export_html(nb: Any, **config: Any) -> str:
    """An executed notebook (``nbformat`` node) as one offline HTML page."""
    body, _ = OfflineHTMLExporter(**config).from_notebook_node(nb)
    return body


def _rewrite(path: Path) -> bool:
    page = path.read_text(encoding="utf-8")
    new = inline_mathjax(page)
    if new == page:
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(new, encoding="utf-8")
    os.replace(tmp, path)  # atomic: a reader never sees half a report
    return True


def main(argv: list[str] | None = None) -> int:
    """``python -m specviz.views.export REPORT.html ...``: inline MathJax into reports that
    nbconvert exported with its CDN MathJax; one line per report."""
    import argparse

    ap = argparse.ArgumentParser(description="inline MathJax into exported notebook reports")
    ap.add_argument("reports", nargs="+", type=Path)
    args = ap.parse_args(argv)
    for path in args.reports:
        changed = _rewrite(path)
        print(f"{path}: {'MathJax inlined' if changed else 'already inlined'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
