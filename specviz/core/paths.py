"""Where specviz keeps what it builds once: model caches, kernel choices, grids."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """Root of specviz's cache: ``$SPECVIZ_CACHE`` or the platform's user cache folder."""
    env = os.environ.get("SPECVIZ_CACHE")
    if env:
        root = Path(env).expanduser()
    else:
        import platformdirs

        root = Path(platformdirs.user_cache_dir("specviz"))
    root.mkdir(parents=True, exist_ok=True)
    return root
