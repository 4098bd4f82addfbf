"""specviz's own decoder as an in-process engine: the audit's controls.

``specviz:toy,verifier=always_accept`` runs :func:`specviz.decoding.serial.speculative_generate`
with a verifier from the bug zoo (``lossless`` is honest; ``always_accept``,
``residual_from_target``, ... ship known mistakes) on the exact toy pair (5 tokens, fast) or on
a real model with a draft model (``specviz:smollm2-135m,draft=smollm2-135m@8,verifier=...``).
The in-process audit must flag the broken verifiers at the same sample sizes at which it passes
an honest engine: the broken-engine control, like the HTTP audit's broken server.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .base import Engine, EngineSample, Sampling, check_sampling
from .convert import hf_folder

__all__ = ["SpecvizEngine"]

_TOY_LETTERS = "abcde"


@dataclass
class SpecvizEngine(Engine):
    """``model`` is ``toy`` (its own draft is the toy pair's draft) or a model name with
    ``draft``; ``verifier`` a name from the bug zoo; ``k`` the draft length (gamma)."""

    model: str = "toy"
    draft: str | None = None
    verifier: str = "lossless"
    k: int = 3
    speculate: bool = True
    engine: str = "specviz"
    _state: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        from ...verification.base import VERIFIERS

        if self.verifier not in VERIFIERS:
            raise ValueError(
                f"specviz: unknown verifier {self.verifier!r}; choose from {sorted(VERIFIERS)}"
            )
        if self.model != "toy" and self.speculate and self.draft is None:
            raise ValueError("specviz: a real model needs draft=... (or speculate=0)")
        self.speculation = "draft" if self.speculate else "off"
        self.first_token_from_target = False if self.speculate else True
        self.sampled_draft = True if self.speculate else None

    def load(self) -> None:
        if self.model == "toy":
            from ...fixtures.toy import toy_pair

            target, draft = toy_pair(len(_TOY_LETTERS), 2, seed=0)
            self._state = dict(target=target, draft=draft, tok=None)
            return
        from ... import models

        target = models.load_model(str(hf_folder(self.model)), progress=False)
        tok = models.load_tokenizer(str(hf_folder(self.model)), progress=False)
        draft = None
        if self.speculate:
            same = self.draft in ("target", self.model)
            draft = (
                target if same else models.load_model(str(hf_folder(self.draft)), progress=False)
            )
        self._state = dict(target=target, draft=draft, tok=tok)

    def _encode(self, prompt: str) -> list[int]:
        tok = self._state["tok"]
        if tok is None:
            bad = sorted(set(prompt) - set(_TOY_LETTERS))
            if bad:
                raise ValueError(f"toy prompts are strings over {_TOY_LETTERS!r}; got {bad}")
            return [_TOY_LETTERS.index(c) for c in prompt]
        return tok(prompt)["input_ids"]

    def sample_one(self, prompt: str, sampling: Sampling, seed: int) -> EngineSample:
        import torch

        from ...decoding.serial import autoregressive_generate, speculative_generate

        check_sampling(self.engine, sampling)
        kw: dict[str, Any] = dict(
            max_new_tokens=sampling.max_tokens,
            do_sample=not sampling.greedy,
            temperature=sampling.temperature or 1.0,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            seed=seed,
        )
        ids = self._encode(prompt)
        t0 = time.perf_counter()
        with torch.inference_mode():
            if self.speculate:
                res = speculative_generate(
                    self._state["target"],
                    self._state["draft"],
                    ids,
                    gamma=self.k,
                    verifier=self.verifier,
                    trace=False,
                    **kw,
                )
            else:
                res = autoregressive_generate(self._state["target"], ids, **kw)
        tokens = tuple(int(t) for t in res.new_tokens)
        seconds = time.perf_counter() - t0
        if not self.speculate:
            return EngineSample(tokens, seconds)
        drafted = sum(int(d) for d in res.drafted_counts)
        accepted = sum(int(a) for a in res.accepted_counts)
        return EngineSample(tokens, seconds, drafted, accepted, len(list(res.drafted_counts)))

    def close(self) -> None:
        self._state = {}
        self._loaded = False
