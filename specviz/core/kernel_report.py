"""What :func:`specviz.use_fastest_kernels` measured and chose: :class:`KernelReport` and its
:class:`KernelTiming` rows, and their JSON form. Below both the chooser
(:mod:`.kernels`) and its cache (:mod:`.kernel_cache`), so neither imports the other back."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["SHAPES", "KernelReport", "KernelTiming"]

SHAPES = ("decode", "verify")  # the two model calls timed: a decode step, a verify pass


@dataclass(frozen=True)
class KernelTiming:
    """Seconds of one model call: ``kernels`` x ``threads`` x shape (``tokens`` fed)."""

    kernels: str  # "packed" | "stock"
    threads: int
    shape: str  # "decode" | "verify"
    tokens: int
    seconds: tuple[float, ...]  # one per round

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


@dataclass(frozen=True)
class KernelReport:
    """What :func:`use_fastest_kernels` measured and chose for one model on this host.

    ``decode`` / ``verify`` are the kernels now used for one-row calls (decode steps) and
    for calls of several rows (verify passes, prefill, batches); ``threads`` the torch
    thread count chosen (process-wide). ``source`` is ``measured``, ``cache`` (measured
    earlier on this host), ``forced`` (``SPECVIZ_KERNELS`` or an explicit choice) or
    ``unavailable`` (not a CPU float model, or no oneDNN). ``ratios`` holds, per shape, the
    median over rounds of stock seconds / packed seconds at the chosen thread count (> 1:
    packed is faster), with the smallest and largest round.
    """

    model: str
    host: str
    decode: str
    verify: str
    threads: int
    gamma: int
    context: int
    source: str
    reason: str
    ratios: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    thread_ratio: float = math.nan  # chosen threads' step time / the current count's
    timings: tuple[KernelTiming, ...] = ()
    measured_at: str = ""
    load_average: float = math.nan  # 1-minute load average when measured
    cpus: int = 0
    measure_seconds: float = 0.0
    cache_path: str | None = None

    @property
    def kernels(self) -> dict[str, str]:
        return {"decode": self.decode, "verify": self.verify}

    def median(self, kernels: str, shape: str, threads: int | None = None) -> float:
        """Median seconds of ``shape`` on ``kernels`` at ``threads`` (default: the chosen)."""
        t = self.threads if threads is None else threads
        for timing in self.timings:
            if (timing.kernels, timing.shape, timing.threads) == (kernels, shape, t):
                return timing.median
        return math.nan

    @property
    def busy(self) -> bool:
        """Measured while the machine ran more than one runnable task per core."""
        return self.cpus > 0 and self.load_average > self.cpus

    def summary(self) -> str:
        """A few lines for a person: what was chosen, measured on what, and why."""
        lines = [
            f"kernels for {self.model}: decode step {self.decode}, verify pass "
            f"(gamma+1={self.gamma + 1} tokens) {self.verify}, {self.threads} torch "
            f"thread{'s' if self.threads != 1 else ''} [{self.source}]"
        ]
        for shape in SHAPES:
            if shape in self.ratios:
                med, lo, hi = self.ratios[shape]
                s, p = self.median("stock", shape), self.median("packed", shape)
                lines.append(
                    f"  {shape:<6} stock {s * 1e3:7.1f} ms, packed {p * 1e3:7.1f} ms: packed "
                    f"{med:.2f}x faster (rounds {lo:.2f}-{hi:.2f}x)"
                )
        if self.reason:
            lines.append(f"  {self.reason}")
        if self.measured_at:
            where = f"; cached in {self.cache_path}" if self.cache_path else ""
            lines.append(
                f"  measured {self.measured_at} on {self.host} (load average "
                f"{self.load_average:.1f} on {self.cpus} cores){where}"
            )
        if self.busy:
            lines.append(
                "  the machine was busy while measuring: remeasure on a quiet machine with "
                "use_fastest_kernels(model, remeasure=True)"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["timings"] = [asdict(t) for t in self.timings]
        d["ratios"] = {k: list(v) for k, v in self.ratios.items()}
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> KernelReport:
        d = dict(d)
        d["timings"] = tuple(
            KernelTiming(**{**t, "seconds": tuple(float(x) for x in t["seconds"])})
            for t in d.get("timings", ())
        )
        d["ratios"] = {k: tuple(float(x) for x in v) for k, v in d.get("ratios", {}).items()}
        report = cls(**d)
        _check_report(report)
        return report


def _check_report(r: KernelReport) -> None:
    if r.decode not in ("packed", "stock") or r.verify not in ("packed", "stock"):
        raise ValueError(f"unknown kernels {r.decode!r}/{r.verify!r}")
    if isinstance(r.threads, bool) or not isinstance(r.threads, int) or r.threads < 1:
        raise ValueError(f"bad thread count {r.threads!r}")
    for t in r.timings:
        if not t.seconds or not all(math.isfinite(x) and x > 0 for x in t.seconds):
            raise ValueError(f"bad timings for {t.kernels}/{t.shape}")
