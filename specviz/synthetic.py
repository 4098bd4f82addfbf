"""Deprecated: the names of the former ``specviz.synthetic`` module, now in
specviz.verification.synthetic and specviz.fixtures.shapes; this path warns and goes in specviz 0.5."""

from specviz._legacy import deprecated
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

deprecated(__name__, "specviz.verification.synthetic and specviz.fixtures.shapes")
