"""Moved to :mod:`specviz.audit.client`; this import path keeps working."""

from specviz._legacy import alias

alias(__name__, "specviz.audit.client")
