"""The one validation layer: every entry point checks its arguments here, before any model runs.

Each check raises one clear message per problem, naming the argument and the way out
(``docs/reliability.md`` lists them with the tests that pin them). The serial and batched
engines, ``consistency_check``, ``greedy_check``, the audit's local engine and the load
generator all call these functions, so a check added here reaches every path.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "check_count",
    "check_draft",
    "check_positions",
    "check_seed",
    "check_target_logits",
    "check_tree",
    "check_vocab",
    "eos_set",
    "generator",
    "prompt_list",
    "prompt_tensor",
    "row_generators",
]


def check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def prompt_tensor(input_ids: Any, vocab: int | None = None, *, batched_hint: bool = True):
    """One prompt (a 1-D tensor, a [1, T] tensor or a list of ints) -> a [T] int64 CPU tensor
    of ids in ``[0, vocab)``. Several prompts are refused with a pointer to the batched API."""
    if isinstance(input_ids, torch.Tensor):
        t = input_ids
        if t.dim() == 2:
            if t.shape[0] != 1:
                raise ValueError(
                    f"input_ids must be a single sequence (1xT), got batch of {t.shape[0]}"
                    + (
                        "; for many prompts use speculative_generate_batch / "
                        "autoregressive_generate_batch"
                        if batched_hint
                        else ""
                    )
                )
            t = t[0]
        if t.dim() != 1:
            raise ValueError(f"input_ids must be 1xT or T, got shape {tuple(input_ids.shape)}")
        if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
            raise ValueError(f"input_ids must be integer token ids, got dtype {t.dtype}")
        t = t.detach().to("cpu", torch.long)
    elif isinstance(input_ids, Sequence) and not isinstance(input_ids, (str, bytes)):
        items = list(input_ids)
        if items and all(isinstance(x, (Sequence, torch.Tensor)) for x in items):
            if len(items) > 1:
                raise ValueError(
                    f"input_ids holds {len(items)} prompts; this function decodes one sequence"
                    + (
                        " -- use speculative_generate_batch / autoregressive_generate_batch "
                        "for several"
                        if batched_hint
                        else ""
                    )
                )
            return prompt_tensor(items[0], vocab, batched_hint=batched_hint)
        if not all(_is_int(x) for x in items):
            bad = next(x for x in items if not _is_int(x))
            raise ValueError(
                f"input_ids must contain integer token ids, got {type(bad).__name__} {bad!r}"
            )
        t = torch.tensor(items, dtype=torch.long)
    else:
        raise TypeError(
            f"input_ids must be a tensor or a list of ints, got {type(input_ids).__name__}"
            + (
                " (tokenize text first, e.g. specviz.prompts.render_prompt)"
                if isinstance(input_ids, str)
                else ""
            )
        )
    if t.numel() == 0:
        raise ValueError("input_ids is empty: the prompt needs at least one token (e.g. BOS)")
    lo, hi = int(t.min()), int(t.max())
    if lo < 0:
        raise ValueError(f"input_ids contains negative token ids (e.g. {lo})")
    if vocab is not None and hi >= vocab:
        raise ValueError(
            f"input_ids contains token id {hi}, outside the target's vocabulary [0, {vocab}); "
            "was the prompt tokenized with another model's tokenizer?"
        )
    return t


def prompt_list(input_ids: Any, num_sequences: int | None, vocab: int | None) -> list[torch.Tensor]:
    """One prompt per row: a single prompt repeated ``num_sequences`` times (the same tensor
    object, which the batched engine prefills once), or a list of prompts (one row each)."""
    many = isinstance(input_ids, (list, tuple)) and len(input_ids) > 0
    many = many and all(
        isinstance(p, (Sequence, torch.Tensor)) and not isinstance(p, str) for p in input_ids
    )
    if isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2 and input_ids.shape[0] > 1:
        many, input_ids = True, list(input_ids)
    if not many:
        if num_sequences is None:
            raise ValueError("num_sequences is required when all rows share one prompt")
        prompt = prompt_tensor(input_ids, vocab, batched_hint=False)
        return [prompt] * check_count("num_sequences", num_sequences, 1)
    prompts = [prompt_tensor(p, vocab, batched_hint=False) for p in input_ids]
    if num_sequences is not None and num_sequences != len(prompts):
        raise ValueError(
            f"num_sequences={num_sequences} but {len(prompts)} prompts were given (one row each)"
        )
    return prompts


def eos_set(eos_token_id: Any) -> frozenset[int]:
    """``eos_token_id``: None, an int, a sequence of ints or an int tensor."""
    if eos_token_id is None:
        return frozenset()
    if isinstance(eos_token_id, str):
        raise TypeError(
            f"eos_token_id must be a token id (int), got the string {eos_token_id!r}; "
            "pass tokenizer.eos_token_id"
        )
    if isinstance(eos_token_id, torch.Tensor):
        if eos_token_id.dtype.is_floating_point or eos_token_id.dtype == torch.bool:
            raise TypeError(f"eos_token_id tensor must hold integer ids, got {eos_token_id.dtype}")
        eos_token_id = eos_token_id.reshape(-1).tolist()
    if _is_int(eos_token_id):
        ids = [eos_token_id]
    elif isinstance(eos_token_id, Sequence):
        ids = list(eos_token_id)
        if not all(_is_int(e) for e in ids):
            raise TypeError(
                f"eos_token_id must be an int or a sequence of ints, got {eos_token_id!r}"
            )
    else:
        raise TypeError(
            f"eos_token_id must be an int, a sequence of ints or a tensor, got "
            f"{type(eos_token_id).__name__}"
        )
    if any(e < 0 for e in ids):
        raise ValueError(f"eos_token_id must be >= 0, got {eos_token_id!r}")
    return frozenset(ids)


def check_seed(seed: Any) -> None:
    if seed is None or isinstance(seed, torch.Generator) or _is_int(seed):
        return
    raise TypeError(
        f"seed must be an int, a torch.Generator or None, got {type(seed).__name__} {seed!r}"
    )


def generator(seed: Any, device: torch.device) -> tuple[torch.Generator, int | None]:
    """One Generator for every draw of a generation. Passing a Generator (instead of an int)
    lets a caller thread one stream through many generations without reseeding."""
    check_seed(seed)
    if isinstance(seed, torch.Generator):
        if seed.device.type != device.type:
            raise ValueError(f"the generator is on {seed.device}, the model on {device}")
        return seed, None
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item())
    g = torch.Generator(device=device)
    g.manual_seed(int(seed))
    return g, int(seed)


def row_generators(
    seed: Any, n: int, device: torch.device
) -> tuple[list[torch.Generator], list[int]]:
    """Per-row Generators of a batch: row ``i`` is seeded ``seed + i`` (so it reproduces the
    serial run with that seed); a Generator given as ``seed`` draws the base seed from its
    stream; None draws a random one."""
    check_seed(seed)
    if isinstance(seed, torch.Generator):
        base = int(torch.randint(0, 2**62, (1,), generator=seed, device=seed.device).item())
    elif seed is None:
        base = int(torch.randint(0, 2**62, (1,)).item())
    else:
        base = int(seed)
    seeds = [base + i for i in range(n)]
    return [torch.Generator(device=device).manual_seed(s) for s in seeds], seeds


def check_target_logits(logits: torch.Tensor) -> None:
    """Refuse NaN/inf target logits at the cost of one reduction: any NaN/inf makes the sum
    non-finite; only then is the elementwise check run (it names the first bad entry, or
    passes if the sum merely overflowed)."""
    if not bool(torch.isfinite(logits.sum())):
        from ..core.sampling import check_logits

        check_logits(logits, "target")


def check_draft(draft: Any, k: int, vocab: int | None, name: str) -> None:
    """A drafter's proposal, before the target sees it: at most ``k`` ids in ``[0, vocab)``
    and, when given, a finite, non-negative ``q_draft`` with one row of ``vocab`` per token
    (``vocab=None``: not known yet, ranges unchecked)."""
    tokens = draft.tokens
    n = tokens.numel()
    if n > k:
        raise ValueError(f"drafter {name!r} proposed {n} tokens when asked for at most {k}")
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        raise ValueError(f"drafter {name!r} proposed token ids of dtype {tokens.dtype}")
    if n and (int(tokens.min()) < 0 or (vocab is not None and int(tokens.max()) >= vocab)):
        bad = int(tokens.min()) if int(tokens.min()) < 0 else int(tokens.max())
        raise ValueError(
            f"drafter {name!r} proposed token id {bad}, outside the target's vocabulary "
            f"[0, {vocab})"
        )
    q = draft.q_draft
    if q is None:
        return
    if vocab is not None and q.shape[-1] != vocab:
        raise ValueError(
            f"vocabulary mismatch: draft logits have {q.shape[-1]} entries, target logits "
            f"{vocab}; draft and target must share a tokenizer (drafter {name!r})"
        )
    if n and not bool(torch.isfinite(q.sum())):
        raise FloatingPointError(f"drafter {name!r} reported a non-finite q_draft")
    if n and bool((q.amin() < 0).item()):
        raise ValueError(f"drafter {name!r} reported negative probabilities in q_draft")


def check_tree(tree: Any, k: int, vocab: int | None, name: str, max_nodes: int = 1024) -> None:
    """A drafter's token tree, before the target sees it: depth at most ``k``, at most
    ``max_nodes`` nodes, ids in ``[0, vocab)`` and a well-formed ``q_draft``."""
    n = tree.size
    if n > max_nodes:
        raise ValueError(f"drafter {name!r} proposed a tree of {n} nodes (at most {max_nodes})")
    if n and max(tree.depths()) > k:
        raise ValueError(
            f"drafter {name!r} proposed a tree of depth {max(tree.depths())} when at most {k} "
            "tokens can follow"
        )
    from ..drafting.base import Draft

    check_draft(Draft(tree.tokens, tree.q_draft), n, vocab, name)


def check_vocab(target_vocab: int | None, drafter: Any) -> None:
    """Draft and target must index the same vocabulary (every path, before any call)."""
    vd = getattr(drafter, "vocab_size", None)
    if target_vocab is not None and isinstance(vd, int) and vd != target_vocab:
        raise ValueError(
            f"vocabulary mismatch: draft logits have {vd} entries, target logits {target_vocab}; "
            "draft and target must share a tokenizer (see specviz.models.check_vocab)"
        )


def check_positions(model: Any, longest_prompt: int, max_new_tokens: int) -> None:
    """Prompt + new tokens beyond what the model was trained for: an error, or a warning for
    models whose RoPE scaling extends their positions."""
    cfg = getattr(model, "config", None)
    limit = getattr(cfg, "max_position_embeddings", None)
    if not isinstance(limit, int) or limit <= 0:
        return
    need = longest_prompt + max_new_tokens
    if need <= limit:
        return
    # transformers 5 keeps RoPE settings in rope_parameters (rope_scaling before)
    scaling = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else None
    if kind not in (None, "default"):
        warnings.warn(
            f"prompt ({longest_prompt}) + max_new_tokens ({max_new_tokens}) = {need} exceeds "
            f"max_position_embeddings={limit}; the model's {kind!r} RoPE scaling extends it",
            stacklevel=3,
        )
        return
    raise ValueError(
        f"prompt ({longest_prompt} tokens) + max_new_tokens ({max_new_tokens}) = {need} exceeds "
        f"the model's max_position_embeddings={limit}; shorten the prompt or max_new_tokens"
    )


def check_probability(name: str, value: Any, *, open_low: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
    if not (0.0 < value < 1.0):
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")
    return float(value)
