"""The bug zoo's shipped mistakes (issue 25): each member's stated law is what its code does,
each is caught at its stated sample size, each runs by name in the engine and in
``consistency_check``, and the lossless block verifier is lossless.

- law vs code: 3,000 draws of each member's stated outcome through its own verifier, GOF
  against the exact (or simulated) law at alpha = 1e-3;
- caught at the stated size: 10 seeded replicates at ``n_to_detect`` (90% power at
  alpha = 0.01), at least 7 rejected (if the 90% claim holds, fewer happens with p = 1.3%);
- the block verifier: exact enumeration (every position's law is p) and the engine.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

import specviz as sv
from specviz.checks.consistency import consistency_check
from specviz.effects.shipped import sample_shipped, shipped_effects, shipped_law
from specviz.stats import goodness_of_fit
from specviz.verification.base import VERIFIERS, get_verifier, verify_lossless
from specviz.verification.block import block_thresholds, verify_block
from specviz.verification.shipped import SHIPPED_ZOO, permuted_row_offsets, shipped_verifier

pytestmark = pytest.mark.usefixtures("one_thread")

BROKEN = [name for name, spec in SHIPPED_ZOO.items() if not spec.lossless]
TOY_T, TOY_D = sv.toy_pair(5, 2, seed=0)


def test_members_resolve_by_name_and_stay_out_of_the_first_wing():
    for name in SHIPPED_ZOO:
        assert get_verifier(name, greedy=False).name == name
        assert name not in VERIFIERS  # the first wing's tables state one-position rules only
    assert get_verifier("ensemble:0.25", greedy=False).name == "ensemble:0.25"
    assert "0.25" in get_verifier("ensemble:0.25", greedy=False).description
    assert get_verifier("quantized_uniform:11", greedy=False).name == "quantized_uniform:11"
    for bad, msg in [
        ("ensemble:abc", "must be a number"),
        ("ensemble:1.5", "in \\[0, 1\\]"),
        ("quantized_uniform:x", "integer"),
        ("quantized_uniform:1", ">= 2"),
        ("one_position_late:3", "takes no parameter"),
    ]:
        with pytest.raises(ValueError, match=msg):
            get_verifier(bad, greedy=False)
    table = shipped_effects()
    assert set(table.index) == set(SHIPPED_ZOO)
    assert table.loc["block_verify", "tv"] == 0.0
    assert (table.loc[BROKEN, "tv"] > 0.005).all(), table.tv


@pytest.mark.parametrize("name", list(SHIPPED_ZOO))
def test_the_stated_law_is_what_the_code_does(name):
    law = shipped_law(name)
    counts = sample_shipped(name, 3000, seed=1)
    assert goodness_of_fit(counts, law.law).pvalue > 1e-3, (name, counts, law.law)


@pytest.mark.parametrize("name", BROKEN)
def test_caught_at_its_stated_sample_size(name):
    law = shipped_law(name)
    n = int(law.n_to_detect)
    assert n <= 3000, (name, n)
    caught = sum(
        goodness_of_fit(sample_shipped(name, n, seed=100 + r), law.expected).pvalue < 0.01
        for r in range(10)
    )
    assert caught >= 7, (name, n, caught)


def test_ensemble_bias_is_exactly_one_minus_w_times_tv():
    s = shipped_law("ensemble").setting
    for w in (0.0, 0.3, 0.5, 0.9):
        law = shipped_law(f"ensemble:{w}")
        tv_pq = 0.5 * np.abs(s.p_a[0] - s.q_a[0]).sum()
        assert law.tv == pytest.approx((1 - w) * tv_pq, abs=1e-12)


def test_block_verification_is_lossless_exactly_and_accepts_more():
    """Enumerate every draft chain (V = 4, k = 3) and every tau: each position's law is p_j,
    and the expected accepted count is at least token verification's (Sun et al. Thm 2)."""
    rng = np.random.default_rng(3)
    V, k = 4, 3
    z = rng.standard_normal((k + 1, V)) * 1.5
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    q = np.exp(z[:k] + rng.standard_normal((k, V))) / np.exp(z[:k] + rng.standard_normal((k, V))).sum(-1, keepdims=True)  # fmt: skip
    q = q / q.sum(-1, keepdims=True)
    pt, qt = torch.tensor(p), torch.tensor(q)
    emitted = np.zeros((k + 1, V))
    block_len = 0.0
    for xs in itertools.product(range(V), repeat=k):
        w = float(np.prod([q[i, x] for i, x in enumerate(xs)]))
        rho, h = (a.numpy() for a in block_thresholds(torch.tensor(xs), qt, pt))
        for tau in range(k + 1):  # P(tau) = h_tau prod_{j > tau} (1 - h_j), h_0 = 1
            pr = (h[tau - 1] if tau else 1.0) * np.prod(1 - h[tau:])
            if pr == 0.0:
                continue
            block_len += w * pr * tau
            for j in range(tau):
                emitted[j, xs[j]] += w * pr
            r = p[k] if tau == k else np.clip(rho[tau] * p[tau] - q[tau], 0, None)
            emitted[tau] += w * pr * r / r.sum()
    for j in range(k + 1):
        assert np.allclose(emitted[j] / emitted[j].sum(), p[j], atol=1e-12), j
    beta = np.minimum(p[:k], q).sum(-1)  # token verification: E[accepted] = sum of prefix products
    assert block_len >= np.cumprod(beta).sum() - 1e-12


