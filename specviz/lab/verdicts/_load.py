"""The verdicts of the load notebook (09) that read a claim-4 verdict against its numbers."""

from __future__ import annotations

from typing import Any

__all__ = ["whatif_trend"]


def whatif_trend(verdict: Any, crossover: Any) -> str:
    """Why notebook 09's what-if run (a cheap LOSSY draft) moved as it did with load: claim 4's
    ``verdict`` on its closed loop (``.status``), read with the direction of the
    ``crossover``'s speed-ups (``.speedups``, lowest load first).

    >>> from types import SimpleNamespace as NS
    >>> whatif_trend(NS(status="not supported"), NS(speedups=[1.1, 1.4]))[:53]
    "in the closed loop the cheap draft's gain grew with l"
    >>> whatif_trend(NS(status="supported"), NS(speedups=[1.4, 1.1]))[-40:]
    'the verify pass got compute-bound first.'
    >>> whatif_trend(NS(status="not supported"), NS(speedups=[1.4, 1.1]))[-23:]
    'beyond the noise floor.'
    """
    grew = verdict.status == "not supported" and crossover.speedups[-1] > crossover.speedups[0]
    shrank = verdict.status in ("supported", "partly supported")
    if grew:
        return (
            "in the closed loop the cheap draft's gain grew with load beyond the noise: the "
            "reverse of claim 4 on a target that is not yet compute-bound here; a compute-bound "
            "target (larger model or batch) turns it around."
        )
    if shrank:
        return (
            "in the closed loop the cheap draft's gain shrank with load: the verify pass got "
            "compute-bound first."
        )
    return "in the closed loop its gain showed no trend beyond the noise floor."
