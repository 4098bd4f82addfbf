"""Peak memory of making onnxruntime-genai's int4 model of a built-in model, two ways, in one
run: the model builder quantizing it itself (``-p int4``) against specviz's route (the
builder's fp32 model, its MatMul weights then quantized in a process of its own:
``specviz.audit.engines.convert._ort_build_quantized``; issue 24's 10 GB bar). It checks that
both give the same weight bytes and graph, and prints each route's peak of the summed resident
memory of its process tree (sampled every 0.2 s), its wall time and the ratios::

    .venv/bin/python benchmarks/ort_quantize_memory.py qwen2.5-coder-1.5b
    .venv/bin/python benchmarks/ort_quantize_memory.py smollm2-135m@8 --precision int8

The transformers folder of the model converts on first use (cached). The builder's own route
on the 1.5B Qwen needs ~15 GB free. Run it alone: a busy machine makes the times noise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from tree_rss import summed_rss  # benchmarks/ (the script's folder is on the path)

_ROUTE = r"""
import sys
from pathlib import Path
from specviz.audit.engines import convert
hf, out, precision, route = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
if route == "builder":
    convert._ort_build(hf, out, "benchmark", precision)
else:
    convert._ort_build_quantized(hf, out, precision, "benchmark")
"""


def _peak(cmd: list[str]) -> tuple[float, float]:
    """Run ``cmd``; its wall seconds and the peak summed RSS of its process tree (GB)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    root, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        peak = max(peak, summed_rss(root)[0])
        time.sleep(0.2)
    if proc.wait() != 0:
        raise SystemExit(f"{cmd[-1]} route failed (exit status {proc.returncode})")
    return time.perf_counter() - t0, peak / 1e9


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="a built-in model name, NAME@LAYERS, or a folder")
    ap.add_argument("--precision", choices=("int4", "int8"), default="int4")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from specviz.audit.engines.convert import hf_folder, ort_model_differences

    hf = hf_folder(args.model)
    with tempfile.TemporaryDirectory(prefix="ort-quantize-", dir=Path(hf).parent) as tmp:
        got = {}
        for route in ("builder", "specviz"):
            out = Path(tmp) / route
            env_cmd = [sys.executable, "-c", _ROUTE, str(hf), str(out), args.precision, route]
            got[route] = _peak(env_cmd)
            print(f"{route:8s} wall {got[route][0]:6.1f} s   peak tree RSS {got[route][1]:5.2f} GB",
                  flush=True)  # fmt: skip
        same = ort_model_differences(Path(tmp) / "specviz", Path(tmp) / "builder")
    print(f"same model: {'yes' if not same else 'NO, differs in ' + ', '.join(same)}")
    (bw, bp), (sw, sp) = got["builder"], got["specviz"]
    print(f"specviz / builder: peak {sp / bp:.2f}x, wall {sw / bw:.2f}x "
          f"({args.model}, {args.precision}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f})")  # fmt: skip
    return 0 if not same else 1


if __name__ == "__main__":
    sys.exit(main())
