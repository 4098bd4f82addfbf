"""The pinned signature names and the adapter that calls each: above both adapter modules
(:mod:`._adapters`, :mod:`._adapters_batch`), which import nothing of this one."""

from __future__ import annotations

from collections.abc import Callable

from ._adapters import Adapter, SpecvizAdapter, TransformersAdapter, VllmAdapter
from ._adapters_batch import FlashInferAdapter, SglangTreeAdapter, TrtllmAdapter

__all__ = ["ADAPTERS", "get_adapter"]

#: Signature name -> its adapter class (the kit's ``SIGNATURES``, in that order).
ADAPTERS: dict[str, Callable[[], Adapter]] = {
    "transformers": TransformersAdapter,
    "vllm": VllmAdapter,
    "flashinfer": FlashInferAdapter,
    "trtllm": TrtllmAdapter,
    "sglang_tree": SglangTreeAdapter,
    "specviz": SpecvizAdapter,
}


def get_adapter(signature: str) -> Adapter:
    """The adapter of a pinned signature name."""
    if signature not in ADAPTERS:
        raise ValueError(f"unknown signature {signature!r}; choose from {sorted(ADAPTERS)}")
    return ADAPTERS[signature]()
