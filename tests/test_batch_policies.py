"""Gamma policies in the batched engine: a one-row batch reproduces the serial engine with
the same policy, many rows stay lossless (exact law on a toy, with a negative control), and
AcceptanceEMA falls back to plain decoding when the batch is large."""

from __future__ import annotations

import pytest
from _exact_law import batched_law_pvalue

import specviz as sv
from specviz.decoding import autoregressive_generate_batch, speculative_generate_batch
from specviz.drafting import early_exit_model
from specviz.drafting import policies as P
from specviz.prompts import render_prompt

pytestmark = pytest.mark.usefixtures("one_thread")

TARGET, DRAFT = sv.toy_pair(5, 2, noise=1.0, seed=0)
# laws that depend on the last 4 tokens: a token fed twice to the draft changes its logits
LONG_TARGET, LONG_DRAFT = sv.toy_pair(5, 4, noise=1.0, seed=0)


class _Alternating(P.ConstantGamma):
    """Changes gamma every call, plain steps (0) included: the draft must catch up."""

    def __init__(self) -> None:
        super().__init__(2)
        self.name = "alternating"
        self.calls = 0

    def start(self) -> None:
        self.calls = 0

    def next_gamma(self) -> int:
        self.calls += 1
        return (0, 1, 3, 0, 0, 2)[self.calls % 6]


POLICIES = {
    "heuristic": lambda: P.HeuristicGamma(1, max_gamma=3),
    "confidence": lambda: P.ConfidenceStop(3, threshold=0.5),
    "confidence-min0": lambda: P.ConfidenceStop(3, threshold=0.6, min_tokens=0),
    # c fixed: a c measured from wall times would make runs differ
    "ema": lambda: P.AcceptanceEMA(3, c=0.3, prior=0.5),
    "ema-fallback": lambda: P.AcceptanceEMA(3, c=0.9, prior=0.3, probe_every=3),
    "alternating": _Alternating,
    "batch-fallback": lambda: P.BatchFallback(3, max_batch=1),
}
SETTINGS = {
    "T1": dict(do_sample=True),
    "T0.7-k3": dict(do_sample=True, temperature=0.7, top_k=3),
    "greedy": dict(),
}


@pytest.mark.parametrize("kw", SETTINGS.values(), ids=list(SETTINGS))
@pytest.mark.parametrize("name", list(POLICIES))
def test_one_row_batch_equals_the_serial_engine(name, kw):
    for seed in range(10):
        common = dict(max_new_tokens=16, seed=seed, **kw)
        pair = (LONG_TARGET, LONG_DRAFT)
        r = sv.speculative_generate(*pair, [0, 1], gamma=POLICIES[name](), **common)
        b = speculative_generate_batch(*pair, [[0, 1]], gamma=POLICIES[name](), **common)
        assert b.sequences[0] == r.new_tokens, (name, seed)
        assert b.accepted_counts[0] == r.accepted_counts
        assert b.drafted_counts[0] == r.drafted_counts


@pytest.mark.parametrize(
    "name, verifier, ok",
    [(n, "lossless", True) for n in ("heuristic", "confidence", "ema-fallback", "alternating")]
    + [("heuristic", "residual_from_target", False)],
)
def test_batched_rows_with_a_policy_follow_the_exact_law(name, verifier, ok):
    """8,000 rows of one prompt, the policy shared by the batch (its gamma depends on the
    other rows' past). Exact 3-token law; alpha 1e-3 (fixed seeds), control p < 1e-6."""
    p = batched_law_pvalue(TARGET, DRAFT, POLICIES[name], verifier, chunks=4)
    assert (p > 1e-3) if ok else (p < 1e-6), p


def test_ema_falls_back_while_the_batch_is_large():
    prompts = [[0, 1], [3], [2, 2, 4, 1], [1, 0, 3], [4], [2]]
    policy = P.AcceptanceEMA(3, c=0.1, prior=0.9, max_batch=3)
    kw = dict(max_new_tokens=8, seed=1)
    b = speculative_generate_batch(TARGET, DRAFT, prompts, gamma=policy, **kw)
    ar = autoregressive_generate_batch(TARGET, prompts, **kw)
    assert b.sequences == ar.sequences  # greedy: identical to plain decoding either way
    # 6 distinct rows > max_batch: every call is a plain step until rows leave (none do early)
    assert all(set(d) == {0} for d in b.drafted_counts)
    assert policy.fallbacks == len(b.drafted_counts[0])
    small = P.AcceptanceEMA(3, c=0.1, prior=0.9, max_batch=8)
    b8 = speculative_generate_batch(TARGET, DRAFT, prompts, gamma=small, **kw)
    assert b8.sequences == ar.sequences
    assert sum(map(sum, b8.drafted_counts)) > 0 and b8.model_calls < b.model_calls


def test_batch_fallback_decodes_plainly_above_max_batch():
    prompts = [[0, 1], [3], [2, 2, 4, 1], [1, 0, 3]]
    kw = dict(max_new_tokens=8, seed=1)
    ar = autoregressive_generate_batch(TARGET, prompts, **kw)
    big = P.BatchFallback(3, max_batch=3)
    b = speculative_generate_batch(TARGET, DRAFT, prompts, gamma=big, **kw)
    assert b.sequences == ar.sequences
    assert all(set(d) == {0} for d in b.drafted_counts) and big.fallbacks == b.model_calls
    ok = P.BatchFallback(3, max_batch=4)
    b4 = speculative_generate_batch(TARGET, DRAFT, prompts, gamma=ok, **kw)
    assert b4.sequences == ar.sequences
    assert ok.fallbacks == 0 and all(d[0] == 3 for d in b4.drafted_counts)
    with pytest.raises(ValueError, match="max_batch"):
        P.BatchFallback(3, max_batch=0)


def test_bad_policy_gamma_is_refused():
    class Negative(P.ConstantGamma):
        def next_gamma(self) -> int:
            return -1

    with pytest.raises(ValueError, match="policy gamma"):
        speculative_generate_batch(TARGET, DRAFT, [[0]], gamma=Negative(1), max_new_tokens=3)
    with pytest.raises(ValueError, match="gamma must be"):
        speculative_generate_batch(TARGET, DRAFT, [[0]], gamma="4", max_new_tokens=3)


def test_policies_keep_greedy_identity_on_smollm2(smollm2):
    model, tok = smollm2
    draft = early_exit_model(model, 26)
    prompts = [render_prompt(tok, q) for q in ("List three fruits.", "Say hi.", "2+2=?")]
    kw = dict(max_new_tokens=12, seed=0)
    plain = autoregressive_generate_batch(model, prompts, **kw)
    for policy in (
        P.HeuristicGamma(2, max_gamma=6),
        P.ConfidenceStop(6, threshold=0.5),
        P.AcceptanceEMA(4, prior=0.5, probe_every=2),
    ):
        b = speculative_generate_batch(model, draft, prompts, gamma=policy, **kw)
        assert b.sequences == plain.sequences, policy.name
        r = sv.speculative_generate(model, draft, prompts[0], gamma=policy, **kw)
        assert r.new_tokens == plain.sequences[0]
