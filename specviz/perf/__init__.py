"""Performance: measured metrics (latency, throughput, memory, draft cost), the theory they
are compared with (all probability laws and speedup formulas live in ``theory``), and the
kernel choice measured on this host (:func:`kernel_report`, :func:`use_fastest_kernels`)."""

from ..core.kernels import KernelReport, KernelTiming, kernel_report, use_fastest_kernels

__all__ = ["KernelReport", "KernelTiming", "kernel_report", "use_fastest_kernels"]
