"""Deprecated: moved to :mod:`specviz.fixtures.toy`; this path warns and goes in specviz 0.5."""

from specviz._legacy import alias

alias(__name__, "specviz.fixtures.toy")
