"""Drafters: anything that can propose the next few tokens.

A drafter is a tiny protocol (as in transformers' ``CandidateGenerator``)::

    propose(context, k, generator) -> Draft(tokens, q_draft or None)
    feedback(num_accepted)                      # optional bookkeeping
    start(prompt, params)                       # optional: called once per generation

A drafter that sets ``wants_target_hidden = True`` also receives
``observe_target(tokens, hidden)`` after each verification: the target's final hidden states
([m, H]) of the tokens the target kept, for feature-level (EAGLE-style) drafting.

``q_draft`` is the distribution each proposed token was *actually sampled from*, one row per
token. A drafter that proposes deterministically (n-gram lookup, argmax) returns ``None`` and
the verifier treats each token as a point mass. The engine never needs to know which drafter
it runs, so new drafters plug in without touching the loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from .lm import LMRunner, as_runner
from .sampling import SamplingParams, logits_to_probs, sample

__all__ = [
    "Draft",
    "Drafter",
    "ModelDrafter",
    "PromptLookupDrafter",
    "EarlyExitDrafter",
    "early_exit_model",
    "as_drafter",
    "DRAFT_MODES",
]


@dataclass(frozen=True)
class Draft:
    tokens: torch.Tensor  # [k] int64
    q_draft: torch.Tensor | None = None  # [k, V] float32, or None for point-mass proposals

    def __post_init__(self) -> None:
        if self.tokens.dim() != 1:
            raise ValueError(f"Draft.tokens must be 1-D, got shape {tuple(self.tokens.shape)}")
        if self.q_draft is not None and (
            self.q_draft.dim() != 2 or self.q_draft.shape[0] != self.tokens.shape[0]
        ):
            raise ValueError(
                f"Draft.q_draft must be [k, V] with k={self.tokens.shape[0]}, "
                f"got {tuple(self.q_draft.shape)}"
            )


@runtime_checkable
class Drafter(Protocol):
    def propose(self, context: torch.Tensor, k: int, generator: torch.Generator) -> Draft: ...

    def feedback(self, num_accepted: int) -> None: ...


# How a model drafter turns its logits into (token, reported q). "exact" is correct; the
# others reproduce mistakes real systems shipped (see verify.py's bug zoo).
DRAFT_MODES = (
    "exact",
    "argmax_softmax_q",  # propose argmax, report softmax (transformers #32867)
    "unprocessed_q",  # sample processed, report raw softmax (transformers #47932)
    "ignores_temperature",  # sample at T=1, report q at T
    "bf16_sample",  # sample from bf16 probabilities, report fp32 q (DeepSpec #31)
    "vocab_shift",  # draft ids shifted for the upper half of the vocabulary, q not remapped
)


def shifted_ids(vocab: int, device: torch.device | None = None) -> torch.Tensor:
    """The id map of the vocabulary-mismatch demonstration: draft id j means target token
    perm[j], where the upper half of the vocabulary is rotated by one (as when two tokenizers
    differ by one inserted token)."""
    perm = torch.arange(vocab, device=device)
    half = vocab // 2
    perm[half:] = torch.roll(perm[half:], 1)
    return perm


def _draft_step(
    logits: torch.Tensor, params: SamplingParams, mode: str, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """One drafted token and the q the drafter reports for it. logits: [V]."""
    q = logits_to_probs(logits, params)  # what a correct drafter samples from
    if params.is_greedy or mode == "exact":
        tok = q.argmax() if params.is_greedy else sample(q, generator)
        return tok, q
    if mode == "argmax_softmax_q":
        return logits.argmax(), q
    if mode == "unprocessed_q":
        return sample(q, generator), torch.softmax(logits.float(), dim=-1)
    if mode == "ignores_temperature":
        t1 = SamplingParams(True, 1.0, params.top_k, params.top_p)
        return sample(logits_to_probs(logits, t1), generator), q
    if mode == "vocab_shift":
        # The draft's own distribution lives in its id space: q_d[j] = q[perm[j]]. The token is
        # translated correctly (perm[j]) but q_d is reported as if indexed by target ids.
        perm = shifted_ids(q.shape[-1], q.device)
        q_d = q[perm]
        j = sample(q_d, generator)
        return perm[j], q_d
    if mode == "bf16_sample":
        q16 = logits_to_probs(logits.to(torch.bfloat16), params).to(torch.bfloat16).float()
        return sample(q16 / q16.sum(), generator), q
    raise ValueError(f"unknown draft mode {mode!r}; choose from {DRAFT_MODES}")


class ModelDrafter:
    """Drafts with an independent causal LM that shares the target's tokenizer.

    Keeps its own KV cache. Rollback is automatic: before drafting it compares the tokens
    it has cached with the context and crops to their common prefix.
    """

    def __init__(self, model: Any, *, mode: str = "exact", name: str | None = None) -> None:
        if mode not in DRAFT_MODES:
            raise ValueError(f"unknown draft mode {mode!r}; choose from {DRAFT_MODES}")
        self.model = model
        self.mode = mode
        self.name = (
            name
            or f"model:{getattr(getattr(model, 'config', None), 'name_or_path', type(model).__name__)}"
        )
        self.runner: LMRunner = as_runner(model)
        self.params = SamplingParams()
        self._fed = torch.empty(0, dtype=torch.long)  # tokens in the runner's cache

    def start(self, prompt: torch.Tensor, params: SamplingParams) -> None:
        self.params = params
        self.runner.reset()
        self._fed = torch.empty(0, dtype=torch.long)

    def _sync(self, context: torch.Tensor) -> torch.Tensor:
        # Crop the cache to the longest prefix it shares with ``context``; return the rest.
        m = min(self._fed.numel(), context.numel() - 1)  # always re-feed >= 1 token
        same = (self._fed[:m] == context[:m]).long()
        keep = int(same.cumprod(0).sum()) if m else 0
        if keep < self.runner.length:
            self.runner.crop(keep)
        self._fed = self._fed[:keep]
        return context[keep:]

    @torch.inference_mode()
    def propose(self, context: torch.Tensor, k: int, generator: torch.Generator) -> Draft:
        pending = self._sync(context)
        logits = self.runner.extend(pending, 1)[-1]  # [V]
        tokens, qs = [], []
        for i in range(k):
            # tokens stay on the model's device inside the loop: no host sync per draft token
            tok, q = _draft_step(logits, self.params, self.mode, generator)
            tokens.append(tok)
            qs.append(q)
            if i + 1 < k:
                logits = self.runner.extend(tok.view(1), 1)[-1]
        drafted = torch.stack(tokens).cpu()  # [k], the one host sync of this draft
        # the runner has seen pending and every draft token but the last
        self._fed = torch.cat([self._fed, pending.cpu(), drafted[: k - 1]])
        return Draft(drafted, torch.stack(qs))

    def feedback(self, num_accepted: int) -> None:
        # Nothing to do: the next propose() crops to the shared prefix.
        pass


class PromptLookupDrafter:
    """Prompt lookup decoding: find the last n-gram earlier in the text, copy what followed.

    Proposals are deterministic (no q): the verifier treats them as point masses, which keeps
    sampling lossless. Among earlier matches the most recent one is used, since repeated
    structure is usually local.
    """

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not (1 <= min_ngram <= max_ngram):
            raise ValueError(
                f"need 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram}, max_ngram={max_ngram}"
            )
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.name = f"prompt_lookup(n={min_ngram}..{max_ngram})"

    def propose(self, context: torch.Tensor, k: int, generator: torch.Generator) -> Draft:
        ctx = context.cpu()
        T = ctx.numel()
        for n in range(min(self.max_ngram, T - 1), self.min_ngram - 1, -1):
            windows = ctx.unfold(0, n, 1)[:-1]  # [T-n, n], all earlier n-grams
            hits = (windows == ctx[T - n :]).all(dim=1).nonzero().flatten()
            if hits.numel():
                start = int(hits[-1]) + n
                return Draft(ctx[start : min(start + k, T)].clone(), None)
        return Draft(torch.empty(0, dtype=torch.long), None)

    def feedback(self, num_accepted: int) -> None:
        pass


def as_drafter(draft: Any, *, mode: str = "exact") -> Drafter:
    """A drafter object is used as is; a model is wrapped in :class:`ModelDrafter`."""
    if hasattr(draft, "propose"):
        if mode != "exact":
            if isinstance(draft, ModelDrafter):
                return ModelDrafter(draft.model, mode=mode, name=draft.name)
            raise ValueError(f"draft mode {mode!r} needs a model draft, not {type(draft).__name__}")
        return draft
    return ModelDrafter(draft, mode=mode)


def early_exit_model(model: Any, num_layers: int) -> Any:
    """A view of ``model`` that runs only its first ``num_layers`` decoder layers, then its
    own final norm and LM head. Weights are shared (no second model in memory); the view
    gets its own KV cache when wrapped in a drafter.

    Works for transformers decoder-only models that keep their blocks in
    ``model.model.layers`` (Llama, Qwen2, Mistral, SmolLM, ...).
    """
    import copy

    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise TypeError(
            f"early exit needs a decoder with model.model.layers; {type(model).__name__} has none"
        )
    total = len(layers)
    if not (1 <= num_layers <= total):
        raise ValueError(f"num_layers must be in [1, {total}] for this model, got {num_layers}")
    # copy.copy shares nn.Module's _modules dict; give each view its own so the original
    # model keeps all of its layers.
    shallow_inner = copy.copy(inner)
    shallow_inner._modules = dict(inner._modules)
    shallow_inner.layers = torch.nn.ModuleList(list(layers)[:num_layers])
    shallow = copy.copy(model)
    shallow._modules = dict(model._modules)
    shallow.model = shallow_inner
    cfg = copy.deepcopy(model.config)
    cfg.num_hidden_layers = num_layers
    if getattr(cfg, "layer_types", None) is not None:
        cfg.layer_types = list(cfg.layer_types)[:num_layers]
    shallow.config = cfg
    shallow_inner.config = cfg
    return shallow


class EarlyExitDrafter(ModelDrafter):
    """Self-speculation: the target's first ``num_layers`` layers draft for the full model."""

    def __init__(self, target: Any, num_layers: int, *, mode: str = "exact") -> None:
        super().__init__(early_exit_model(target, num_layers), mode=mode)
        self.num_layers = num_layers
        self.name = f"early_exit(L={num_layers})"
