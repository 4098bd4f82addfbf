"""The public loaders: :func:`load_model`, :func:`load_tokenizer`, :func:`load_pair`."""

from __future__ import annotations

import contextlib
import importlib
from typing import TYPE_CHECKING, Any

import torch

from ..core.kernels import default_kernel_mode, use_fastest_kernels
from ..core.packed import use_packed_weights

if TYPE_CHECKING:
    from transformers import PreTrainedModel

from ._cache import resolve_dtype
from ._gguf import _load_dense
from ._resolve import _check_folder, _explain_hub_failure, _from_location, _resolve
from ._specs import ModelPair, Source, VocabMismatchError
from ._util import _say
from ._vocab import _logit_dim, check_vocab, check_vocab_models


def load_model(
    name_or_path: str,
    *,
    dtype: torch.dtype | str = torch.float32,
    device: str | torch.device = "cpu",
    source: Source = "auto",
    trust_remote_code: bool = False,
    progress: bool = True,
    packed: bool | None = None,
    keep_dense: bool = True,
    threads: bool = True,
) -> PreTrainedModel:
    """Load a causal LM in eval mode with gradients off.

    ``name_or_path`` is a built-in name (see ``BUILTIN_MODELS``), a local model folder, a local
    ``.gguf`` file (dequantized on every call, not cached), or a hub name. ``source="hub"`` loads
    a built-in from its hub id; ``source="local"`` never contacts the hub.

    Kernels (CPU): by default (``packed=None``) :func:`specviz.use_fastest_kernels` times a
    decode step and a verify pass on oneDNN's pre-packed linear weights and on PyTorch's stock
    kernels, and on each torch thread count up to the current one (``threads=False``: the
    current count only), once per host and model (cached), and keeps the faster of each --
    packed weights were 1.66x faster on one host and 0.81x on another.
    ``specviz.perf.kernel_report(model)`` says what was chosen and why. ``packed=True`` packs
    without measuring, ``packed=False`` keeps the stock kernels (the opt-out);
    ``SPECVIZ_KERNELS=packed|stock`` sets the default. Packed weights cost a second copy of the
    linear layers; with ``keep_dense=False`` the packed copy replaces the dense one wherever
    nothing else reads it (the stock kernels, training and ``stock_linears`` then raise), and
    timing the two kernels holds one copy resident at a time (peak memory ~ one copy).
    """
    if not keep_dense and packed is False:
        raise ValueError("keep_dense=False frees the dense weights after packing: pass packed=True")
    torch_dtype = resolve_dtype(dtype)
    location = _resolve(name_or_path, source, progress)
    _check_folder(location, "model")
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if location.local_only:
        kwargs["local_files_only"] = True
    if location.gguf_file:
        kwargs["gguf_file"] = location.gguf_file
    with _explain_hub_failure(location.path) if location.hub else contextlib.nullcontext():
        model = _from_location(
            location,
            source,
            progress,
            lambda path: _load_dense(path, torch_dtype, progress, **kwargs),
        )
    model = model.to(device)
    model.eval()
    model.requires_grad_(False)
    _choose_kernels(model, packed, keep_dense, threads, progress)
    return model


def _choose_kernels(
    model: PreTrainedModel, packed: bool | None, keep_dense: bool, threads: bool, progress: bool
) -> None:
    if packed is True:
        use_packed_weights(model, keep_dense=keep_dense)
        use_fastest_kernels(model, mode="packed", keep_dense=keep_dense)  # recorded, not timed
        return
    mode = "stock" if packed is False else default_kernel_mode()
    if packed is None and mode == "fastest" and next(model.parameters()).device.type != "cpu":
        return
    report = use_fastest_kernels(
        model, mode=mode, keep_dense=keep_dense, threads=threads, progress=progress
    )
    if report.source == "measured":
        kept = f", cached in {report.cache_path}" if report.cache_path else ""
        _say(f"{report.summary().splitlines()[0]} (timed on this host{kept})", progress)


