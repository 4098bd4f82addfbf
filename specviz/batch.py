"""The names of the former ``specviz.batch`` module, now split into subpackages; this import
path keeps working (new code imports from the new homes)."""

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
