"""Kernels chosen by measurement: packed (oneDNN) or stock linear kernels, and torch threads.

Whether pre-packed weights pay depends on the host, not on the code: on 2026-11-30 oneDNN's
packed kernels made a SmolLM2 decode step 1.66x faster than PyTorch's stock sgemm path; on
2026-12-02, on a host with a third of the memory bandwidth, they were 0.81x. So
:func:`use_fastest_kernels` times, on this host and this model, the two shapes speculative
decoding runs -- a decode step (1 token) and a verify pass (gamma + 1 tokens) at a realistic
context -- on both kernels and on each thread count up to the current one, keeps the faster
kernel for each shape and the faster thread count, applies them, and says what it measured.

Noise: rounds interleave every variant (rotating their order) and the choice rests on the
median of per-round ratios; a departure from the stock kernels (or from the current thread
count) needs a margin, so a tie keeps the path that is bit-identical to transformers and
costs no second copy of the weights.

The choice is cached once per host with the model (:mod:`.kernel_cache`),
written atomically, read back only when its checksum, format and host fingerprint (CPU, core
count, torch version, boot) match; anything else is measured again. ``SPECVIZ_KERNELS``
(``fastest``, ``packed``, ``stock``) sets what :func:`specviz.models.load_model` does by
default.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import statistics
import time
import weakref
from typing import Any

import torch

from . import kernel_cache as kc
from .kernel_report import SHAPES, KernelReport, KernelTiming
from .packed import (
    _packable,
    dense_dropped,
    file_backed_share,
    pack_lean,
    packed_layers,
    packed_shapes,
    packing_available,
    route_packed,
    stock_linears,
    touch_dense,
    unsupported_reason,
    use_packed_weights,
)
from .threads import torch_threads

__all__ = [
    "KERNEL_MODES",
    "KernelReport",
    "KernelTiming",
    "default_kernel_mode",
    "kernel_report",
    "use_fastest_kernels",
]

KERNEL_MODES = ("fastest", "packed", "stock")
_MARGIN = 0.05  # a departure from the default must be >= 5% faster (median of rounds)

# the report of every model chosen for in this process, newest last (weak: models come and go)
_REPORTS: weakref.WeakKeyDictionary[torch.nn.Module, KernelReport] = weakref.WeakKeyDictionary()
_LAST: list[KernelReport] = []


# ------------------------------------------------------------------------- public entry


def default_kernel_mode() -> str:
    """``SPECVIZ_KERNELS`` (``fastest`` when unset): what ``load_model`` does by default."""
    mode = os.environ.get("SPECVIZ_KERNELS", "fastest").strip().lower() or "fastest"
    if mode not in KERNEL_MODES:
        raise ValueError(f"SPECVIZ_KERNELS must be one of {KERNEL_MODES}, got {mode!r}")
    return mode


def kernel_report(model: Any = None) -> KernelReport | None:
    """The kernel choice in force for ``model`` (the one :func:`use_fastest_kernels` made),
    or, without a model, the latest choice made in this process; None if there is none."""
    if model is None:
        return _LAST[-1] if _LAST else None
    try:
        return _REPORTS.get(model)
    except TypeError:  # not weak-referenceable: never chosen for
        return None


def use_fastest_kernels(
    model: Any,
    *,
    gamma: int = 4,
    context: int = 128,
    threads: bool | int = True,
    rounds: int = 5,
    budget_s: float = 60.0,
    keep_dense: bool = True,
    cache: bool = True,
    remeasure: bool = False,
    mode: str = "fastest",
    progress: bool = False,
) -> KernelReport:
    """Measure and apply the faster linear kernels (and torch thread count) for ``model``.

    Times a decode step (1 token) and a verify pass (``gamma + 1`` tokens) on a cache of
    ``context`` tokens, on packed and on stock weights, at each thread count in
    ``1..torch.get_num_threads()`` worth trying (``threads=False``: the current one only; an
    int: that count), ``rounds`` interleaved rounds (fewer past ``budget_s`` seconds, at least
    two; a thread count 1.5x slower than the best after the first round is dropped); keeps the faster kernel for each shape
    (stock unless packed is >= 5% faster) and the faster thread count, applies both, and
    returns the :class:`KernelReport`. The timings are cached per host with the model and
    reused (``remeasure=True`` measures again; ``cache=False`` neither reads nor writes them;
    a measurement taken while the load average exceeded the core count is taken again once
    the machine is quiet).
    ``keep_dense=False`` frees the dense weights when packed wins both shapes, and then
    chooses one kernel for both shapes (a mix needs both copies); for weights mapped from a
    file (what :func:`specviz.models.load_model` loads) it also times with one copy resident
    at a time: the model is packed for each round's packed variants, each dense layer's pages
    dropped as soon as it is packed (read again from the page cache by the stock variants),
    and unpacked for the stock ones -- timing a 1.5B model no longer holds its 6 GB twice. ``mode="packed"`` /
    ``"stock"`` applies that without measuring (``source="forced"``). A model that is not a
    CPU float32/bfloat16 model, or a PyTorch without oneDNN, is left as it is
    (``source="unavailable"``).
    """
    if mode not in KERNEL_MODES:
        raise ValueError(f"mode must be one of {KERNEL_MODES}, got {mode!r}")
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma must be an integer >= 1, got {gamma!r}")
    for name, v in (("context", context), ("rounds", rounds)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    name, host = kc.model_name(model), kc.host_fingerprint()
    why_not = _unavailable(model)
    if why_not or mode != "fastest":
        kernels = "stock" if why_not else mode
        if not why_not:
            _apply(model, mode == "packed", mode == "packed", None, keep_dense)
        why = why_not or f"{mode} kernels requested (packed= or SPECVIZ_KERNELS): nothing timed"
        report = KernelReport(
            name, host["name"], kernels, kernels, torch.get_num_threads(), gamma, context,
            "unavailable" if why_not else "forced", why, cpus=kc.cpus(),
        )  # fmt: skip
        return _remember(model, report)
    counts = _thread_counts(threads, torch.get_num_threads())
    path = kc.cache_path(model, gamma, context) if cache else None
    cached = None if remeasure or path is None else kc.read(path, host)
    if cached is not None and cached.busy and not kc.busy_now():
        cached = None  # timed on a busy machine, and it is quiet now: time it again
    if cached is not None and set(counts) <= {t.threads for t in cached.timings}:
        # the cached timings decide again, among the thread counts allowed now
        report = _choose(cached, counts, source="cache")
    else:
        report = _measure(model, name, host["name"], gamma, context, counts, rounds, budget_s,
                          progress, keep_dense)  # fmt: skip
        if path is not None:
            report = kc.write(path, host, report)
    decode, verify = report.decode == "packed", report.verify == "packed"
    if not keep_dense and decode != verify:
        decode = verify = _one_kernel(report)
        k = "packed" if decode else "stock"
        report = _replace(
            report, decode=k, verify=k,
            reason=report.reason + f"; keep_dense=False holds one copy of the weights: {k} "
            "kernels for both shapes (the faster over a decode step plus a verify pass)",
        )  # fmt: skip
    _apply(model, decode, verify, report.threads, keep_dense)
    return _remember(model, report)


def _remember(model: Any, report: KernelReport) -> KernelReport:
    with contextlib.suppress(TypeError):
        _REPORTS[model] = report
    _LAST[:] = [report]
    return report


def _replace(report: KernelReport, **kw: Any) -> KernelReport:
    import dataclasses

    return dataclasses.replace(report, **kw)


# ------------------------------------------------------------------------- applying


def _unavailable(model: Any) -> str:
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        return f"{type(model).__name__} is not a transformers model: kernels left as they are"
    layers = [m for m in model.modules() if _packable(m)]
    if not layers:
        return "no CPU float32/bfloat16 linear layer (a GPU model, or another dtype)"
    if not packing_available():
        return "this PyTorch has no oneDNN: stock kernels"
    why = unsupported_reason(layers)
    return f"{why}: stock kernels" if why else ""


def _apply(model: Any, decode: bool, verify: bool, threads: int | None, keep_dense: bool) -> None:
    if decode or verify:
        # a per-shape mix runs both kernels: it keeps the dense weights
        use_packed_weights(model, keep_dense=keep_dense or decode != verify)
        route_packed(model, decode=decode, verify=verify)
    elif packed_layers(model):
        if dense_dropped(model):
            raise RuntimeError(
                "stock kernels were chosen but this model's dense weights were freed after "
                "packing; load it again (load_model(..., packed=None))"
            )
        use_packed_weights(model, False)
    if threads is not None and threads != torch.get_num_threads():
        torch.set_num_threads(threads)


def _one_kernel(report: KernelReport) -> bool:
    """Packed for both shapes? The faster over one decode step plus one verify pass."""
    s = report.median("stock", "decode") + report.median("stock", "verify")
    p = report.median("packed", "decode") + report.median("packed", "verify")
    return p * (1 + _MARGIN) < s


# ------------------------------------------------------------------------- measuring


def _thread_counts(threads: bool | int, cap: int) -> tuple[int, ...]:
    if threads is True:
        # never above the current count (OMP_NUM_THREADS, a notebook per core): 1, half, all
        return tuple(sorted({1, max(1, cap // 2), cap}))
    if threads is False:
        return (cap,)
    if isinstance(threads, int) and threads >= 1:
        return (threads,)
    raise ValueError(f"threads must be True, False or an integer >= 1, got {threads!r}")


def _measure(
    model: Any,
    name: str,
    host: str,
    gamma: int,
    context: int,
    counts: tuple[int, ...],
    rounds: int,
    budget_s: float,
    progress: bool,
    keep_dense: bool = True,
) -> KernelReport:
    from .runners import HFRunner

    if dense_dropped(model):
        raise RuntimeError(
            "use_fastest_kernels needs the dense weights to time the stock kernels; this "
            "model's were freed after packing (keep_dense=False): load it again"
        )
    was = packed_shapes(model)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    # keep_dense=False on weights mapped from a file: one copy resident at a time -- the model
    # is packed for the packed variants (each dense layer's pages dropped once packed, read
    # again from the file for the stock ones) and unpacked for the stock ones; otherwise both
    # copies while measuring, the loser freed afterwards
    lean = not keep_dense and file_backed_share(model) >= 0.5
    switch = (lambda kernels: _switch_lean(model, kernels)) if lean else None
    if lean:
        use_packed_weights(model, False)
    else:
        use_packed_weights(model)
        route_packed(model, decode=True, verify=True)
    vocab = min(int(getattr(model.config, "vocab_size", 1000) or 1000), 1000)
    g = torch.Generator().manual_seed(0)
    ctx = torch.randint(0, vocab, (context,), generator=g)
    feeds = {
        "decode": torch.randint(0, vocab, (1,), generator=g),
        "verify": torch.randint(0, vocab, (gamma + 1,), generator=g),
    }
    t_start = time.perf_counter()
    if progress:
        print(f"specviz: timing {name}'s kernels (packed, stock) x threads {counts}, once per "
              "host", flush=True)  # fmt: skip
    try:
        times = _time_rounds(model, HFRunner(model), ctx, feeds, counts, rounds, budget_s,
                             switch)  # fmt: skip
    except BaseException:  # leave the model as it was
        if any(was):
            use_packed_weights(model)
            route_packed(model, decode=was[0], verify=was[1])
        else:
            use_packed_weights(model, False)
        raise
    timings = tuple(
        KernelTiming(k, t, s, feeds[s].numel(), tuple(v)) for (k, t, s), v in times.items()
    )
    measured = KernelReport(
        name, host, "stock", "stock", max(counts), gamma, context, "measured", "",
        timings=timings, measured_at=datetime.datetime.now().isoformat(timespec="seconds"),
        load_average=load, cpus=kc.cpus(), measure_seconds=time.perf_counter() - t_start,
    )  # fmt: skip
    return _choose(measured, counts, source="measured")


def _time_rounds(
    model: Any,
    runner: Any,
    ctx: torch.Tensor,
    feeds: dict[str, torch.Tensor],
    counts: tuple[int, ...],
    rounds: int,
    budget_s: float,
    switch: Any = None,
) -> dict[tuple[str, int, str], list[float]]:
    """Seconds per (kernels, threads, shape), one per round; every round times every variant,
    in an order rotated each round; round -1 only warms up (first calls pay). ``switch``
    (lean measuring): called with "packed" / "stock" to put the model in that state before a
    variant of the other; the variants then run kernel by kernel, the kernel order reversed
    each round (stock packed, packed stock, ...: one switch per round)."""
    times: dict[tuple[str, int, str], list[float]] = {}
    t_start = time.perf_counter()
    runner.extend(ctx, 1)
    live = list(counts)
    state = "stock"
    for r in range(-1, rounds):
        if switch is None:
            variants = [(k, t) for t in live for k in ("stock", "packed")]
            shift = max(r, 0) % len(variants)
            order = variants[shift:] + variants[:shift]
        else:
            kinds = [state, "packed" if state == "stock" else "stock"]
            shift = max(r, 0) % len(live)
            order = [(k, t) for k in kinds for t in live[shift:] + live[:shift]]
        for kernels, t in order:
            if switch is not None and kernels != state:
                switch(kernels)
                state = kernels
            pause = stock_linears(model) if kernels == "stock" else contextlib.nullcontext()
            with pause, torch_threads(t):
                for shape, feed in feeds.items():
                    t0 = time.perf_counter()
                    runner.extend(feed, feed.numel())
                    dt = time.perf_counter() - t0
                    runner.crop(ctx.numel())
                    if r >= 0:
                        times.setdefault((kernels, t, shape), []).append(dt)
        if r == 0 and len(live) > 1:  # a thread count far behind cannot win: stop timing it
            step = {t: min(_step(times, k, t, -1) for k in ("stock", "packed")) for t in live}
            live = [t for t in live if step[t] <= 1.5 * min(step.values())]
        if r >= 1 and time.perf_counter() - t_start > budget_s:
            break
    return times


def _switch_lean(model: Any, kernels: str) -> None:
    if kernels == "packed":
        pack_lean(model)  # dense pages dropped layer by layer as each is packed
    else:
        use_packed_weights(model, False)  # packed copies freed (and trimmed): stock reads dense
        touch_dense(model)  # its dropped pages mapped again before anything is timed


def _step(times: dict[tuple[str, int, str], list[float]], k: str, t: int, i: int) -> float:
    return sum(times[(k, t, shape)][i] for shape in SHAPES)


def _paired_ratios(timings: tuple[KernelTiming, ...], shape: str, t: int) -> list[float]:
    by = {(x.kernels, x.threads, x.shape): x.seconds for x in timings}
    stock, packed = by[("stock", t, shape)], by[("packed", t, shape)]
    return [s / p for s, p in zip(stock, packed, strict=True)]


def _choose(measured: KernelReport, counts: tuple[int, ...], *, source: str) -> KernelReport:
    """Per thread count, per shape: packed when the median of per-round stock/packed ratios
    clears the margin. Threads: among ``counts`` (those timed), the count whose decode +
    verify time on its own best kernels is smallest -- the largest allowed count unless
    another clears the margin."""
    timings = measured.timings
    med = {(x.kernels, x.threads, x.shape): x.median for x in timings}
    counts = tuple(t for t in counts if ("stock", t, "decode") in med)
    cap = max(counts)
    choice: dict[int, dict[str, str]] = {}
    step: dict[int, float] = {}
    for t in counts:
        choice[t] = {}
        for shape in SHAPES:
            r = statistics.median(_paired_ratios(timings, shape, t))
            choice[t][shape] = "packed" if r > 1 + _MARGIN else "stock"
        step[t] = sum(med[(choice[t][s], t, s)] for s in SHAPES)
    best = min(counts, key=lambda t: step[t])
    chosen = best if step[best] * (1 + _MARGIN) < step[cap] else cap
    ratios = {}
    for shape in SHAPES:
        rs = _paired_ratios(timings, shape, chosen)
        ratios[shape] = (statistics.median(rs), min(rs), max(rs))
    parts = []
    for shape in SHAPES:
        m = ratios[shape][0]
        if choice[chosen][shape] == "packed":
            parts.append(f"{shape}: packed ({m:.2f}x stock's speed)")
        elif m > 1:
            parts.append(f"{shape}: stock (packed only {m:.2f}x, under the {_MARGIN:.0%} margin)")
        else:
            parts.append(f"{shape}: stock (packed {m:.2f}x: slower here)")
    if len(counts) > 1:
        parts.append(
            f"threads: {chosen} of {', '.join(map(str, counts))} (decode + verify "
            f"{step[chosen] * 1e3:.0f} ms vs {step[cap] * 1e3:.0f} ms at {cap})"
        )
    n = min(len(x.seconds) for x in timings if x.threads == chosen)
    parts.append(f"median of {n} interleaved rounds, measured in {measured.measure_seconds:.0f} s")
    return _replace(
        measured,
        decode=choice[chosen]["decode"],
        verify=choice[chosen]["verify"],
        threads=chosen,
        source=source,
        reason="; ".join(parts),
        ratios=ratios,
        thread_ratio=step[chosen] / step[cap],
    )
