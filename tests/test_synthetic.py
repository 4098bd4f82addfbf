"""The LOSSY benchmark-only synthetic verifier, random Llama shapes, and the GPU sweep's logic."""

from __future__ import annotations

import csv
import importlib.util
import math
from pathlib import Path

import pytest
import torch

import specviz as sv
from specviz.fixtures import shapes
from specviz.verification import get_verifier
from specviz.verification import synthetic as S

ROOT = Path(__file__).resolve().parents[1]
PAIR = sv.toy_pair(5, 2, noise=1.0, seed=0)


def _acceptance_observations(rate, n_runs=200, gamma=4):
    """Per evaluated draft position: 1 accepted / 0 the first rejection (causal prefix)."""
    g = torch.Generator().manual_seed(0)
    obs = []
    with pytest.warns(S.SyntheticAcceptanceWarning):
        spec = S.synthetic_verifier(rate)
    for _ in range(n_runs):
        r = sv.speculative_generate(
            *PAIR, [0], gamma=gamma, max_new_tokens=20, do_sample=True, seed=g, verifier=spec
        )
        for d, a in zip(r.drafted_counts, r.accepted_counts, strict=True):
            obs += [1] * a + ([0] if a < d else [])
    return obs


def test_acceptance_rate_is_the_requested_one():
    obs = _acceptance_observations(0.6)
    n, mean = len(obs), sum(obs) / len(obs)
    z = lambda p: (mean - p) / math.sqrt(p * (1 - p) / n)  # noqa: E731
    assert abs(z(0.6)) < 3.29  # two-sided, false-positive rate 0.1%
    assert abs(z(0.7)) > 5  # negative control: a wrong rate is rejected


def test_synthetic_is_lossy_and_kept_out_of_the_zoo():
    assert not any(name.startswith("synthetic") for name in sv.VERIFIERS)
    with pytest.warns(S.SyntheticAcceptanceWarning, match="LOSSY"):
        spec = get_verifier("synthetic:0.9", greedy=False)
    assert spec.lossless is False and spec.name == "synthetic(0.9)"
    with pytest.warns(S.SyntheticAcceptanceWarning):
        assert get_verifier("synthetic", greedy=True).name == f"synthetic({S.DEFAULT_RATE:g})"
    # Lossy indeed: with acceptance 1 the output is the *draft's* greedy text, not the target's.
    with pytest.warns(S.SyntheticAcceptanceWarning):
        r = sv.speculative_generate(*PAIR, [0], gamma=4, max_new_tokens=12, verifier="synthetic:1")
    target_text = sv.autoregressive_generate(PAIR[0], [0], max_new_tokens=12).new_tokens
    draft_text = sv.autoregressive_generate(PAIR[1], [0], max_new_tokens=12).new_tokens
    assert target_text != draft_text
    assert r.new_tokens[:4] == draft_text[:4] != target_text[:4]


@pytest.mark.parametrize("bad", ["synthetic:1.5", "synthetic:x", "synthetic:-0.1"])
def test_bad_synthetic_rates(bad):
    with pytest.raises(ValueError, match="synthetic"):
        get_verifier(bad, greedy=False)


def test_random_llama_shapes():
    shape = shapes.LLAMA_SHAPES["tiny"]
    state = torch.random.get_rng_state()
    m1 = shapes.random_llama("tiny", seed=3)
    assert torch.equal(state, torch.random.get_rng_state())  # caller's RNG untouched
    m2 = shapes.random_llama("tiny", seed=3)
    assert sum(p.numel() for p in m1.parameters()) == shape.num_parameters()
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters(), strict=True))
    assert shapes.LLAMA_SHAPES["1b"].num_parameters() == pytest.approx(1.236e9, rel=0.01)
    assert shapes.LLAMA_SHAPES["8b"].num_parameters() == pytest.approx(8.03e9, rel=0.01)
    with pytest.raises(MemoryError, match="bfloat16"):
        shapes.random_llama("8b", dtype=torch.float32, max_bytes=24 * 2**30)
    assert shapes.llama_config("8b", num_layers=4).num_hidden_layers == 4
    with pytest.raises(ValueError, match="unknown Llama shape"):
        shapes.llama_config("70b")


def test_engine_runs_on_random_models_with_synthetic_acceptance():
    target, draft = shapes.random_llama("tiny", seed=0), shapes.random_llama("tiny-draft", seed=1)
    with pytest.warns(S.SyntheticAcceptanceWarning):
        r = sv.speculative_generate(
            target, draft, [1, 2, 3], gamma=4, max_new_tokens=30, verifier="synthetic:0.5", seed=0
        )
    assert len(r.new_tokens) == 30
    assert 0 < sum(r.accepted_counts) < sum(r.drafted_counts)


def _gpu_sweep():
    spec = importlib.util.spec_from_file_location("gpu_sweep", ROOT / "benchmarks" / "gpu_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_sweep_fails_clearly_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(SystemExit, match="CUDA is not available"):
        _gpu_sweep().main(["--device", "cuda"])


def test_gpu_sweep_logic_on_cpu(tmp_path):
    out = _gpu_sweep().main(["--device", "cpu", "--tiny", "--out", str(tmp_path)])
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert len(rows) == 2 * 2 * 2  # gamma x batch x acceptance
    assert {r["batch"] for r in rows} == {"1", "2"}
    for r in rows:
        assert float(r["speedup"]) > 0 and float(r["c"]) > 0
        assert float(r["new_tokens"]) == 8 * int(r["batch"])
    hi = [float(r["measured_accept"]) for r in rows if r["accept_rate"] == "0.9"]
    lo = [float(r["measured_accept"]) for r in rows if r["accept_rate"] == "0.5"]
    assert sum(hi) / len(hi) > sum(lo) / len(lo)
    assert (out / "environment.json").exists()
