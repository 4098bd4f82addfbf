"""The batched engine's CPU speed levers keep the logits (issue 30, "faster verdicts"):
SDPA reads grouped-query K/V heads in place on multi-column calls instead of transformers'
``repeat_kv`` copy, and big batched calls may run at a measured thread count, leaving the
process's count as it was."""

from __future__ import annotations

import pytest
import torch

import specviz.core.batch_runners as br
from specviz.fixtures.llamas import tiny_llama


def _feed(
    model, gqa_env: str | None, monkeypatch, grouped: bool = False
) -> tuple[list[torch.Tensor], int]:
    """Prefill a shared prompt, then three multi-column steps with holes; returns the logits
    and how many times transformers' repeat_kv ran. ``grouped``: with the batched engine's
    own attention (:func:`~specviz.core.batch_runners.grouped_attention`), else with SDPA."""
    import contextlib

    import transformers.integrations.sdpa_attention as sdpa

    if not grouped:
        monkeypatch.setattr(br, "_grouped_attention", lambda *a: contextlib.nullcontext())

    calls = [0]
    real = sdpa.repeat_kv

    def counting(*a, **k):
        calls[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(sdpa, "repeat_kv", counting)
    if gqa_env is None:
        monkeypatch.delenv(br._GQA_ENV, raising=False)
    else:
        monkeypatch.setenv(br._GQA_ENV, gqa_env)
    g = torch.Generator().manual_seed(0)
    runner = br.BatchRunner(model, 6)
    runner.prefill_shared(torch.randint(0, 50, (9,), generator=g))
    out = []
    for width in (2, 3, 1):
        tokens = torch.randint(0, 50, (6, width), generator=g)
        valid = torch.ones(6, width, dtype=torch.bool)
        valid[::2, 0] = False  # holes, as rejected drafts leave them
        out.append(runner.extend(tokens, valid, width))
    return out, calls[0]


def test_gqa_in_place_gives_the_same_logits_as_repeat_kv(monkeypatch):
    model = tiny_llama(50, seed=3, hidden_size=32, num_layers=2)
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    copied, n_copy = _feed(model, "0", monkeypatch)  # "0": transformers' own repeat_kv path
    in_place, n_in_place = _feed(model, None, monkeypatch)
    # the control really copied, the engine really did not (a renamed switch would show here)
    assert n_copy > 0
    assert n_in_place == 0
    for a, b in zip(copied, in_place, strict=True):
        assert torch.equal(a, b)
    assert br._GQA_ENV not in __import__("os").environ  # the switch is scoped to the call


def test_grouped_attention_gives_sdpas_logits_without_copies(monkeypatch):
    """The engine's grouped attention (two matmuls per key/value head) against SDPA on
    transformers' repeat_kv path: the same logits up to float32 rounding, no K/V copy, and the
    attention registry left as it was."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    model = tiny_llama(50, seed=3, hidden_size=32, num_layers=2)
    sdpa_before = ALL_ATTENTION_FUNCTIONS["sdpa"]
    copied, _ = _feed(model, "0", monkeypatch)
    grouped, n_grouped = _feed(model, None, monkeypatch, grouped=True)
    assert n_grouped == 0
    for a, b in zip(copied, grouped, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is sdpa_before


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_attention_matches_sdpa_and_a_wrong_head_order_does_not(dtype):
    """Random [B, Hq, q, D] queries over [B, Hkv, kv, D] keys with a boolean mask (one query
    fully masked, as a hole's column can be): SDPA's output within the dtype's rounding, and
    finite everywhere; the negative control -- query heads paired with the wrong key/value
    heads -- is far off."""
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    B, Hq, Hkv, q, kv, D = 4, 6, 2, 3, 7, 8
    query, key, value = (
        torch.randn(B, h, n, D, generator=g).to(dtype) for h, n in ((Hq, q), (Hkv, kv), (Hkv, kv))
    )
    mask = torch.rand(B, 1, q, kv, generator=g) > 0.3
    mask[..., 0] = True
    mask[1, 0, 2] = False  # a fully masked query
    module = torch.nn.Module()
    fallback = lambda *a, **k: pytest.fail("the grouped path must not fall back")  # noqa: E731
    out, _ = br.grouped_attention(module, query, key, value, mask, fallback=fallback)
    assert out.shape == (B, q, Hq, D) and torch.isfinite(out).all()
    ref = F.scaled_dot_product_attention(
        query.float(), key.float(), value.float(), attn_mask=mask, enable_gqa=True
    ).transpose(1, 2)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    keep = mask.any(-1).view(B, 1, q, 1).transpose(1, 2)  # SDPA's fully masked row is NaN
    torch.testing.assert_close(out.float() * keep, torch.nan_to_num(ref) * keep, rtol=tol, atol=tol)
    wrong_order = query.view(B, Hkv, Hq // Hkv, q, D).transpose(1, 2).reshape(B, Hq, q, D)
    bad, _ = br.grouped_attention(module, wrong_order, key, value, mask, fallback=fallback)
    assert (bad.float() - out.float()).abs().max() > 0.1


@pytest.mark.parametrize("q", [1, 3])
def test_grouped_attention_without_a_mask_is_sdpas_causal_rule(q):
    """transformers passes no mask when a batch has no holes: the grouped path then applies
    SDPA's causal rule itself (query i sees the keys up to its own column) instead of
    falling back; the control -- every key visible to a 3-query call -- is far off."""
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(1)
    B, Hq, Hkv, kv, D = 3, 6, 2, 7, 8
    query = torch.randn(B, Hq, q, D, generator=g)
    key, value = (torch.randn(B, Hkv, kv, D, generator=g) for _ in range(2))
    fallback = lambda *a, **k: pytest.fail("the grouped path must not fall back")  # noqa: E731
    out, _ = br.grouped_attention(torch.nn.Module(), query, key, value, None, fallback=fallback)
    causal = torch.ones(q, kv, dtype=torch.bool).tril(kv - q)
    ref = F.scaled_dot_product_attention(query, key, value, attn_mask=causal, enable_gqa=True)
    torch.testing.assert_close(out, ref.transpose(1, 2), rtol=1e-5, atol=1e-5)
    if q > 1:
        flat = F.scaled_dot_product_attention(query, key, value, enable_gqa=True)
        assert (flat.transpose(1, 2) - out).abs().max() > 1e-2


def test_batch_threads_leaves_small_calls_and_unchosen_models_alone():
    model = tiny_llama(7, seed=0)
    assert br.batch_threads(model, br.BATCH_THREAD_TOKENS - 1) is None
    # no kernel choice was made for this model (nor, in a fresh process, any): current count
    from specviz.core.kernels import kernel_report

    if kernel_report() is None:
        assert br.batch_threads(model, 10_000) is None


def test_measured_thread_count_is_cached_and_restored(monkeypatch):
    """With a kernel choice that timed 1 and 2 threads and chose 1, a big call measures once
    which count is faster for it (either answer is legitimate on a shared host), reuses that
    answer, and leaves the process at the chosen count afterwards."""
    from specviz.core import kernels

    model = tiny_llama(7, seed=1)
    timing = [kernels.KernelTiming("stock", n, "decode", 1, (0.01,)) for n in (1, 2)]
    report = kernels.KernelReport("tiny", "host", "stock", "stock", 1, 4, 128, "measured", "",
                                  timings=tuple(timing))  # fmt: skip
    monkeypatch.setattr(kernels, "kernel_report", lambda model=None: report)
    measured = []
    real = br._time_threads
    monkeypatch.setattr(br, "_time_threads", lambda *a, **k: measured.append(1) or real(*a, **k))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        first = br.batch_threads(model, 10_000)
        again = br.batch_threads(model, 10_000)
        assert first in (None, 2) and again == first
        assert measured == [1]  # measured once per model, count pair and process
        runner = br.BatchRunner(model, 40)
        runner.prefill_shared(torch.tensor([1, 2, 3]))
        runner.extend(torch.ones(40, 1, dtype=torch.long), torch.ones(40, 1, dtype=torch.bool), 1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("tokens", [0, 1, br.BATCH_THREAD_TOKENS - 1])
def test_small_calls_never_measure(tokens, monkeypatch):
    monkeypatch.setattr(br, "_time_threads", lambda *a, **k: pytest.fail("measured"))
    assert br.batch_threads(tiny_llama(7), tokens) is None
