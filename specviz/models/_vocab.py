"""Do target and draft share one vocabulary? (:func:`check_vocab`, :func:`check_vocab_models`)"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    pass

from ._specs import VocabMismatchError

_SPECIAL_ATTRS = ("eos_token", "bos_token", "unk_token", "pad_token")
_ABSENT = "<absent>"


def _id_to_token(tokenizer: Any) -> dict[int, str]:
    return {int(i): tok for tok, i in tokenizer.get_vocab().items()}


def _special_tokens(tokenizer: Any) -> dict[str, Any]:
    specials: dict[str, Any] = {}
    for attr in _SPECIAL_ATTRS:
        specials[attr] = (getattr(tokenizer, attr, None), getattr(tokenizer, f"{attr}_id", None))
    specials["special ids"] = sorted(getattr(tokenizer, "all_special_ids", []) or [])
    return specials


def _show(token: str | None) -> str:
    return _ABSENT if token is None else repr(token)


def _first_difference(target: dict[int, str], draft: dict[int, str]) -> str | None:
    for token_id in sorted(target.keys() | draft.keys()):
        left, right = target.get(token_id), draft.get(token_id)
        if left != right:
            return f"id {token_id}: target {_show(left)} vs draft {_show(right)}"
    return None


def check_vocab(target_tokenizer: Any, draft_tokenizer: Any) -> None:
    """Raise :class:`VocabMismatchError` unless both tokenizers map every id to the same string.

    Speculative sampling compares p(x) and q(x) token by token, so the two vocabularies must be
    identical, special tokens included (a different eos would stop the two models at different
    places). Nothing is remapped silently.
    """
    target, draft = _id_to_token(target_tokenizer), _id_to_token(draft_tokenizer)
    difference = _first_difference(target, draft)
    if difference is not None:
        sizes = (
            f"vocabulary sizes differ (target {len(target)} vs draft {len(draft)}); "
            if len(target) != len(draft)
            else ""
        )
        raise VocabMismatchError(
            f"target and draft vocabularies differ: {sizes}first difference at {difference}"
        )
    target_specials, draft_specials = (
        _special_tokens(target_tokenizer),
        _special_tokens(draft_tokenizer),
    )
    for key, value in target_specials.items():
        if draft_specials[key] != value:
            raise VocabMismatchError(
                f"target and draft special tokens differ: {key} target {value!r} vs draft {draft_specials[key]!r}"
            )


def _logit_dim(model: Any) -> int:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if isinstance(weight, torch.Tensor):
        return int(weight.shape[0])
    config = (
        model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    )
    return int(config.vocab_size)


def check_vocab_models(target_model: Any, draft_model: Any, tokenizer: Any = None) -> int:
    """Check that both models score the same token ids; return how many logit columns to compare.

    Output widths may differ only by padding rows beyond the tokenizer's last id (vLLM's
    151936-vs-152064 Qwen case); that needs ``tokenizer`` to prove it, and then the tokenizer's
    size is returned. Without it any difference is an error.
    """
    target_dim, draft_dim = _logit_dim(target_model), _logit_dim(draft_model)
    if tokenizer is not None:
        needed = len(tokenizer)
        if min(target_dim, draft_dim) < needed:
            raise VocabMismatchError(
                f"tokenizer has {needed} tokens but the target outputs {target_dim} logits "
                f"and the draft {draft_dim}: some token ids cannot be scored"
            )
        return target_dim if target_dim == draft_dim else needed
    if target_dim != draft_dim:
        raise VocabMismatchError(
            f"target outputs {target_dim} logits but draft outputs {draft_dim}; "
            f"pass the tokenizer to check that only padding rows differ"
        )
    return target_dim
