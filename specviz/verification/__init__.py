"""Verification: decide how many drafted tokens to keep and which token comes next.

:mod:`.base` holds the lossless rule and greedy matching and the registry
(:data:`VERIFIERS`, :func:`get_verifier`); :mod:`.zoo` the deliberately broken rules with
their exact first-token laws; :mod:`.synthetic` the LOSSY benchmark-only rule; :mod:`.shipped`
the mistakes engines shipped in 2024-26 (resolved by name, stated in :mod:`.shipped_laws`).
Importing the package registers all of them.
"""

from . import shipped, synthetic, zoo  # noqa: F401  (registration)
from .base import VERIFIERS, Verdict, VerifierSpec, get_verifier, verify_greedy, verify_lossless

__all__ = [
    "VERIFIERS",
    "Verdict",
    "VerifierSpec",
    "get_verifier",
    "verify_greedy",
    "verify_lossless",
]
