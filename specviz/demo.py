"""Deprecated: moved to :mod:`specviz.lab.demo`; this path warns and goes in specviz 0.5."""

from specviz._legacy import alias

alias(__name__, "specviz.lab.demo")
