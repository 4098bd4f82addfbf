"""Doctest collection over the package (``make test`` runs ``--doctest-modules specviz``).

The legacy flat-layout paths (``specviz/<old>.py``) are deprecated shims of their new modules:
they are not collected (importing one warns; their names' doctests run from the new module),
and ``__main__`` is not imported."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).parent / "specviz"
collect_ignore = [str(_PKG / "__main__.py")] + [
    str(p) for p in _PKG.glob("*.py") if "from specviz._legacy import" in p.read_text()
]
