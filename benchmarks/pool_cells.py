"""Pool the per-cell ratios of several ``vs_transformers.py`` runs, with an interval.

    .venv/bin/python benchmarks/pool_cells.py benchmarks/results/vs_transformers_qwen_stock_2026-12-06.txt

Each run prints one line per (repeat, prompt, system): ``[repeat r prompt i] name: N tokens in
S s``. The systems of one cell run back to back, so their ratio cancels drift between cells;
this script takes every cell of every run in the given files (a file may hold several runs,
each ending at its ``pair:`` summary line), and prints the geometric mean of the per-cell
ratios with a 95% t interval on the log scale -- what one short run cannot say on a host whose
cells vary by +-10%.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
from pathlib import Path

from scipy import stats

CELL = re.compile(r"\[repeat (\d+) prompt (\d+)\] (\w+): (\d+) tokens in ([\d.]+) s")
PAIRS = [
    ("sv_plain", "hf_plain"),
    ("sv_spec", "hf_assisted"),
    ("sv_spec_notrace", "hf_assisted"),
]


def runs(text: str) -> list[dict[tuple[int, int], dict[str, float]]]:
    """Tokens/s per system per (repeat, prompt) cell, one dict per run in the text."""
    out: list[dict[tuple[int, int], dict[str, float]]] = []
    for block in re.split(r"^pair: .*$", text, flags=re.M):
        cells: dict[tuple[int, int], dict[str, float]] = {}
        for m in CELL.finditer(block):
            cells.setdefault((int(m[1]), int(m[2])), {})[m[3]] = int(m[4]) / float(m[5])
        if cells:
            out.append(cells)
    return out


def pooled(all_runs, a: str, b: str) -> tuple[int, float, float, float]:
    logs = [math.log(c[a] / c[b]) for r in all_runs for c in r.values() if a in c and b in c]
    if len(logs) < 2:
        raise SystemExit(f"fewer than 2 cells with both {a} and {b}")
    mean = statistics.mean(logs)
    half = stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return len(logs), math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    args = ap.parse_args(argv)
    all_runs = [r for f in args.files for r in runs(f.read_text())]
    print(f"{len(all_runs)} runs, {sum(len(r) for r in all_runs)} cells")
    for a, b in PAIRS:
        n, gm, lo, hi = pooled(all_runs, a, b)
        print(f"  {a} / {b}: {n} cells, geometric mean {gm:.3f}x, 95% CI [{lo:.3f}, {hi:.3f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
