"""Deprecated: moved to :mod:`specviz.audit.client`; this path warns and goes in specviz 0.5."""

from specviz._legacy import alias

alias(__name__, "specviz.audit.client")
