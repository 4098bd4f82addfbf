"""Moved to :mod:`specviz.core.sampling`; this import path keeps working."""

from specviz._legacy import alias

alias(__name__, "specviz.core.sampling")
