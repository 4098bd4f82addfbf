"""Moved to :mod:`specviz.lab.analysis`; this import path keeps working."""

from specviz._legacy import alias

alias(__name__, "specviz.lab.analysis")
