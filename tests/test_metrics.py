"""Serving metrics computed from GenerationResult/Trace: hand-checked values and invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import specviz as sv
from specviz.core.trace import Step, Trace
from specviz.decoding.serial import GenerationResult
from specviz.perf import metrics as M


def _result(token_times, steps, total):
    tr = Trace(tuple(steps), {"kind": "speculative"})
    new = [t for s in steps for t in s.emitted]
    return GenerationResult(
        new,
        tr,
        3,
        len(steps),
        tuple(s.accepted for s in steps),
        tuple(s.drafted for s in steps),
        tuple(token_times),
        total,
        0,
    )


def test_hand_computed_request():
    # Step 1: 3 drafted, 2 accepted (+1 corrected); step 2: 3 drafted, 3 accepted (+1 bonus).
    steps = [
        Step(0, 0, 3, 2, (5, 6, 7), "corrected", 0.03, 0.10, 0.13),
        Step(1, 3, 3, 3, (8, 9, 10, 11), "bonus", 0.03, 0.10, 0.26),
    ]
    r = _result([0.13] * 3 + [0.26] * 4, steps, 0.30)
    m = M.request_metrics(r, target_step_time=0.05)
    assert m.new_tokens == 7 and m.target_calls == 2
    assert m.ttft == pytest.approx(0.13)
    assert m.tokens_per_second == pytest.approx(7 / 0.30)
    assert m.target_calls_per_token == pytest.approx(2 / 7)
    assert m.acceptance_rate == pytest.approx(5 / 6)
    assert m.mean_accepted_length == pytest.approx(3.5)
    assert m.itl == pytest.approx((0, 0, 0.13, 0, 0, 0))
    assert m.itl_p50 == 0.0 and m.itl_p99 == pytest.approx(0.13 * 0.95 + 0 * 0.05, rel=0.2)
    assert m.draft_cost_ratio == pytest.approx((0.06 / 6) / 0.05)
    assert m.overhead_time == pytest.approx(0.30 - 0.06 - 0.20)
    # Without a plain step time, c uses the mean verify call as the target step (lower bound).
    assert M.request_metrics(r).draft_cost_ratio == pytest.approx((0.06 / 6) / 0.10)
    assert M.compute_per_token(m, c=0.2) == pytest.approx((2 + 0.2 * 6) / 7)


def test_acceptance_counts_only_the_causal_prefix():
    """A draft that equals the target's token *after* a rejection was never used."""
    target, draft = sv.toy_pair(5, 2, noise=1.0, seed=0)
    r = sv.speculative_generate(
        target, draft, [0], gamma=4, max_new_tokens=60, seed=3, do_sample=True
    )
    m = M.request_metrics(r)
    df = r.trace.to_dataframe()
    drafted = df[df.draft_token >= 0]
    # The naive count: every drafted token equal to the final text at its position.
    naive = sum(
        int(tok == r.new_tokens[pos])
        for tok, pos in zip(drafted.draft_token, drafted.position, strict=True)
        if pos < len(r.new_tokens)
    )
    assert m.accepted == int(drafted.accepted.sum()) == sum(r.accepted_counts)
    assert naive > m.accepted  # lucky matches after a rejection exist here and are not counted


def test_percentile_matches_numpy():
    rng = np.random.default_rng(0)
    xs = rng.exponential(size=101).tolist()
    for q in (0, 50, 90, 99, 100):
        assert M.percentile(xs, q) == pytest.approx(np.percentile(xs, q))
    assert math.isnan(M.percentile([], 50))
    with pytest.raises(ValueError, match="percentile"):
        M.percentile(xs, 101)


def test_aggregate_pools_requests():
    target, draft = sv.toy_pair(5, 2, seed=0)
    ms = [
        M.request_metrics(
            sv.speculative_generate(
                target, draft, [0], gamma=3, max_new_tokens=30, seed=s, do_sample=True
            )
        )
        for s in range(4)
    ]
    agg = M.aggregate(ms)
    assert agg.requests == 4 and agg.new_tokens == 120
    assert agg.target_calls_per_token == pytest.approx(sum(m.target_calls for m in ms) / 120)
    assert agg.acceptance_rate == pytest.approx(
        sum(m.accepted for m in ms) / sum(m.drafted for m in ms)
    )
    assert agg.itl_p90 == pytest.approx(M.percentile([g for m in ms for g in m.itl], 90))
    with pytest.raises(ValueError, match="at least one"):
        M.aggregate([])


def test_plain_run_metrics():
    target, _ = sv.toy_pair(5, 2, seed=0)
    m = M.request_metrics(sv.autoregressive_generate(target, [0], max_new_tokens=10))
    assert m.target_calls_per_token == 1.0 and m.drafted == 0
    assert math.isnan(m.acceptance_rate) and math.isnan(m.draft_cost_ratio)


def test_memory_of_smollm2(smollm2):
    model, _ = smollm2
    cfg = model.config
    # 30 layers x 3 KV heads x 64 dims x K and V x 4 bytes.
    assert M.kv_cache_bytes_per_token(cfg, torch.float32) == 2 * 30 * 3 * 64 * 4
    wb = M.weights_bytes(model)
    assert wb == pytest.approx(134.5e6 * 4, rel=0.02)  # tied embeddings counted once
    rep = M.memory_report(model, sv.EarlyExitDrafter(model, 10), context_tokens=1000, gamma=4)
    assert rep.draft_weights_bytes == 0  # early exit shares the target's weights
    assert rep.draft_kv_bytes_per_token == 2 * 10 * 3 * 64 * 4
    assert rep.kv_bytes_at_context == 1004 * (2 * 40 * 3 * 64 * 4)
    assert rep.peak_rss_bytes > wb


def test_cost_per_token():
    assert M.cost_per_token(10.0, 3.6) == pytest.approx(1e-4)
    assert M.cost_per_token(10.0, 3.6, concurrency=4) == pytest.approx(2.5e-5)
    with pytest.raises(ValueError):
        M.cost_per_token(0.0, 1.0)
