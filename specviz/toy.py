"""Moved to :mod:`specviz.fixtures.toy`; this import path keeps working."""

from specviz._legacy import alias

alias(__name__, "specviz.fixtures.toy")
