"""Moved to :mod:`specviz.fixtures.llamas`; this import path keeps working."""

from specviz._legacy import alias

alias(__name__, "specviz.fixtures.llamas")
