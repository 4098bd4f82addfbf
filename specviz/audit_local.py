"""Deprecated: moved to :mod:`specviz.audit.local`; this path warns and goes in specviz 0.5."""

from specviz._legacy import alias

alias(__name__, "specviz.audit.local")
