"""Hashing files, joining split GGUF parts, and finding the installed GGUF files."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import tempfile
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.paths import cache_dir

if TYPE_CHECKING:
    pass

from ._specs import _CHUNK, BuiltinModel, ModelIntegrityError, ModelNotAvailableError
from ._util import _make_shareable, _tqdm


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
