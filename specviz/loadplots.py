"""Moved to :mod:`specviz.views.load`; this import path keeps working."""

from specviz._legacy import alias

alias(__name__, "specviz.views.load")
