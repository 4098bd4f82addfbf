"""scripts/audit_sizes.py: the samples per arm an audit would need to see a TV at a position,
from its raw samples (no model). Synthetic sequences with fixed seeds; seconds."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parent.parent / "scripts" / "audit_sizes.py"
_spec = importlib.util.spec_from_file_location("audit_sizes", _PATH)
sizes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sizes)


def _seqs(rng: np.random.Generator, n: int, second: int) -> list[tuple[int, ...]]:
    """First token from 2 values, second from ``second`` values (uniform), third constant."""
    return [(int(rng.integers(2)), int(rng.integers(second)), 7) for _ in range(n)]


def test_needed_n_agrees_with_the_power_statement():
    rng = np.random.default_rng(0)
    a, b = _seqs(rng, 400, 4), _seqs(rng, 400, 4)
    at = sizes.needed_n(a, b, 2, tv=0.05)
    assert at["outcomes"] == 8
    # inverting: the size needed for the TV these 400 samples detect is about 400
    back = sizes.needed_n(a, b, 2, tv=at["min_detectable_tv"])
    assert 0.8 * 400 <= back["n_needed"] <= 1.2 * 400
    # a smaller TV needs more samples, about 1/tv^2
    assert at["n_needed"] > 400
    assert at["n_needed"] == pytest.approx(400 * (at["min_detectable_tv"] / 0.05) ** 2, rel=0.3)


def test_more_outcomes_need_more_samples():
    # the control: the same test on a law with many more outcomes at position 2 must need
    # more samples for the same TV -- a sizing that ignored the law would not see it
    rng = np.random.default_rng(1)
    few = sizes.needed_n(_seqs(rng, 500, 2), _seqs(rng, 500, 2), 2, tv=0.05)
    many = sizes.needed_n(_seqs(rng, 500, 60), _seqs(rng, 500, 60), 2, tv=0.05)
    assert many["outcomes"] > 4 * few["outcomes"]
    assert many["n_needed"] > 1.3 * few["n_needed"]
    # a position with one outcome (the constant first three tokens' third... here position 1
    # of a constant stream) has nothing to size
    const = sizes.needed_n([(5,)] * 50, [(5,)] * 50, 1)
    assert const["outcomes"] == 1 and math.isinf(const["n_needed"])


def test_bad_input_is_refused():
    a = [(1, 2)] * 10
    with pytest.raises(ValueError, match="tv must be in"):
        sizes.needed_n(a, a, 1, tv=0)
    with pytest.raises(ValueError, match="1-based"):
        sizes.needed_n(a, a, 0)
    with pytest.raises(ValueError, match="both arms"):
        sizes.needed_n(a, [], 1)


def test_audit_sizes_reads_a_raw_file(tmp_path: Path):
    rng = np.random.default_rng(2)
    folder = tmp_path / "demo"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({"n_samples": 100}))
    lines = [json.dumps({"kind": "header", "key": "x"})]
    for arm in "ab":
        for j, s in enumerate(_seqs(rng, 120, 3)):  # 20 beyond n_samples: not counted
            err = "boom" if j == 3 else None  # a failed request: not an outcome of the law
            lines.append(json.dumps({"kind": "sample", "arm": arm, "prompt": 0, "index": j,
                                     "tokens": list(s), "error": err}))  # fmt: skip
    (folder / "raw.jsonl").write_text("\n".join(lines) + "\n{damaged\n")
    rows = sizes.audit_sizes(folder)
    assert [r["position"] for r in rows] == [1, 2, 3]
    assert all(r["n"] == 100 for r in rows)
    assert rows[1]["outcomes"] == 6 and rows[2]["outcomes"] == 6
    assert math.isfinite(rows[1]["n_needed"]) and rows[1]["n_needed"] > 100
