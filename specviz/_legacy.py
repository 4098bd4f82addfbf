"""The import paths of the flat layout (specviz <= 0.1), deprecated and on their way out.

Every ``specviz/<old>.py`` is a shim: importing it warns once per process with a
:class:`DeprecationWarning` that names the new home and the version in which the path goes
(:data:`REMOVAL`), as scipy's ``_sub_module_deprecation`` does, and then hands out the very same
objects as before. A moved module is aliased (``specviz.<old>`` *is* the new module, so
monkeypatching either affects both); a module whose names were split over several homes
re-exports them. ``python -m specviz.<old>`` runs the new module.

The package itself never imports these paths (the second import-linter contract in
pyproject.toml), nor do tests and notebooks (``tests/test_legacy_paths.py`` counts).
"""

from __future__ import annotations

import importlib
import runpy
import sys
import warnings

#: The release in which the flat-layout paths are removed.
REMOVAL = "0.5"


def message(name: str, home: str) -> str:
    """The deprecation message of the legacy path ``name``, whose names now live in ``home``.

    >>> message("specviz.engine", "specviz.decoding.serial")
    'specviz.engine is deprecated and will be removed in specviz 0.5; import from specviz.decoding.serial instead'
    """
    return (
        f"{name} is deprecated and will be removed in specviz {REMOVAL}; import from {home} instead"
    )


def _outside_imports() -> int:
    """The ``stacklevel`` that points at the first frame outside the import machinery (the
    import system, a loader's ``exec_module`` such as pytest's, ``importlib.import_module``),
    this module and the shims: the line that imported the legacy path, where Python's default
    filters show the warning. ``warnings.warn`` skips the import system's frames when it
    counts, so they are not counted here either."""
    frame, level = sys._getframe(1), 1
    while frame is not None:
        code = frame.f_code
        internal = "importlib" in code.co_filename and "_bootstrap" in code.co_filename
        machinery = code.co_name in _LOADERS or code.co_filename in (__file__, importlib.__file__)
        if not (internal or machinery or frame.f_globals.get("__name__") in _SHIMS):
            break
        frame, level = frame.f_back, level + (not internal)
    return level


_LOADERS = ("exec_module", "load_module", "_call_with_frames_removed")


def deprecated(name: str, home: str) -> None:
    """Warn that the legacy module ``name`` is deprecated in favour of ``home``."""
    _SHIMS.add(name)
    warnings.warn(message(name, home), DeprecationWarning, stacklevel=_outside_imports())


def alias(name: str, target: str) -> None:
    """Warn, then make the module ``name`` the module ``target`` (``python -m`` runs ``target``)."""
    if name == "__main__":
        old = getattr(sys.modules["__main__"].__spec__, "name", "this path")
        warnings.warn(message(old, target), DeprecationWarning, stacklevel=2)
        runpy.run_module(target, run_name="__main__", alter_sys=True)
        return
    deprecated(name, target)
    sys.modules[name] = importlib.import_module(target)


_SHIMS: set[str] = set()
