"""The static, position-indexed KV cache (and its compiled decode path): the same tokens
as the dynamic cache, rollback by moving the write position, clear errors."""

from __future__ import annotations

import shutil

import pytest
import torch

import specviz as sv
from specviz.core.runners import HFRunner, StaticRunner, as_runner, use_static_cache
from specviz.drafting import early_exit_model
from specviz.fixtures.shapes import random_llama
from specviz.prompts import render_prompt

pytestmark = pytest.mark.usefixtures("one_thread")

IDS = [1, 5, 9, 3, 7, 7, 2]


def _pair():
    # two differently seeded random Llamas: the draft disagrees often, so rollback is used
    return random_llama("tiny", seed=0), random_llama("tiny", seed=1)


# random weights make greedy decoding degenerate (one token forever): sample instead;
# greedy with rejections is covered on SmolLM2 below
@pytest.mark.parametrize(
    "kw", [dict(do_sample=True, seed=1), dict(do_sample=True, temperature=0.9, top_k=50, seed=3)]
)
def test_static_cache_gives_the_dynamic_cache_tokens(kw):
    target, draft = _pair()
    ref = sv.speculative_generate(target, draft, IDS, gamma=3, max_new_tokens=24, **kw)
    assert min(ref.accepted_counts) < 3  # rejections happened
    use_static_cache(target, 64)
    use_static_cache(draft, 64)
    assert isinstance(as_runner(target), StaticRunner)
    got = sv.speculative_generate(target, draft, IDS, gamma=3, max_new_tokens=24, **kw)
    assert got.new_tokens == ref.new_tokens
    assert got.accepted_counts == ref.accepted_counts
    use_static_cache(target, None)
    assert type(as_runner(target)) is HFRunner


def test_rollback_overwrites_stale_positions():
    target, _ = _pair()
    dyn = HFRunner(target)
    sta = StaticRunner(target, 32)
    for r in (dyn, sta):
        r.extend(torch.tensor(IDS), 1)
        r.extend(torch.tensor([4, 4, 4]), 3)
        r.crop(len(IDS) + 1)  # keep one of the three
    a = dyn.extend(torch.tensor([8, 6]), 2)
    b = sta.extend(torch.tensor([8, 6]), 2)
    assert torch.allclose(a, b, atol=1e-5)
    fresh = HFRunner(target)
    c = fresh.extend(torch.tensor([*IDS, 4, 8, 6]), 2)
    assert torch.allclose(b, c, atol=1e-5)


def test_static_cache_errors():
    target, _ = _pair()
    r = StaticRunner(target, 8)
    r.extend(torch.tensor(IDS), 1)
    with pytest.raises(ValueError, match="static KV cache full"):
        r.extend(torch.tensor([1, 2]), 1)
    with pytest.raises(ValueError, match="max_length"):
        use_static_cache(target, 0)
    with pytest.raises(TypeError, match="transformers causal LM"):
        use_static_cache(sv.toy_pair(5, 2)[0], 16)


def test_static_cache_on_smollm2_greedy(smollm2):
    model, tok = smollm2
    draft = early_exit_model(model, 20)
    ids = render_prompt(tok, "List three fruits, then list them again in reverse order.")
    ref = sv.speculative_generate(model, draft, ids, gamma=4, max_new_tokens=16)
    try:
        use_static_cache(model, 256)
        use_static_cache(draft, 256)
        got = sv.speculative_generate(model, draft, ids, gamma=4, max_new_tokens=16)
        lookup = sv.speculative_generate(
            model, sv.PromptLookupDrafter(), ids, gamma=4, max_new_tokens=16
        )
    finally:
        use_static_cache(model, None)
        use_static_cache(draft, None)
    assert got.new_tokens == ref.new_tokens
    assert lookup.new_tokens == ref.new_tokens


@pytest.mark.skipif(shutil.which("cc") is None, reason="torch.compile on CPU needs a C compiler")
def test_compiled_decode_path_gives_the_same_tokens():
    """The compiled path, on CPU with inductor's default mode (CUDA would use CUDA graphs):
    ~40 s of compilation for the tiny model."""
    target, draft = _pair()
    kw = dict(gamma=2, max_new_tokens=12, do_sample=True, seed=5)
    ref = sv.speculative_generate(target, draft, IDS, **kw)
    use_static_cache(target, 64, compile=True, mode="default")
    got = sv.speculative_generate(target, draft, IDS, **kw)
    assert got.new_tokens == ref.new_tokens
