"""What both reports share (``consistency_check`` and ``specviz audit``): argument checks, the
per-test table, the Holm verdict with Benjamini-Hochberg for exploration, and the power
statement."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from .. import stats
from ..decoding.inputs import check_count, check_probability, prompt_tensor

__all__ = [
    "check_settings",
    "outcome_phrase",
    "power_outcome",
    "power_statement",
    "prompt_ids",
    "result_row",
    "verdict",
]


def check_settings(*, n_samples: Any, alpha: Any, batch_size: Any = 1) -> None:
    """The sample size, level and batch size of a check, before anything runs."""
    check_count("n_samples", n_samples, 2)
    check_probability("alpha", alpha)
    check_count("batch_size", batch_size, 1)


def prompt_ids(prompts: Any, tokenizer: Any, vocab: int | None) -> list[list[int]]:
    """A check's prompts -> token-id lists: a non-empty list of token-id lists, strings or
    :class:`~specviz.prompts.Prompt` (the last two with ``tokenizer``). Every prompt is checked
    here, before the first one is sampled."""
    if isinstance(prompts, (str, torch.Tensor)) or not isinstance(prompts, Sequence):
        raise TypeError(
            f"prompts must be a list of prompts (token-id lists, strings or Prompt objects), "
            f"got {type(prompts).__name__}; for one prompt pass [prompt]"
        )
    if len(prompts) == 0:
        raise ValueError("prompts is empty: pass at least one prompt")
    if all(isinstance(p, int) and not isinstance(p, bool) for p in prompts):
        raise TypeError(
            "prompts looks like one flat list of token ids; pass a list of prompts, e.g. "
            "[ids] for a single prompt"
        )
    out = []
    for i, p in enumerate(prompts):
        try:
            out.append(prompt_tensor(_ids(p, tokenizer), vocab, batched_hint=False).tolist())
        except (TypeError, ValueError) as e:
            raise type(e)(f"prompt {i}: {e}") from None
    return out


def _ids(prompt: Any, tokenizer: Any) -> Any:
    if isinstance(prompt, str) or hasattr(prompt, "messages"):
        if tokenizer is None:
            raise ValueError("text prompts need tokenizer=...")
        from ..prompts import render_prompt

        return render_prompt(tokenizer, prompt)
    if isinstance(prompt, torch.Tensor):
        return prompt.reshape(-1)
    return prompt


def result_row(prompt: int, test: str, res: Any) -> dict[str, Any]:
    """One row of a report's per-test table."""
    return dict(
        prompt=prompt,
        test=test,
        statistic=float(res.statistic),
        pvalue=float(res.pvalue),
        dof=getattr(res, "dof", None),
        method=res.method,
    )


def verdict(tests: Any, alpha: float) -> str:
    """Add Holm-adjusted (the verdict) and Benjamini-Hochberg (exploration) p-values and the
    rejections to ``tests`` (a DataFrame with a ``pvalue`` column); return the verdict."""
    holm = stats.adjust_pvalues(tests.pvalue.to_numpy(), method="holm", alpha=alpha)
    bh = stats.adjust_pvalues(tests.pvalue.to_numpy(), method="fdr_bh", alpha=alpha)
    tests["holm"] = holm.pvalues_adjusted
    tests["bh"] = bh.pvalues_adjusted
    tests["reject"] = holm.reject
    return "inconsistent" if holm.any_reject else "consistent"


def power_statement(
    min_detectable: Sequence[float], n_samples: int, alpha: float, n_tests: int, *, per: str
) -> tuple[float, str]:
    """(smallest detectable first-token TV, the sentence saying it) from each prompt's
    minimum detectable TV; ``per`` names the unit of ``n_samples`` ("arm", "configuration
    and prompt")."""
    finite = [m for m in min_detectable if math.isfinite(m)]
    if not finite:
        return math.nan, "Too few distinct first tokens to state a detectable TV."
    lo, hi = min(finite), max(finite)
    span = f"{lo:.3f}" if math.isclose(lo, hi, rel_tol=0.05) else f"{lo:.3f}-{hi:.3f}"
    depends = "" if len(finite) == 1 else " (depending on the prompt's next-token law)"
    return lo, (
        f"With {n_samples} samples per {per}, a first-token TV of {span} or more{depends} "
        f"would be detected with 90% probability (alpha={alpha}, two-sample Pearson; before "
        f"the Holm correction over {n_tests} tests)."
    )


def power_outcome(verdict: str, min_detectable_tv: float, tv_threshold: float) -> str:
    """The Holm ``verdict`` with its power: "inconsistent" (a test rejected), "consistent"
    (none did, and a first-token TV of ``tv_threshold`` would have been seen with 90%
    probability) or "inconclusive" (none did, but the samples could only see a larger TV).

    >>> power_outcome("consistent", 0.26, 0.1), power_outcome("consistent", 0.05, 0.1)
    ('inconclusive', 'consistent')
    """
    if verdict == "inconsistent":
        return "inconsistent"
    seen = math.isfinite(min_detectable_tv) and min_detectable_tv <= tv_threshold
    return "consistent" if seen else "inconclusive"


def outcome_phrase(report: Any) -> str:
    """A check's ``outcome`` (:attr:`ConsistencyReport.outcome`: the Holm verdict with its
    power) as a short phrase that never reads as a pass when the samples could not see the
    stated ``tv_threshold``:

    * "inconsistent (a test rejected at alpha=0.01)";
    * "consistent (a first-token TV of 0.05 or more would have been seen; threshold 0.1)";
    * "inconclusive (could not see TV < 0.606)".

    >>> from types import SimpleNamespace as R
    >>> outcome_phrase(R(outcome="inconclusive", min_detectable_tv=0.6061, tv_threshold=0.1,
    ...                  alpha=0.01))
    'inconclusive (could not see TV < 0.606)'
    >>> outcome_phrase(R(outcome="consistent", min_detectable_tv=0.0412, tv_threshold=0.1,
    ...                  alpha=0.01))
    'consistent (a first-token TV of 0.0412 or more would have been seen; threshold 0.1)'
    """
    outcome, mdt = report.outcome, report.min_detectable_tv
    if outcome == "inconsistent":
        return f"inconsistent (a test rejected at alpha={report.alpha:g})"
    if outcome == "consistent":
        return (
            f"consistent (a first-token TV of {mdt:.3g} or more would have been seen; "
            f"threshold {report.tv_threshold:g})"
        )
    if not math.isfinite(mdt):
        return "inconclusive (no first-token TV is detectable at this sample size)"
    return f"inconclusive (could not see TV < {mdt:.3g})"
