"""The names of the former ``specviz.verify`` module, now split into subpackages; this import
path keeps working (new code imports from the new homes)."""

from specviz.verification.base import (
    VERIFIERS,
    Verdict,
    VerifierSpec,
    VerifyFn,
    get_verifier,
    verify_greedy,
    verify_lossless,
)
from specviz.verification.zoo import (
    make_threshold,
    make_typical,
    verify_always_accept,
    verify_ratio_unchecked,
    verify_residual_from_target,
)

__all__ = [
    "VERIFIERS",
    "Verdict",
    "VerifierSpec",
    "VerifyFn",
    "get_verifier",
    "make_threshold",
    "make_typical",
    "verify_always_accept",
    "verify_greedy",
    "verify_lossless",
    "verify_ratio_unchecked",
    "verify_residual_from_target",
]
