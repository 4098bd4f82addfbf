"""`make demo`: the per-prompt demo, then every notebook at its demo size, timed.

    .venv/bin/python scripts/make_demo.py [--jobs 2] [--out reports/demo] [--skip-demo]

1. ``python -m specviz demo`` (the default pair on the kernels measured faster on this host;
   it says whether speculation can pay here, and runs the pair that does when it cannot);
2. every notebook executed with ``SPECVIZ_NB_SMALL=1`` (the small configuration CI runs: same
   code path, fewer samples and tokens) and exported to offline HTML under ``--out`` (plotly.js
   inlined, explorers as their static snapshots; see docs/notebooks.md), ``--jobs`` at a time,
   one torch thread each, with a progress line per notebook;
3. every report opened in headless Chromium with the network blocked (under 8 MB, every
   figure and explorer snapshot drawn by the inlined plotly.js);
4. ``index.html`` beside the reports: each notebook's live demo run (its CPU seconds) next to
   its committed full-size report (``reports/NN_*.html``, ``make reports``), with the verdicts
   each printed and the claims only the full size decides (:mod:`specviz.lab.report_index`);
5. the wall time, the CPU time, the peak resident memory of the largest process (the demo or
   a notebook kernel) and each report's size.

Full-size reports are ``make reports``. Exits non-zero if a step fails; a report is written
only when its notebook ran to the end (nbconvert writes the file after executing it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# CPU seconds per notebook at the demo size (quiet 2 cores, 2026-12-06), for the order they
# start in when no earlier run's timings.json is there: longest first, so the last one to
# start does not run alone at the end (12 started last: 10.9 min for the whole demo)
DEMO_CPU_S = {"12": 188, "08": 121, "10": 74, "09": 64, "11": 56, "07": 55, "03": 45}


def longest_first(notebooks: list[Path], out: Path) -> list[Path]:
    """The notebooks by their CPU time at the last run (``out/timings.json``), else by
    ``DEMO_CPU_S``, longest first; unknown ones keep their order after the known ones."""
    try:
        last = json.loads((out / "timings.json").read_text())
        known = {k: float(v) for k, v in last.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        known = {}

    def cost(p: Path) -> float:
        return known.get(p.name, DEMO_CPU_S.get(p.name[:2], 30.0))

    return sorted(notebooks, key=cost, reverse=True)  # stable: ties keep their order


def nbconvert(path: Path, out: Path) -> tuple[Path, float, float, int, str]:
    """Execute and export one notebook: (path, wall s, CPU s of nbconvert and its kernel,
    exit code, the end of its stderr)."""
    env = dict(os.environ, SPECVIZ_NB_SMALL="1", OMP_NUM_THREADS="1", PLOTLY_RENDERER="notebook")
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "nbconvert", "--execute",
             "--to", "specviz.views.export.OfflineHTMLExporter",  # MathJax inlined: formulas offline
             "--output-dir", str(out), "--ExecutePreprocessor.timeout=1800",
             "--ExecutePreprocessor.store_widget_state=False", str(path)],
            stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=ROOT,
        )  # fmt: skip
        # this child's own rusage (its kernel included): CPU time is what a quiet machine
        # would spend; wall time on a shared one is not
        _, status, usage = os.wait4(proc.pid, 0)
        err.seek(0)
        tail = err.read().decode(errors="replace")[-2000:]
    cpu = usage.ru_utime + usage.ru_stime
    return path, time.perf_counter() - t0, cpu, os.waitstatus_to_exitcode(status), tail


def write_index(out: Path, timings: dict[str, float], failed: list[str], wall: float) -> Path:
    """index.html: each notebook's demo report next to its committed full-size one."""
    from specviz.lab.report_index import NotebookEntry, write_index

    entries = [
        NotebookEntry(
            p.stem,
            out / f"{p.stem}.html",
            cpu_s=timings.get(p.name),
            full=ROOT / "reports" / f"{p.stem}.html",
            status="FAILED" if p.name in failed else "ok",
        ).read()
        for p in NOTEBOOKS
    ]
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    return write_index(entries, out, wall_s=wall, cpu_s=cpu.ru_utime + cpu.ru_stime)


def check_offline(reports: list[Path]) -> list[str]:
    """Each report opened in headless Chromium with the network blocked: under 8 MB, every
    figure and explorer snapshot drawn (skipped, and said so, without chromium)."""
    from specviz.views.offline import check_reports

    if not reports:
        return []
    if shutil.which("chromium") is None:
        print("offline check skipped: no chromium on PATH (apt-get install chromium)")
        return []
    print(f"== {len(reports)} reports opened offline in Chromium ==", flush=True)
    bad = []
    for check in check_reports(reports):
        print(f"{'ok' if check.ok else 'FAILED':<6} {check}", flush=True)
        if not check.ok:
            bad.append(f"{check.path} (offline)")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--out", default="reports/demo")
    ap.add_argument("--skip-demo", action="store_true", help="notebooks only")
    args = ap.parse_args()
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    if not args.skip_demo:
        print("== specviz demo (default pair, kernels chosen for this host) ==", flush=True)
        if subprocess.run([sys.executable, "-m", "specviz", "demo"], cwd=ROOT).returncode:
            print("specviz demo failed", file=sys.stderr)
            return 1
        print(f"== demo done in {time.perf_counter() - t_start:.0f} s ==", flush=True)
    print(f"== {len(NOTEBOOKS)} notebooks at demo size, {args.jobs} at a time ==", flush=True)
    failed, timings = [], {}
    t_notebooks = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(nbconvert, p, out) for p in longest_first(NOTEBOOKS, out)]
        for done, future in enumerate(as_completed(futures), 1):
            path, secs, cpu, rc, err = future.result()
            timings[path.name] = cpu
            html = out / (path.stem + ".html")
            size = f"{html.stat().st_size / 2**20:.1f} MB" if rc == 0 and html.exists() else "-"
            status = "ok" if rc == 0 else "FAILED"
            print(f"[{done:2d}/{len(NOTEBOOKS)}] {path.name:<42} {status:<6} {secs:5.0f} s wall "
                  f"{cpu:5.0f} s CPU  report {size}", flush=True)  # fmt: skip
            if rc:
                failed.append(path.name)
                print(err, file=sys.stderr)
    print(f"== notebooks: {time.perf_counter() - t_notebooks:.0f} s wall, "
          f"{sum(timings.values()):.0f} s CPU ==", flush=True)  # fmt: skip
    tmp = out / "timings.json.tmp"  # the next run's order (atomic: a partial file is never read)
    tmp.write_text(json.dumps(timings, indent=1))
    tmp.replace(out / "timings.json")
    reports = [out / (p.stem + ".html") for p in NOTEBOOKS if p.name not in failed]
    failed += check_offline(reports)
    wall = time.perf_counter() - t_start
    index = write_index(out, timings, failed, wall)
    peak = max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
               resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # fmt: skip
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"\nmake demo: {wall / 60:.1f} min wall time, "
          f"{(cpu.ru_utime + cpu.ru_stime) / 60:.1f} min CPU, peak RSS {peak / 2**30:.1f} GiB "
          f"(largest process); open {index}")  # fmt: skip
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
