"""Doctest collection over the package (``make test`` runs ``--doctest-modules specviz``).

The legacy flat-layout paths (``specviz/<old>.py``) are aliases of their new modules; their
doctests are collected once, from the new module, and ``__main__`` is not imported."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).parent / "specviz"
collect_ignore = [str(_PKG / "__main__.py"), str(_PKG / "_legacy.py")] + [
    str(p)
    for p in _PKG.glob("*.py")
    if "specviz._legacy import alias" in p.read_text() or "former ``specviz." in p.read_text()
]
