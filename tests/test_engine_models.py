"""The engine on a real model (SmolLM2-135M-Instruct): greedy identity and sampled laws."""

from __future__ import annotations

import collections

import pytest
import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import specviz as sv
from specviz.drafting import EarlyExitDrafter, PromptLookupDrafter
from specviz.prompts import load_prompts, render_prompt
from specviz.stats import goodness_of_fit, grouped_goodness_of_fit

ALPHA = 1e-3  # per lossless check, fixed seeds: a 0.1% false-positive rate
CONTROL_P = 1e-6
MAX_NEW = 64


@pytest.fixture(scope="module")
def prompts(smollm2):
    _, tok = smollm2
    chosen = load_prompts(categories=["structured", "code", "chat_writing"], per_category=1)
    return [render_prompt(tok, p) for p in chosen]


def _hf_greedy(model, ids, eos):
    x = torch.tensor([ids])
    out = model.generate(
        x,
        attention_mask=torch.ones_like(x),  # explicit: never let generate infer padding
        max_new_tokens=MAX_NEW,
        do_sample=False,
        eos_token_id=eos,
        pad_token_id=eos,
    )
    return out[0, len(ids) :].tolist()


@pytest.fixture(scope="module")
def greedy_references(smollm2, prompts):
    model, tok = smollm2
    return [_hf_greedy(model, ids, tok.eos_token_id) for ids in prompts]


def test_greedy_baseline_equals_transformers(smollm2, prompts, greedy_references):
    model, tok = smollm2
    for ids, reference in zip(prompts, greedy_references, strict=True):
        plain = sv.autoregressive_generate(
            model, ids, max_new_tokens=MAX_NEW, eos_token_id=tok.eos_token_id
        )
        assert plain.new_tokens == reference, "specviz baseline differs from transformers"
        assert len(reference) == MAX_NEW or reference[-1] == tok.eos_token_id


@pytest.mark.parametrize("drafter", ["early_exit", "prompt_lookup", "self"])
def test_greedy_identity_with_transformers(smollm2, prompts, greedy_references, drafter):
    model, tok = smollm2
    eos = tok.eos_token_id
    for ids, reference in zip(prompts, greedy_references, strict=True):
        draft = {
            "early_exit": EarlyExitDrafter(model, 24),
            "prompt_lookup": PromptLookupDrafter(),
            "self": model,
        }[drafter]
        spec = sv.speculative_generate(
            model, draft, ids, gamma=4, max_new_tokens=MAX_NEW, eos_token_id=eos
        )
        assert spec.new_tokens == reference, f"speculative ({drafter}) differs from greedy"
        s = spec.summary()
        assert s.new_tokens == len(spec.new_tokens)
        assert s.target_calls == len(spec.trace.steps) <= len(spec.new_tokens)


def _hf_law(logits: torch.Tensor, temperature, top_k, top_p) -> torch.Tensor:
    """The distribution transformers' generate samples from (its own logits processors)."""
    procs = LogitsProcessorList()
    if temperature != 1.0:
        procs.append(TemperatureLogitsWarper(temperature))
    if top_k is not None:
        procs.append(TopKLogitsWarper(top_k))
    if top_p is not None and top_p < 1.0:
        procs.append(TopPLogitsWarper(top_p))
    scores = procs(torch.zeros(1, 1, dtype=torch.long), logits[None].clone())
    return torch.softmax(scores, dim=-1)[0]


SETTINGS = [(1.0, None, None), (0.7, 50, None), (1.3, None, 0.9), (0.8, 20, 0.8)]
N_SAMPLES = 3000


def _two_token_samples(target, draft, ids, setting, verifier="lossless", n=N_SAMPLES, seed=0):
    temperature, top_k, top_p = setting
    g = torch.Generator().manual_seed(seed)
    return [
        tuple(
            sv.speculative_generate(
                target,
                draft,
                ids,
                gamma=2,
                max_new_tokens=2,
                do_sample=True,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                seed=g,
                trace=False,
                verifier=verifier,
            ).new_tokens
        )
        for _ in range(n)
    ]


def _token_law_pvalues(target, ids, samples, setting):
    first = collections.Counter(s[0] for s in samples)
    p1 = _hf_law(target.next_logits(tuple(ids)), *setting)
    r1 = goodness_of_fit(
        torch.bincount(torch.tensor([s[0] for s in samples]), minlength=p1.numel()), p1
    )
    second: dict = collections.defaultdict(collections.Counter)
    for a, b in samples:
        second[a][b] += 1
    r2 = grouped_goodness_of_fit(second, lambda a: _hf_law(target.next_logits((*ids, a)), *setting))
    assert len(first) > 1
    return r1.pvalue, r2.pvalue


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: f"T{s[0]}-k{s[1]}-p{s[2]}")
def test_first_and_second_token_laws_match_transformers(smollm2, memo_pair, setting):
    _, tok = smollm2
    target, draft = memo_pair
    ids = render_prompt(tok, "Name a colour.")
    samples = _two_token_samples(target, draft, ids, setting)
    p1, p2 = _token_law_pvalues(target, ids, samples, setting)
    assert p1 > ALPHA and p2 > ALPHA, (p1, p2)


def test_law_test_catches_unprocessed_q(smollm2, memo_pair):
    """Negative control: transformers #47932 on a real model must be caught at this n."""
    _, tok = smollm2
    target, draft = memo_pair
    ids = render_prompt(tok, "Name a colour.")
    setting = (0.7, 20, 0.8)
    samples = _two_token_samples(target, draft, ids, setting, verifier="unprocessed_q")
    p1, p2 = _token_law_pvalues(target, ids, samples, setting)
    assert min(p1, p2) < CONTROL_P, (p1, p2)


def test_same_seed_same_tokens_and_trace(smollm2, prompts):
    model, tok = smollm2
    runs = [
        sv.speculative_generate(
            model,
            EarlyExitDrafter(model, 24),
            prompts[0],
            gamma=3,
            max_new_tokens=24,
            do_sample=True,
            temperature=0.9,
            top_k=40,
            seed=1234,
        )
        for _ in range(2)
    ]
    a, b = (r.trace.to_dataframe().drop(columns=["draft_time", "verify_time"]) for r in runs)
    assert runs[0].new_tokens == runs[1].new_tokens
    assert a.equals(b)
    other = sv.speculative_generate(
        model,
        EarlyExitDrafter(model, 24),
        prompts[0],
        gamma=3,
        max_new_tokens=24,
        do_sample=True,
        temperature=0.9,
        top_k=40,
        seed=4321,
    )
    assert other.new_tokens != runs[0].new_tokens  # the seed is really used


def test_sampled_baseline_reproducible(smollm2, prompts):
    model, _ = smollm2
    r1 = sv.autoregressive_generate(model, prompts[0], max_new_tokens=8, do_sample=True, seed=7)
    r2 = sv.autoregressive_generate(model, prompts[0], max_new_tokens=8, do_sample=True, seed=7)
    assert r1.new_tokens == r2.new_tokens and len(r1.new_tokens) == 8
