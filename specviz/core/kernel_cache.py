"""Where :func:`specviz.use_fastest_kernels` keeps its timings: one JSON file per model (and
gamma, context) under ``cache_dir()/kernels/``, written atomically (temporary file, fsync,
rename) with a SHA-256 of its content and the fingerprint of the host that timed it (name,
CPU, cores, boot, torch build). A file is used only when all of that checks out; anything
else -- absent, damaged, edited, another host or boot -- means timing again."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from .kernel_report import KernelReport
from .packed import packing_available
from .paths import cache_dir

__all__ = ["busy_now", "cache_path", "cpus", "host_fingerprint", "model_name", "read", "write"]

_FORMAT = 1


def busy_now() -> bool:
    return hasattr(os, "getloadavg") and os.getloadavg()[0] > cpus()


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def host_fingerprint() -> dict[str, str]:
    """What makes a kernel choice valid: the machine, its boot, the CPU, the torch build."""
    cpu = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    boot = ""
    with contextlib.suppress(OSError):
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="utf-8").strip()
    node = platform.node()
    return {
        "name": f"{node} ({cpu or platform.machine()}, {cpus()} cores)",
        "node": node,
        "cpu": cpu,
        "cpus": str(cpus()),
        "boot": boot,
        "torch": torch.__version__,
        "onednn": str(packing_available()),
    }


def model_name(model: Any) -> str:
    cfg = getattr(model, "config", None)
    path = str(getattr(cfg, "_name_or_path", "") or "")
    return Path(path).name or type(model).__name__


def model_key(model: Any) -> str:
    cfg = model.config
    try:
        text = cfg.to_json_string(use_diff=False)
    except (AttributeError, TypeError, ValueError):  # a config that does not serialise
        text = repr(cfg)
    params = sum(p.numel() for p in model.parameters())
    dtype = str(next(model.parameters()).dtype)
    h = hashlib.sha256(f"{text}|{params}|{dtype}".encode()).hexdigest()[:16]
    safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in model_name(model))
    return f"{safe[:60]}-{h}"


def cache_path(model: Any, gamma: int, context: int) -> Path:
    return cache_dir() / "kernels" / f"{model_key(model)}-g{gamma}-c{context}.json"


def _digest(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def read(path: Path, host: dict[str, str]) -> KernelReport | None:
    """The cached report, or None (absent, another host or boot, damaged: measured again)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        warnings.warn(f"kernel cache {path} is unreadable ({err}); measuring again", stacklevel=3)
        return None
    try:
        payload = {k: data[k] for k in ("format", "host", "report")}
        if data.get("sha256") != _digest(payload):
            raise ValueError("checksum mismatch")
        if payload["format"] != _FORMAT:
            return None
        if payload["host"] != host:
            return None  # another host, boot or torch: the choice may not hold here
        report = KernelReport.from_json(payload["report"])
    except (KeyError, TypeError, ValueError) as err:
        warnings.warn(f"kernel cache {path} is damaged ({err}); measuring again", stacklevel=3)
        return None
    return dataclasses.replace(report, cache_path=str(path))


def write(path: Path, host: dict[str, str], report: KernelReport) -> KernelReport:
    """Write atomically (temporary file, fsync, rename); a failure only warns."""
    report = dataclasses.replace(report, cache_path=str(path))
    payload = {"format": _FORMAT, "host": host, "report": report.to_json()}
    text = json.dumps({**payload, "sha256": _digest(payload)}, indent=1, sort_keys=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    except OSError as err:
        warnings.warn(f"could not cache the kernel choice in {path}: {err}", stacklevel=3)
        return dataclasses.replace(report, cache_path=None)
    return report
