"""The static HTML snapshot an explorer or playground gives an offline export (plotly's
"notebook" renderer), with the renderer restored afterwards."""

from __future__ import annotations

from typing import Any

import plotly.io as pio


def snapshot_html(widget: Any) -> str:
    """``widget``'s ``text/html`` bundle as an exported report gets it."""
    before = pio.renderers.default
    try:
        pio.renderers.default = "notebook"
        return widget._repr_mimebundle_()["text/html"]
    finally:
        pio.renderers.default = before
