"""The one decoding core (issue 14): every drafter through the serial and the batched driver.

* a one-row batch equals the serial run, for every drafter (token for token, accepted counts);
* row ``i`` of a seeded batch equals the serial run with ``seed + i`` (session-memory drafters
  excepted by design: batch rows share a suffix drafter's memory);
* the batched path keeps the exact law for every drafter: 20,000 rows of 3-token
  continuations against the enumerated law, chi-square at alpha = 1e-3 with fixed seeds, and
  a broken verifier through the same drafter as the negative control (p < 1e-6);
* greedy identity with the trained head and prompt lookup on SmolLM2, batched and serial.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch

import specviz as sv
from specviz.decoding import speculative_generate_batch
from specviz.drafting import EarlyExitDrafter, ModelDrafter, PromptLookupDrafter
from specviz.drafting.policies import ConfidenceStop, HeuristicGamma
from specviz.drafting.suffix import SuffixDrafter
from specviz.fixtures.llamas import tiny_llama_pair
from specviz.stats import goodness_of_fit

pytestmark = pytest.mark.usefixtures("one_thread")

TOY_T, TOY_D = sv.toy_pair(5, 2, seed=0)
LLAMA_T, LLAMA_D = tiny_llama_pair(7, seed=0, peak=6.0)
SAMPLED = dict(do_sample=True, temperature=0.9, top_k=5)


def _drafters(target, draft):
    """Fresh drafters for one run (drafters hold per-generation state)."""
    out = {
        "model": lambda: draft,
        "ModelDrafter": lambda: ModelDrafter(draft),
        "prompt_lookup": lambda: PromptLookupDrafter(max_ngram=2),
        "suffix": lambda: SuffixDrafter(max_depth=6),
        "suffix_sampled": lambda: SuffixDrafter(
            max_depth=6, sample=True, vocab_size=target_vocab(target)
        ),
    }
    if hasattr(target, "model"):  # transformers: its own first layer as the draft
        out["early_exit"] = lambda: EarlyExitDrafter(target, 1)
    return out


def target_vocab(model) -> int:
    return model.vocab_size if hasattr(model, "vocab_size") else model.config.vocab_size


PAIRS = {"toy": (TOY_T, TOY_D, [0, 1, 0, 1, 2]), "tiny_llama": (LLAMA_T, LLAMA_D, [2, 5, 1, 2, 5])}
CASES = [(p, d) for p in PAIRS for d in _drafters(*PAIRS[p][:2])]


@pytest.mark.parametrize("pair, name", CASES)
@pytest.mark.parametrize("kw", [SAMPLED, {}], ids=["sampled", "greedy"])
def test_one_row_batch_equals_the_serial_run(pair, name, kw):
    target, draft, prompt = PAIRS[pair]
    make = _drafters(target, draft)[name]
    for seed in range(4):
        common = dict(gamma=3, max_new_tokens=10, seed=seed, **kw)
        r = sv.speculative_generate(target, make(), prompt, **common)
        b = speculative_generate_batch(target, make(), prompt, num_sequences=1, **common)
        assert b.sequences[0] == r.new_tokens, (name, seed)
        assert b.accepted_counts[0] == r.accepted_counts
        assert b.drafted_counts[0] == r.drafted_counts


@pytest.mark.parametrize("pair, name", [c for c in CASES if not c[1].startswith("suffix")])
def test_seeded_rows_equal_serial_runs_with_seed_plus_i(pair, name):
    target, draft, prompt = PAIRS[pair]
    make = _drafters(target, draft)[name]
    common = dict(gamma=3, max_new_tokens=10, **SAMPLED)
    b = speculative_generate_batch(target, make(), prompt, num_sequences=8, seed=40, **common)
    for i in range(8):
        r = sv.speculative_generate(target, make(), prompt, seed=40 + i, **common)
        assert b.sequences[i] == r.new_tokens, (name, i)
        assert b.accepted_counts[i] == r.accepted_counts


def test_policies_through_the_batched_drafter_path():
    """A gamma policy and a confidence stop with a drafter *object* (not the batched model
    fast path): one-row batch == serial."""
    for policy in (lambda: HeuristicGamma(1, max_gamma=4), lambda: ConfidenceStop(3, 0.4)):
        for seed in range(4):
            common = dict(gamma=policy(), max_new_tokens=12, seed=seed, **SAMPLED)
            r = sv.speculative_generate(TOY_T, ModelDrafter(TOY_D), [0], **common)
            common["gamma"] = policy()
            b = speculative_generate_batch(
                TOY_T, ModelDrafter(TOY_D), [0], num_sequences=1, **common
            )
            assert b.sequences[0] == r.new_tokens


def _law_pvalue(target, make, verifier, rows=2000, chunks=10, prompt=(0,)):
    params = sv.SamplingParams(True, 0.9, 5)
    law = sv.exact_continuation_law(target, list(prompt), 3, params)
    counts: collections.Counter = collections.Counter()
    for c in range(chunks):
        br = speculative_generate_batch(
            target, make(), list(prompt), num_sequences=rows, gamma=2, max_new_tokens=3,
            seed=c * rows, verifier=verifier, **SAMPLED,
        )  # fmt: skip
        counts.update(tuple(s) for s in br.sequences)
    assert set(counts) <= set(law)
    keys = sorted(law)
    observed = np.array([counts[k] for k in keys])
    return goodness_of_fit(observed, np.array([law[k] for k in keys])).pvalue


LAW_CASES = [("toy", "model"), ("toy", "prompt_lookup"), ("toy", "suffix"),
             ("toy", "suffix_sampled"), ("tiny_llama", "early_exit"), ("tiny_llama", "prompt_lookup")]  # fmt: skip


@pytest.mark.parametrize("pair, name", LAW_CASES)
def test_the_batched_path_keeps_the_exact_law_for_every_drafter(pair, name):
    """20,000 rows per case (alpha 1e-3, fixed seeds); ``residual_from_target`` through the
    same drafter must fail (p < 1e-6). The lookup prompt repeats itself so that copying
    drafters propose something."""
    target, draft, prompt = PAIRS[pair]
    make = _drafters(target, draft)[name]
    prompt = prompt[:3]
    assert _law_pvalue(target, make, "lossless", prompt=prompt) > 1e-3
    assert _law_pvalue(target, make, "residual_from_target", prompt=prompt) < 1e-6


def test_greedy_head_and_lookup_match_plain_greedy_on_smollm2(smollm2):
    from specviz.drafting.heads import HeadDrafter
    from specviz.prompts import render_prompt

    model, tok = smollm2
    prompts = [render_prompt(tok, q) for q in ("List three fruits.", "Repeat: a b c a b c a b")]
    kw = dict(max_new_tokens=24, eos_token_id=tok.eos_token_id)
    refs = [sv.autoregressive_generate(model, ids, **kw).new_tokens for ids in prompts]
    for make in (lambda: HeadDrafter.from_pretrained(model), lambda: PromptLookupDrafter(3)):
        batch = speculative_generate_batch(model, make(), prompts, gamma=4, **kw)
        for ids, ref, got in zip(prompts, refs, batch.sequences, strict=True):
            assert got == ref
            assert sv.speculative_generate(model, make(), ids, gamma=4, **kw).new_tokens == ref


def test_batched_rows_keep_their_traces():
    b = speculative_generate_batch(
        TOY_T,
        TOY_D,
        [0, 1],
        num_sequences=3,
        gamma=2,
        max_new_tokens=6,
        seed=0,
        trace=True,
        **SAMPLED,
    )
    for i, tr in enumerate(b.traces):
        r = sv.speculative_generate(
            TOY_T, TOY_D, [0, 1], gamma=2, max_new_tokens=6, seed=i, **SAMPLED
        )
        assert [s.emitted for s in tr.steps] == [s.emitted for s in r.trace.steps]
        assert tr.to_dataframe().u.tolist() == pytest.approx(
            r.trace.to_dataframe().u.tolist(), nan_ok=True
        )


def test_the_head_drafter_keeps_the_first_token_law_batched(smollm2):
    """The EAGLE-style head needs a real target, so its exact-law check is the first emitted
    token on SmolLM2: 3,000 batched rows (head proposals per row, one batched target call)
    against the target's processed next-token law, chi-square at alpha 1e-3 (fixed seed);
    ``residual_from_target`` through the same head is the negative control (p < 1e-6)."""
    from specviz.drafting.heads import HeadDrafter
    from specviz.prompts import render_prompt

    model, tok = smollm2
    ids = render_prompt(tok, "Name a colour.")
    params = sv.SamplingParams(True, 0.8, 20)
    with torch.no_grad():
        p = sv.logits_to_probs(model(torch.tensor([ids])).logits[0, -1], params).double()
    support = torch.nonzero(p > 0).view(-1).tolist()

    def pvalue(verifier: str) -> float:
        br = speculative_generate_batch(
            model, HeadDrafter.from_pretrained(model), ids, num_sequences=3000, gamma=2,
            max_new_tokens=2, do_sample=True, temperature=0.8, top_k=20, seed=11,
            verifier=verifier,
        )  # fmt: skip
        first = collections.Counter(s[0] for s in br.sequences)
        assert set(first) <= set(support)
        observed = np.array([first[t] for t in support])
        return goodness_of_fit(observed, p[support].numpy() / float(p[support].sum())).pvalue

    assert pvalue("lossless") > 1e-3
    assert pvalue("residual_from_target") < 1e-6
