"""Shared helpers of the benchmark scripts: pairs, prompts, transformers calls, interleaving.

Timings on a shared 2-core machine are noisy: every script interleaves the systems it
compares (A B C D, B C D A, ...) on the same prompts so drift hits all of them alike, and
prints ratios measured in the same run.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

import specviz as sv
from specviz.drafting import PromptLookupDrafter
from specviz.models import load_model, load_tokenizer
from specviz.prompts import load_prompts, render_prompt

CATEGORIES = ("code", "extraction", "structured", "summarization", "chat_writing")


@dataclass
class Pair:
    name: str
    target: torch.nn.Module
    tokenizer: object
    draft_model: torch.nn.Module | None  # None: prompt lookup
    gamma: int
    eos: int | None


def packed_flag(ap) -> None:
    """``--packed/--no-packed``: run specviz on packed (oneDNN) linear weights (default)."""
    import argparse

    ap.add_argument(
        "--packed",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="pre-pack linear weights for oneDNN (specviz.use_packed_weights); default on",
    )


def kernels_flag(ap) -> None:
    """``--kernels fastest|packed|stock``: specviz's CPU linear kernels (default: measured on
    this host by specviz.use_fastest_kernels, cached per host)."""
    ap.add_argument(
        "--kernels",
        choices=("fastest", "packed", "stock"),
        default="fastest",
        help="specviz's linear kernels: timed per host and shape (default), packed, or stock",
    )


def packed_arg(kernels: str) -> bool | None:
    """``load_model(packed=...)`` for a ``--kernels`` value."""
    return {"fastest": None, "packed": True, "stock": False}[kernels]


def load_pair(name: str, *, packed: bool | None = False) -> Pair:
    """``packed``: True/False as in load_model; None = the kernels measured faster on this
    host (the draft at the thread count chosen for the target)."""
    if name == "smollm2":
        tok = load_tokenizer("smollm2-135m", progress=False)
        model = load_model("smollm2-135m", progress=False, packed=packed)
        return Pair("smollm2-135m + prompt lookup", model, tok, None, 4, tok.eos_token_id)
    if name == "qwen":
        tok = load_tokenizer("qwen2.5-coder-1.5b", progress=False)
        target = load_model("qwen2.5-coder-1.5b", progress=False, packed=packed)
        draft = load_model("qwen2.5-coder-0.5b", progress=False, packed=packed, threads=False)
        return Pair("qwen2.5-coder 1.5b + 0.5b", target, tok, draft, 4, tok.eos_token_id)
    raise SystemExit(f"unknown pair {name!r}: choose smollm2 or qwen")


def prompts(pair: Pair, n: int) -> list[list[int]]:
    chosen = []
    for cat in CATEGORIES:
        chosen += load_prompts(categories=cat, per_category=1)
    return [render_prompt(pair.tokenizer, p) for p in chosen[:n]]


def hf_generate(pair: Pair, ids: list[int], tokens: int, *, assisted: bool) -> list[int]:
    x = torch.tensor([ids])
    kwargs: dict = {}
    if assisted and pair.draft_model is not None:
        cfg = pair.draft_model.generation_config
        # Same gamma as specviz, every step: constant schedule, no confidence early stop.
        cfg.num_assistant_tokens = pair.gamma
        cfg.num_assistant_tokens_schedule = "constant"
        cfg.assistant_confidence_threshold = 0.0
        kwargs["assistant_model"] = pair.draft_model
    elif assisted:
        kwargs.update(prompt_lookup_num_tokens=pair.gamma, max_matching_ngram_size=3)
    out = pair.target.generate(
        x,
        attention_mask=torch.ones_like(x),  # explicit: never let generate infer padding
        max_new_tokens=tokens,
        do_sample=False,
        temperature=None,
        top_p=None,
        top_k=None,
        repetition_penalty=None,
        eos_token_id=pair.eos,
        pad_token_id=pair.eos,
        **kwargs,
    )
    return out[0, len(ids) :].tolist()


def sv_spec(pair: Pair, ids: list[int], tokens: int, *, trace: bool = True, gamma=None):
    draft = pair.draft_model if pair.draft_model is not None else PromptLookupDrafter()
    return sv.speculative_generate(
        pair.target,
        draft,
        ids,
        gamma=pair.gamma if gamma is None else gamma,
        max_new_tokens=tokens,
        eos_token_id=pair.eos,
        trace=trace,
    )


def sv_plain(pair: Pair, ids: list[int], tokens: int):
    return sv.autoregressive_generate(
        pair.target, ids, max_new_tokens=tokens, eos_token_id=pair.eos
    )


@dataclass
class Tally:
    """Per system: seconds and tokens per repeat (summed over prompts)."""

    seconds: dict[str, list[float]] = field(default_factory=dict)
    tokens: dict[str, list[int]] = field(default_factory=dict)
    cells: dict[str, list[float]] = field(default_factory=dict)  # tokens/s per (repeat, prompt)

    def add(self, name: str, rep: int, seconds: float, tokens: int) -> None:
        s, t = self.seconds.setdefault(name, []), self.tokens.setdefault(name, [])
        while len(s) <= rep:
            s.append(0.0)
            t.append(0)
        s[rep] += seconds
        t[rep] += tokens

    def ratio(self, a: str, b: str) -> float:
        """Geometric mean over (repeat, prompt) cells of tokens/s of ``a`` over ``b``: the
        systems of one cell run back to back, so machine drift between cells cancels."""
        logs = [math.log(x / y) for x, y in zip(self.cells[a], self.cells[b], strict=True)]
        return math.exp(sum(logs) / len(logs))

    def tps(self, name: str) -> float:
        """Median over repeats of tokens/s."""
        return statistics.median(
            t / s for s, t in zip(self.seconds[name], self.tokens[name], strict=True)
        )


def interleaved(
    systems: dict[str, Callable[[list[int]], list[int]]],
    prompt_ids: list[list[int]],
    repeats: int,
    *,
    reference: str,
) -> Tally:
    """Run every system on every prompt, rotating their order; assert identical tokens."""
    names = list(systems)
    tally = Tally()
    for rep in range(repeats):
        for i, ids in enumerate(prompt_ids):
            shift = (rep + i) % len(names)
            order = names[shift:] + names[:shift]
            outs = {}
            for name in order:
                t0 = time.perf_counter()
                outs[name] = systems[name](ids)
                took = time.perf_counter() - t0
                tally.add(name, rep, took, len(outs[name]))
                tally.cells.setdefault(name, []).append(len(outs[name]) / took)
                print(
                    f"  [repeat {rep} prompt {i}] {name}: {len(outs[name])} tokens in {took:.2f} s",
                    flush=True,
                )
            for name, toks in outs.items():
                if toks != outs[reference]:
                    raise AssertionError(
                        f"prompt {i}: {name} differs from {reference} "
                        f"(first difference at token "
                        f"{next((j for j, (a, b) in enumerate(zip(toks, outs[reference], strict=False)) if a != b), min(len(toks), len(outs[reference])))})"
                    )
    return tally
