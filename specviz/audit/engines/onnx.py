"""onnxruntime-genai as an audited engine, in-process on the CPU execution provider: plain,
with a draft model (a composite ``genai_config.json`` with a ``model.draft`` block), or with
n-gram lookup (``ngram_size``). Speculation runs at batch size 1: one ``Generator`` per
request, seeded with its own ``random_seed``.

The engine's own per-request counters come from ``Generator.get_speculative_stats()``
(``draft_tokens_evaluated`` / ``draft_tokens_accepted``; its acceptance rate is their ratio).
Its sources verify with min(1, p/q) and resample from norm(max(0, p - q)) over the processed
(temperature, top-k, top-p) distributions: with draft = target it must accept every evaluated
draft token.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .base import Engine, EngineError, EngineSample, Sampling, check_sampling, import_engine
from .convert import onnx_model, onnx_speculative_folder, parse_model

__all__ = ["OnnxEngine"]


@dataclass
class OnnxEngine(Engine):
    """``model`` (a built-in name, ``name@N``, a safetensors folder or an onnxruntime-genai
    folder), ``draft`` (the same kinds, or ``"target"``), ``lookup`` (n-gram size), ``k``
    (``max_draft_tokens``), ``precision`` (the builder's, when converting), ``threads``."""

    model: str = "smollm2-135m"
    draft: str | None = None
    lookup: int | None = None
    k: int = 3
    precision: str = "fp32"
    threads: int | None = None
    engine: str = "onnxruntime-genai"
    _state: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.draft is not None and self.lookup is not None:
            raise ValueError(
                "onnxruntime-genai: a draft model and n-gram lookup exclude each other"
            )
        self.speculation = "draft" if self.draft else ("lookup" if self.lookup else "off")
        self.sampled_draft = True if self.draft else None
        self.first_token_from_target = None  # not established from its sources

    def _folder(self, name: str) -> Path:
        path = Path(parse_model(name)[0]).expanduser()
        if path.is_dir() and (path / "genai_config.json").is_file():
            return path
        return onnx_model(name, precision=self.precision, progress=False)

    def load(self) -> None:
        og = import_engine("onnxruntime_genai", "onnxruntime-genai", "onnxruntime")
        target = self._folder(self.model)
        folder = target
        if self.draft is not None:
            draft = target if self.draft in ("target", self.model) else self._folder(self.draft)
            folder = onnx_speculative_folder(target, draft, max_draft_tokens=self.k)
        vocab = json.loads((folder / "genai_config.json").read_text())["model"]["vocab_size"]
        try:
            config = og.Config(str(folder))
            if self.threads:
                opts = {"session_options": {"intra_op_num_threads": int(self.threads)}}
                blocks = {"decoder": opts, **({"draft": opts} if self.draft else {})}
                config.overlay(json.dumps({"model": blocks}))
            model = og.Model(config)
        except Exception as err:  # noqa: BLE001 - the runtime raises plain RuntimeErrors
            raise EngineError(
                f"onnxruntime-genai ({self.name}): cannot load {folder}: {err}"
            ) from err
        self._state = {"og": og, "model": model, "tok": og.Tokenizer(model), "vocab": vocab}

    def sample_one(self, prompt: str, sampling: Sampling, seed: int) -> EngineSample:
        check_sampling(self.engine, sampling)
        og, model = self._state["og"], self._state["model"]
        ids = self._state["tok"].encode(prompt)
        params = og.GeneratorParams(model)
        search: dict[str, Any] = dict(
            max_length=len(ids) + sampling.max_tokens, do_sample=not sampling.greedy
        )
        if not sampling.greedy:
            search.update(
                temperature=sampling.temperature,
                top_k=sampling.top_k or self._state["vocab"],  # no cut: the whole vocabulary
                top_p=1.0 if sampling.top_p is None else sampling.top_p,
                random_seed=seed,
            )
        params.set_search_options(**search)
        if self.lookup:
            params.set_speculative_options(ngram_size=self.lookup, max_draft_tokens=self.k)
        t0 = time.perf_counter()
        gen = og.Generator(model, params)
        gen.append_tokens(ids)
        while not gen.is_done():
            gen.generate_next_token()
        tokens = tuple(int(t) for t in gen.get_sequence(0)[len(ids) :])
        seconds = time.perf_counter() - t0
        if self.speculation == "off":
            return EngineSample(tokens, seconds)
        st = gen.get_speculative_stats()
        return EngineSample(
            tokens,
            seconds,
            int(st["draft_tokens_evaluated"]),
            int(st["draft_tokens_accepted"]),
            int(st["target_forward_passes"]),
        )

    def close(self) -> None:
        self._state = {}
        self._loaded = False
