"""Deprecated: the names of the former ``specviz.verify`` module, now in
specviz.verification and specviz.verification.zoo; this path warns and goes in specviz 0.5."""

from specviz._legacy import deprecated
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

deprecated(__name__, "specviz.verification and specviz.verification.zoo")
