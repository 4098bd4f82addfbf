"""The verdicts of the load notebook (09) that read a claim-4 verdict against its numbers."""

from __future__ import annotations

from typing import Any

__all__ = ["whatif_trend"]


def _shrink_reason(sweep: Any) -> str:
    """Why a gain shrank with the batch, read off a batch sweep (``batch_size``, ``mode``,
    ``speedup``, ``decode_speedup``, ``prefill_s``, ``seconds``): whether the decoding phase
    kept its gain -- then the prompt prefill, which speculation does not shorten and which
    takes a growing share of a larger batch, is what shrank it end to end -- or lost it too."""
    spec = sweep[sweep["mode"] == "speculative"].set_index("batch_size")
    plain = sweep[sweep["mode"] == "plain"].set_index("batch_size")
    lo, hi = min(spec.index), max(spec.index)
    e_lo, e_hi = float(spec.loc[lo, "speedup"]), float(spec.loc[hi, "speedup"])
    d_lo, d_hi = float(spec.loc[lo, "decode_speedup"]), float(spec.loc[hi, "decode_speedup"])
    share = (plain["prefill_s"] / plain["seconds"]).astype(float)
    nums = (f"in the batch sweep, end to end {e_lo:.2f}x at batch {lo} -> {e_hi:.2f}x at "
            f"{hi}, decoding phase alone {d_lo:.2f}x -> {d_hi:.2f}x")  # fmt: skip
    if d_lo > 1.0 and d_hi - 1.0 >= 0.5 * (d_lo - 1.0):
        rows = "row" if lo == 1 else "rows"
        return (f"{nums}: the decoding phase kept most of its gain, while the prompt prefill, "
                f"which speculation does not shorten, grew from {share[lo]:.0%} of a plain "
                f"batch's time at {lo} {rows} to {share[hi]:.0%} at {hi}.")  # fmt: skip
    return (f"{nums}: the decoding phase lost its gain too -- each speculative step of a larger "
            "batch cost more relative to a plain one.")  # fmt: skip


def whatif_trend(verdict: Any, crossover: Any, sweep: Any = None) -> str:
    """Why notebook 09's what-if run (a cheap LOSSY draft) moved as it did with load: claim 4's
    ``verdict`` on its closed loop (``.status``), read with the direction of the
    ``crossover``'s speed-ups (``.speedups``, lowest load first). Where the gain shrank, the
    reason is read from the what-if's batch ``sweep`` (decoding phase against end to end, and
    the prefill's share of a batch) -- never a fixed sentence: the committed 09 once printed
    "the verify pass got compute-bound first" beside a decoding phase that kept 1.45x.

    >>> import pandas as pd
    >>> from types import SimpleNamespace as NS
    >>> whatif_trend(NS(status="not supported"), NS(speedups=[1.1, 1.4]))[:53]
    "in the closed loop the cheap draft's gain grew with l"
    >>> bs = pd.DataFrame(dict(batch_size=[1, 1, 16, 16], mode=["plain", "speculative"] * 2,
    ...     speedup=[1, 1.44, 1, 1.05], decode_speedup=[1, 1.56, 1, 1.45],
    ...     prefill_s=[0.1, 0.1, 3.0, 3.0], seconds=[1.0, 0.7, 5.0, 4.8]))
    >>> why = whatif_trend(NS(status="partly supported"), NS(speedups=[1.6, 0.97]), bs)
    >>> why.endswith("grew from 10% of a plain batch's time at 1 row to 60% at 16.")
    True
    >>> "lost its gain too" in whatif_trend(NS(status="supported"), NS(speedups=[1.6, 0.9]),
    ...     bs.assign(decode_speedup=[1, 1.56, 1, 1.05]))
    True
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
        head = "in the closed loop the cheap draft's gain shrank with load"
        return f"{head}; {_shrink_reason(sweep)}" if sweep is not None else f"{head}."
    return "in the closed loop its gain showed no trend beyond the noise floor."
