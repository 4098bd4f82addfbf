"""Peak resident memory of each notebook kernel, run the way ``make demo`` runs it, per cell.

    .venv/bin/python benchmarks/notebook_rss.py notebooks/12_cross_vocabulary.ipynb [...]

Each notebook is executed (``nbclient``, nothing exported) with the environment
``scripts/make_demo.py`` gives it (``SPECVIZ_NB_SMALL=1``, ``OMP_NUM_THREADS=1``,
``PLOTLY_RENDERER=notebook``); after every cell the kernel's ``VmRSS`` and ``VmHWM`` (its peak
so far) are read from ``/proc/<kernel pid>/status``. Prints, per notebook, the kernel's peak
and the cells that raised it (the cell whose code holds the memory), so a peak can be traced
to the models and buffers a cell creates. Linux only (``/proc``). Runs one notebook at a time:
its numbers are the kernel's own, whatever else the machine runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GIB = 2**30


def _status(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def run(path: Path, timeout: int, top: int) -> tuple[str, float, float]:
    import nbformat
    from nbclient import NotebookClient

    env = dict(os.environ, SPECVIZ_NB_SMALL="1", OMP_NUM_THREADS="1", PLOTLY_RENDERER="notebook")
    nb = nbformat.read(path, as_version=4)
    rows: list[tuple[int, str, dict[str, int]]] = []
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={
        "metadata": {"path": str(ROOT / "notebooks")}})  # fmt: skip

    def after(cell, cell_index, **_):  # noqa: ANN001
        pid = client.km.provisioner.process.pid
        first = next((s for s in cell.source.splitlines() if s.strip()), "")
        rows.append((cell_index, first[:60], _status(pid)))

    client.on_cell_executed = after
    saved = dict(os.environ)
    os.environ.update(env)  # the kernel inherits this process's environment
    t0 = time.perf_counter()
    failed = ""
    try:
        client.execute(cwd=str(ROOT / "notebooks"))
    except Exception as err:  # noqa: BLE001 -- report the peak up to the failing cell
        failed = f", FAILED: {type(err).__name__}: {str(err).strip().splitlines()[-1][:200]}"
    finally:
        os.environ.clear()
        os.environ.update(saved)
    wall = time.perf_counter() - t0
    peak = max((r[2]["VmHWM"] for r in rows), default=0)
    print(f"== {path.name}: kernel peak RSS {peak / GIB:.2f} GiB ({peak / 1e9:.2f} GB), "
          f"{wall:.0f} s wall, {len(rows)} code cells{failed}", flush=True)  # fmt: skip
    prev = 0
    raises = []
    for i, first, s in rows:
        raises.append((s["VmHWM"] - prev, i, first, s))
        prev = s["VmHWM"]
    for d, i, first, s in sorted(raises, reverse=True)[:top]:
        print(f"   cell {i:3d} +{d / GIB:5.2f} GiB peak -> {s['VmHWM'] / GIB:5.2f} GiB "
              f"(after it: RSS {s['VmRSS'] / GIB:5.2f} GiB, anon {s['RssAnon'] / GIB:5.2f}, "
              f"file {s['RssFile'] / GIB:5.2f})  {first}", flush=True)  # fmt: skip
    return path.name, peak, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    ap.add_argument("--top", type=int, default=4, help="cells shown per notebook")
    args = ap.parse_args()
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    load = os.getloadavg()[0]
    print(f"# load average at start {load:.2f}; one notebook at a time", flush=True)
    results = [run(p.resolve(), args.timeout, args.top) for p in paths]
    print("\nnotebook                                   peak RSS   wall")
    for name, peak, wall in results:
        print(f"{name:<42} {peak / GIB:5.2f} GiB {wall:5.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
