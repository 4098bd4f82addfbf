"""Verification: decide how many drafted tokens to keep and which token comes next.

:mod:`.lossless` holds the lossless rule and greedy matching, :mod:`.trees` the rules for token
trees, :mod:`.zoo` the deliberately broken rules, :mod:`.synthetic` the LOSSY benchmark-only
rule, :mod:`.shipped` the mistakes engines shipped in 2024-26; :mod:`.base` lists them all by
name (:data:`VERIFIERS`, :func:`get_verifier`). Their exact laws and effect sizes are analysis
above this layer: :mod:`specviz.effects`.
"""

from .base import VERIFIERS, get_verifier
from .lossless import verify_greedy, verify_lossless
from .verdict import Verdict, VerifierSpec

__all__ = [
    "VERIFIERS",
    "Verdict",
    "VerifierSpec",
    "get_verifier",
    "verify_greedy",
    "verify_lossless",
]