def load_tokenizer(name_or_path: str, *, source: Source = "auto", progress: bool = True) -> Any:
    """Load the tokenizer with the same resolution rules as :func:`load_model`.

    For a built-in model without a cache this builds the cache first, so the tokenizer always
    comes from the same folder as the weights.
    """
    from transformers import AutoTokenizer

    location = _resolve(name_or_path, source, progress)
    _check_folder(location, "tokenizer")
    kwargs: dict[str, Any] = {}
    if location.local_only:
        kwargs["local_files_only"] = True
    if location.gguf_file:
        kwargs["gguf_file"] = location.gguf_file
    with _explain_hub_failure(location.path) if location.hub else contextlib.nullcontext():
        return _from_location(
            location, source, progress, lambda path: AutoTokenizer.from_pretrained(path, **kwargs)
        )


def load_pair(
    target: str,
    draft: str,
    *,
    dtype: torch.dtype | str = torch.float32,
    device: str | torch.device = "cpu",
    draft_dtype: torch.dtype | str | None = None,
    source: Source = "auto",
    progress: bool = True,
    packed: bool | None = None,
    keep_dense: bool = True,
    cross_vocab: str | None = None,
) -> ModelPair:
    """Load a target and a draft that share one vocabulary (checked before the weights load).
    ``packed`` and ``keep_dense`` are passed to both :func:`load_model` calls (by default each
    model gets the kernels measured faster for it; the torch thread count, process-wide, is
    the one measured faster for the target).

    ``cross_vocab`` lets a draft with another tokenizer propose for the target:
    ``"intersection"`` (token-level intersection: lossless under sampling and greedy) or
    ``"string"`` (string-level exact match: greedy only). The pair's ``draft`` is then a
    :class:`~specviz.drafting.CrossVocabDrafter`, ready to pass as ``draft`` to every entry
    point; ``tokenizer`` is the target's.
    """
    if cross_vocab is not None and cross_vocab not in _cross_vocab().CROSS_VOCAB_METHODS:
        known = _cross_vocab().CROSS_VOCAB_METHODS
        raise ValueError(f"cross_vocab must be None or one of {known}, got {cross_vocab!r}")
    target_tokenizer = load_tokenizer(target, source=source, progress=progress)
    draft_tokenizer = load_tokenizer(draft, source=source, progress=progress)
    if cross_vocab is None:
        try:
            check_vocab(target_tokenizer, draft_tokenizer)
        except VocabMismatchError as err:
            raise VocabMismatchError(
                f"{err}. To draft with another tokenizer, say how: load_pair({target!r}, "
                f"{draft!r}, cross_vocab='intersection') (token-level intersection, lossless "
                "under sampling) or cross_vocab='string' (string-level exact match, greedy only)"
            ) from None
    if not keep_dense and packed is False:
        raise ValueError("keep_dense=False frees the dense weights after packing: pass packed=True")
    target_model = load_model(
        target, dtype=dtype, device=device, source=source, progress=progress, packed=packed,
        keep_dense=keep_dense,
    )  # fmt: skip
    draft_model = load_model(
        draft,
        dtype=dtype if draft_dtype is None else draft_dtype,
        device=device,
        source=source,
        progress=progress,
        packed=packed,
        keep_dense=keep_dense,
        threads=False,  # the target's choice holds for the process
    )
    if cross_vocab is not None:
        drafter = _cross_vocab().CrossVocabDrafter(
            draft_model, draft_tokenizer, target_tokenizer, method=cross_vocab,
            target_vocab_size=_logit_dim(target_model),
        )  # fmt: skip
        return ModelPair(target_model, drafter, target_tokenizer)
    check_vocab_models(target_model, draft_model, tokenizer=target_tokenizer)
    return ModelPair(target_model, draft_model, target_tokenizer)


def _cross_vocab() -> Any:
    """:mod:`specviz.drafting.cross_vocab`, looked up by name when ``load_pair(cross_vocab=...)``
    runs: drafting sits above this module, so nothing here imports it, and no table is filled
    on import (the order modules were imported in does not matter)."""
    return importlib.import_module("specviz.drafting.cross_vocab")
