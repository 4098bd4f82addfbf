"""transformers' own ``generate`` as an audited engine: plain sampling, assisted generation
with a draft model (``assistant_model=``), prompt lookup (``prompt_lookup_num_tokens=``) and
the deliberately lossy static ensemble (``assistant_ensemble_weight=w``: its verifier accepts
against w*p + (1-w)*q, so the output law at a drafted position is that mixture, TV (1-w)*TV(p, q)
away from the target's).

transformers reports no acceptance counts, so this adapter counts forward passes (hooks on the
two models): every target pass after the prefill is one verification step and commits the
accepted tokens plus one, so accepted = new tokens - target passes; with a draft model every
draft pass drafts one token. The assistant's confidence threshold is set to 0 and its schedule
to "constant", so every step drafts ``k`` tokens (where the length budget allows).

The models load with PyTorch's stock kernels (``packed=False``): the engine audited is
transformers as its users run it, not specviz's kernel chooser. On the bf16 Qwen pair this is
~5x slower per request on this CPU (17 s vs 3.3 s for 3 tokens of the 1.5B, under other load)
and does not lower the peak: loading the 1.5B in bf16 from its f32 safetensors folder peaks at
10.9 GB either way (4.0 GB once loaded).

transformers' assistant drafts from the prompt: the first generated token goes through the
speculative path too (no first-token control here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .base import Engine, EngineError, EngineSample, Sampling, check_sampling
from .convert import hf_folder

__all__ = ["TransformersEngine"]


@dataclass
class TransformersEngine(Engine):
    """``model`` (target) and optionally ``draft`` (``"target"`` for the target itself,
    ``"name@N"`` for its first N layers), ``lookup`` (prompt lookup: tokens drafted per step),
    ``ensemble`` (assistant_ensemble_weight, lossy), ``k`` (draft tokens per step)."""

    model: str = "smollm2-135m"
    draft: str | None = None
    lookup: int | None = None
    ensemble: float | None = None
    k: int = 3
    threads: int | None = None
    dtype: str = "float32"  # bfloat16 halves the memory of a Qwen pair
    engine: str = "transformers"
    _state: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.draft is not None and self.lookup is not None:
            raise ValueError("transformers: a draft model and prompt lookup exclude each other")
        if self.ensemble is not None:
            if self.draft is None:
                raise ValueError("transformers: ensemble= needs a draft model (draft=...)")
            if not 0 < self.ensemble < 1:
                raise ValueError(f"transformers: ensemble must be in (0, 1), got {self.ensemble}")
            self.lossy = True
        self.speculation = "draft" if self.draft else ("lookup" if self.lookup else "off")
        self.first_token_from_target = self.speculation == "off"
        self.sampled_draft = True if self.draft else None

    def load(self) -> None:
        import torch

        from ... import models

        if self.threads:
            torch.set_num_threads(self.threads)
        load = dict(dtype=self.dtype, progress=False, packed=False)  # stock kernels: see above
        target = models.load_model(str(hf_folder(self.model)), **load)
        tok = models.load_tokenizer(str(hf_folder(self.model)), progress=False)
        draft = None
        if self.draft is not None:
            if self.draft in ("target", self.model):
                draft = _alias(target)  # the same weights, its own hooks and settings
            else:
                draft = models.load_model(str(hf_folder(self.draft)), **load)
            if draft.config.vocab_size != target.config.vocab_size:
                raise EngineError(
                    f"transformers: draft {self.draft} has vocabulary "
                    f"{draft.config.vocab_size}, the target {target.config.vocab_size}"
                )
            gc = draft.generation_config
            gc.num_assistant_tokens = self.k
            gc.num_assistant_tokens_schedule = "constant"
            gc.assistant_confidence_threshold = 0.0
        calls = {"target": 0, "draft": 0}

        def counter(key: str):
            def hook(module: Any, args: Any, kwargs: Any, out: Any) -> None:
                calls[key] += 1

            return hook

        hooks = [target.register_forward_hook(counter("target"), with_kwargs=True)]
        if draft is not None:
            hooks.append(draft.register_forward_hook(counter("draft"), with_kwargs=True))
        self._state = dict(target=target, draft=draft, tok=tok, calls=calls, hooks=hooks)

    def sample_one(self, prompt: str, sampling: Sampling, seed: int) -> EngineSample:
        import time

        import torch

        check_sampling(self.engine, sampling)
        st = self._state
        ids = st["tok"](prompt, return_tensors="pt")["input_ids"]
        kw: dict[str, Any] = dict(
            max_new_tokens=sampling.max_tokens,
            do_sample=not sampling.greedy,
            pad_token_id=st["tok"].pad_token_id or st["tok"].eos_token_id,
        )
        if not sampling.greedy:
            kw.update(
                temperature=sampling.temperature,
                top_k=sampling.top_k or 0,
                top_p=1.0 if sampling.top_p is None else sampling.top_p,
            )
        if st["draft"] is not None:
            kw["assistant_model"] = st["draft"]
            if self.ensemble is not None:
                kw["assistant_ensemble_weight"] = self.ensemble
        elif self.lookup:
            kw["prompt_lookup_num_tokens"] = self.lookup
        calls = st["calls"]
        calls["target"] = calls["draft"] = 0
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = st["target"].generate(ids, attention_mask=torch.ones_like(ids), **kw)
        seconds = time.perf_counter() - t0
        new = [int(t) for t in out[0, ids.shape[1] :]]
        if self.speculation == "off":
            return EngineSample(tuple(new), seconds, steps=len(new))
        # the first target pass verifies the first draft too (the prompt is its prefix)
        steps = calls["target"]
        accepted = max(0, len(new) - steps)
        drafted = calls["draft"] if self.draft else None
        return EngineSample(tuple(new), seconds, drafted, accepted, steps)

    def close(self) -> None:
        for h in self._state.get("hooks", ()):
            h.remove()
        self._state = {}
        self._loaded = False


def _alias(model: Any) -> Any:
    """A second module object over the same weights (no copy): draft = target, with its own
    forward hooks and generation config, so the two roles' passes are counted apart."""
    import copy
    from collections import OrderedDict

    alias = copy.copy(model)
    for name in ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called"):
        if hasattr(model, name):
            setattr(alias, name, OrderedDict())
    alias.generation_config = copy.deepcopy(model.generation_config)
    return alias


def ensemble_bias(
    target: str,
    draft: str,
    prompt: str,
    weight: float,
    *,
    temperature: float = 1.0,
    dtype: str = "float32",
) -> dict[str, float]:
    """The exact bias of ``assistant_ensemble_weight=weight`` at the first generated token
    (transformers' assistant drafts it from the prompt, so it goes through the ensemble rule):
    the output law there is v = w*p + (1-w)*q, and TV(v, p) = (1-w) * TV(p, q). Returns
    ``tv_pq`` and ``predicted_tv`` (no top-k / top-p: the prediction uses the temperature only).
    """
    import torch

    from ... import models

    tok = models.load_tokenizer(str(hf_folder(target)), progress=False)
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    laws = []
    for name in (target, draft):
        model = models.load_model(str(hf_folder(name)), dtype=dtype, progress=False, packed=False)
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, -1].float() / temperature
        laws.append(torch.softmax(logits, -1))
        del model
    p_target, q_draft = laws
    tv = 0.5 * float((p_target - q_draft).abs().sum())
    return {"tv_pq": tv, "predicted_tv": (1 - weight) * tv, "weight": weight}
