"""Moved to :mod:`specviz.perf.theory`; this import path keeps working."""

from specviz._legacy import alias

alias(__name__, "specviz.perf.theory")
