"""Moved to :mod:`specviz.decoding.serial`; this import path keeps working."""

from specviz._legacy import alias

alias(__name__, "specviz.decoding.serial")
