"""Moved to :mod:`specviz.fixtures.memo`; this import path keeps working."""

from specviz._legacy import alias

alias(__name__, "specviz.fixtures.memo")
