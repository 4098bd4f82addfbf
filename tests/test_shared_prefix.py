"""A shared prompt stored once (issue 30, "faster verdicts"): the masked batch cache keeps the
prompt's keys and values as one block for every row, and the batched attention reads it
once per key/value head. The logits must be those of per-row copies, through forks, holes,
trims and one-row (SDPA) calls."""

from __future__ import annotations

import pytest
import torch

import specviz.core.batch_runners as br
import specviz.core.shared_prefix as sp
from specviz.fixtures.llamas import tiny_llama


def _copied(cache, rows: int) -> None:
    """The old layout: the prompt copied into every row."""
    cache.batch_repeat_interleave(rows)


def _run(model, monkeypatch, *, shared: bool, corrupt: bool = False) -> list[torch.Tensor]:
    """Prefill a shared prompt into 6 rows, then multi-column steps with holes, a fork with
    repeated rows, a trim and a one-row step; returns every step's logits."""
    if not shared:
        monkeypatch.setattr(sp, "share_prefix", _copied)
    g = torch.Generator().manual_seed(0)
    runner = br.BatchRunner(model, 6)
    runner.prefill_shared(torch.randint(0, 50, (9,), generator=g))
    if corrupt:  # negative control: the shared block's value heads in the wrong order
        for layer in runner.cache.layers:
            layer.prefix_values = layer.prefix_values.flip(1)
    out = []

    def step(rows: int, width: int) -> None:
        tokens = torch.randint(0, 50, (rows, width), generator=g)
        valid = torch.ones(rows, width, dtype=torch.bool)
        valid[::2, 0] = False  # holes, as rejected drafts leave them
        out.append(runner.extend(tokens, valid, width))

    step(6, 2)
    step(6, 3)
    runner.select(torch.tensor([0, 0, 3, 5]))  # a fork and finished rows
    runner.mask[:, -1] = False  # a rejected last column in every row ...
    runner.trim()  # ... cropped
    step(4, 2)
    runner.select(torch.tensor([2]))
    step(1, 2)  # one row: SDPA, the whole keys built from the block
    return out


def test_shared_prompt_gives_the_logits_of_per_row_copies(monkeypatch):
    model = tiny_llama(50, seed=3, hidden_size=32, num_layers=2)
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    copied = _run(model, monkeypatch, shared=False)
    monkeypatch.undo()
    shared = _run(model, monkeypatch, shared=True)
    for a, b in zip(copied, shared, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    # the control: a wrong shared block is seen (the comparison can fail)
    wrong = _run(model, monkeypatch, shared=True, corrupt=True)
    assert (copied[0] - wrong[0]).abs().max() > 1e-3


def test_shared_prompt_is_stored_once(monkeypatch):
    model = tiny_llama(50, seed=3, hidden_size=32, num_layers=2)
    runner = br.BatchRunner(model, 6)
    runner.prefill_shared(torch.arange(9))
    for layer in runner.cache.layers:
        assert isinstance(layer, sp.SharedPrefixLayer)
        assert layer.prefix_keys.shape[0] == 1 and layer.prefix_length == 9
        assert layer.keys.shape[0] == 6 and layer.keys.shape[2] == 0
    assert runner.cache.get_seq_length() == 9
    runner.extend(torch.zeros(6, 2, dtype=torch.long), torch.ones(6, 2, dtype=torch.bool), 2)
    assert runner.cache.get_seq_length() == 11
    assert not any(layer.split for layer in runner.cache.layers)  # reset after the call
    with pytest.raises(ValueError, match="follow the shared prompt"):
        runner.cache.layers[0].crop(-3)  # only 2 columns follow the prompt
