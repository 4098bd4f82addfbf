"""In-process engines for ``specviz audit`` (see :mod:`.base` for the contract).

An engine spec is ``ENGINE:MODEL[,key=value...]``:

* ``ENGINE``: ``transformers`` (``hf``), ``openvino`` (``ov``), ``onnxruntime``
  (``onnxruntime-genai``, ``ort``) or ``specviz`` (specviz's own decoder with a verifier from
  the bug zoo: the audit's controls, :mod:`.zoo`);
* ``MODEL``: a built-in model (``smollm2-135m``, ``qwen2.5-coder-1.5b``, ...; ``name@N`` keeps
  its first N layers), a safetensors folder, or a folder the engine reads natively;
* keys: ``draft=MODEL`` (``draft=target``: the target as its own draft -- the identity probe),
  ``lookup=N`` (prompt lookup / n-gram drafting), ``k=N`` (draft tokens per step),
  ``ensemble=W`` (transformers' lossy ``assistant_ensemble_weight``), ``dtype=bfloat16``
  (transformers), ``threads=N``,
  ``batch=N`` (OpenVINO: continuous batching; transformers, plain arm only: N return
  sequences per ``generate`` call), ``reload=0`` (OpenVINO: keep the pipeline after
  a failed request instead of rebuilding it), ``precision=fp32|int4|int8`` (onnxruntime;
  OpenVINO: ``bf16|f16|f32``, its inference precision), ``weights=f16|int8`` (OpenVINO: the
  converted model's weights; int8 through a Q8_0 GGUF, the default above 1B parameters),
  ``verifier=NAME`` and ``speculate=0|1`` (specviz).

>>> engine_from_spec("openvino:smollm2-135m,draft=target,k=2").speculation
'draft'
>>> engine_from_spec("ort:smollm2-135m").engine
'onnxruntime-genai'
"""

from __future__ import annotations

from typing import Any

from .base import (
    FAILED,
    Engine,
    EngineError,
    EngineSample,
    EngineUnavailable,
    Sampling,
)

__all__ = [
    "ENGINES",
    "FAILED",
    "Engine",
    "EngineError",
    "EngineSample",
    "EngineUnavailable",
    "Sampling",
    "engine_from_spec",
    "identity_spec",
    "is_engine_spec",
]

ENGINES = {
    "transformers": "transformers",
    "hf": "transformers",
    "openvino": "openvino",
    "ov": "openvino",
    "onnxruntime": "onnxruntime-genai",
    "onnxruntime-genai": "onnxruntime-genai",
    "ort": "onnxruntime-genai",
    "specviz": "specviz",
}
_KEYS = {
    "transformers": {"draft", "lookup", "ensemble", "k", "threads", "dtype", "batch"},
    "openvino": {"draft", "lookup", "k", "threads", "batch", "reload", "precision", "weights"},
    "onnxruntime-genai": {"draft", "lookup", "k", "threads", "precision"},
    "specviz": {"draft", "verifier", "k", "speculate"},
}
_INTS = {"lookup", "k", "threads", "batch", "speculate", "reload"}


def is_engine_spec(text: str) -> bool:
    """True for ``ENGINE:...`` with a known engine (an http(s) URL is not one)."""
    head = text.split(":", 1)[0].lower()
    return ":" in text and head in ENGINES


def _parse(text: str) -> tuple[str, str, dict[str, str]]:
    if not is_engine_spec(text):
        raise ValueError(
            f"{text!r} is not an engine spec: expected ENGINE:MODEL[,key=value...] with ENGINE "
            f"one of {sorted(set(ENGINES))}, or an http(s):// URL"
        )
    head, rest = text.split(":", 1)
    engine = ENGINES[head.lower()]
    parts = [p.strip() for p in rest.split(",") if p.strip()]
    if not parts or "=" in parts[0]:
        raise ValueError(f"{text!r}: the model comes first, e.g. {head}:smollm2-135m,draft=target")
    options: dict[str, str] = {}
    for p in parts[1:]:
        key, sep, value = p.partition("=")
        if not sep or not value:
            raise ValueError(f"{text!r}: {p!r} is not key=value")
        if key not in _KEYS[engine]:
            raise ValueError(f"{text!r}: {engine} takes {sorted(_KEYS[engine])}, not {key!r}")
        options[key] = value
    return engine, parts[0], options


def engine_from_spec(text: str, label: str = "") -> Engine:
    """The engine a spec describes (nothing is loaded yet; :meth:`Engine.ensure_loaded` does
    it). Raises ValueError naming the problem for a malformed spec."""
    engine, model, options = _parse(text)
    kw: dict[str, Any] = {"model": model}
    for key, value in options.items():
        try:
            kw[key] = int(value) if key in _INTS else (float(value) if key == "ensemble" else value)
        except ValueError:
            raise ValueError(f"{text!r}: {key} must be a number, got {value!r}") from None
    spec = ",".join([model, *(f"{k}={v}" for k, v in sorted(options.items()))])
    if engine == "transformers":
        from .hf import TransformersEngine as cls
    elif engine == "openvino":
        from .openvino import OpenVINOEngine as cls
    elif engine == "specviz":
        from .zoo import SpecvizEngine as cls
    else:
        from .onnx import OnnxEngine as cls
    return cls(spec=spec, label=label, **kw)


def identity_spec(text: str) -> str:
    """The identity-draft version of an engine spec: the same engine and target, with the
    target as its own draft (``draft=target``); other drafting keys are dropped.

    >>> identity_spec("openvino:qwen2.5-coder-0.5b,threads=2")
    'openvino:qwen2.5-coder-0.5b,threads=2,draft=target'
    """
    engine, model, options = _parse(text)
    head = text.split(":", 1)[0]
    keep = {k: v for k, v in options.items() if k not in ("draft", "lookup", "ensemble")}
    keep["draft"] = "target"
    return f"{head}:" + ",".join([model, *(f"{k}={v}" for k, v in keep.items())])
