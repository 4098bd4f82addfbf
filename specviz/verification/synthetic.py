"""BENCHMARK-ONLY tools: a LOSSY synthetic verifier and randomly initialised Llama-shaped models.

!!! The ``"synthetic"`` verifier does NOT preserve the target's output distribution. !!!

It accepts each drafted token with a fixed probability, whatever the draft and the target
say, so that the *speed* of the engine can be measured as a function of acceptance on models
for which no trained weights exist here (randomly initialised 1B- and 8B-shaped Llamas: their
draft and target agree almost nowhere, so the real rule would accept nothing). The text it
produces is meaningless and the statistics of :mod:`specviz.stats` will reject it; that is
by design. Every use emits :class:`SyntheticAcceptanceWarning`.

The compute is real: the draft model drafts, the target verifies gamma + 1 tokens per call,
caches grow and are cropped exactly as in a real run; only the accept/reject coin is fake.

>>> import warnings
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore", SyntheticAcceptanceWarning)
...     spec = synthetic_verifier(0.7)
>>> spec.name, spec.lossless
('synthetic(0.7)', False)
"""

from __future__ import annotations

import os
import sys
import warnings

import torch

from ..core.sampling import sample
from .verdict import Verdict, VerifierSpec

__all__ = ["SyntheticAcceptanceWarning", "DEFAULT_RATE", "synthetic_verifier", "parse_synthetic"]


class SyntheticAcceptanceWarning(UserWarning):
    """Emitted whenever the lossy, benchmark-only synthetic verifier is used."""


DEFAULT_RATE = 0.8

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _outside_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning raised by this module's caller point at the
    first frame outside the specviz package -- the user's code (a notebook cell), not a file
    of whichever checkout happens to be installed (09's report printed
    ``/work/wt/nb/specviz/verification/base.py:89``: a helper's worktree). The call chain
    into this module varies (``get_verifier`` -> ``parse_synthetic`` -> here, or a direct
    call), so the level is counted rather than fixed."""
    frame = sys._getframe(2)  # the caller of synthetic_verifier
    level = 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


def synthetic_verifier(accept_rate: float = DEFAULT_RATE) -> VerifierSpec:
    """LOSSY, BENCHMARK ONLY: accept each draft independently with ``accept_rate``.

    After the first refusal the next token is the target's argmax (greedy) or a draw from
    p_target (sampling) -- not the residual. The output law is NOT the target's.
    """
    if not isinstance(accept_rate, (int, float)) or not 0.0 <= accept_rate <= 1.0:
        raise ValueError(f"synthetic accept_rate must be in [0, 1], got {accept_rate!r}")
    rate = float(accept_rate)
    warnings.warn(
        f"verifier 'synthetic({rate})' is LOSSY and for benchmarks only: drafts are accepted "
        "with a fixed probability, the output is not the target's distribution",
        SyntheticAcceptanceWarning,
        stacklevel=_outside_stacklevel(),
    )

    def verify_synthetic(tokens, q_draft, p_target, generator) -> Verdict:
        k = tokens.numel()
        dev = p_target.device
        u = torch.rand(k, generator=generator, device=dev)
        accept = torch.full((k,), rate, device=dev)
        n = int((u < accept).long().cumprod(0).sum()) if k else 0
        row = p_target[n]
        # Greedy runs have one-hot-free probabilities too; argmax if the row is a point mass.
        nxt = int(sample(row, generator)) if float(row.max()) < 1.0 else int(row.argmax())
        return Verdict(n, nxt, "bonus" if n == k else "corrected", accept, u, None)

    return VerifierSpec(
        f"synthetic({rate:g})",
        verify_synthetic,
        False,
        f"LOSSY benchmark-only: each draft accepted with probability {rate:g}",
    )


def parse_synthetic(name: str) -> VerifierSpec | None:
    """``"synthetic"`` or ``"synthetic:0.6"`` -> a synthetic verifier; other names -> None."""
    if not isinstance(name, str) or not (name == "synthetic" or name.startswith("synthetic:")):
        return None
    rate = DEFAULT_RATE
    if ":" in name:
        try:
            rate = float(name.split(":", 1)[1])
        except ValueError:
            raise ValueError(
                f"bad synthetic verifier {name!r}: expected 'synthetic:<rate in [0, 1]>'"
            ) from None
    return synthetic_verifier(rate)
