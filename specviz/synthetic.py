"""BENCHMARK-ONLY tools: a LOSSY synthetic verifier and randomly initialised Llama-shaped models.

!!! The ``"synthetic"`` verifier does NOT preserve the target's output distribution. !!!

It accepts each drafted token with a fixed probability, whatever the draft and the target
say, so that the *speed* of the engine can be measured as a function of acceptance on models
for which no trained weights exist here (randomly initialised 1B- and 8B-shaped Llamas: their
draft and target agree almost nowhere, so the real rule would accept nothing). The text it
produces is meaningless and the statistics of :mod:`specviz.stats` will reject it; that is
by design. Every use emits :class:`SyntheticAcceptanceWarning`.

The compute is real: the draft model drafts, the target verifies gamma + 1 tokens per call,
caches grow and are cropped exactly as in a real run; only the accept/reject coin is fake.

>>> import warnings
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore", SyntheticAcceptanceWarning)
...     spec = synthetic_verifier(0.7)
>>> spec.name, spec.lossless
('synthetic(0.7)', False)
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from .sampling import sample
from .verify import Verdict, VerifierSpec

__all__ = [
    "SyntheticAcceptanceWarning",
    "synthetic_verifier",
    "parse_synthetic",
    "LLAMA_SHAPES",
    "LlamaShape",
    "llama_config",
    "random_llama",
    "model_bytes",
]


class SyntheticAcceptanceWarning(UserWarning):
    """Emitted whenever the lossy, benchmark-only synthetic verifier is used."""


DEFAULT_RATE = 0.8


def synthetic_verifier(accept_rate: float = DEFAULT_RATE) -> VerifierSpec:
    """LOSSY, BENCHMARK ONLY: accept each draft independently with ``accept_rate``.

    After the first refusal the next token is the target's argmax (greedy) or a draw from
    p_target (sampling) -- not the residual. The output law is NOT the target's.
    """
    if not isinstance(accept_rate, (int, float)) or not 0.0 <= accept_rate <= 1.0:
        raise ValueError(f"synthetic accept_rate must be in [0, 1], got {accept_rate!r}")
    rate = float(accept_rate)
    warnings.warn(
        f"verifier 'synthetic({rate})' is LOSSY and for benchmarks only: drafts are accepted "
        "with a fixed probability, the output is not the target's distribution",
        SyntheticAcceptanceWarning,
        stacklevel=3,
    )

    def verify_synthetic(tokens, q_draft, p_target, generator) -> Verdict:
        k = tokens.numel()
        dev = p_target.device
        u = torch.rand(k, generator=generator, device=dev)
        accept = torch.full((k,), rate, device=dev)
        n = int((u < accept).long().cumprod(0).sum()) if k else 0
        row = p_target[n]
        # Greedy runs have one-hot-free probabilities too; argmax if the row is a point mass.
        nxt = int(sample(row, generator)) if float(row.max()) < 1.0 else int(row.argmax())
        return Verdict(n, nxt, "bonus" if n == k else "corrected", accept, u, None)

    return VerifierSpec(
        f"synthetic({rate:g})",
        verify_synthetic,
        False,
        f"LOSSY benchmark-only: each draft accepted with probability {rate:g}",
    )


def parse_synthetic(name: str) -> VerifierSpec | None:
    """``"synthetic"`` or ``"synthetic:0.6"`` -> a synthetic verifier; other names -> None."""
    if not isinstance(name, str) or not (name == "synthetic" or name.startswith("synthetic:")):
        return None
    rate = DEFAULT_RATE
    if ":" in name:
        try:
            rate = float(name.split(":", 1)[1])
        except ValueError:
            raise ValueError(
                f"bad synthetic verifier {name!r}: expected 'synthetic:<rate in [0, 1]>'"
            ) from None
    return synthetic_verifier(rate)


# -- randomly initialised Llama-shaped models ----------------------------------------------


@dataclass(frozen=True)
class LlamaShape:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    tie_word_embeddings: bool
    note: str = ""

    def num_parameters(self, num_layers: int | None = None) -> int:
        """Parameters of this shape (tied embeddings counted once)."""
        L = self.num_hidden_layers if num_layers is None else num_layers
        h, i, v = self.hidden_size, self.intermediate_size, self.vocab_size
        head = h // self.num_attention_heads
        attn = h * h * 2 + 2 * h * self.num_key_value_heads * head  # q, o, k, v
        mlp = 3 * h * i
        emb = v * h * (1 if self.tie_word_embeddings else 2)
        return L * (attn + mlp + 2 * h) + emb + h


LLAMA_SHAPES: dict[str, LlamaShape] = {
    # Llama-3.2-1B: 1.24B parameters, 4.9 GB in fp32, 2.5 GB in bf16.
    "1b": LlamaShape(2048, 8192, 16, 32, 8, 128256, True, "Llama-3.2-1B shape"),
    # Llama-3.1-8B: 8.0B parameters, 32 GB in fp32 (does not fit a 24 GiB machine), 16 GB in
    # bf16. On small machines use dtype=bfloat16 and/or num_layers < 32 (per-layer cost is
    # what matters for speed ratios; say which you used).
    "8b": LlamaShape(4096, 14336, 32, 32, 8, 128256, False, "Llama-3.1-8B shape"),
    # A Llama-3-vocabulary draft of ~68M non-embedding-light parameters (JackFram-68m-like).
    "draft-68m": LlamaShape(768, 3072, 2, 12, 12, 128256, True, "small draft, Llama-3 vocab"),
    # Test sizes: seconds to build, milliseconds per step.
    "tiny": LlamaShape(64, 128, 2, 4, 2, 512, True, "test size"),
    "tiny-draft": LlamaShape(32, 64, 1, 2, 1, 512, True, "test size draft"),
}


def llama_config(shape: str | LlamaShape, *, num_layers: int | None = None) -> Any:
    """A transformers ``LlamaConfig`` for a named shape (see :data:`LLAMA_SHAPES`)."""
    from transformers import LlamaConfig

    if isinstance(shape, str):
        if shape not in LLAMA_SHAPES:
            raise ValueError(f"unknown Llama shape {shape!r}; choose from {sorted(LLAMA_SHAPES)}")
        shape = LLAMA_SHAPES[shape]
    layers = shape.num_hidden_layers if num_layers is None else num_layers
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ValueError(f"num_layers must be an integer >= 1, got {num_layers!r}")
    return LlamaConfig(
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        vocab_size=shape.vocab_size,
        tie_word_embeddings=shape.tie_word_embeddings,
        max_position_embeddings=8192,
        rope_theta=500000.0,
        bos_token_id=1,
        eos_token_id=2,
    )


def model_bytes(shape: str | LlamaShape, dtype: torch.dtype, num_layers: int | None = None) -> int:
    """Weight bytes of a shape before building it (to refuse what cannot fit)."""
    if isinstance(shape, str):
        shape = LLAMA_SHAPES[shape]
    return shape.num_parameters(num_layers) * torch.empty(0, dtype=dtype).element_size()


def random_llama(
    shape: str | LlamaShape,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    num_layers: int | None = None,
    seed: int = 0,
    max_bytes: int | None = None,
) -> Any:
    """A randomly initialised ``LlamaForCausalLM`` of the given shape, eval mode, no grads.

    For timing only: its predictions are noise. ``max_bytes`` refuses shapes that would not
    fit (e.g. the 8B shape in fp32 needs 32 GB) with a clear error instead of an OOM kill.
    """
    from transformers import LlamaForCausalLM

    cfg = llama_config(shape, num_layers=num_layers)
    need = model_bytes(shape, dtype, cfg.num_hidden_layers)
    if max_bytes is not None and need > max_bytes:
        raise MemoryError(
            f"a {shape!r}-shaped Llama with {cfg.num_hidden_layers} layers in {dtype} needs "
            f"{need / 2**30:.1f} GiB of weights, over the {max_bytes / 2**30:.1f} GiB allowed; "
            "use dtype=torch.bfloat16 and/or fewer num_layers"
        )
    # transformers initialises from the global RNG: fork it so the caller's stream is untouched.
    devices = [torch.device(device)] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        with _default_dtype(dtype):
            model = LlamaForCausalLM(cfg)
    model = model.to(device=device, dtype=dtype)
    model.eval()
    model.requires_grad_(False)
    return model


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype):
    before = torch.get_default_dtype()
    if dtype.is_floating_point:
        torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)
