"""What an audit samples: the settings stored in the raw file's header."""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import stats
from .client import APIS, Endpoint

__all__ = ["ARMS", "AuditConfig"]


ARMS = ("a", "b")  # a: speculation off (reference), b: speculation on
_SEED_ARM = 10**8  # seeds: seed + arm * 1e8 + prompt * 1e5 + index (< 2**31 for llama.cpp)
_SEED_PROMPT = 10**5
_SEED_MAX = 2**31 - 1


def _prompts(name: str, value: Any, *, empty_ok: bool) -> tuple[str, ...]:
    """A str is one prompt; otherwise a sequence of non-empty strings, as a tuple."""
    if isinstance(value, str):
        value = (value,)
    if isinstance(value, bytes) or not isinstance(value, Sequence):
        raise ValueError(
            f"{name} must be a string or a sequence of strings, got {type(value).__name__}"
        )
    for i, p in enumerate(value):
        if not isinstance(p, str):
            raise ValueError(f"{name}: prompt {i} is a {type(p).__name__}, not a string: {p!r}")
        if not p:
            raise ValueError(f"{name}: prompt {i} is an empty string")
    if not value and not empty_ok:
        raise ValueError(f"{name} is empty: give at least one prompt")
    return tuple(value)


def _int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _real(name: str, value: Any, minimum: float) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or value < minimum
    ):
        raise ValueError(f"{name} must be a finite number >= {minimum:g}, got {value!r}")


@dataclass(frozen=True)
class AuditConfig:
    """Everything that fixes what is sampled (stored in the raw file's header: a resumed
    audit must use the same values).

    Checked on construction: a bad value raises a ValueError whose message starts with the
    field's name. ``prompts`` (and ``load_prompts``) may be one string -- one prompt, not its
    characters -- or a sequence of non-empty strings; both are stored as tuples.

    ``api`` picks the endpoint: ``"completions"`` (``/v1/completions``, the prompt as text) or
    ``"chat"`` (``/v1/chat/completions``, the prompt as one user message: the server applies
    its chat template). ``load_temperature`` is one temperature or several (the load sweep
    runs once per temperature; above 0 it uses ``top_p``/``top_k`` too).

    >>> AuditConfig(prompts="ab", load_temperature=(0, 0.7)).load_temperatures
    (0.0, 0.7)
    """

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
    load_temperature: float | tuple[float, ...] = 0.0
    load_prompts: tuple[str, ...] = ()
    n_boot: int = 300
    outcome: str = "tokens"  # "tokens" (server-reported, needs logprobs) or "text" (split_text)
    api: str = "completions"  # "completions" or "chat"
    # the first-token TV the audit should be able to see: a run whose samples could only see a
    # larger one is "inconclusive", not "consistent" (not part of the sampling key)
    tv_threshold: float = 0.1

    def __post_init__(self) -> None:
        # A single prompt given as a string is one prompt, not its characters.
        object.__setattr__(self, "prompts", _prompts("prompts", self.prompts, empty_ok=False))
        object.__setattr__(
            self, "load_prompts", _prompts("load_prompts", self.load_prompts, empty_ok=True)
        )
        if len(self.prompts) > 999:
            raise ValueError(f"prompts: at most 999 prompts, got {len(self.prompts)}")
        _int("n_samples", self.n_samples, 2)
        if self.n_samples >= _SEED_PROMPT:
            raise ValueError(f"n_samples must be < {_SEED_PROMPT}, got {self.n_samples!r}")
        _int("max_tokens", self.max_tokens, 1)
        _real("temperature", self.temperature, 0.0)
        if self.temperature == 0:
            raise ValueError(
                "temperature must be > 0: the sampled comparison needs sampling "
                "(the greedy report runs at temperature 0 separately)"
            )
        if self.top_p is not None:
            _real("top_p", self.top_p, 0.0)
            if not 0 < self.top_p <= 1:
                raise ValueError(f"top_p must be None or in (0, 1], got {self.top_p!r}")
        if self.top_k is not None:
            _int("top_k", self.top_k, 1)
        _int("seed", self.seed, 0)
        last = self.seed + _SEED_ARM * (len(ARMS) - 1) + _SEED_PROMPT * (len(self.prompts) - 1)
        if last + self.n_samples > _SEED_MAX:
            raise ValueError(
                f"seed must be <= {_SEED_MAX - (last - self.seed) - self.n_samples} with "
                f"{len(self.prompts)} prompts and n_samples={self.n_samples} (request seeds "
                f"must stay below 2**31), got {self.seed!r}"
            )
        _real("alpha", self.alpha, 0.0)
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha!r}")
        _int("concurrency", self.concurrency, 1)
        _int("retries", self.retries, 0)
        if not isinstance(self.greedy, bool):
            raise ValueError(f"greedy must be True or False, got {self.greedy!r}")
        _int("greedy_max_tokens", self.greedy_max_tokens, 1)
        _real("near_tie", self.near_tie, 0.0)
        if isinstance(self.load_levels, (str, bytes)) or not isinstance(self.load_levels, Sequence):
            raise ValueError(
                f"load_levels must be a sequence of integers >= 1 (empty skips the load "
                f"sweep), got {self.load_levels!r}"
            )
        if any(
            isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < 1
            for x in self.load_levels
        ):
            raise ValueError(f"load_levels must be integers >= 1, got {self.load_levels!r}")
        object.__setattr__(self, "load_levels", tuple(int(x) for x in self.load_levels))
        _int("load_requests", self.load_requests, 1)
        _int("load_max_tokens", self.load_max_tokens, 1)
        if isinstance(self.load_temperature, Sequence) and not isinstance(
            self.load_temperature, (str, bytes)
        ):
            temps = tuple(self.load_temperature)
            if not temps:
                raise ValueError("load_temperature must be a number or a non-empty sequence")
            for t in temps:
                _real("load_temperature", t, 0.0)
            if len(set(temps)) != len(temps):
                raise ValueError(f"load_temperature has repeated values: {temps!r}")
            object.__setattr__(self, "load_temperature", tuple(float(t) for t in temps))
        else:
            _real("load_temperature", self.load_temperature, 0.0)
        _int("n_boot", self.n_boot, 1)
        if self.outcome not in ("tokens", "text"):
            raise ValueError(f"outcome must be 'tokens' or 'text', got {self.outcome!r}")
        if self.api not in APIS:
            raise ValueError(f"api must be 'completions' or 'chat', got {self.api!r}")
        _real("tv_threshold", self.tv_threshold, 0.0)
        if not 0 < self.tv_threshold <= 1:
            raise ValueError(f"tv_threshold must be in (0, 1], got {self.tv_threshold!r}")

    @property
    def load_temperatures(self) -> tuple[float, ...]:
        """The load sweep's temperatures (one sweep each)."""
        t = self.load_temperature
        return t if isinstance(t, tuple) else (float(t),)

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
        if self.api != "completions":  # keeps the keys of older raw files valid
            key["api"] = self.api
        return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()
