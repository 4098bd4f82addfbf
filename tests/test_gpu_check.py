"""CPU smoke test of benchmarks/gpu_check.py, the prepared check for a lent CUDA GPU: the
whole script in ``--tiny`` mode writes a summary and every CSV with its columns, and the
exact-law p-values land on the right side of their thresholds."""

from __future__ import annotations

import csv
import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"

pytestmark = pytest.mark.slow


@functools.cache
def _module():
    """The script as a module (for its section and column names); registered before it runs,
    as its dataclasses need."""
    spec = importlib.util.spec_from_file_location("_gpu_check_script", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out, json.loads((out / "summary.json").read_text()), proc.stdout


def _rows(path: Path) -> tuple[list[str], list[dict]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def test_every_section_ran(tiny_run):
    _, summary, stdout = tiny_run
    gc = _module()
    assert summary["finished"] is True
    assert list(summary["sections"]) == list(gc.SECTIONS)
    for name, rec in summary["sections"].items():
        assert rec["status"] == "ok", (name, rec)
        assert rec["seconds"] >= 0
    # --tiny skips the compiled mode by design, and says so
    assert summary["sections"]["static_compile"]["skipped_parts"] == [
        "static+compile: --tiny skips torch.compile"
    ]
    env = summary["environment"]
    assert env["torch"] and env["device"] == "cpu" and "transformers" in env
    assert "gamma \\ batch" in stdout  # the ratios table


def test_csvs_have_their_columns(tiny_run):
    out, summary, _ = tiny_run
    gc = _module()
    for name, (filename, fields) in gc.CSV.items():
        path = out / filename
        assert summary["paths"][name] == str(path)
        header, rows = _rows(path)
        assert header == fields, name
        assert rows, name


def test_greedy_identity_rows(tiny_run):
    out, _, _ = tiny_run
    _, rows = _rows(out / "greedy_identity.csv")
    assert {r["system"] for r in rows} == {
        "autoregressive",
        "spec_early_exit24",
        "spec_prompt_lookup",
    }
    assert len(rows) == 3 * 2  # 2 prompts
    assert all(r["verdict"] in ("identical", "numerics") for r in rows)
    assert all(int(r["new_tokens"]) > 0 for r in rows)


def test_exact_law_pvalues(tiny_run):
    out, _, _ = tiny_run
    _, rows = _rows(out / "exact_law.csv")
    by = {r["verifier"]: r for r in rows}
    assert float(by["lossless"]["pvalue"]) > 1e-3
    assert float(by["residual_from_target"]["pvalue"]) < 1e-6
    for r in rows:
        assert int(r["n_samples"]) == 2000
        assert r["passed"] == "True"
        assert float(r["seconds"]) > 0


def test_gamma_batch_grid(tiny_run):
    out, _, _ = tiny_run
    _, rows = _rows(out / "gamma_batch.csv")
    assert {(int(r["gamma"]), int(r["batch"])) for r in rows} == {
        (g, b) for g in (1, 2) for b in (1, 2)
    }
    for r in rows:
        assert float(r["speedup"]) > 0
        assert int(r["model_calls"]) > 0
        assert float(r["mean_accepted_per_call"]) >= 0


def test_static_compile_rows(tiny_run):
    out, _, _ = tiny_run
    _, rows = _rows(out / "static_compile.csv")
    ran = [r for r in rows if r["status"] == "ok"]
    assert {r["mode"] for r in ran} == {"eager", "static"}
    assert all(r["tokens_equal_eager"] == "True" for r in ran)
    skipped = [r for r in rows if r["status"] == "skipped"]
    assert {r["mode"] for r in skipped} == {"static+compile"}
    assert all(r["reason"] for r in skipped)


def test_cuda_without_a_gpu_says_how_to_smoke_test(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU, even on a GPU machine
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 2
    assert "--device cpu --tiny" in proc.stderr
