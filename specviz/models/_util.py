"""Small helpers the parts share: progress lines, warnings, progress bars, shareable files."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

from ._specs import logger


def _make_shareable(path: Path) -> None:
    """Give temp files/folders (created 0600/0700) the usual umask-based permissions."""
    umask = os.umask(0)
    os.umask(umask)
    paths = [path, *path.rglob("*")] if path.is_dir() else [path]
    for item in paths:
        item.chmod((0o777 if item.is_dir() else 0o666) & ~umask)


def _say(message: str, progress: bool) -> None:
    """One short status line on stderr (when ``progress``), always mirrored to the logger."""
    logger.info(message)
    if progress:
        print(f"specviz: {message}", file=sys.stderr, flush=True)


def _warn(message: str, progress: bool) -> None:
    """A warning: logged, and printed on stderr when ``progress`` unless logging's last-resort
    handler (no handlers configured) prints it already."""
    logger.warning(message)
    if progress and logger.hasHandlers():
        print(f"specviz: {message}", file=sys.stderr, flush=True)


def _tqdm(progress: bool, **kwargs: Any):
    from tqdm.auto import tqdm

    return tqdm(disable=not progress, unit="B", unit_scale=True, unit_divisor=1024, **kwargs)


@contextlib.contextmanager
def _transformers_progress(enabled: bool) -> Iterator[None]:
    """Silence transformers' own progress bars for the duration, if asked to."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    if not enabled and was_enabled:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if not enabled and was_enabled:
            hf_logging.enable_progress_bar()
