"""The cache folder's records: which files it holds, when each was last hashed, and whether it is complete."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import torch

from ..core.paths import cache_dir

if TYPE_CHECKING:
    pass

from ._files import _CRC_BLOCK, _crc32_file, _file_digests
from ._specs import (
    _CRC_NAME,
    _META_NAME,
    _SHA256_HEX,
    _SOURCES,
    _VERIFIED_NAME,
    _WEIGHTS_NAME,
    BUILTIN_MODELS,
    BuiltinModel,
    ModelIntegrityError,
)
from ._util import _make_shareable, _say


def _builtin_cache_path(spec: BuiltinModel) -> Path:
    return cache_dir() / "models" / spec.cache_name


class _CacheState(NamedTuple):
    """What :func:`_cache_state` found: ``missing``, ``ready`` or ``damaged`` (with the reason)."""

    status: Literal["missing", "ready", "damaged"]
    reason: str = ""


def _damaged(reason: str) -> _CacheState:
    return _CacheState("damaged", reason)


def _file_table(meta: Any) -> dict[str, tuple[int, str]] | str:
    """``{name: (size, sha256)}`` from a parsed ``specviz.json``, or why it has none."""
    files = meta.get("files") if isinstance(meta, dict) else None
    if files is None:
        return f"{_META_NAME} has no files table (built by an older specviz)"
    if not isinstance(files, dict) or not files:
        return f"{_META_NAME}: the files table is empty or not a table"
    table: dict[str, tuple[int, str]] = {}
    for name, entry in files.items():
        parts = Path(name).parts
        size = entry.get("size") if isinstance(entry, dict) else None
        digest = entry.get("sha256") if isinstance(entry, dict) else None
        if (
            not name
            or Path(name).is_absolute()
            or ".." in parts
            or name in (_META_NAME, _VERIFIED_NAME, _CRC_NAME)
            or isinstance(size, bool)
            or not isinstance(size, int)
            or size < 0
            or not isinstance(digest, str)
            or not _SHA256_HEX.fullmatch(digest)
        ):
            return f"{_META_NAME}: bad files table entry {name!r}: {entry!r}"
        table[name] = (size, digest)
    if _WEIGHTS_NAME not in table:
        return f"{_META_NAME}: the files table does not list {_WEIGHTS_NAME}"
    return table


def _read_verified(folder: Path, name: str = _VERIFIED_NAME) -> dict[str, Any]:
    """The ``.verified.json`` records, ``{}`` when absent or unreadable (all get re-hashed)."""
    try:
        data = json.loads((folder / name).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    return files if isinstance(files, dict) else {}


def _verified_record(st: os.stat_result, digest: str) -> dict[str, Any]:
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}


#: Files whose content passed a check in this process: (device, inode, size, mtime_ns).
_CONTENT_CHECKED: set[tuple[int, int, int, int]] = set()
#: When the bytes of a cached file whose size and mtime did not change are read again:
#: ``auto`` (default) -- files under ``_BIG_FILE`` once per process, larger ones (the Qwen
#: weights) when their last content check is over ``_RECHECK_S`` old; ``content`` -- every
#: file once per process; ``stat`` -- never (size and mtime only).
_CHECK_ENV = "SPECVIZ_CACHE_CHECK"
_CHECK_MODES = ("auto", "content", "stat")
_BIG_FILE = 1 << 30
_RECHECK_S = 24 * 3600


def _stat_key(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _check_mode() -> str:
    mode = os.environ.get(_CHECK_ENV, "auto").strip().lower() or "auto"
    if mode not in _CHECK_MODES:
        raise ValueError(f"{_CHECK_ENV} must be one of {_CHECK_MODES}, got {mode!r}")
    return mode


def _content_check_due(st: os.stat_result, checked: Any) -> bool:
    """Whether a file whose size and mtime match its records is read again now (``checked``:
    the time of its last content check, recorded for big files)."""
    mode = _check_mode()
    if mode == "stat" or _stat_key(st) in _CONTENT_CHECKED:
        return False
    if mode == "content" or st.st_size < _BIG_FILE:
        return True
    fresh = isinstance(checked, (int, float)) and 0 <= time.time() - checked < _RECHECK_S
    return not fresh


def _write_verified(folder: Path, records: dict[str, Any], name: str = _VERIFIED_NAME) -> None:
    """Write ``.verified.json`` atomically (temporary file + rename)."""
    fd, tmp_name = tempfile.mkstemp(prefix=f"{name}.", suffix=".tmp", dir=folder)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"files": records}, handle, indent=1, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        _make_shareable(tmp)
        os.replace(tmp, folder / name)
    finally:
        tmp.unlink(missing_ok=True)


def _content_checked(st: os.stat_result) -> int:
    """Remember that a file's bytes were just checked (this process; for big files, the time)."""
    _CONTENT_CHECKED.add(_stat_key(st))
    return int(time.time())


