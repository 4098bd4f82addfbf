"""Drafting with a causal LM: an independent small model, or the target's own first layers."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from ..core.args import check_int, check_real
from ..core.runners import LMRunner, as_runner, vocab_size_of
from ..core.sampling import SamplingParams
from .base import Draft, Drafter, ForeignDrafter
from .model_loop import DraftRows, run_draft
from .modes import DRAFT_MODES, DraftStop

__all__ = [
    "ModelDrafter",
    "ConfidenceStopDrafter",
    "early_exit_model",
    "EarlyExitDrafter",
    "as_drafter",
]


class ModelDrafter(Drafter):
    """Drafts with an independent causal LM that shares the target's tokenizer.

    Keeps its own KV cache. Rollback is automatic: before drafting it compares the tokens
    it has cached with the context and crops to their common prefix. A proposal is the one
    draft loop of every model draft (:func:`~specviz.drafting.model_loop.run_draft`), run as a
    batch of one group of one row over this single-sequence runner.
    """

    def __init__(
        self,
        model: Any,
        *,
        mode: str = "exact",
        name: str | None = None,
        stop: DraftStop | None = None,
    ) -> None:
        if mode not in DRAFT_MODES:
            raise ValueError(f"unknown draft mode {mode!r}; choose from {DRAFT_MODES}")
        self.model = model
        self.mode = mode
        self.name = (
            name
            or f"model:{getattr(getattr(model, 'config', None), 'name_or_path', type(model).__name__)}"
        )
        self.runner: LMRunner = as_runner(model)
        self.vocab_size = vocab_size_of(model)
        self.params = SamplingParams()
        self.stop = stop  # a confidence stop (see DraftStop), or None: draft all k
        self.stopped_early = 0  # proposals the stop cut short
        self._fed = torch.empty(0, dtype=torch.long)  # tokens in the runner's cache

    @property
    def deterministic(self) -> bool:
        return self.params.is_greedy

    def fork(self) -> ModelDrafter:
        """Same model and settings, a cache of its own (it re-syncs to the context on its
        first proposal)."""
        twin = copy.copy(self)
        twin.runner = as_runner(self.model)
        twin.stopped_early = 0
        twin._fed = torch.empty(0, dtype=torch.long)
        return twin

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
        logits = self.runner.extend(pending, 1)[-1:]  # [1, V]
        # a batch of one group of one row: the loop every model draft runs (model_loop)
        b = DraftRows([[_Sequence(generator)]], [k])
        run_draft(_OneSequence(self.runner), b, logits, self.params,
                  mode=self.mode, stop=self.stop, name=self.name)  # fmt: skip
        n = b.ks[0]
        if n < k:
            self.stopped_early += 1
        if n <= 0:
            self._fed = torch.cat([self._fed, pending.cpu()])
            return Draft(torch.empty(0, dtype=torch.long))
        drafted = b.drafts[0, :n].clone()  # [n]
        # the runner has seen pending and every draft token but the k-th (a stop comes first)
        self._fed = torch.cat([self._fed, pending.cpu(), drafted[: k - 1]])
        return Draft(drafted, torch.stack(b.qs[0]))


@dataclass(frozen=True)
class _Sequence:
    """The one row of a serial draft: what the loop reads of a row."""

    generator: torch.Generator


class _OneSequence:
    """:class:`~specviz.drafting.model_loop.DraftFeed` over a single-sequence runner (crop
    rollback, static or compiled cache, no attention mask): one group, never forked."""

    def __init__(self, runner: LMRunner) -> None:
        self.runner = runner

    def feed(self, tokens: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        return self.runner.extend(tokens.view(1), 1)  # [1, V]; a one-row feed has no hole

    def fork(self, parents: torch.Tensor) -> None:
        raise RuntimeError("a draft of one row cannot fork")


class ConfidenceStopDrafter(ModelDrafter):
    """A model drafter that stops proposing at the first position (after ``min_tokens``)
    whose draft distribution has top probability below ``threshold`` (with greedy decoding,
    the top probability of the draft's plain softmax): ``inner``'s model and draft mode with
    a :class:`~specviz.drafting.modes.DraftStop`.

    The stop looks only at ``q_draft`` of the next position -- a function of the context --
    before that position's token is drawn, so the proposal law of the drafted tokens is
    unchanged and verification stays exactly lossless.
    """

    def __init__(self, inner: ModelDrafter, threshold: float, min_tokens: int = 1) -> None:
        if not isinstance(inner, ModelDrafter):
            raise TypeError(
                f"ConfidenceStop needs a model drafter (it reads q_draft), got {type(inner).__name__}"
            )
        threshold = check_real("threshold", threshold, low=0.0, high=1.0)
        min_tokens = check_int("min_tokens", min_tokens, 0)
        vars(self).update(vars(inner))  # inner's model, mode and cache (as copy.copy would)
        self.threshold, self.min_tokens = threshold, min_tokens
        self.stop = DraftStop(threshold, min_tokens)
        self.stopped_early = 0
        self.name = f"{inner.name}+stop(top<{threshold})"


def as_drafter(draft: Any, *, mode: str = "exact") -> Drafter:
    """A :class:`Drafter` is used as is, a model is wrapped in :class:`ModelDrafter`, and an
    object that only has ``propose`` gets the contract's other hooks (no-ops) once, here.
    ``mode`` is a bug-zoo draft mode (:data:`~specviz.drafting.DRAFT_MODES`): model drafts only."""
    if mode != "exact":
        if isinstance(draft, ModelDrafter):
            twin = copy.copy(draft)
            twin.mode = mode
            twin.runner = as_runner(draft.model)
            return twin
        if callable(getattr(draft, "with_draft_mode", None)):
            # a drafter that reproduces draft modes itself (the cross-vocabulary shortcuts)
            return draft.with_draft_mode(mode)
        if hasattr(draft, "propose"):
            raise ValueError(f"draft mode {mode!r} needs a model draft, not {type(draft).__name__}")
        return ModelDrafter(draft, mode=mode)
    if isinstance(draft, Drafter):
        return draft
    if hasattr(draft, "propose"):
        return ForeignDrafter(draft)
    if draft is None:
        raise TypeError("draft is None: pass a draft model or a drafter object")
    return ModelDrafter(draft, mode=mode)


def early_exit_model(model: Any, num_layers: int) -> Any:
    """A view of ``model`` that runs only its first ``num_layers`` decoder layers, then its
    own final norm and LM head. Weights are shared (no second model in memory); the view
    gets its own KV cache when wrapped in a drafter.

    Works for transformers decoder-only models that keep their blocks in
    ``model.model.layers`` (Llama, Qwen2, Mistral, SmolLM, ...).
    """
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
