"""Moved to :mod:`specviz.drafting.suffix`; this import path keeps working."""

from specviz._legacy import alias

alias(__name__, "specviz.drafting.suffix")