def _cache_state(folder: Path, *, progress: bool = False, rehash: bool = False) -> _CacheState:
    """Check a built-in cache folder against the files table in its ``specviz.json``.

    Every recorded file must exist with its recorded size. A file whose ``(size, mtime_ns)``
    differs from its ``.verified.json`` record (or that has none, or every file if ``rehash``)
    is hashed and must match its recorded SHA-256; the records are then updated (best effort:
    a read-only cache is simply re-hashed next time), with the CRC-32 of each 256 MiB block. A
    file whose size and mtime did not change is still read again and must match those CRCs
    (bit rot keeps both): files under 1 GiB once per process, larger ones once a day
    (``SPECVIZ_CACHE_CHECK``: ``auto``, ``content`` for every file once per process, ``stat``
    for never).
    """
    if not folder.exists() and not folder.is_symlink():
        return _CacheState("missing")
    if not folder.is_dir():
        return _damaged("not a folder")
    try:
        text = (folder / _META_NAME).read_text(encoding="utf-8")
    except FileNotFoundError:
        return _damaged(f"{_META_NAME}: missing")
    except (OSError, UnicodeDecodeError) as err:
        return _damaged(f"{_META_NAME}: unreadable ({err})")
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as err:
        return _damaged(
            f"{_META_NAME}: not valid JSON ({err.msg}: line {err.lineno} column {err.colno})"
        )
    table = _file_table(meta)
    if isinstance(table, str):
        return _damaged(table)
    stats: dict[str, os.stat_result] = {}
    for name, (size, _) in table.items():
        try:
            st = (folder / name).stat()
        except FileNotFoundError:
            return _damaged(f"{name}: missing")
        except OSError as err:
            return _damaged(f"{name}: unreadable ({err})")
        if not stat.S_ISREG(st.st_mode):
            return _damaged(f"{name}: not a regular file")
        if st.st_size != size:
            return _damaged(f"{name}: size {st.st_size} != {size}")
        stats[name] = st
    verified = _read_verified(folder)
    crcs = _read_verified(folder, _CRC_NAME)
    records: dict[str, Any] = {}
    new_crcs: dict[str, Any] = {}
    for name, (_, digest) in table.items():
        st, path = stats[name], folder / name
        current = _verified_record(st, digest)
        old = crcs.get(name) if isinstance(crcs.get(name), dict) else {}
        crc = old.get("crc32") if {k: old.get(k) for k in current} == current else None
        known = (
            verified.get(name) == current
            and isinstance(crc, list)
            and bool(crc)
            and all(isinstance(c, int) for c in crc)
        )
        big = st.st_size > 64 * 1024 * 1024
        checked_at = old.get("checked") if crc is not None else None
        try:
            if rehash or not known:  # changed since it was verified, or never verified
                if big and not rehash:
                    _say(
                        f"verifying {name} in {folder} (changed since it was last verified)",
                        progress,
                    )
                actual, crc = _file_digests(
                    path, progress=progress and big, desc=f"verifying {name}"
                )
                if actual != digest:
                    return _damaged(
                        f"{name}: SHA-256 {actual[:16]}... != recorded {digest[:16]}..."
                    )
                checked_at = _content_checked(st)
            elif _content_check_due(st, checked_at):  # same size and mtime: read the bytes
                now = _crc32_file(path)
                if now != crc:
                    block = next(
                        (i for i, (a, b) in enumerate(zip(now, crc, strict=False)) if a != b), 0
                    )
                    where = _CRC_BLOCK * block
                    return _damaged(
                        f"{name}: its content changed since it was verified (CRC-32 of the "
                        f"{_CRC_BLOCK >> 20} MiB block at byte {where} differs) although its size "
                        "and mtime did not: bit rot or an in-place edit"
                    )
                checked_at = _content_checked(st)
        except OSError as err:
            return _damaged(f"{name}: unreadable ({err})")
        records[name] = current
        new_crcs[name] = {**current, "crc32": crc}
        if st.st_size >= _BIG_FILE and checked_at is not None:
            new_crcs[name]["checked"] = checked_at
    with contextlib.suppress(OSError):
        if records != verified:
            _write_verified(folder, records)
        if new_crcs != crcs:
            _write_verified(folder, new_crcs, _CRC_NAME)
    return _CacheState("ready")


def _cache_ready(folder: Path) -> bool:
    return _cache_state(folder).status == "ready"


def _discard(folder: Path) -> None:
    """Move a damaged cache entry out of the way (rename, so the final name is free at once)
    and delete it."""
    aside = folder.with_name(f".{folder.name}.damaged-{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        os.rename(folder, aside)
    except FileNotFoundError:  # another process moved it already
        return
    except OSError as err:
        raise ModelIntegrityError(
            f"cannot move the damaged cache entry {folder} out of the way ({err}); delete it"
        ) from err
    if aside.is_dir() and not aside.is_symlink():
        shutil.rmtree(aside, ignore_errors=True)
    else:  # an entry that is a file (or a link): rmtree cannot remove it
        with contextlib.suppress(OSError):
            aside.unlink()


_DTYPE_ALIASES = {
    "fp32": "float32",
    "float": "float32",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
}


def resolve_dtype(dtype: torch.dtype | str) -> torch.dtype | str:
    """Turn ``"bfloat16"``/``"bf16"``/``torch.bfloat16`` into a torch dtype (``"auto"`` is kept)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str):
        name = dtype.strip().lower().removeprefix("torch.")
        if name == "auto":
            return "auto"
        value = getattr(torch, _DTYPE_ALIASES.get(name, name), None)
        if isinstance(value, torch.dtype) and value.is_floating_point:
            return value
    raise ValueError(f"unsupported dtype {dtype!r}: use a floating torch.dtype or e.g. 'bfloat16'")


def _check_source(source: str) -> None:
    if source not in _SOURCES:
        raise ValueError(f"source must be one of {_SOURCES}, got {source!r}")


def _hub_offline() -> bool:
    """Whether the hub must not be contacted (env read now, not at import like huggingface_hub)."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().upper() in {"1", "ON", "YES", "TRUE"}:
            return True
    try:
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE)
    except ImportError:  # pragma: no cover - huggingface_hub comes with transformers
        return False


def _builtin_names() -> str:
    return ", ".join(BUILTIN_MODELS)
