"""Moved to :mod:`specviz.core.runners`; this import path keeps working."""

from specviz._legacy import alias

alias(__name__, "specviz.core.runners")
