"""The bonus column's laws computed only where a row accepted every draft (issue 30,
"faster verdicts"): a batched verify pass defers the target's law after the last draft, and
asks for it per draft group. Samples and recorded laws must be those of the pass that
computes every column, the deferral must really skip rows, and a wrong bonus law must show."""

from __future__ import annotations

import pytest
import torch

import specviz.core.batch_runners as batch_runners
import specviz.decoding.step as step
from specviz.decoding.batched import speculative_generate_batch
from specviz.fixtures.llamas import tiny_llama_pair


def _run(monkeypatch, *, defer: bool, wrong: bool = False, fed: list | None = None):
    target, draft = tiny_llama_pair(50, seed=1, draft_noise=0.3)
    asked: list[int] = []
    real = step._BonusLaws.__call__
    real_run = batch_runners._LazyColumn._run

    def feeding(self, rows):  # rows fed the deferred column / rows of the verify pass
        if fed is not None:
            fed.append((rows.numel(), self.tokens.shape[0]))
        return real_run(self, rows)

    monkeypatch.setattr(batch_runners._LazyColumn, "_run", feeding)

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
    fed_full: list = []
    fed: list = []
    full, asked_full = _run(monkeypatch, defer=False, fed=fed_full)
    lazy, asked = _run(monkeypatch, defer=True, fed=fed)
    assert not asked_full and not fed_full  # the control computed every column
    assert asked, "no step deferred its bonus column"
    # the deferred column ran through the model only for the rows that asked, never for all
    assert fed and all(0 < n <= rows for n, rows in fed)
    assert sum(n for n, _ in fed) < sum(rows for _, rows in fed)
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


def _runner_steps(*, lazy: bool, misplace: bool = False):
    """A 5-row masked cache: a 3-column verify pass whose last column is deferred and asked
    for in two calls (rows 3, 1, then 0), rollback of the other rows' last column, then one
    more step; returns (the deferred column's logits, the next step's logits)."""
    from specviz.fixtures.llamas import tiny_llama

    model = tiny_llama(50, seed=3)
    g = torch.Generator().manual_seed(0)
    runner = batch_runners.BatchRunner(model, 5)
    runner.prefill_shared(torch.randint(0, 50, (7,), generator=g))
    tokens = torch.randint(0, 50, (5, 3), generator=g)
    valid = torch.ones(5, 3, dtype=torch.bool)
    col0 = runner.mask.shape[1]
    if lazy:
        runner.extend(tokens, valid, 3, defer_last=True)
        first = runner.deferred_logits(torch.tensor([3, 1]))
        if misplace:  # negative control: row 1's new keys written one column early
            with torch.inference_mode():
                for lay in runner.cache.layers:
                    lay.keys[1, :, -2] = lay.keys[1, :, -1]
        column = torch.cat([runner.deferred_logits(torch.tensor([0])), first])
    else:
        column = runner.extend(tokens, valid, 3)[[0, 3, 1], -1]
    runner.mask[[2, 4], col0 + 2 :] = False  # the rows that did not keep the column
    runner.trim()
    nxt = runner.extend(torch.randint(0, 50, (5, 1), generator=g), valid[:, :1], 1)
    return column, nxt


def test_deferred_column_equals_the_full_pass():
    full_col, full_next = _runner_steps(lazy=False)
    lazy_col, lazy_next = _runner_steps(lazy=True)
    torch.testing.assert_close(lazy_col, full_col, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(lazy_next, full_next, rtol=1e-4, atol=1e-4)
    _, bad_next = _runner_steps(lazy=True, misplace=True)
    assert not torch.allclose(bad_next[1], full_next[1], rtol=1e-4, atol=1e-4)
