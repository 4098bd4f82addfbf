"""Moved to :mod:`specviz.lab.checklist`; this import path keeps working."""

from specviz._legacy import alias

alias(__name__, "specviz.lab.checklist")
