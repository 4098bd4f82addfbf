"""The tree rules' effect sizes: exact first-token laws of the bug zoo's tree rules (and the
lossless rule for each sibling sampling) on a stated toy, and the samples a test needs."""

from __future__ import annotations

import math
from typing import Any

import torch

from ..core.sampling import SamplingParams, logits_to_probs
from ..fixtures.toy import toy_pair
from ..stats import sample_size_for_laws, tv_distance
from ..verification.trees import LOSSLESS_TREE_RULES, first_token_law_tree
from ..verification.zoo import TREE_ZOO
from .zoo import _sample_size_cells

__all__ = ["markdown_table_trees", "stated_tree_setting", "tree_zoo_effects"]


def tree_zoo_effects(
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor,
    params: SamplingParams,
    *,
    children: int = 3,
    alpha: float = 0.01,
    power: float = 0.9,
) -> Any:
    """Like :func:`zoo_effects` for the tree rules: the root has ``children`` candidates drawn
    from the draft's processed law the way each rule's drafter draws them (its
    ``tree_sampling``); the lossless rows apply the right rule to each sampling. Exact by
    enumeration of the sibling draws (:func:`~specviz.verification.trees.first_token_law_tree`),
    the same rule functions the sampler runs."""
    import pandas as pd

    p = logits_to_probs(target_logits.float(), params).double()
    q = logits_to_probs(draft_logits.float(), params).double()
    rows = []
    cases = [(f"lossless[{s}]", LOSSLESS_TREE_RULES[s], s, True, "the lossless rule for " + s)
             for s in LOSSLESS_TREE_RULES]  # fmt: skip
    cases += [(n, r, s, False, d) for n, (r, s, d) in TREE_ZOO.items()]
    for name, rule, sampling, lossless, desc in cases:
        law = first_token_law_tree(rule, p, q, children, sampling)
        tv = float(tv_distance(p.numpy(), law.numpy()))
        if tv < 1e-7:  # float32 laws: anything smaller is rounding
            n1 = n2 = math.inf
            tv = 0.0
        else:
            pn, ln = p.numpy(), (law / law.sum()).numpy()
            n1 = sample_size_for_laws(pn, ln, alpha=alpha, power=power)
            n2 = sample_size_for_laws(pn, ln, alpha=alpha, power=power, two_sample=True)
        rows.append(dict(verifier=name, sampling=sampling, lossless=lossless, tv=tv,
                         n_one_sample=n1, n_two_sample=n2, mistake=desc))  # fmt: skip
    return pd.DataFrame(rows).set_index("verifier")


def stated_tree_setting() -> tuple[Any, Any, tuple[int, ...], SamplingParams]:
    """The toy on which specviz states the tree rules' effects: an 8-token context-free toy at
    temperature 1 without top-k / top-p (so a root can have three distinct sampled children),
    the draft the target plus unit logit noise (``toy_pair(8, 1, noise=1.0, seed=3)``)."""
    target, draft = toy_pair(8, 1, noise=1.0, seed=3)
    return target, draft, (1,), SamplingParams(True, 1.0)


def markdown_table_trees(alpha: float = 0.01, power: float = 0.9, children: int = 3) -> str:
    """The stated tree table (docs/bug_zoo.md), on :func:`stated_tree_setting`, 3 children."""
    target, draft, context, params = stated_tree_setting()
    table = tree_zoo_effects(target.next_logits(context), draft.next_logits(context), params,
                             children=children, alpha=alpha, power=power)  # fmt: skip
    lines = [
        "| verifier | siblings drawn | first-token TV | n one-sample | n per arm, two-sample | mistake |",
        "|---|---|---:|---:|---:|---|",
    ]
    for name, row in table.iterrows():
        n1, n2 = _sample_size_cells(row)
        lines.append(f"| `{name}` | {row.sampling} | {row.tv:.4f} | {n1} | {n2} | {row.mistake} |")
    return "\n".join(lines)
