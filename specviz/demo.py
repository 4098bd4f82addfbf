"""Moved to :mod:`specviz.lab.demo`; this import path keeps working."""

from specviz._legacy import alias

alias(__name__, "specviz.lab.demo")
