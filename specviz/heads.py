"""Moved to :mod:`specviz.drafting.heads`; this import path keeps working."""

from specviz._legacy import alias

alias(__name__, "specviz.drafting.heads")
