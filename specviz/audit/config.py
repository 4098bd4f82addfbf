"""What an audit samples: the settings stored in the raw file's header."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from .. import stats
from .client import Endpoint

__all__ = ["ARMS", "AuditConfig"]


ARMS = ("a", "b")  # a: speculation off (reference), b: speculation on
_SEED_ARM = 10**8  # seeds: seed + arm * 1e8 + prompt * 1e5 + index (< 2**31 for llama.cpp)
_SEED_PROMPT = 10**5


@dataclass(frozen=True)
class AuditConfig:
    """Everything that fixes what is sampled (stored in the raw file's header: a resumed
    audit must use the same values)."""

    prompts: tuple[str, ...]
    n_samples: int = 200
    max_tokens: int = 4
    temperature: float = 1.0
    top_p: float | None = None
    top_k: int | None = None
    seed: int = 0
    alpha: float = 0.01
    concurrency: int = 4
    retries: int = 4
    greedy: bool = True
    greedy_max_tokens: int = 32
    near_tie: float = stats.DEFAULT_NEAR_TIE
    load_levels: tuple[int, ...] = (1, 2, 4)
    load_requests: int = 8
    load_max_tokens: int = 64
    load_temperature: float = 0.0
    load_prompts: tuple[str, ...] = ()
    n_boot: int = 300
    outcome: str = "tokens"  # "tokens" (server-reported, needs logprobs) or "text" (split_text)

    def __post_init__(self) -> None:
        if not self.prompts:
            raise ValueError("prompts is empty")
        if not 1 <= self.n_samples < _SEED_PROMPT:
            raise ValueError(f"n_samples must be in [1, {_SEED_PROMPT})")
        if len(self.prompts) > 999:
            raise ValueError("at most 999 prompts")
        if self.max_tokens < 1 or self.greedy_max_tokens < 1 or self.load_max_tokens < 1:
            raise ValueError("max_tokens values must be >= 1")
        if self.temperature <= 0:
            raise ValueError("the sampled comparison needs temperature > 0 (greedy is separate)")
        if self.concurrency < 1 or any(c < 1 for c in self.load_levels):
            raise ValueError("concurrency levels must be >= 1")
        if not 0 < self.alpha < 1:
            raise ValueError("alpha must be in (0, 1)")
        if self.outcome not in ("tokens", "text"):
            raise ValueError(f"outcome must be 'tokens' or 'text', got {self.outcome!r}")

    def sampling_key(self, a: Endpoint, b: Endpoint) -> str:
        """Hash of what the raw samples depend on."""
        key = dict(
            prompts=self.prompts,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            seed=self.seed,
            greedy_max_tokens=self.greedy_max_tokens,
            outcome=self.outcome,
            a=[a.base_url, a.model, sorted(a.extra.items())],
            b=[b.base_url, b.model, sorted(b.extra.items())],
        )
        return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()
