"""Moved to :mod:`specviz.audit.broken_server`; this import path keeps working."""

from specviz._legacy import alias

alias(__name__, "specviz.audit.broken_server")
