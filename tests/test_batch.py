"""Batched decoding with ragged acceptance: each row equals its serial run, and is exact."""

from __future__ import annotations

import pytest
from _exact_law import batched_law_pvalue

import specviz as sv
from specviz.decoding import autoregressive_generate_batch, speculative_generate_batch
from specviz.drafting import early_exit_model
from specviz.prompts import render_prompt

TARGET, DRAFT = sv.toy_pair(5, 2, seed=0)
SETTINGS = [
    dict(do_sample=True),
    dict(do_sample=True, temperature=0.7, top_k=3, top_p=0.9),
    dict(),  # greedy
]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("kw", SETTINGS, ids=["T1", "T0.7-k3-p0.9", "greedy"])
def test_rows_equal_serial_runs_on_toy(kw):
    br = speculative_generate_batch(
        TARGET,
        DRAFT,
        [0, 1],
        num_sequences=12,
        gamma=3,
        max_new_tokens=9,
        seed=100,
        eos_token_id=4,
        **kw,
    )
    for i in range(12):
        r = sv.speculative_generate(
            TARGET, DRAFT, [0, 1], gamma=3, max_new_tokens=9, seed=100 + i, eos_token_id=4, **kw
        )
        assert br.sequences[i] == r.new_tokens
        assert br.accepted_counts[i] == r.accepted_counts
    ar = autoregressive_generate_batch(
        TARGET, [0, 1], num_sequences=5, max_new_tokens=9, seed=3, **kw
    )
    for i in range(5):
        r = sv.autoregressive_generate(TARGET, [0, 1], max_new_tokens=9, seed=3 + i, **kw)
        assert ar.sequences[i] == r.new_tokens


@pytest.mark.parametrize("verifier, ok", [("lossless", True), ("residual_from_target", False)])
def test_batched_continuations_follow_the_exact_law(verifier, ok):
    """20,000 batched rows vs the enumerated law; alpha 1e-3 (fixed seed), control p < 1e-6."""
    p = batched_law_pvalue(TARGET, DRAFT, lambda: 2, verifier, chunks=10)
    assert (p > 1e-3) if ok else (p < 1e-6), p


def test_batch_takes_drafter_objects_and_rows_equal_serial_runs():
    """Prompt lookup through the batched engine: one drafter per group, rows == serial."""
    kw = dict(gamma=3, max_new_tokens=9, do_sample=True, eos_token_id=4)
    br = speculative_generate_batch(
        TARGET, sv.PromptLookupDrafter(), [0, 1, 0, 1], num_sequences=6, seed=3, **kw
    )
    for i in range(6):
        r = sv.speculative_generate(
            TARGET, sv.PromptLookupDrafter(), [0, 1, 0, 1], seed=3 + i, **kw
        )
        assert br.sequences[i] == r.new_tokens
        assert br.accepted_counts[i] == r.accepted_counts


@pytest.mark.parametrize("kw", [dict(), dict(do_sample=True, temperature=0.8, top_k=50)])
def test_rows_equal_serial_runs_on_smollm2(smollm2, kw):
    model, tok = smollm2
    draft = early_exit_model(model, 28)
    ids = render_prompt(tok, "List three fruits.")
    br = speculative_generate_batch(
        model, draft, ids, num_sequences=4, gamma=3, max_new_tokens=10, seed=100, **kw
    )
    for i in range(4):
        r = sv.speculative_generate(
            model, draft, ids, gamma=3, max_new_tokens=10, seed=100 + i, **kw
        )
        assert br.sequences[i] == r.new_tokens
    ar = autoregressive_generate_batch(model, ids, num_sequences=3, max_new_tokens=8, seed=9, **kw)
    for i in range(3):
        r = sv.autoregressive_generate(model, ids, max_new_tokens=8, seed=9 + i, **kw)
        assert ar.sequences[i] == r.new_tokens


TOY_PROMPTS = [[0, 1], [3], [2, 2, 4, 1], [1, 0, 3]]


@pytest.mark.parametrize("kw", SETTINGS, ids=["T1", "T0.7-k3-p0.9", "greedy"])
def test_rows_with_their_own_prompts_equal_serial_runs_on_toy(kw):
    """A list of prompts (as a server batches requests): shorter prompts leave holes, rows
    that finish early leave the batch, and row i still equals its serial run."""
    br = speculative_generate_batch(
        TARGET, DRAFT, TOY_PROMPTS, gamma=3, max_new_tokens=9, seed=7, eos_token_id=4, **kw
    )
    ar = autoregressive_generate_batch(
        TARGET, TOY_PROMPTS, max_new_tokens=9, seed=7, eos_token_id=4, **kw
    )
    for i, prompt in enumerate(TOY_PROMPTS):
        common = dict(max_new_tokens=9, seed=7 + i, eos_token_id=4, **kw)
        r = sv.speculative_generate(TARGET, DRAFT, prompt, gamma=3, **common)
        assert br.sequences[i] == r.new_tokens
        assert br.accepted_counts[i] == r.accepted_counts
        assert ar.sequences[i] == sv.autoregressive_generate(TARGET, prompt, **common).new_tokens
        for res in (br, ar):
            t = res.token_times[i]
            assert len(t) == len(res.sequences[i]) and t == sorted(t) and t[0] > 0


def test_prompt_list_errors():
    with pytest.raises(ValueError, match="num_sequences=3 but 4 prompts"):
        autoregressive_generate_batch(TARGET, TOY_PROMPTS, num_sequences=3, max_new_tokens=2)
    with pytest.raises(ValueError, match="num_sequences is required"):
        speculative_generate_batch(TARGET, DRAFT, [0, 1], max_new_tokens=2)


def test_rows_with_their_own_prompts_equal_serial_runs_on_smollm2(smollm2):
    model, tok = smollm2
    draft = early_exit_model(model, 28)
    prompts = [render_prompt(tok, q) for q in ("List three fruits.", "Say hi.", "2+2=?")]
    kw = dict(do_sample=True, temperature=0.8, top_k=50, max_new_tokens=8, seed=5)
    br = speculative_generate_batch(model, draft, prompts, gamma=3, **kw)
    for i, ids in enumerate(prompts):
        r = sv.speculative_generate(model, draft, ids, gamma=3, **{**kw, "seed": 5 + i})
        assert br.sequences[i] == r.new_tokens
