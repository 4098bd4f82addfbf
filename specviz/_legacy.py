"""Import paths of the flat layout (specviz <= 0.1), kept working after the move into
subpackages: ``specviz/<old>.py`` makes ``specviz.<old>`` *be* its new module."""

from __future__ import annotations

import importlib
import runpy
import sys


def alias(name: str, target: str) -> None:
    """Make the module ``name`` the module ``target`` (``python -m`` runs ``target``)."""
    if name == "__main__":
        runpy.run_module(target, run_name="__main__", alter_sys=True)
        return
    sys.modules[name] = importlib.import_module(target)
