"""Moved to :mod:`specviz.audit.local`; this import path keeps working."""

from specviz._legacy import alias

alias(__name__, "specviz.audit.local")
