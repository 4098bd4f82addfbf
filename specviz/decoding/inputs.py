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

import numpy as np
import torch

from ..core.args import as_int, check_int, is_int

__all__ = [
    "Q_SUM_TOLERANCE",
    "check_count",
    "check_draft",
    "check_models",
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


#: How far a row of a drafter's ``q_draft`` may sum from 1 (float32 softmax rounding over a
#: 150k vocabulary stays below 1e-4; 16-bit laws get ``Q_SUM_TOLERANCE_16BIT``).
Q_SUM_TOLERANCE = 1e-3
Q_SUM_TOLERANCE_16BIT = 2e-2

#: Seeds torch's Generator takes (``manual_seed`` accepts [-2**63, 2**64)).
_SEED_LOW, _SEED_HIGH = -(2**63), 2**64 - 1


def check_count(name: str, value: Any, minimum: int) -> int:
    """An integer (int, numpy integer or 0-d integer tensor) >= ``minimum``, as a Python int."""
    return check_int(name, value, minimum)


def _is_int(x: Any) -> bool:
    return is_int(x)


def prompt_tensor(input_ids: Any, vocab: int | None = None, *, batched_hint: bool = True):
    """One prompt (a 1-D tensor, a [1, T] tensor or a list of ints) -> a [T] int64 CPU tensor
    of ids in ``[0, vocab)``. Several prompts are refused with a pointer to the batched API.
    Numpy arrays and numpy / 0-d tensor ids are taken like tensors and ints."""
    if isinstance(input_ids, np.ndarray) and input_ids.dtype.kind in "iu":
        input_ids = torch.from_numpy(input_ids.astype(np.int64))
    if isinstance(input_ids, torch.Tensor):
        t = _prompt_from_tensor(input_ids, batched_hint)
    elif isinstance(input_ids, Sequence) and not isinstance(input_ids, (str, bytes)):
        items = list(input_ids)
        if items and all(_is_prompt_like(x) for x in items):
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
        ints = [as_int(x) for x in items]
        if any(v is None for v in ints):
            bad = next(x for x, v in zip(items, ints, strict=True) if v is None)
            raise ValueError(
                f"input_ids must contain integer token ids, got {type(bad).__name__} {bad!r}"
            )
        t = torch.tensor(ints, dtype=torch.long)
    else:
        raise TypeError(
            f"input_ids must be a tensor or a list of ints, got {type(input_ids).__name__}"
            + (
                " (tokenize text first, e.g. specviz.prompts.render_prompt)"
                if isinstance(input_ids, str)
                else ""
            )
        )
    _check_ids(t, vocab)
    return t


def _prompt_from_tensor(input_ids: torch.Tensor, batched_hint: bool) -> torch.Tensor:
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
    return t.detach().to("cpu", torch.long)


def _check_ids(t: torch.Tensor, vocab: int | None) -> None:
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


def _is_prompt_like(x: Any) -> bool:
    """A prompt inside a list of prompts: a sequence or a tensor of at least one dimension (a
    0-d tensor is one token id)."""
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return x.ndim > 0
    return isinstance(x, Sequence) and not isinstance(x, (str, bytes))


def prompt_list(input_ids: Any, num_sequences: int | None, vocab: int | None) -> list[torch.Tensor]:
    """One prompt per row: a single prompt repeated ``num_sequences`` times (the same tensor
    object, which the batched engine prefills once), or a list of prompts (one row each)."""
    many = isinstance(input_ids, (list, tuple)) and len(input_ids) > 0
    many = many and all(_is_prompt_like(p) for p in input_ids)
    if isinstance(input_ids, (torch.Tensor, np.ndarray)) and input_ids.ndim == 2:
        if input_ids.shape[0] > 1:
            many, input_ids = True, list(input_ids)
    if not many:
        if num_sequences is None:
            raise ValueError("num_sequences is required when all rows share one prompt")
        prompt = prompt_tensor(input_ids, vocab, batched_hint=False)
        return [prompt] * check_count("num_sequences", num_sequences, 1)
    prompts = [prompt_tensor(p, vocab, batched_hint=False) for p in input_ids]
    if num_sequences is not None and check_count("num_sequences", num_sequences, 1) != len(prompts):
        raise ValueError(
            f"num_sequences={num_sequences} but {len(prompts)} prompts were given (one row each)"
        )
    return prompts


def eos_set(eos_token_id: Any, vocab: int | None = None) -> frozenset[int]:
    """``eos_token_id``: None, an int, a sequence of ints or an int tensor; each id inside the
    target's vocabulary ``[0, vocab)`` when that is known (an id outside it could never be
    emitted, so the run would silently never stop)."""
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
        ids = [as_int(eos_token_id)]
    elif isinstance(eos_token_id, (Sequence, set, frozenset)):
        ids = [as_int(e) for e in eos_token_id]
        if any(e is None for e in ids):
            raise TypeError(
                f"eos_token_id must be an int or a sequence of ints, got {eos_token_id!r}"
            )
    else:
        raise TypeError(
            f"eos_token_id must be an int, a sequence of ints or a tensor, got "
            f"{type(eos_token_id).__name__}"
        )
    if any(e < 0 for e in ids):  # type: ignore[operator]
        raise ValueError(f"eos_token_id must be >= 0, got {eos_token_id!r}")
    if vocab is not None and any(e >= vocab for e in ids):  # type: ignore[operator]
        bad = next(e for e in ids if e >= vocab)  # type: ignore[operator]
        raise ValueError(
            f"eos_token_id {bad} is outside the target's vocabulary [0, {vocab}): it can never "
            "be emitted, so generation would never stop there; pass the target tokenizer's "
            "eos_token_id"
        )
    return frozenset(ids)  # type: ignore[arg-type]


def check_seed(seed: Any, rows: int = 1) -> None:
    """An int seed (``rows`` of them from ``seed``: ``seed .. seed + rows - 1``) that torch's
    Generator takes, a ``torch.Generator`` or None."""
    if seed is None or isinstance(seed, torch.Generator):
        return
    v = as_int(seed)
    if v is None:
        raise TypeError(
            f"seed must be an int, a torch.Generator or None, got {type(seed).__name__} {seed!r}"
        )
    if v < _SEED_LOW or v + max(rows, 1) - 1 > _SEED_HIGH:
        rows_note = f" (rows use seed .. seed + {rows - 1})" if rows > 1 else ""
        raise ValueError(
            f"seed must be in [-2**63, 2**64 - {max(rows, 1)}]{rows_note}, got {v}: torch's "
            "Generator takes 64-bit seeds"
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
    seed = as_int(seed)
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g, seed


def row_generators(
    seed: Any, n: int, device: torch.device
) -> tuple[list[torch.Generator], list[int]]:
    """Per-row Generators of a batch: row ``i`` is seeded ``seed + i`` (so it reproduces the
    serial run with that seed); a Generator given as ``seed`` draws the base seed from its
    stream; None draws a random one."""
    check_seed(seed, n)
    if isinstance(seed, torch.Generator):
        base = int(torch.randint(0, 2**62, (1,), generator=seed, device=seed.device).item())
    elif seed is None:
        base = int(torch.randint(0, 2**62, (1,)).item())
    else:
        base = as_int(seed)  # type: ignore[assignment]
    seeds = [base + i for i in range(n)]
    return [torch.Generator(device=device).manual_seed(s) for s in seeds], seeds


def check_target_logits(logits: torch.Tensor) -> None:
    """Refuse NaN/inf target logits at the cost of one reduction: any NaN/inf makes the sum
    non-finite; only then is the elementwise check run (it names the first bad entry, or
    passes if the sum merely overflowed)."""
    if not bool(torch.isfinite(logits.sum())):
        from ..core.sampling import check_logits

        check_logits(logits, "target")


def check_draft(
    draft: Any, k: int, vocab: int | None, name: str, *, normalised: bool = True
) -> None:
    """A drafter's proposal, before the target sees it: at most ``k`` ids in ``[0, vocab)``
    and, when given, a ``q_draft`` with one row of ``vocab`` per token whose entries are
    finite and >= 0 and whose rows sum to 1 within :data:`Q_SUM_TOLERANCE` (``vocab=None``:
    not known yet, ranges unchecked). A row that does not sum to 1 is not the law a token was
    drawn from, and min(1, p/q) on it gives a wrong output law without any other sign.
    ``normalised=False`` skips the sum (the bug zoo's ``vocab_map_unrenormalized`` reports an
    unnormalised q on purpose). Cost: one reduction over q per proposal, no per-token work."""
    tokens = draft.tokens
    n = tokens.numel()
    if n > k:
        raise ValueError(f"drafter {name!r} proposed {n} tokens when asked for at most {k}")
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
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
    if not n:
        return
    if not (q.dtype.is_floating_point):
        raise ValueError(f"drafter {name!r} reported q_draft of dtype {q.dtype}, not floats")
    # [k]: NaN/inf anywhere makes its row non-finite (16-bit laws summed in float32)
    sums = q.sum(-1) if q.element_size() >= 4 else q.sum(-1, dtype=torch.float32)
    tol = Q_SUM_TOLERANCE if q.element_size() >= 4 else Q_SUM_TOLERANCE_16BIT
    off = (sums - 1.0).abs()
    flags = torch.stack([~torch.isfinite(sums).all(), q.amin() < 0, (off > tol).any()])
    non_finite, negative, unnormalised = flags.tolist()  # one host sync for the three checks
    if non_finite:
        raise FloatingPointError(f"drafter {name!r} reported a non-finite q_draft")
    if negative:
        raise ValueError(f"drafter {name!r} reported negative probabilities in q_draft")
    if normalised and unnormalised:
        i = int(off.argmax())
        raise ValueError(
            f"drafter {name!r} reported a q_draft whose row {i} sums to {float(sums[i]):.6g}, "
            f"not 1 (tolerance {tol:g}): q_draft must be the normalised law each drafted "
            "token was sampled from (one row per token), or None for a deterministic "
            "proposal"
        )


def check_tree(
    tree: Any, k: int, vocab: int | None, name: str, max_nodes: int = 1024,
    *, normalised: bool = True,
) -> None:  # fmt: skip
    """A drafter's token tree, before the target sees it: depth at most ``k``, at most
    ``max_nodes`` nodes, ids in ``[0, vocab)``, a well-formed ``q_draft`` (as
    :func:`check_draft`) and, for siblings drawn ``"without_replacement"``, no token twice
    under one parent (such a tree cannot have been drawn that way)."""
    n = tree.size
    if n > max_nodes:
        raise ValueError(f"drafter {name!r} proposed a tree of {n} nodes (at most {max_nodes})")
    if n and max(tree.depths()) > k:
        raise ValueError(
            f"drafter {name!r} proposed a tree of depth {max(tree.depths())} when at most {k} "
            "tokens can follow"
        )
    from ..drafting.base import Draft

    check_draft(Draft(tree.tokens, tree.q_draft), n, vocab, name, normalised=normalised)
    if n > 1 and tree.sampling == "without_replacement":
        pairs = torch.stack([tree.parents.long(), tree.tokens.long()], 1)  # [n, 2]
        if torch.unique(pairs, dim=0).shape[0] != n:
            raise ValueError(
                f"drafter {name!r} proposed a tree with the same token twice under one parent, "
                f"labelled sampling={tree.sampling!r}: siblings drawn that way are distinct "
                "(use sampling='independent' for siblings drawn with replacement)"
            )


def check_vocab(target_vocab: int | None, drafter: Any) -> None:
    """Draft and target must index the same vocabulary (every path, before any call)."""
    vd = getattr(drafter, "vocab_size", None)
    if target_vocab is not None and isinstance(vd, int) and vd != target_vocab:
        if getattr(drafter, "own_tokenizer", False):  # a cross-vocabulary drafter
            raise ValueError(
                f"vocabulary mismatch: the cross-vocabulary drafter {drafter.name!r} proposes "
                f"over {vd} target ids, but the target's logits have {target_vocab}; build it "
                f"with target_vocab_size={target_vocab} (load_pair does this)"
            )
        raise ValueError(
            f"vocabulary mismatch: draft logits have {vd} entries, target logits {target_vocab}; "
            "draft and target must share a tokenizer (see specviz.models.check_vocab)"
        )


def _model_of(obj: Any) -> Any:
    """The torch model behind a target, a model drafter or a wrapper of one (None if none)."""
    for _ in range(4):
        if obj is None or callable(getattr(obj, "parameters", None)):
            return obj
        obj = next(
            (getattr(obj, a) for a in ("model", "draft_model", "inner") if hasattr(obj, a)), None
        )
    return None


def _first_device(model: Any) -> torch.device | None:
    try:
        p = next(iter(model.parameters()), None)
    except (TypeError, AttributeError):
        return None
    return None if p is None else p.device


def check_models(
    target: Any, drafter: Any = None, longest_prompt: int = 0, max_new_tokens: int = 0
) -> None:
    """Before any model runs: no model on the ``meta`` device (weights never loaded: torch's
    own error would not say which model), and a draft model's own position limit (as
    :func:`check_positions` does for the target)."""
    for who, obj in (("target", target), ("draft", drafter)):
        model = _model_of(obj)
        dev = _first_device(model) if model is not None else None
        if dev is not None and dev.type == "meta":
            raise ValueError(
                f"the {who} model ({type(model).__name__}) is on the 'meta' device: it has no "
                "weights (built under torch.device('meta') or loaded without them); load its "
                "weights, e.g. specviz.load_model(...) or model.to_empty(device='cpu') followed "
                "by load_state_dict"
            )
    draft_model = _model_of(drafter)
    if draft_model is not None and draft_model is not _model_of(target):
        check_positions(draft_model, longest_prompt, max_new_tokens, who="draft")


def check_positions(
    model: Any, longest_prompt: int, max_new_tokens: int, who: str = "target"
) -> None:
    """Prompt + new tokens beyond what the model was trained for: an error, or a warning for
    models whose RoPE scaling extends their positions. For a ``"draft"`` model with rotary
    positions only a warning (it runs, and the output law is the target's either way); a
    draft with learned absolute positions cannot run past them, so that is an error."""
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
            f"max_position_embeddings={limit} of the {who}; the model's {kind!r} RoPE scaling "
            "extends it",
            stacklevel=3,
        )
        return
    rotary = bool(scaling) or hasattr(cfg, "rope_theta")
    if who == "draft" and rotary:
        warnings.warn(
            f"prompt ({longest_prompt}) + max_new_tokens ({max_new_tokens}) = {need} exceeds "
            f"the draft's max_position_embeddings={limit}: it drafts past its trained positions "
            "(the output law is still the target's; acceptance may drop)",
            stacklevel=3,
        )
        return
    raise ValueError(
        f"prompt ({longest_prompt} tokens) + max_new_tokens ({max_new_tokens}) = {need} exceeds "
        f"the {'model' if who == 'target' else 'draft model'}'s max_position_embeddings="
        f"{limit}; shorten the prompt or "
        "max_new_tokens" + (", or use a draft with a longer context" if who == "draft" else "")
    )


def check_probability(name: str, value: Any, *, open_low: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
    if not (0.0 < value < 1.0):
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")
    return float(value)
