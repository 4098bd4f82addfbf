"""Notebook 06's descriptive lines next to its claim-7 verdict: per precision and drafter, how
many prompts kept their greedy text; where the greedy margins sit (near and exact ties); where
the divergences sit among them; what the mixed-precision bug needs to be seen (claim 9)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["precision_detail_lines", "mixed_precision_power_lines"]


def precision_detail_lines(
    table: Any, margins: Mapping[str, Any], *, near_tie: Mapping[str, float], tokens: int
) -> list[str]:
    """From :func:`specviz.lab.experiments.precision_greedy`'s ``table`` (with an
    ``exact_tie`` column) and ``margins`` (dtype -> the top-1/top-2 margins of every plain
    greedy step): one line per (dtype, drafter) -- prompts identical over ``tokens`` tokens,
    the divergences' margins and verdicts --, one per dtype on its greedy margins (median,
    share below ``near_tie``, exact ties), and the divergences' percentiles among all margins.

    >>> import pandas as pd
    >>> t = pd.DataFrame(dict(dtype=["fp32", "bf16", "bf16"], drafter=["lookup", "lookup",
    ...     "plain"], identical=[True, True, False], margin=[None, None, 0.0],
    ...     verdict=[None, None, "numerics"], exact_tie=[False, False, True]))
    >>> m = {"fp32": np.array([0.0, 1.0, 2.0]), "bf16": np.array([0.0, 0.25, 3.0])}
    >>> for line in precision_detail_lines(t, m, near_tie={"fp32": 0.05, "bf16": 0.5},
    ...                                    tokens=8):
    ...     print(line)
    Claim 7, fp32 lookup (speculative vs plain fp32): 1 of 1 prompts identical over 8 tokens.
    Claim 7, bf16 lookup (speculative vs plain bf16): 1 of 1 prompts identical over 8 tokens.
    Claim 7, bf16 plain (vs plain fp32): 0 of 1 prompts identical over 8 tokens; divergences at margins [0], verdicts {'numerics': 1}.
    All 3 plain greedy decisions in fp32: median margin 1, 33.3% below the near-tie threshold 0.05; 1 exact ties (margin 0: claim 7's tie-breaking case, the argmax there is decided by tie-breaking alone), 0 of the first divergences at one.
    All 3 plain greedy decisions in bf16: median margin 0.25, 66.7% below the near-tie threshold 0.5; 1 exact ties (margin 0: claim 7's tie-breaking case, the argmax there is decided by tie-breaking alone), 1 of the first divergences at one.
    The 1 divergence margins sit at percentiles [0] of all greedy margins.
    """
    out = []
    for dt in dict.fromkeys([*margins, *table.dtype]):
        for dname in dict.fromkeys(table.drafter):
            sub = table[(table.dtype == dt) & (table.drafter == dname)]
            if sub.empty:
                continue
            d = sub[~sub.identical]
            ms = ", ".join(f"{m:.3g}" for m in d.margin.dropna())
            vs = {k: int(v) for k, v in d.verdict.value_counts().items()}
            what = "vs plain fp32" if dname == "plain" else f"speculative vs plain {dt}"
            out.append(
                f"Claim 7, {dt} {dname} ({what}): {int(sub.identical.sum())} of {len(sub)} "
                f"prompts identical over {tokens} tokens"
                + (f"; divergences at margins [{ms}], verdicts {vs}" if len(d) else "")
                + "."
            )
    for dt, m in margins.items():
        m = np.asarray(m, dtype=float)
        if not m.size:
            continue
        ties = int(np.sum(m == 0))
        div_ties = int(table[(table.dtype == dt) & table.exact_tie].shape[0])
        out.append(
            f"All {m.size} plain greedy decisions in {dt}: median margin {np.median(m):.3g}, "
            f"{np.mean(m < near_tie[dt]):.1%} below the near-tie threshold {near_tie[dt]}; "
            + (
                f"{ties} exact ties (margin 0: claim 7's tie-breaking case, the argmax there is "
                f"decided by tie-breaking alone), {div_ties} of the first divergences at one."
                if ties
                else "no exact ties (margin 0)."
            )
        )
    div_m = table[~table.identical].margin.dropna().astype(float)
    if len(div_m):
        all_m = np.concatenate([np.asarray(v, dtype=float) for v in margins.values()])
        out.append(
            f"The {len(div_m)} divergence margins sit at percentiles "
            f"{[round(float(np.mean(all_m < x)) * 100) for x in div_m]} of all greedy margins."
        )
    return out


def mixed_precision_power_lines(mp: Any) -> list[str]:
    """Claim 9 on notebook 06's ``mp`` table (``model``, ``first_token_tv``,
    ``samples_per_arm_for_90pct``): the bug's exact damage and the samples a test needs.

    >>> import pandas as pd
    >>> mp = pd.DataFrame(dict(model=["toy"], first_token_tv=[0.0171],
    ...                        samples_per_arm_for_90pct=[26900.4]))
    >>> mixed_precision_power_lines(mp)
    ['Claim 9, mixed_precision on toy: exact first-token TV 0.0171; 90% power needs 26900 samples per arm.']
    """
    return [
        f"Claim 9, mixed_precision on {r.model}: exact first-token TV {r.first_token_tv:.4f}; "
        f"90% power needs {r.samples_per_arm_for_90pct:.0f} samples per arm."
        for r in mp.itertuples()
    ]