def test_block_rules_agree_with_token_verification_at_one_draft():
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    p = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    q = torch.tensor([[0.2, 0.7, 0.1]])
    for _ in range(50):
        a = verify_block(torch.tensor([1]), q, p, g1)
        b = SHIPPED_ZOO["block_verify_cumprod"].verify(torch.tensor([1]), q, p, g2)
        assert (a.num_accepted, a.next_token) == (b.num_accepted, b.next_token)


def test_ragged_row_map_is_the_identity_at_batch_1_and_equal_lengths():
    assert permuted_row_offsets([3]) == [0]
    assert permuted_row_offsets([2, 2, 2]) == [0, 2, 4]
    assert permuted_row_offsets([1, 3, 2]) == [5, 0, 3]
    rows = SHIPPED_ZOO["ragged_row_permutation"].verify_rows
    p = torch.softmax(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), -1)
    q = torch.softmax(torch.randn(2, 4, generator=torch.Generator().manual_seed(1)), -1)
    toks = torch.tensor([1, 2])
    for seed in range(20):
        ga, gb = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        (v,) = rows([toks], [q], [p], [ga])
        w = verify_lossless(toks, q, p, gb)
        assert (v.num_accepted, v.next_token) == (w.num_accepted, w.next_token)
    # batch 1 through the serial engine: identical to the lossless rule, token for token
    kw = dict(max_new_tokens=6, gamma=3, do_sample=True, seed=11)
    a = sv.speculative_generate(TOY_T, TOY_D, [0], verifier="ragged_row_permutation", **kw)
    b = sv.speculative_generate(TOY_T, TOY_D, [0], verifier="lossless", **kw)
    assert a.new_tokens == b.new_tokens


@pytest.mark.parametrize(
    "name",
    ["one_position_late", "softmax_residual", "rng_reset_each_round", "stale_q",
     "independent_target_ratio", "block_verify_cumprod", "ensemble"],
)  # fmt: skip
def test_consistency_check_flags_them_by_name(name):
    report = consistency_check(
        TOY_T, TOY_D, [[0]], n_samples=1000, max_new_tokens=4, gamma=3, verifier=name,
        seed=0, batch_size=1000, n_boot=20, progress=False,
    )  # fmt: skip
    assert report.verdict == "inconsistent", report.summary()


def test_consistency_check_sees_the_ragged_leak_and_passes_block_verification():
    """gamma 3 and 4-token continuations: the second step's rows draft 2, 1 or 0 tokens
    (whatever room is left), so the batch is ragged and the permuted row map leaks."""
    kw = dict(n_samples=3000, max_new_tokens=4, gamma=3, seed=0, batch_size=1000, n_boot=20, progress=False)  # fmt: skip
    ragged = consistency_check(TOY_T, TOY_D, [[0]], verifier="ragged_row_permutation", **kw)
    assert ragged.verdict == "inconsistent", ragged.summary()
    block = consistency_check(TOY_T, TOY_D, [[0]], verifier="block_verify", **kw)
    assert block.verdict == "consistent", block.summary()


def test_every_member_runs_in_the_batched_engine():
    for name in SHIPPED_ZOO:
        res = sv.speculative_generate_batch(
            TOY_T, TOY_D, [0], num_sequences=16, gamma=3, max_new_tokens=5, seed=0,
            verifier=name, do_sample=True,
        )  # fmt: skip
        assert all(len(s) == 5 for s in res.sequences), name


def test_stale_q_state_is_per_stream_and_weak():
    spec = shipped_verifier("stale_q")
    p = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    q = torch.tensor([[1.0, 0.0]])
    g = torch.Generator().manual_seed(0)
    spec.verify(torch.tensor([0]), q, p, g)
    from specviz.verification.shipped import _STALE_Q

    assert g in _STALE_Q
    del g
    import gc

    gc.collect()
    assert len([k for k in _STALE_Q.keys()]) <= 1  # only live generators keep a buffer
    assert math.isfinite(shipped_law("stale_q").tv)
