"""Deprecated: the names of the former ``specviz.batch`` module, now in
specviz.decoding; this path warns and goes in specviz 0.5."""

from specviz._legacy import deprecated
from specviz.decoding.batched import (
    BatchResult,
    autoregressive_generate_batch,
    speculative_generate_batch,
)

__all__ = [
    "BatchResult",
    "autoregressive_generate_batch",
    "speculative_generate_batch",
]

deprecated(__name__, "specviz.decoding")
