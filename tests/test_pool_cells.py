"""benchmarks/pool_cells.py: per-cell ratios pooled over runs (no model runs)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("pool_cells", ROOT / "benchmarks" / "pool_cells.py")
pool_cells = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pool_cells)


def _run(ratios: list[float]) -> str:
    lines = []
    for i, r in enumerate(ratios):
        lines.append(f"  [repeat 0 prompt {i}] hf_plain: 10 tokens in 10.00 s")
        lines.append(f"  [repeat 0 prompt {i}] sv_plain: 10 tokens in {10 / r:.4f} s")
    return "\n".join(lines) + "\npair: toy\n"


def test_pooled_geometric_mean_and_interval():
    runs = pool_cells.runs(_run([1.1, 1.2]) + _run([1.0]))
    assert [len(r) for r in runs] == [2, 1]  # one dict per run, split at its summary line
    n, gm, lo, hi = pool_cells.pooled(runs, "sv_plain", "hf_plain")
    assert n == 3
    assert gm == pytest.approx(math.exp((math.log(1.1) + math.log(1.2)) / 3), rel=1e-3)
    assert lo < gm < hi


def test_interval_excludes_one_only_when_the_cells_agree():
    # control: the same mean ratio with spread cells must not exclude 1.0
    _, _, lo_tight, _ = pool_cells.pooled(
        pool_cells.runs(_run([1.1, 1.11, 1.09])), "sv_plain", "hf_plain"
    )
    _, _, lo_wide, _ = pool_cells.pooled(
        pool_cells.runs(_run([0.8, 1.5, 1.05])), "sv_plain", "hf_plain"
    )
    assert lo_tight > 1.0 > lo_wide


def test_one_cell_is_refused():
    with pytest.raises(SystemExit, match="fewer than 2 cells"):
        pool_cells.pooled(pool_cells.runs(_run([1.1])), "sv_plain", "hf_plain")


def test_committed_qwen_stock_runs_parse():
    path = ROOT / "benchmarks" / "results" / "vs_transformers_qwen_stock_2026-12-06.txt"
    runs = pool_cells.runs(path.read_text())
    assert [len(r) for r in runs] == [1, 4, 6]
