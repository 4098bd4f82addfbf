"""The decoding core: one validated draft -> verify -> commit step, driven serially
(:func:`speculative_generate`, :func:`autoregressive_generate`) or batched
(:func:`speculative_generate_batch`, :func:`autoregressive_generate_batch`)."""

from .batched import BatchResult, autoregressive_generate_batch, speculative_generate_batch
from .serial import GenerationResult, autoregressive_generate, speculative_generate

__all__ = [
    "BatchResult",
    "GenerationResult",
    "autoregressive_generate",
    "autoregressive_generate_batch",
    "speculative_generate",
    "speculative_generate_batch",
]
