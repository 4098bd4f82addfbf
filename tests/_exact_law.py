"""Shared check: batched speculative rows of one prompt against a toy's enumerated law."""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

import specviz as sv
from specviz.decoding import speculative_generate_batch
from specviz.stats import goodness_of_fit


def batched_law_pvalue(
    target: Any, draft: Any, make_gamma: Any, verifier: str, *, chunks: int, rows: int = 2000
) -> float:
    """``chunks`` x ``rows`` batched rows from prompt [0], 3 tokens each (T = 1), against the
    exact continuation law; ``make_gamma()`` gives each chunk's gamma (an int or a policy)."""
    law = sv.exact_continuation_law(target, [0], 3, sv.SamplingParams(True))
    keys = sorted(law)
    counts: collections.Counter = collections.Counter()
    for chunk in range(chunks):
        br = speculative_generate_batch(
            target,
            draft,
            [0],
            num_sequences=rows,
            gamma=make_gamma(),
            max_new_tokens=3,
            do_sample=True,
            seed=chunk * rows,
            verifier=verifier,
        )
        counts.update(tuple(s) for s in br.sequences)
    assert set(counts) <= set(law)
    observed = np.array([counts[k] for k in keys])
    return goodness_of_fit(observed, np.array([law[k] for k in keys])).pvalue
