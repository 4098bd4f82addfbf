"""The EAGLE-style head: shipped weights, greedy identity, rollback, exact sampling, training.

The law check is a Pearson chi-square at alpha = 0.001 with a fixed seed (false-positive rate
0.1%); its negative control -- drafting over the draft vocabulary but reporting the softmax over
the full vocabulary as q, the mistake the vocabulary-subset trick invites -- must be rejected at
p < 1e-6.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import specviz as sv
from specviz.core.sampling import logits_to_probs, sample
from specviz.drafting.heads import (
    EagleHead,
    HeadConfig,
    HeadDrafter,
    default_head_path,
    load_head,
    training_time_test_mask,
)
from specviz.fixtures.toy import ToyLM, ToyRunner
from specviz.prompts import load_prompts, render_prompt
from specviz.stats import grouped_goodness_of_fit

ROOT = Path(__file__).resolve().parent.parent
ALPHA = 1e-3
CONTROL_P = 1e-6
N = 20_000
MAX_NEW = 48


pytestmark = pytest.mark.usefixtures("one_thread")


# -- shipped weights on SmolLM2 ---------------------------------------------------------------


def test_shipped_head_is_small_safetensors_with_metadata():
    stem = default_head_path()
    weights = stem.with_name(stem.name + ".safetensors")
    assert weights.is_file() and weights.stat().st_size < 10e6
    meta = json.loads(stem.with_name(stem.name + ".json").read_text())
    assert meta["target"]["name"] == "smollm2-135m"
    assert meta["data"]["split"] == "train"
    alone, hybrid = meta["heldout_eval"], meta["heldout_eval_with_lookup"]
    for ev in (alone, hybrid):
        assert ev["split"] == "heldout" and ev["gamma"] == 4 and ev["mode"] == "greedy"
        assert ev["prompts"] == 40
    # As recorded when the weights were trained (re-measured live below): the head alone ~1.58
    # tokens per target call on heldout prompts, with prompt lookup in front ~2.07.
    assert alone["mean_accepted_length"] >= 1.5, "the head alone is below the 1.5 floor"
    assert hybrid["mean_accepted_length"] >= alone["mean_accepted_length"]
    # the head-only prompts were used (the remedy for memorising the 82 train prompts)
    assert meta["data"]["extra_prompts"]["prompts"] >= 320


def test_shipped_head_alone_meets_the_issue_floor(smollm2):
    """Re-measures the card's held-out number from scratch (40 prompts, gamma 4, greedy, 64
    new tokens, the training script's own evaluation) instead of trusting the card: the head
    alone must reach the issue's floor of 1.5 tokens per target call, and the card must say
    what this machine measures (greedy is deterministic; rounding may flip a rare near-tie)."""
    model, tok = smollm2
    stem = default_head_path()
    card = json.loads(stem.with_name(stem.name + ".json").read_text())["heldout_eval"]
    args = argparse.Namespace(
        eval_per_category=card["prompts"] // 8, eval_max_new_tokens=card["max_new_tokens"]
    )
    live = _train_module().evaluate(model, tok, stem, args)
    assert live["prompts"] == card["prompts"] == 40
    assert live["mean_accepted_length"] >= 1.5, live
    assert abs(live["mean_accepted_length"] - card["mean_accepted_length"]) < 0.03, (live, card)


@pytest.fixture(scope="module")
def head_drafter(smollm2):
    return HeadDrafter.from_pretrained(smollm2[0])


def test_greedy_identity_and_acceptance_on_smollm2(smollm2, head_drafter):
    model, tok = smollm2
    prompts = load_prompts(split="heldout", categories=["code", "chat_writing"], per_category=1)
    tokens = calls = 0
    for p in prompts:
        ids = render_prompt(tok, p)
        kw = dict(max_new_tokens=MAX_NEW, eos_token_id=tok.eos_token_id)
        base = sv.autoregressive_generate(model, ids, **kw)
        spec = sv.speculative_generate(model, head_drafter, ids, gamma=4, **kw)
        assert spec.new_tokens == base.new_tokens, f"head drafter differs from greedy on {p.id}"
        tokens, calls = tokens + len(spec.new_tokens), calls + spec.target_calls
    assert tokens / calls > 1.1, f"the head drafts almost nothing useful ({tokens / calls:.2f})"


class _Recorder:
    """Records every (context, proposal) of the drafter it wraps."""

    def __init__(self, inner):
        self.inner, self.seen = inner, []

    def propose(self, context, k, generator):
        d = self.inner.propose(context, k, generator)
        self.seen.append((context.clone(), d.tokens.clone()))
        return d

    def __getattr__(self, name):
        return getattr(self.inner, name)


@torch.inference_mode()
def test_incremental_drafting_equals_drafting_from_scratch(smollm2, head_drafter):
    """After accepts and rejections the head's cache must hold exactly the true-feature slots:
    a fresh drafter given the same history proposes the same tokens."""
    model, tok = smollm2
    ids = render_prompt(tok, load_prompts(split="heldout", categories=["math_reasoning"])[0])
    rec = _Recorder(head_drafter)
    sv.speculative_generate(model, rec, ids, gamma=4, max_new_tokens=32, trace=False)
    steps = [(c, t) for c, t in rec.seen if t.numel()]
    assert len(steps) >= 5
    fresh = HeadDrafter.from_pretrained(model)
    same = 0
    for context, tokens in steps[1::2]:
        hidden = model.model(input_ids=context[None, :-1]).last_hidden_state[0]  # [T-1, H]
        fresh.start(context, sv.SamplingParams())
        fresh.observe_target(context[:-1], hidden)
        again = fresh.propose(context, tokens.numel(), torch.Generator())
        same += int(torch.equal(again.tokens, tokens))
    # One full pass vs an incremental KV cache differ in rounding only: near-ties may flip.
    assert same >= len(steps[1::2]) - 1, (same, len(steps[1::2]))


# -- exact sampling on a toy target with hidden states ---------------------------------------


class HiddenToyLM(ToyLM):
    """A toy target that also returns 'final hidden states' (a fixed random embedding of each
    position's Markov state), so a feature-level head has something to read."""

    def __init__(self, base: ToyLM, hidden: int = 8, seed: int = 0):
        super().__init__(base.table, base.vocab_size, base.order, name=base.name + "+hidden")
        g = torch.Generator().manual_seed(seed)
        self.features = torch.randn(base.table.shape[0], hidden, generator=g)

    def make_runner(self):
        return _HiddenToyRunner(self)


class _HiddenToyRunner(ToyRunner):
    def extend(self, tokens, num_logits, return_hidden=False):
        start = len(self.tokens)
        logits = super().extend(tokens, num_logits)
        if not return_hidden:
            return logits
        rows = [
            self.model._row(self.tokens[:end]) for end in range(start + 1, len(self.tokens) + 1)
        ]
        return logits, self.model.features[rows]  # [n, H]


def _toy_head_drafter(cls=HeadDrafter, vocab_ids=(2, 4)) -> HeadDrafter:
    torch.manual_seed(0)
    cfg = HeadConfig(hidden_size=8, num_heads=2, num_kv_heads=1, head_dim=4, intermediate_size=16)
    lm_head = torch.randn(5, 8) * 2.0
    ids = torch.tensor(vocab_ids) if vocab_ids is not None else None
    return cls(EagleHead(cfg), nn.Embedding(5, 8), nn.Identity(), lm_head, ids, name="toy_head")


class FullVocabQ(HeadDrafter):
    """Negative control: samples over the draft vocabulary, reports the full-vocabulary softmax."""

    def _pick(self, feat, generator):
        if self.params.is_greedy:
            return super()._pick(feat, generator)
        probs = logits_to_probs(self._w @ feat, self.params)
        j = int(sample(probs, generator))
        full = logits_to_probs(self.lm_head_weight @ feat, self.params)  # not what was sampled
        return int(self.vocab_ids[j]), full


TOY = HiddenToyLM(sv.toy_pair(5, 2, seed=0)[0])
PARAMS = sv.SamplingParams(True, 1.0, None, None)


def _toy_pvalue(drafter, n: int, *, gamma=3, length=3, prompt=(0,), seed=0):
    law = sv.exact_continuation_law(TOY, list(prompt), length, PARAMS)
    keys = sorted(law)
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys))
    g = torch.Generator().manual_seed(seed)
    accepted = 0
    for _ in range(n):
        r = sv.speculative_generate(
            TOY, drafter, list(prompt), gamma=gamma, max_new_tokens=length, do_sample=True,
            seed=g, trace=False,
        )  # fmt: skip
        accepted += sum(r.accepted_counts)
        i = index.get(tuple(r.new_tokens))
        if i is None:
            return 0.0, accepted
        counts[i] += 1
    expected = np.array([law[k] for k in keys])
    p = grouped_goodness_of_fit({0: dict(enumerate(counts))}, lambda _: expected / expected.sum())
    return p.pvalue, accepted


