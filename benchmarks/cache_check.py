"""What the once-per-process content check of the model cache costs (issue 28).

Each measurement is a fresh Python process (the check runs once per process) that loads a
built-in model from a warm cache and reports its own CPU time (``resource.getrusage``) for
``load_model`` alone; ``SPECVIZ_CACHE_CHECK=stat`` (size and mtime only, the behaviour before)
is the reference, interleaved with the default (``content``: CRC-32 of every file once per
process). CPU time, not wall clock: the machine is shared. Prints both and their difference::

    python benchmarks/cache_check.py --model smollm2-135m --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
import specviz.models as m
m.load_model(sys.argv[1], progress=False)  # warm: the cache entry exists and is verified
m._CONTENT_CHECKED.clear()  # as in a fresh process (imports are not part of the measurement)
r0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
m.load_model(sys.argv[1], progress=False)
r1, w1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
print(json.dumps({"cpu": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
                  "wall": w1 - w0}))
"""


def measure(model: str, mode: str) -> dict:
    env = {**os.environ, "SPECVIZ_CACHE_CHECK": mode}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, model], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {"stat": [], "content": []}
    for i in range(args.repeats):
        for mode in ("stat", "content") if i % 2 == 0 else ("content", "stat"):
            runs[mode].append(measure(args.model, mode))
    cpu = {k: statistics.median(r["cpu"] for r in v) for k, v in runs.items()}
    wall = {k: statistics.median(r["wall"] for r in v) for k, v in runs.items()}
    print(f"{args.model}: load_model from a warm cache, median of {args.repeats} processes")
    for k in ("stat", "content"):
        print(f"  SPECVIZ_CACHE_CHECK={k:<8} cpu {cpu[k]:.3f} s   wall {wall[k]:.3f} s")
    print(
        f"  content check adds {cpu['content'] - cpu['stat']:.3f} s CPU per process "
        f"({cpu['content'] / max(cpu['stat'], 1e-9):.2f}x the stat-only load's CPU time)"
    )


if __name__ == "__main__":
    main()
