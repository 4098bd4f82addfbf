"""Tiny random transformers Llamas: real models (real attention, real KV caches, real
kernels) small enough to sample hundreds of thousands of continuations in seconds.

specviz's toy models compute every law exactly but share none of a transformer's numerics;
a statistical check that is calibrated on toys only can still be wrong on a real model
(issue 13: float drift between a verify pass and a decode pass split the atoms of the
log-probability law, and KS rejected a correct sampler). These are the real-model fixtures
for that kind of calibration: ``LlamaForCausalLM`` with random weights and an LM head
scaled by ``peak`` so next-token laws are peaked, as a trained model's are.

>>> target, draft = tiny_llama_pair(7, seed=0)
>>> target.config.vocab_size, target.config.num_hidden_layers
(7, 2)
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["tiny_llama", "tiny_llama_pair"]


def tiny_llama(
    vocab_size: int = 7,
    *,
    seed: int = 0,
    num_layers: int = 2,
    hidden_size: int = 32,
    peak: float = 4.0,
    max_positions: int = 256,
) -> Any:
    """A random ``LlamaForCausalLM`` (fp32, CPU, eval mode) whose LM head is scaled by
    ``peak`` (1 = the initialiser's nearly flat laws; 4-8 = peaked, like a trained LM)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    for name, value, low in (("vocab_size", vocab_size, 2), ("num_layers", num_layers, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if hidden_size % 8:
        raise ValueError(f"hidden_size must be a multiple of 8 (4 heads), got {hidden_size}")
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    cfg.name_or_path = f"tiny-llama(V={vocab_size},seed={seed})"
    gen_state = torch.random.get_rng_state()
    try:  # weights from this seed only; the caller's global RNG stream is left as it was
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg).eval()
    finally:
        torch.random.set_rng_state(gen_state)
    with torch.no_grad():
        model.lm_head.weight.mul_(peak)
    return model


def tiny_llama_pair(
    vocab_size: int = 7,
    *,
    seed: int = 0,
    draft_noise: float = 0.5,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """(target, draft): the draft is the target with every weight moved by Gaussian noise of
    ``draft_noise`` times that tensor's standard deviation, so the two agree often but not
    always (acceptance well inside (0, 1), the regime where verification bugs show)."""
    target = tiny_llama(vocab_size, seed=seed, **kwargs)
    draft = tiny_llama(vocab_size, seed=seed, **kwargs)
    g = torch.Generator().manual_seed(seed + 10_000)
    with torch.no_grad():
        for p in draft.parameters():
            scale = float(p.std()) if p.numel() > 1 else 0.0
            p.add_(torch.randn(p.shape, generator=g) * draft_noise * scale)
    draft.config.name_or_path = f"{target.config.name_or_path}+noise({draft_noise})"
    return target, draft
