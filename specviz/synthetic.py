"""The names of the former ``specviz.synthetic`` module, now split into subpackages; this import
path keeps working (new code imports from the new homes)."""

from specviz.fixtures.shapes import (
    LLAMA_SHAPES,
    LlamaShape,
    llama_config,
    model_bytes,
    random_llama,
)
from specviz.verification.synthetic import (
    DEFAULT_RATE,
    SyntheticAcceptanceWarning,
    parse_synthetic,
    synthetic_verifier,
)

__all__ = [
    "DEFAULT_RATE",
    "LLAMA_SHAPES",
    "LlamaShape",
    "SyntheticAcceptanceWarning",
    "llama_config",
    "model_bytes",
    "parse_synthetic",
    "random_llama",
    "synthetic_verifier",
]
