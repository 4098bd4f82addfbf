"""How much of the target's law a cross-vocabulary draft can reach: the intersection's
coverage of the target's probability mass (:class:`~specviz.drafting.cross_vocab.CrossVocabDrafter`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..core.runners import as_runner
from ..core.sampling import SamplingParams, logits_to_probs

if TYPE_CHECKING:
    from .cross_vocab import CrossVocabDrafter

__all__ = ["coverage_along", "coverage_by_category", "target_mass_coverage"]


def target_mass_coverage(
    target_logits: torch.Tensor, reachable: torch.Tensor, params: SamplingParams | None = None
) -> torch.Tensor:
    """The share of the target's probability mass the intersection can propose, per row of
    ``target_logits`` ([..., V_target]) under ``params`` (default: temperature 1):
    ``sum of p(x) over the reachable x`` (:meth:`CrossVocabDrafter.reachable`). The accepted
    share of a step can never exceed it: a target token outside the intersection is only ever
    reached as a correction.

    >>> target_mass_coverage(torch.log(torch.tensor([0.5, 0.3, 0.2])), torch.tensor([1, 0, 1]).bool())
    tensor(0.7000)
    """
    params = SamplingParams(True, 1.0) if params is None else params
    probs = logits_to_probs(target_logits.float(), params)
    width = min(probs.shape[-1], reachable.numel())
    return (probs[..., :width] * reachable[:width].to(probs.device, probs.dtype)).sum(-1).cpu()


@torch.inference_mode()
def coverage_along(
    target: Any,
    drafter: CrossVocabDrafter,
    prompt: Sequence[int],
    continuation: Sequence[int],
    params: SamplingParams | None = None,
) -> torch.Tensor:
    """:func:`target_mass_coverage` at every position of ``continuation`` after ``prompt``
    (one target pass over both; [len(continuation)], float32): how much of the target's law
    the draft could reach where each continuation token was decided."""
    if not continuation:
        return torch.empty(0)
    runner = as_runner(target)
    ids = torch.tensor([*prompt, *continuation[:-1]], dtype=torch.long)
    logits = runner.extend(ids.to(runner.device), len(continuation))
    return target_mass_coverage(logits, drafter.reachable(), params)


def coverage_by_category(
    target: Any,
    drafter: CrossVocabDrafter,
    cells: Sequence[tuple[str, Sequence[int], Sequence[int]]],
    params: SamplingParams | None = None,
) -> Any:
    """The intersection's coverage along continuations, one row per decided position: a
    DataFrame with ``category``, ``prompt`` (index into ``cells``), ``position``,
    ``coverage`` (:func:`target_mass_coverage`) and ``reachable`` (whether the token that was
    emitted there is one the draft can propose). ``cells`` are ``(category, prompt ids,
    continuation ids)``, e.g. plain greedy outputs of held-out prompts of every category.

    >>> import torch
    >>> from specviz.drafting.cross_vocab import CrossVocabDrafter, StringTokenizer
    >>> from specviz.fixtures.toy import ToyLM
    >>> target = ToyLM.random(4, 1, seed=0)
    >>> d = CrossVocabDrafter(ToyLM.random(4, 1, seed=1), StringTokenizer(["a", "b", "c", "ba"]),
    ...                       StringTokenizer(["a", "b", "ab", "c"]))
    >>> df = coverage_by_category(target, d, [("toy", [0], [2, 1])])
    >>> df[["category", "position", "reachable"]].values.tolist()
    [['toy', 0, False], ['toy', 1, True]]
    """
    import pandas as pd

    reach = drafter.reachable()
    rows = []
    for i, (category, prompt, continuation) in enumerate(cells):
        cont = [int(t) for t in continuation]
        cov = coverage_along(target, drafter, list(prompt), cont, params).tolist()
        for pos, (c, t) in enumerate(zip(cov, cont, strict=True)):
            ok = bool(reach[t]) if 0 <= t < reach.numel() else False
            rows.append(dict(category=category, prompt=i, position=pos, coverage=c, reachable=ok))
    return pd.DataFrame(rows, columns=["category", "prompt", "position", "coverage", "reachable"])
