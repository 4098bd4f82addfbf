"""A stateful view of a causal LM: feed tokens, get logits, crop back.

The engine talks to every model (transformers models, toy models, anything else) through
this tiny interface so that rollback is one call: the KV cache is indexed by position,
and dropping rejected drafts is ``crop(length)`` -- no recomputation of the prefix.
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol, runtime_checkable

import torch

from .packed import packed_layers

__all__ = [
    "LMRunner",
    "HFRunner",
    "StaticRunner",
    "as_runner",
    "use_static_cache",
    "vocab_size_of",
]


@runtime_checkable
class LMRunner(Protocol):
    """One sequence's worth of model state (batch size 1)."""

    length: int  # number of tokens whose keys/values are cached
    device: torch.device

    def extend(self, tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        """Append ``tokens`` ([n] int64) and return float32 logits for the last
        ``num_logits`` of them ([num_logits, V]); row i predicts the token after
        the (n - num_logits + i)-th new token."""
        ...

    def crop(self, length: int) -> None:
        """Forget everything after the first ``length`` tokens."""
        ...

    def reset(self) -> None: ...


class HFRunner:
    """:class:`LMRunner` over a transformers causal LM with a ``DynamicCache``."""

    def __init__(self, model: Any) -> None:
        from transformers import DynamicCache

        self.model = model
        self._cache_cls = DynamicCache
        self.device = next(model.parameters()).device
        # transformers renamed ``past_key_values`` to ``cache`` (5.2x); use what forward takes.
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self.reset()

    def reset(self) -> None:
        self.cache = self._cache_cls(config=self.model.config)
        self.length = 0

    @torch.inference_mode()
    def extend(self, tokens: torch.Tensor, num_logits: int, return_hidden: bool = False):
        """See :class:`LMRunner`. With ``return_hidden`` also return the final (normed)
        hidden states of all new tokens, [n, H] -- what feature-level drafters consume."""
        ids = tokens.to(self.device, torch.long).view(1, -1)  # [1, n]
        if return_hidden:
            return self._extend_hidden(ids, num_logits)
        out = self._forward_for(ids.shape[1])(
            input_ids=ids,
            use_cache=True,
            logits_to_keep=num_logits,
            **{self._cache_kw: self.cache},
        )
        self.length += ids.shape[1]
        return out.logits[0, -num_logits:].float()  # [num_logits, V]

    def _forward_for(self, n: int) -> Any:
        """The callable that runs an extend of ``n`` tokens (the model itself here)."""
        return self.model

    def _extend_hidden(self, ids: torch.Tensor, num_logits: int):
        base = self.model.get_decoder() if hasattr(self.model, "get_decoder") else self.model.model
        head = self.model.get_output_embeddings()
        out = base(input_ids=ids, use_cache=True, **{self._cache_kw: self.cache})
        hidden = out.last_hidden_state[0]  # [n, H]
        self.length += ids.shape[1]
        return head(hidden[-num_logits:]).float(), hidden

    def crop(self, length: int) -> None:
        remove = self.length - length
        if remove < 0:
            raise ValueError(f"cannot crop a cache of {self.length} tokens to {length}")
        if remove:
            # transformers 5.x: a negative count removes that many trailing positions.
            self.cache.crop(-remove)
        self.length = length


class StaticRunner(HFRunner):
    """:class:`LMRunner` over a pre-allocated, position-indexed KV cache (transformers
    ``StaticCache``), gpt-fast style: rollback moves the write position back and touches no
    tensor (stale entries are overwritten before attention can see them), and every decode
    step has the same cache shape -- what ``torch.compile`` and CUDA graphs need.

    ``compile=True`` runs short extends (decode steps and verify passes of up to
    ``compile_max_tokens`` tokens) through ``torch.compile(model, mode=...)``; prefill stays
    eager, so only a handful of shapes are ever compiled. Meant for CUDA ("reduce-overhead"
    uses CUDA graphs); on CPU it works with ``mode="default"`` but rarely pays.
    Made by :func:`as_runner` once :func:`use_static_cache` has marked the model.
    """

    def __init__(
        self,
        model: Any,
        max_length: int,
        *,
        compile: bool = False,
        mode: str = "reduce-overhead",
        compile_max_tokens: int = 16,
    ) -> None:
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
            raise ValueError(f"max_length must be a positive integer, got {max_length!r}")
        self.max_length = max_length
        self.compile_max_tokens = compile_max_tokens
        self._compiled = _compiled_forward(model, mode) if compile else None
        super().__init__(model)

    def reset(self) -> None:
        from transformers import StaticCache

        self.cache = StaticCache(config=self.model.config, max_cache_len=self.max_length)
        self.length = 0

    def extend(self, tokens: torch.Tensor, num_logits: int, return_hidden: bool = False):
        n = tokens.numel()
        if self.length + n > self.max_length:
            raise ValueError(
                f"static KV cache full: {self.length} + {n} tokens > max_length={self.max_length}; "
                "pass a larger max_length to use_static_cache()"
            )
        return super().extend(tokens, num_logits, return_hidden)

    def _forward_for(self, n: int) -> Any:
        if self._compiled is None or n > self.compile_max_tokens:
            return self.model  # prefill stays eager: few compiled shapes
        return self._compiled


def _compiled_forward(model: Any, mode: str) -> Any:
    """One compiled forward per (model, mode), reused by every runner of that model."""
    store = model.__dict__.setdefault("_specviz_compiled", {})
    if mode not in store:
        store[mode] = torch.compile(model, mode=mode, dynamic=False)
    return store[mode]


def use_static_cache(
    model: Any,
    max_length: int | None = 2048,
    *,
    compile: bool = False,
    mode: str = "reduce-overhead",
) -> Any:
    """Make every runner of ``model`` (target or draft, in every engine) a
    :class:`StaticRunner` with room for ``max_length`` tokens, optionally with a compiled
    decode forward; ``max_length=None`` switches back to the dynamic cache. Returns the model.

    >>> use_static_cache(model, 1024, compile=torch.cuda.is_available())  # doctest: +SKIP
    """
    if max_length is None:
        model.__dict__.pop("_specviz_static", None)
        return model
    if not (isinstance(model, torch.nn.Module) and hasattr(model, "config")):
        raise TypeError(
            f"use_static_cache needs a transformers causal LM, got {type(model).__name__}"
        )
    if compile and packed_layers(model):
        raise ValueError(
            "use_static_cache(compile=True): the model runs on packed CPU weights, which "
            "torch.compile cannot trace; call specviz.use_packed_weights(model, False) first"
        )
    StaticRunner(model, max_length)  # validates the arguments now, not at first use
    model.__dict__["_specviz_static"] = dict(max_length=max_length, compile=compile, mode=mode)
    return model


def as_runner(model: Any) -> LMRunner:
    """Wrap ``model`` in a fresh runner (toy models provide ``make_runner`` themselves;
    models marked by :func:`use_static_cache` get a :class:`StaticRunner`)."""
    if hasattr(model, "make_runner"):
        return model.make_runner()
    static = getattr(model, "__dict__", {}).get("_specviz_static")
    if static is not None:
        return StaticRunner(model, **static)
    if isinstance(model, torch.nn.Module) and hasattr(model, "config"):
        return HFRunner(model)
    raise TypeError(
        f"expected a transformers causal LM, a specviz toy model or a drafter, got {type(model).__name__}"
    )


def vocab_size_of(model: Any) -> int | None:
    """The width of the model's logits, when it can be known without a forward pass."""
    if hasattr(model, "vocab_size") and isinstance(model.vocab_size, int):
        return model.vocab_size
    emb = getattr(model, "get_output_embeddings", lambda: None)()
    if emb is not None and hasattr(emb, "weight"):
        return int(emb.weight.shape[0])
    cfg = getattr(model, "config", None)
    return getattr(cfg, "vocab_size", None)
