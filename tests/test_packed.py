"""Packed (oneDNN) linear weights: same outputs as F.linear up to summation order, the
stock path on demand, clean unpacking, clear errors, greedy text unchanged on SmolLM2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

import specviz as sv
import specviz.core.packed as packed_mod
from specviz.core.packed import (
    packed_layers,
    packing_supported,
    stock_linears,
    use_packed_weights,
)
from specviz.core.runners import use_static_cache
from specviz.drafting import PromptLookupDrafter, early_exit_model
from specviz.fixtures.shapes import random_llama
from specviz.prompts import load_prompts, render_prompt

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not packed_mod.packing_available(), reason="no oneDNN in this torch"),
]


def _mlp(dtype=torch.float32, bias=True) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(64, 160, bias=bias), nn.GELU(), nn.Linear(160, 48, bias=bias)
    ).to(dtype)


# oneDNN packs bf16 only on CPUs with AVX-512 (bw/vl/dq) or AVX-NE-CONVERT; elsewhere the
# refusal is what test_kernels checks
_BF16 = pytest.param(
    torch.bfloat16,
    2e-2,
    marks=pytest.mark.skipif(
        bool(packing_supported(torch.bfloat16)), reason="this CPU cannot pack bf16 weights"
    ),
)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), _BF16])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 64), (5, 64), (1, 32, 64)])
def test_packed_forward_matches_f_linear(dtype, tol, bias, shape):
    model = _mlp(dtype, bias)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    with torch.no_grad():
        ref = model(x)
        assert use_packed_weights(model) == 2
        got = model(x)
    assert got.shape == ref.shape and got.dtype == ref.dtype
    torch.testing.assert_close(got, ref, rtol=tol, atol=tol)
    # an edit after packing is noticed (repacked); control: the edit changed the output
    with torch.no_grad():
        before = model[0](x)
        model[0].weight.mul_(1.1)
        ref_edited = nn.functional.linear(x, model[0].weight, model[0].bias)
        edited = model[0](x)
    torch.testing.assert_close(edited, ref_edited, rtol=tol, atol=tol)
    assert not torch.allclose(before, ref_edited, rtol=tol, atol=tol)


def test_packed_kernel_runs_and_stock_linears_pauses_it(monkeypatch):
    model = _mlp()
    use_packed_weights(model)
    calls = []
    real = packed_mod._packed_linear
    monkeypatch.setattr(packed_mod, "_packed_linear", lambda *a: calls.append(1) or real(*a))
    x = torch.randn(3, 64)
    with torch.no_grad():
        model(x)
        assert len(calls) == 2
        with stock_linears(model):
            stock = model(x)
        assert len(calls) == 2  # no packed call inside the block
        ref = nn.functional.linear(
            nn.functional.gelu(nn.functional.linear(x, model[0].weight, model[0].bias)),
            model[2].weight,
            model[2].bias,
        )
        assert torch.equal(stock, ref)  # bit for bit the stock path
        model(x)
    assert len(calls) == 4  # packing is back after the block


def test_unpacking_restores_the_module_and_frees_the_copy():
    model = _mlp()
    assert use_packed_weights(model) == 2
    assert use_packed_weights(model) == 2  # idempotent
    assert packed_layers(model) == 2
    assert "forward" in model[0].__dict__
    use_packed_weights(model, False)
    assert packed_layers(model) == 0
    assert "forward" not in model[0].__dict__
    x = torch.randn(2, 64)
    with torch.no_grad():
        assert torch.equal(model[0](x), nn.functional.linear(x, model[0].weight, model[0].bias))


def test_autograd_takes_the_stock_path():
    model = _mlp()
    model.requires_grad_(True)
    use_packed_weights(model)
    x = torch.randn(4, 64, requires_grad=True)
    model(x).sum().backward()  # the packed op has no backward: must not be used here
    assert x.grad is not None and model[0].weight.grad is not None


def test_clear_errors():
    with pytest.raises(ValueError, match="no CPU float32/bfloat16 nn.Linear"):
        use_packed_weights(nn.Embedding(10, 4))
    model = _mlp()
    use_packed_weights(model)
    with pytest.raises(TypeError, match="input dtype"), torch.no_grad():
        model(torch.randn(2, 64, dtype=torch.float64))
    llama = random_llama("tiny", seed=0)
    use_packed_weights(llama)
    with pytest.raises(ValueError, match="packed CPU weights"):
        use_static_cache(llama, 64, compile=True)
    use_static_cache(llama, 64)  # the eager static cache is fine with packed weights
    out = sv.autoregressive_generate(llama, [1, 2, 3], max_new_tokens=4)
    assert len(out.new_tokens) == 4


def test_smollm2_greedy_text_is_unchanged_by_packing(smollm2):
    """On packed weights specviz's speculative and plain decoding and transformers'
    ``generate`` on the stock kernels give the same greedy text (2 prompts x 32 tokens)."""
    model, tok = smollm2
    prompts = [render_prompt(tok, p) for p in load_prompts(categories="code", per_category=2)]
    kw = dict(max_new_tokens=32, eos_token_id=tok.eos_token_id)
    try:
        assert use_packed_weights(model) > 100
        for ids in prompts:
            with stock_linears(model):
                x = torch.tensor([ids])
                hf = model.generate(
                    x,
                    attention_mask=torch.ones_like(x),
                    max_new_tokens=32,
                    do_sample=False,
                    eos_token_id=tok.eos_token_id,
                    pad_token_id=tok.eos_token_id,
                )[0, len(ids) :].tolist()
            plain = sv.autoregressive_generate(model, ids, **kw).new_tokens
            spec = sv.speculative_generate(model, PromptLookupDrafter(), ids, gamma=4, **kw)
            assert plain == hf
            assert spec.new_tokens == hf
    finally:
        use_packed_weights(model, False)
    assert packed_layers(model) == 0


def test_load_model_packed_flag():
    from specviz.models import load_model

    model = load_model("smollm2-135m", progress=False, packed=True)
    assert packed_layers(model) == sum(isinstance(m, nn.Linear) for m in model.modules())


def test_memory_report_counts_the_packed_copy():
    from specviz.perf.metrics import memory_report, weights_bytes

    llama = random_llama("tiny", seed=0)
    before = memory_report(llama, context_tokens=16)
    assert before.packed_weights_bytes == 0
    use_packed_weights(llama)
    after = memory_report(llama, context_tokens=16)
    linear = sum(m.weight.numel() * 4 for m in llama.modules() if isinstance(m, nn.Linear))
    assert after.packed_weights_bytes >= linear  # a second copy (blocked layouts may pad)
    assert after.packed_weights_bytes < 1.5 * linear
    assert after.total_bytes == before.total_bytes + after.packed_weights_bytes
    assert weights_bytes(llama) == before.target_weights_bytes  # the dense weights stay
    # an early-exit draft shares the target's (packed) layers: counted once
    shared = memory_report(llama, early_exit_model(llama, 1), context_tokens=16)
    assert shared.packed_weights_bytes == after.packed_weights_bytes


def test_keep_dense_false_frees_untied_weights_and_keeps_outputs():
    """The packed copy replaces the dense one (tied weights stay); outputs are unchanged and
    every path that would read a freed weight raises instead of computing with zeros."""
    from specviz.core.packed import dense_dropped
    from specviz.perf.metrics import memory_report, weights_bytes

    llama = random_llama("tiny", seed=0)
    llama.lm_head.weight = llama.model.embed_tokens.weight  # a tied head, as SmolLM2 and Qwen
    before = weights_bytes(llama)
    use_packed_weights(llama)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        ref = llama(ids).logits
    linear = [m for m in llama.modules() if isinstance(m, nn.Linear)]
    untied = sum(m.weight.numel() * 4 for m in linear if m is not llama.lm_head)
    use_packed_weights(llama, keep_dense=False)
    assert dense_dropped(llama) == len(linear) - 1  # the tied head keeps its dense weight
    assert llama.lm_head.weight.data_ptr() == llama.model.embed_tokens.weight.data_ptr()
    with torch.no_grad():
        torch.testing.assert_close(llama(ids).logits, ref, rtol=0, atol=0)
    assert before - weights_bytes(llama) >= untied - 4 * len(linear)
    assert memory_report(llama, context_tokens=16).target_weights_bytes == weights_bytes(llama)
    out = sv.autoregressive_generate(llama, [1, 2, 3], max_new_tokens=4)
    assert len(out.new_tokens) == 4
    with pytest.raises(RuntimeError, match="dense linear weights"), stock_linears(llama):
        pass
    with pytest.raises(RuntimeError, match="dense linear weights"):
        use_packed_weights(llama, False)
    x = torch.randn(2, 64, requires_grad=True)
    with pytest.raises(RuntimeError, match="dense linear weights"):
        llama.model.layers[0].mlp.up_proj(x)
    from specviz.models import load_model

    with pytest.raises(ValueError, match="pass packed=True"):
        load_model("smollm2-135m", keep_dense=False, packed=False)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_freed_weights_of_a_mapped_file_leave_memory(tmp_path):
    """transformers maps safetensors files: a dense weight freed after packing must give its
    resident pages back (madvise), or the packed model costs its size twice in RSS (the demo
    peaked at 15.8 GiB before)."""
    from specviz.core.packed import _file_mappings, _release_file_pages

    def rss_file_mib() -> int:
        text = Path("/proc/self/status").read_text()
        return int(re.search(r"RssFile:\s+(\d+)", text).group(1)) // 1024

    n = 64 * 2**20 // 4  # 64 MiB of float32
    path = tmp_path / "weights.bin"
    torch.arange(n, dtype=torch.float32).numpy().tofile(path)
    w = torch.from_file(str(path), shared=False, size=n, dtype=torch.float32)
    keep = torch.from_file(str(path), shared=False, size=1024, dtype=torch.float32)
    before = rss_file_mib()
    assert float(w.sum()) > 0  # read: the pages are resident now
    touched = rss_file_mib()
    assert touched - before > 48
    _release_file_pages(w, _file_mappings())
    assert rss_file_mib() < touched - 48
    # anonymous memory and other mappings are not touched
    anon = torch.ones(n)
    _release_file_pages(anon, _file_mappings())
    assert float(anon.sum()) == n and float(keep[3]) == 3.0


@pytest.mark.skipif(not Path("/proc/self/pagemap").exists(), reason="needs Linux pagemap")
def test_pages_of_a_weight_in_use_are_dropped_only_while_unwritten(tmp_path):
    """A weight that stays in use (a tied embedding, the dense copy while kernels are timed)
    may lose its resident pages only while they are the file's: it then reads the same values
    again. A written page of the private mapping holds the edit and must stay (negative
    control: dropping it regardless brings back the file's value)."""
    from specviz.core.packed import _file_mappings, _release_file_pages

    n = 4 * 2**20 // 4
    path = tmp_path / "weights.bin"
    torch.arange(n, dtype=torch.float32).numpy().tofile(path)
    w = torch.from_file(str(path), shared=False, size=n, dtype=torch.float32)
    total = float(w.double().sum())
    assert _release_file_pages(w, _file_mappings(), clean_only=True)  # clean: dropped
    assert float(w.double().sum()) == total  # and read again from the file
    w[5000] = -1.0  # one page now holds an edit
    assert not _release_file_pages(w, _file_mappings(), clean_only=True)
    assert float(w[5000]) == -1.0
    assert _release_file_pages(w, _file_mappings())  # unconditional: only for freed weights
    assert float(w[5000]) == 5000.0  # the edit is gone: why in-use weights need the check
