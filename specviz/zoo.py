"""Moved to :mod:`specviz.verification.zoo`; this import path keeps working."""

from specviz._legacy import alias

alias(__name__, "specviz.verification.zoo")
