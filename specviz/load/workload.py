"""The workload: prompts with their categories, Poisson arrivals."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..perf.metrics import LOWER_IS_BETTER  # noqa: F401  (re-exported)

_SINGULAR = {"clients": "client", "concurrent clients": "concurrent client",
             "rows per batch": "row per batch"}  # fmt: skip


def at_level(level: float, unit: str) -> str:
    """A load level with its unit, in the singular at 1: ``"1 client"``, ``"4 clients"``,
    ``"1 row per batch"`` (a rate keeps ``requests/s``).

    >>> at_level(1, "clients"), at_level(4.0, "clients"), at_level(1, "rows per batch")
    ('1 client', '4 clients', '1 row per batch')
    """
    return f"{level:g} {_SINGULAR.get(unit, unit) if level == 1 else unit}"


def at_levels(levels: Sequence[float | str], unit: str) -> str:
    """Several load levels with one unit: ``"2, 4 clients"``; one level reads as
    :func:`at_level` (``"1 client"``). Levels may come formatted already.

    >>> at_levels([1, 2], "clients"), at_levels(["1"], "clients"), at_levels([1.0], "clients")
    ('1, 2 clients', '1 client', '1 client')
    """
    xs = [float(x) for x in levels]
    if len(xs) == 1:
        return at_level(xs[0], unit)
    return f"{', '.join(f'{x:g}' for x in xs)} {unit}"


__all__ = ["LoadPrompt", "load_prompts_for", "mixed_prompts", "Request", "poisson_arrivals"]


# -- workload ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadPrompt:
    """A prompt ready for the engine: token ids plus the labels results are split by."""

    input_ids: tuple[int, ...]
    prompt_id: str = ""
    category: str = ""

    def __post_init__(self) -> None:
        if not self.input_ids:
            raise ValueError(f"prompt {self.prompt_id!r} has no tokens")


def load_prompts_for(tokenizer: Any, prompts: Sequence[Any]) -> list[LoadPrompt]:
    """Render :class:`~specviz.prompts.Prompt` objects (or strings) with the chat template.

    >>> from specviz.prompts import load_prompts
    >>> class Tok:  # no chat template: contents are joined and encoded
    ...     def encode(self, text): return [len(w) for w in text.split()]
    >>> lp = load_prompts_for(Tok(), load_prompts(categories="structured", per_category=1))
    >>> lp[0].category
    'structured'
    """
    from ..prompts import render_prompt

    out = []
    for i, p in enumerate(prompts):
        ids = tuple(render_prompt(tokenizer, p))
        out.append(LoadPrompt(ids, getattr(p, "id", f"p{i}"), getattr(p, "category", "")))
    return out


def mixed_prompts(
    tokenizer: Any,
    n: int,
    *,
    categories: Sequence[str] | None = None,
    path: Any = None,
    split: str | None = None,
) -> list[LoadPrompt]:
    """``n`` distinct prompts of the prompt set, round-robin over the categories (so any
    prefix of the list mixes tasks), rendered with the chat template.

    Distinct prompts matter: rows with identical tokens can share work in a batched engine,
    which would flatter whichever mode exploits it. ``split="heldout"`` keeps prompts a
    trained drafter (the EAGLE-style head) never saw: on its own ``train`` prompts it
    recalls the target's greedy text and accepts far more than on new requests.

    >>> class Tok:
    ...     def encode(self, text): return [len(w) for w in text.split()]
    >>> [p.category for p in mixed_prompts(Tok(), 3)]
    ['chat_writing', 'translation', 'summarization']
    """
    from ..prompts import load_prompts

    n = _check_int("n", n, 1)
    pool = load_prompts(path, categories=list(categories) if categories else None, split=split)
    by_cat: dict[str, list[Any]] = {}
    for p in pool:
        by_cat.setdefault(p.category, []).append(p)
    order = [p for rank in range(max(map(len, by_cat.values()))) for ps in by_cat.values()
             if rank < len(ps) for p in [ps[rank]]]  # fmt: skip
    if n > len(order):
        raise ValueError(f"asked for {n} distinct prompts, the prompt set has {len(order)}")
    return load_prompts_for(tokenizer, order[:n])


def _as_load_prompts(prompts: Sequence[Any]) -> list[LoadPrompt]:
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence) or not prompts:
        raise ValueError("prompts must be a non-empty list of LoadPrompt or token-id lists")
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, LoadPrompt):
            out.append(p)
        elif isinstance(p, Sequence) and not isinstance(p, (str, bytes)):
            if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in p):
                raise ValueError(f"prompt {i} must contain non-negative integer token ids")
            out.append(LoadPrompt(tuple(p), f"p{i}", ""))
        else:
            raise TypeError(
                f"prompt {i} is a {type(p).__name__}; pass LoadPrompt or token ids "
                "(render Prompt objects with load_prompts_for(tokenizer, prompts))"
            )
    return out


@dataclass(frozen=True)
class Request:
    id: int
    arrival: float  # virtual seconds
    prompt: LoadPrompt = field(repr=False)
    client: int | None = None  # closed loop: which client sent it


def poisson_arrivals(rate: float, n: int, *, seed: int | torch.Generator = 0) -> list[float]:
    """Arrival times (seconds) of ``n`` requests of a Poisson process with ``rate`` req/s.

    The gaps are drawn at unit rate and divided by ``rate``, so the same seed gives the same
    pattern at every rate, only compressed (common random numbers across load levels).

    >>> a = poisson_arrivals(2.0, 3, seed=0)
    >>> b = poisson_arrivals(4.0, 3, seed=0)
    >>> [round(x / y, 6) for x, y in zip(a, b)]
    [2.0, 2.0, 2.0]
    """
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not rate > 0:
        raise ValueError(f"rate must be a positive number of requests per second, got {rate!r}")
    if not math.isfinite(rate):
        raise ValueError(f"rate must be finite, got {rate!r}")
    n = _check_int("n", n, 1)
    gen = seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(seed)
    u = torch.rand(n, generator=gen, dtype=torch.float64)
    gaps = -torch.log1p(-u)  # Exp(1)
    return (gaps.cumsum(0) / float(rate)).tolist()


def _prompt_order(n_prompts: int, n: int, seed: int) -> list[int]:
    """Which prompt each request uses: a seeded shuffle, cycled."""
    gen = torch.Generator().manual_seed(seed + 1)
    perm = torch.randperm(n_prompts, generator=gen).tolist()
    return [perm[i % n_prompts] for i in range(n)]


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value
