"""The cross-vocabulary shortcuts' effect sizes: exact first-token laws with a drafter of
another tokenizer (:class:`~specviz.drafting.CrossVocabDrafter`) on a stated toy, and the samples
a test needs (the table in ``docs/drafters.md``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..core.sampling import SamplingParams, logits_to_probs
from ..drafting.cross_vocab import CrossVocabDrafter, StringTokenizer
from ..fixtures.toy import ToyLM
from ..stats import sample_size_for_laws, tv_distance
from ..verification.base import VERIFIERS
from ..verification.zoo import CROSS_VOCAB_ZOO
from .zoo import ZooEffect, _ratio_accept, _residual, _sample_size_cells

__all__ = [
    "CROSS_VOCAB_DRAFT_STRINGS",
    "CROSS_VOCAB_SEEDS",
    "CROSS_VOCAB_TARGET_STRINGS",
    "cross_vocab_first_token_law",
    "cross_vocab_zoo_effects",
    "markdown_table_cross_vocab",
    "stated_cross_vocab_setting",
]

#: The stated cross-vocabulary toy: two small vocabularies that share "a", "b", "c" and " "; the
#: target also has "ab" and " a", the draft "ba" and " b" (so text moves token boundaries).
CROSS_VOCAB_TARGET_STRINGS = ("a", "b", "ab", "c", " a", " ")
CROSS_VOCAB_DRAFT_STRINGS = ("a", "b", "c", "ba", " b", " ")
#: ToyLM.random seeds of the stated target and draft (picked so every shortcut's TV is > 0.05).
CROSS_VOCAB_SEEDS = (5, 1)


def cross_vocab_first_token_law(
    verifier: str, target_logits: torch.Tensor, drafter: Any, context: Any, params: SamplingParams
) -> np.ndarray:
    """Exact law of the first token a speculative step emits with a cross-vocabulary drafter
    (:class:`~specviz.drafting.CrossVocabDrafter`) after ``context``, under ``"lossless"`` or a
    shortcut of :data:`CROSS_VOCAB_ZOO`: ``sum_x s(x) [a(x) delta_x + (1 - a(x)) r]`` with ``s``
    the law of the proposed target id and ``a``, ``r`` the ratio rule's acceptance and residual
    on the reported q. Both come from the drafter's own :meth:`~CrossVocabDrafter.laws`, the
    function its sampler runs."""
    if params.is_greedy:
        raise ValueError("cross_vocab_first_token_law is for sampling (do_sample=True)")
    if verifier != "lossless" and verifier not in CROSS_VOCAB_ZOO:
        raise ValueError(
            f"no cross-vocabulary first-token law for {verifier!r}; choose 'lossless' or one of "
            f"{sorted(CROSS_VOCAB_ZOO)}"
        )
    mode = "exact" if verifier == "lossless" else CROSS_VOCAB_ZOO[verifier].draft_mode
    s, reported = drafter.proposal_law(context, params, mode)
    # float32 laws over a large vocabulary sum to 1 only within ~1e-5 (151,936 Qwen ids): rescale
    # in float64, the draw and the reported q by the same factor (an exact q stays equal to it),
    # or the lossless rule shows that rounding as a TV of its own
    p = logits_to_probs(target_logits.float(), params).double().cpu().numpy()
    p = p / p.sum()
    s, reported = s.numpy(), reported.numpy()
    scale = s.sum()
    s, reported = s / scale, reported / scale
    accept = _ratio_accept(p, reported)
    law = s * accept + (s * (1.0 - accept)).sum() * _residual(p, reported)
    return law / law.sum()


def cross_vocab_zoo_effects(
    target_logits: torch.Tensor,
    drafter: Any,
    context: Any,
    params: SamplingParams,
    *,
    alpha: float = 0.01,
    power: float = 0.9,
) -> Any:
    """Like :func:`zoo_effects` for the cross-vocabulary shortcuts (and the lossless rule):
    a DataFrame (index: verifier) of exact first-token TVs and the samples a test needs."""
    import pandas as pd

    p = logits_to_probs(target_logits.float(), params).double().cpu().numpy()
    rows = []
    for name in ["lossless", *CROSS_VOCAB_ZOO]:
        law = cross_vocab_first_token_law(name, target_logits, drafter, context, params)
        tv = float(tv_distance(p, law))
        if tv < 1e-9:  # float64 laws: anything smaller is rounding
            n1 = n2 = math.inf
            tv = 0.0
        else:
            try:
                n1 = sample_size_for_laws(p, law, alpha=alpha, power=power)
                n2 = sample_size_for_laws(p, law, alpha=alpha, power=power, two_sample=True)
            except ValueError:  # beyond 1e10 samples: invisible in practice
                n1 = n2 = math.inf
        spec = VERIFIERS["lossless"] if name == "lossless" else CROSS_VOCAB_ZOO[name]
        rows.append(ZooEffect(name, spec.lossless, tv, n1, n2, spec.description))
    return pd.DataFrame([r.__dict__ for r in rows]).set_index("verifier")


def stated_cross_vocab_setting() -> tuple[Any, Any, tuple[int, ...], SamplingParams]:
    """The toy on which specviz states the cross-vocabulary shortcuts' effects: (target,
    intersection drafter, context, params). Order-2 toys over
    :data:`CROSS_VOCAB_TARGET_STRINGS` and :data:`CROSS_VOCAB_DRAFT_STRINGS`
    (6 tokens each), at temperature 1, context ``(0,)`` ("a")."""
    target_tok = StringTokenizer(CROSS_VOCAB_TARGET_STRINGS)
    draft_tok = StringTokenizer(CROSS_VOCAB_DRAFT_STRINGS)
    target = ToyLM.random(len(target_tok), 2, seed=CROSS_VOCAB_SEEDS[0])
    draft = ToyLM.random(len(draft_tok), 2, seed=CROSS_VOCAB_SEEDS[1])
    drafter = CrossVocabDrafter(draft, draft_tok, target_tok)
    return target, drafter, (0,), SamplingParams(True, 1.0)


def markdown_table_cross_vocab(alpha: float = 0.01, power: float = 0.9) -> str:
    """The stated cross-vocabulary table (docs/drafters.md), on :func:`stated_cross_vocab_setting`."""
    target, drafter, context, params = stated_cross_vocab_setting()
    table = cross_vocab_zoo_effects(target.next_logits(context), drafter, context, params,
                                    alpha=alpha, power=power)  # fmt: skip
    lines = [
        "| verifier | first-token TV | n one-sample | n per arm, two-sample | mistake |",
        "|---|---:|---:|---:|---|",
    ]
    for name, row in table.iterrows():
        n1, n2 = _sample_size_cells(row)
        lines.append(f"| `{name}` | {row.tv:.4f} | {n1} | {n2} | {row.mistake} |")
    return "\n".join(lines)
