"""Greedy consistency: separate numerical near ties from real bugs."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ._discrete import _hashable
from ._results import DEFAULT_NEAR_TIE, GreedyConsistencyResult

__all__ = ["greedy_consistency"]


# --------------------------------------------------------------------------------------------
# Greedy consistency
# --------------------------------------------------------------------------------------------


def _first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    m = min(len(a), len(b))
    for i in range(m):
        if a[i] != b[i]:
            return i
    return None if len(a) == len(b) else m


def greedy_consistency(
    reference_tokens: Sequence[Sequence[int]],
    candidate_tokens: Sequence[Sequence[int]],
    margins: Sequence[float | None] | None = None,
    *,
    near_tie: float = DEFAULT_NEAR_TIE,
) -> GreedyConsistencyResult:
    """Compare greedy speculative outputs with plain greedy outputs, prompt by prompt.

    Greedy speculative decoding must reproduce plain greedy decoding token for token, except
    where the target's top-1 and top-2 logits are so close that the different matmul shapes
    of a (k+1)-token verify pass and a 1-token decode pass flip the argmax (transformers #25420,
    #30413; vLLM #41758). vLLM's end-to-end tests accept ~66% exact matches with no explanation;
    here each divergence gets a verdict:

    * ``"identical"``: same tokens (``first_divergence`` is None);
    * ``"numerics"``: diverged where the target's top-1 minus top-2 logit ``margin`` (computed
      by the caller with teacher forcing on the reference prefix) is below ``near_tie``;
    * ``"bug"``: diverged with a clear margin, or with no margin supplied (an unexplained
      divergence is never excused). Catches e.g. transformers PR #28508 (drafts always accepted).

    A length difference where one output is a prefix of the other diverges at the shorter
    length (e.g. EOS vs. a continuation). ``near_tie`` defaults to 0.05 logits, generous for
    fp32 (shape-dependent reduction order moves logits by ~1e-4..1e-3); use ~0.5 for bf16.
    """
    refs = [list(_hashable(r)) for r in reference_tokens]
    cands = [list(_hashable(c)) for c in candidate_tokens]
    if len(refs) != len(cands):
        raise ValueError(f"{len(refs)} reference vs {len(cands)} candidate sequences")
    if margins is not None and len(margins) != len(refs):
        raise ValueError(f"{len(margins)} margins for {len(refs)} sequences")
    if near_tie < 0:
        raise ValueError("near_tie must be >= 0")
    divs: list[int | None] = []
    margs: list[float | None] = []
    verdicts: list[str] = []
    for i, (r, c) in enumerate(zip(refs, cands, strict=True)):
        d = _first_divergence(r, c)
        m = None if margins is None or margins[i] is None else abs(float(margins[i]))  # type: ignore[arg-type]
        divs.append(d)
        margs.append(m)
        if d is None:
            verdicts.append("identical")
        elif m is not None and m < near_tie:
            verdicts.append("numerics")
        else:
            verdicts.append("bug")
    n = len(refs)
    return GreedyConsistencyResult(
        exact_match_rate=(sum(d is None for d in divs) / n) if n else math.nan,
        first_divergence=tuple(divs),
        margins=tuple(margs),
        verdicts=tuple(verdicts),
        near_tie=float(near_tie),
        n=n,
    )
