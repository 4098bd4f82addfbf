"""Verifiers by name: the registry (:data:`VERIFIERS`, :data:`PREFIXES`, :func:`get_verifier`).

The rules live in their own modules -- the lossless rule and greedy matching in
:mod:`.lossless`, token trees in :mod:`.trees`, the deliberately broken rules of the bug zoo in
:mod:`.zoo` and :mod:`.shipped`, the LOSSY benchmark-only rule in :mod:`.synthetic` -- and
none of them writes here: this module imports each and lists its members explicitly, so the
registry is whole whatever was imported first (no registration by import side effect).

The broken rules each reproduce a mistake a real system shipped, so that the statistics
module can show it being caught. They are selected by name in
``speculative_generate(..., verifier=...)``.
"""

from __future__ import annotations

from collections.abc import Callable

from . import shipped, synthetic, zoo
from .lossless import (  # noqa: F401  (their historical home: users import them from here)
    _first_false,
    _gathered,
    _lossless_core,
    _point_mass,
    _residual_token,
    _shape,
    _verify_greedy,
    _verify_lossless,
    check_chain_shapes,
    verify_greedy,
    verify_lossless,
    verify_lossless_groups,
)
from .trees import _verify_tree_greedy, _verify_tree_lossless
from .verdict import Verdict, VerifierSpec, VerifyFn

__all__ = [
    "PREFIXES",
    "VERIFIERS",
    "Verdict",
    "VerifierSpec",
    "VerifyFn",
    "get_verifier",
    "verify_greedy",
    "verify_lossless",
    "verify_lossless_groups",
]

LOSSLESS = VerifierSpec(
    "lossless",
    _verify_lossless,  # the public names check shapes; the engine has checked them
    True,
    "min(1, p/q), residual, bonus; trees: the rule of their sampling",
    verify_tree=_verify_tree_lossless,
    verify_groups=verify_lossless_groups,
)
GREEDY = VerifierSpec(
    "greedy",
    _verify_greedy,
    True,
    "greedy matching (do_sample=False)",
    verify_tree=_verify_tree_greedy,
)

#: Every rule by name: the two lossless ones, then the bug zoo's broken chain rules and its
#: broken tree rules (:mod:`specviz.verification.zoo`).
VERIFIERS: dict[str, VerifierSpec] = {
    s.name: s for s in (LOSSLESS, GREEDY, *zoo.BROKEN, *zoo.TREE_SPECS.values())
}

#: Name prefixes resolved by a function (``"synthetic:0.8"``, ``"ensemble:0.3"``), kept out of
#: VERIFIERS so that nothing iterating the bug zoo picks them up by accident: the shipped
#: mistakes (:mod:`.shipped`), the synthetic rule, the cross-vocabulary shortcuts (:mod:`.zoo`).
PREFIXES: dict[str, Callable[[str], VerifierSpec]] = {
    **dict.fromkeys(shipped.MEMBER_NAMES, shipped.shipped_verifier),
    "synthetic": synthetic.parse_synthetic,
    **dict.fromkeys(zoo.CROSS_VOCAB_ZOO, zoo.cross_vocab_spec),
}


def get_verifier(verifier: str | VerifierSpec, *, greedy: bool) -> VerifierSpec:
    """Resolve a verifier; with greedy decoding "lossless" means greedy matching.

    ``"synthetic"`` / ``"synthetic:<rate>"`` resolve to the LOSSY benchmark-only verifier of
    :mod:`specviz.verification.synthetic` (or pass ``synthetic_verifier(rate)`` itself).
    """
    if isinstance(verifier, VerifierSpec):
        return verifier
    if isinstance(verifier, str) and verifier.split(":", 1)[0] in PREFIXES:
        return PREFIXES[verifier.split(":", 1)[0]](verifier)
    if not isinstance(verifier, str) or verifier not in VERIFIERS:
        raise ValueError(f"unknown verifier {verifier!r}; choose from {sorted(VERIFIERS)}")
    if verifier == "greedy" and not greedy:
        raise ValueError(
            "verifier='greedy' is greedy matching and needs do_sample=False; with sampling use "
            "verifier='lossless' (which is greedy matching when do_sample=False)"
        )
    if greedy and verifier == "lossless":
        return VERIFIERS["greedy"]
    return VERIFIERS[verifier]
