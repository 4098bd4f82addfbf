"""The bonus column's laws computed only where a row accepted every draft (issue 30,
"faster verdicts"): a batched verify pass defers the target's law after the last draft, and
asks for it per draft group. Samples and recorded laws must be those of the pass that
computes every column, the deferral must really skip rows, and a wrong bonus law must show."""

from __future__ import annotations

import pytest
import torch

import specviz.decoding.step as step
from specviz.decoding.batched import speculative_generate_batch
from specviz.fixtures.llamas import tiny_llama_pair


def _run(monkeypatch, *, defer: bool, wrong: bool = False):
    target, draft = tiny_llama_pair(50, seed=1, draft_noise=0.3)
    asked: list[int] = []
    real = step._BonusLaws.__call__

    def counting(self, groups):
        asked.append(len(set(groups)))
        laws = real(self, groups)
        return torch.full_like(laws, 1 / laws.shape[-1]) if wrong else laws

    monkeypatch.setattr(step._BonusLaws, "__call__", counting)
    if not defer:
        monkeypatch.setattr(step.Decoder, "_defer_bonus", lambda *a: False)
    r = speculative_generate_batch(target, draft, [1, 2, 3, 4], num_sequences=48,
                                   max_new_tokens=8, gamma=2, do_sample=True, seed=11,
                                   record=True)  # fmt: skip
    monkeypatch.undo()
    return r, asked


def test_deferred_bonus_keeps_samples_and_laws(monkeypatch):
    full, asked_full = _run(monkeypatch, defer=False)
    lazy, asked = _run(monkeypatch, defer=True)
    assert not asked_full  # the control computed every column
    assert asked, "no step deferred its bonus column"
    # some rows accepted everything (bonus laws asked) but not all of them in every step
    drafted = sum(sum(d) for d in lazy.drafted_counts)
    accepted = sum(sum(a) for a in lazy.accepted_counts)
    assert 0 < accepted < drafted
    assert lazy.sequences == full.sequences
    for a, b in zip(lazy.token_probs, full.token_probs, strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-7)
    # the negative control: a wrong bonus law changes what is sampled and recorded
    wrong, _ = _run(monkeypatch, defer=True, wrong=True)
    assert wrong.token_probs != full.token_probs
