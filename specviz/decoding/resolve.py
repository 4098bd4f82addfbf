"""Every public decoding entry's inputs, checked and normalised once: :func:`resolve`.

The serial and batched, plain and speculative entries differ only in what they hand the
core, so their checks (in the order users see the errors), the wrapping of the target and
the drafter and the rows' generators live here, once; each entry is ``resolve(...)`` and a
:class:`~specviz.decoding.step.Decoder` run.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch

from ..core.runners import as_runner, vocab_size_of
from ..core.sampling import SamplingParams
from ..drafting.base import Drafter
from ..drafting.model import ConfidenceStopDrafter, ModelDrafter, as_drafter
from ..drafting.policies import ConstantGamma, GammaPolicy, as_policy
from ..verification.base import VerifierSpec, get_verifier
from .drafts import DrafterGroups, DraftSource, ModelGroups
from .inputs import (
    check_count,
    check_models,
    check_positions,
    check_vocab,
    eos_set,
    generator,
    prompt_list,
    prompt_tensor,
    row_generators,
)
from .state import Row
from .step import Decoder
from .targets import BatchTarget, SingleTarget

__all__ = ["Resolved", "resolve", "policy_drafter"]

_PLAIN = object()  # resolve(draft=...) default: plain decoding, no drafter


@dataclass
class Resolved:
    """What a decoding entry runs: checked rows, the target and draft strategies, the rule."""

    params: SamplingParams
    vocab: int | None
    eos: frozenset[int]
    rows: list[Row]
    target: SingleTarget | BatchTarget
    source: DraftSource
    policy: GammaPolicy
    spec: VerifierSpec

    def decoder(self, **flags: bool) -> Decoder:
        """The core over these inputs (``flags``: Decoder's plain / trace / record)."""
        return Decoder(
            self.target,
            self.source,
            self.rows,
            params=self.params,
            spec=self.spec,
            policy=self.policy,
            eos=self.eos,
            vocab=self.vocab,
            **flags,
        )


def resolve(
    target: Any,
    input_ids: Any,
    *,
    params: SamplingParams,
    max_new_tokens: Any,
    seed: Any,
    eos_token_id: Any,
    draft: Any = _PLAIN,
    gamma: Any = 0,
    verifier: str = "lossless",
    batched: bool = False,
    num_sequences: int | None = None,
) -> Resolved:
    """Check and normalise one call's inputs before any model runs: prompts (one, or a batch
    of ``num_sequences`` / a list), vocabulary, EOS, the target's runner, the drafter (a draft
    model, a drafter object or none: ``draft`` left out is plain decoding) and the rows'
    generators (row i seeded ``seed + i``)."""
    plain = draft is _PLAIN
    policy = ConstantGamma(0) if plain else as_policy(gamma)
    max_new_tokens = check_count("max_new_tokens", max_new_tokens, 0)
    check_models(target)
    vocab = vocab_size_of(target)
    if batched:
        prompts = prompt_list(input_ids, num_sequences, vocab)
    else:
        prompts = [prompt_tensor(input_ids, vocab)]
    longest = max(p.numel() for p in prompts)
    check_positions(target, longest, max_new_tokens)
    eos = eos_set(eos_token_id, vocab)
    spec = get_verifier(verifier, greedy=params.is_greedy)
    if plain:
        source: DraftSource = DraftSource()
    elif batched:
        source = _batched_source(draft, spec.draft_mode, policy, vocab)
    else:
        source = DrafterGroups(policy_drafter(as_drafter(draft, mode=spec.draft_mode), policy))
        check_vocab(vocab, source.drafter)
    if not plain:
        drafted_by = getattr(source, "drafter", getattr(source, "model", None))
        check_models(target, drafted_by, longest, max_new_tokens)
    if batched:
        rows = _rows(prompts, seed, max_new_tokens, _device(target))
        return Resolved(params, vocab, eos, rows, _batch_target(target, len(rows)), source,
                        policy, spec)  # fmt: skip
    runner = as_runner(target)
    gen, seed = generator(seed, runner.device)
    rows = [Row(0, gen, seed, prompts[0], max_new_tokens)]
    trees = isinstance(source, DrafterGroups) and source.drafter.proposes_trees
    # token trees are verified with tree attention on the masked cache (a batch of one)
    one = BatchTarget(target) if trees else SingleTarget(runner)
    return Resolved(params, vocab, eos, rows, one, source, policy, spec)


def policy_drafter(drafter: Drafter, policy: GammaPolicy) -> Drafter:
    """The drafter a policy asks for: a confidence stop makes a model drafter stop early."""
    stop = policy.draft_stop()
    if stop is None:
        return drafter
    return ConfidenceStopDrafter(drafter, stop.threshold, stop.min_tokens)


def _batched_source(draft: Any, mode: str, policy: Any, vocab: int | None) -> DraftSource:
    """A draft model (or a model drafter) is drafted batched over the rows; any other
    drafter runs one instance per group of identical rows."""
    if isinstance(draft, ModelDrafter) or not hasattr(draft, "propose"):
        drafter = as_drafter(draft)  # a clear error for something that is neither
        check_vocab(vocab, drafter)
        stop = policy.draft_stop() or drafter.stop  # a ConfidenceStopDrafter brings its own
        return ModelGroups(drafter.model, mode, drafter.name, stop)
    drafter = policy_drafter(as_drafter(draft, mode=mode), policy)
    check_vocab(vocab, drafter)
    return DrafterGroups(drafter)


def _batch_target(model: Any, rows: int) -> BatchTarget | SingleTarget:
    """A one-row batch of a model marked by ``use_static_cache`` runs on that static runner;
    otherwise the masked batch cache (which is dynamic: say so once)."""
    static = getattr(model, "__dict__", {}).get("_specviz_static")
    if static is not None:
        if rows == 1:
            return SingleTarget(as_runner(model))
        warnings.warn(
            "use_static_cache() applies to single-sequence decoding; the batched engine runs "
            "its masked dynamic cache",
            stacklevel=4,
        )
    return BatchTarget(model)


def _rows(prompts: list[torch.Tensor], seed: Any, max_new_tokens: int, device) -> list[Row]:
    gens, seeds = row_generators(seed, len(prompts), device)
    return [Row(i, gens[i], seeds[i], p, max_new_tokens) for i, p in enumerate(prompts)]


def _device(model: Any) -> torch.device:
    return torch.device("cpu") if hasattr(model, "make_runner") else next(model.parameters()).device