def test_toy_head_sampling_is_exact():
    drafter = _toy_head_drafter()
    p, accepted = _toy_pvalue(drafter, N)
    assert accepted > N // 10, "the toy head must get drafts accepted for the test to bite"
    assert p > ALPHA, p


def test_toy_head_full_vocab_q_is_caught():
    p, _ = _toy_pvalue(_toy_head_drafter(FullVocabQ), N // 4)  # gross bias: N/4 suffices
    assert p < CONTROL_P, p


def test_training_time_test_mask_matches_inference():
    # step 3 at slot 5: true slots 0..3 (step 1), predicted slot 4 (step 2), itself (step 3)
    m = training_time_test_mask(7, 3)
    assert m.shape == (7, 21)
    assert m[5, :7].nonzero().flatten().tolist() == [0, 1, 2, 3]
    assert m[5, 7:14].nonzero().flatten().tolist() == [4]
    assert m[5, 14:].nonzero().flatten().tolist() == [5]
    assert torch.equal(training_time_test_mask(4, 1), torch.ones(4, 4, dtype=torch.bool).tril())


# -- the training script -------------------------------------------------------------------


def _train_module():
    spec = importlib.util.spec_from_file_location("train_head", ROOT / "scripts" / "train_head.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_quick_training_writes_loadable_weights(smollm2, tmp_path):
    model, tok = smollm2
    out = tmp_path / "head"
    meta = _train_module().main(["--quick", "--out", str(out)], model=model, tokenizer=tok)
    weights = out.with_name("head.safetensors")
    assert weights.is_file() and weights.stat().st_size < 10e6
    head, vocab, saved = load_head(out)
    assert saved["data"]["prompts"] == meta["data"]["prompts"] > 0
    assert vocab is not None and vocab.numel() == meta["draft_vocab"]
    drafter = HeadDrafter.from_pretrained(model, out)
    ids = render_prompt(tok, "Count from 1 to 10.")
    base = sv.autoregressive_generate(model, ids, max_new_tokens=12)
    spec = sv.speculative_generate(model, drafter, ids, gamma=3, max_new_tokens=12)
    assert spec.new_tokens == base.new_tokens


def test_memory_report_counts_the_heads_weights_and_kv(smollm2, head_drafter):
    """The head brings its own layer and KV cache (one attention layer); the embedding, final
    norm and LM head are the target's and are not counted twice."""
    from specviz.perf.metrics import memory_report, weights_bytes

    model, _ = smollm2
    rep = memory_report(model, head_drafter, context_tokens=100, gamma=4)
    cfg = head_drafter.head.cfg
    assert rep.draft_weights_bytes == weights_bytes(head_drafter.head) > 0
    assert rep.draft_weights_bytes < rep.target_weights_bytes / 10
    assert rep.draft_kv_bytes_per_token == 2 * cfg.num_kv_heads * cfg.head_dim * 4
    assert rep.kv_bytes_at_context == 104 * (
        rep.target_kv_bytes_per_token + rep.draft_kv_bytes_per_token
    )


def test_notebook_spec_head_with_lookup_first(smollm2):
    """``eagle_head+lookup`` (notebook 00's default): copying where the text repeats, the head
    elsewhere -- still exactly greedy decoding."""
    from specviz.lab import load_models

    models = load_models("smollm2-135m", "eagle_head+lookup")
    assert models.draft.name.endswith("+prompt_lookup(n=2..3)")
    tok = models.tokenizer
    ids = render_prompt(tok, load_prompts(categories=["extraction"], split="heldout")[0])
    kw = dict(max_new_tokens=24, eos_token_id=tok.eos_token_id)
    base = sv.autoregressive_generate(models.target, ids, **kw)
    spec = sv.speculative_generate(models.target, models.draft, ids, gamma=4, **kw)
    assert spec.new_tokens == base.new_tokens
    assert spec.target_calls < base.target_calls
