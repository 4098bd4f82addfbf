"""greedy_check: greedy speculative vs plain greedy decoding, numerics vs bug."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from .. import stats
from ..core.args import check_real
from ..core.runners import vocab_size_of
from ..decoding.inputs import check_count, check_vocab, eos_set
from ..decoding.resolve import policy_drafter
from ..decoding.serial import autoregressive_generate, speculative_generate
from ..drafting.model import as_drafter
from ..drafting.policies import as_policy
from ..verification.base import get_verifier
from .report import prompt_ids

__all__ = ["GreedyReport", "greedy_check"]


@dataclass(frozen=True, eq=False)
class GreedyReport:
    result: stats.GreedyConsistencyResult
    speculative: tuple[tuple[int, ...], ...]
    reference: tuple[tuple[int, ...], ...]

    @property
    def verdict(self) -> str:
        if self.result.n_bug:
            return "bug"
        return "numerics" if self.result.n_numerics else "identical"

    def summary(self) -> str:
        """One readable line: the verdict, how many prompts matched token for token, and where
        and at which logit margin the others first diverged.

        >>> r = stats.greedy_consistency([[1, 2, 3], [4, 5]], [[1, 2, 3], [4, 6]], [None, 0.01])
        >>> GreedyReport(r, (), ()).summary()
        'greedy: numerics -- 1 of 2 prompts identical (50%); prompt 1 diverged at token 1, margin 0.01 (numerics: below 0.05)'
        """
        r = self.result
        head = (
            f"greedy: {self.verdict} -- {r.n - r.n_bug - r.n_numerics} of {r.n} prompts "
            f"identical ({r.exact_match_rate:.0%})"
        )
        parts = [
            f"prompt {i} diverged at token {d}, {_divergence(m, v, r.near_tie)}"
            for i, (d, m, v) in enumerate(
                zip(r.first_divergence, r.margins, r.verdicts, strict=True)
            )
            if d is not None
        ]
        shown = parts[:3] + ([f"{len(parts) - 3} more"] if len(parts) > 3 else [])
        return head + ("; " + "; ".join(shown) if shown else "")

    def __str__(self) -> str:
        return self.summary()


def _divergence(margin: float | None, verdict: str, near_tie: float) -> str:
    if margin is None:
        return "no margin computed (bug: an unexplained divergence)"
    m = "an exact tie (margin 0)" if margin == 0 else f"margin {margin:.3g}"
    return f"{m} ({verdict}: {'below' if verdict == 'numerics' else 'not below'} {near_tie:g})"


@torch.inference_mode()
def _margin(target: Any, prefix: list[int]) -> float:
    """Target's top-1 minus top-2 logit for the token after ``prefix``."""
    from ..core.runners import as_runner

    logits = as_runner(target).extend(torch.tensor(prefix), 1)[-1]
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


def greedy_check(
    target: Any,
    draft: Any,
    prompts: Sequence[Any],
    *,
    max_new_tokens: int,
    gamma: int = 4,
    eos_token_id: int | Sequence[int] | None = None,
    tokenizer: Any = None,
    near_tie: float = stats.DEFAULT_NEAR_TIE,
    verifier: str = "lossless",
    progress: bool = True,
) -> GreedyReport:
    """Greedy speculative vs plain greedy decoding, prompt by prompt, with the logit margin
    at the first divergence (a near tie means numerics, a clear margin means a bug)."""
    check_count("max_new_tokens", max_new_tokens, 1)
    near_tie = check_real("near_tie", near_tie, low=0.0)
    vocab = vocab_size_of(target)
    id_lists = prompt_ids(prompts, tokenizer, vocab)
    # everything the speculative runs would refuse, refused before the first baseline runs
    spec = get_verifier(verifier, greedy=True)
    check_vocab(vocab, policy_drafter(as_drafter(draft, mode=spec.draft_mode), as_policy(gamma)))
    eos_set(eos_token_id, vocab)
    specs, refs, margins = [], [], []
    for ids in tqdm(id_lists, desc="greedy", disable=not progress):
        kw = dict(max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
        ref = autoregressive_generate(target, ids, **kw).new_tokens
        spec = speculative_generate(
            target, draft, ids, gamma=gamma, verifier=verifier, trace=False, **kw
        ).new_tokens
        i = next((j for j, (a, b) in enumerate(zip(ref, spec, strict=False)) if a != b), None)
        margins.append(None if i is None else _margin(target, ids + ref[:i]))
        specs.append(tuple(spec))
        refs.append(tuple(ref))
    result = stats.greedy_consistency(refs, specs, margins, near_tie=near_tie)
    return GreedyReport(result, tuple(specs), tuple(refs))
