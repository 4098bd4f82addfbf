"""Moved to :mod:`specviz.core.trace`; this import path keeps working."""

from specviz._legacy import alias

alias(__name__, "specviz.core.trace")
