"""Token ids as text: tokenizers, vocabularies, callables, or #id; whole-number count axes."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["Tokenizer", "count_axis", "token_label", "visible"]


Tokenizer = Any  # HF tokenizer | Sequence[str] | Mapping[int, str] | Callable[[int], str] | None

_VISIBLE = str.maketrans({" ": "·", "\n": "↵", "\t": "⇥", "\r": "␍"})


# -------------------------------------------------------------------------------------------
# tokens
# -------------------------------------------------------------------------------------------


def _decoder(tokenizer: Tokenizer) -> Callable[[int], str]:
    if tokenizer is None:
        return lambda i: f"#{i}"
    if hasattr(tokenizer, "decode"):
        return lambda i: tokenizer.decode([int(i)])
    if isinstance(tokenizer, Mapping):
        return lambda i: str(tokenizer.get(int(i), f"#{i}"))
    if isinstance(tokenizer, Sequence):  # list of names, or a str of one-letter names
        return lambda i: str(tokenizer[int(i)]) if 0 <= int(i) < len(tokenizer) else f"#{i}"
    if callable(tokenizer):
        return lambda i: str(tokenizer(int(i)))
    raise TypeError(
        "tokenizer must have decode(), be a sequence/mapping of names, a callable or None; "
        f"got {type(tokenizer).__name__}"
    )


def visible(text: str) -> str:
    """``text`` with its whitespace made visible, as :func:`token_label` shows it (``·``
    space, ``↵`` newline, ``⇥`` tab); an empty string is ``∅``.

    >>> visible(" ab"), visible("b "), visible("")
    ('·ab', 'b·', '∅')
    """
    return str(text).translate(_VISIBLE) if text else "∅"


def token_label(token_id: int, tokenizer: Tokenizer = None) -> str:
    """Readable text of one token, with whitespace made visible (``·`` space, ``↵`` newline),
    because most tokens of real text start with a space or are one, and a blank label hides
    exactly the tokens a reader needs to see."""
    if token_id < 0:
        return "∅"
    text = _decoder(tokenizer)(token_id)
    return text.translate(_VISIBLE) if text else "∅"


def _labels(ids: Sequence[int], tokenizer: Tokenizer) -> list[str]:
    """Labels for bar categories: decoded text, made unique by appending the id on collisions
    (two ids can decode to the same string, and plotly would merge their bars)."""
    texts = [token_label(i, tokenizer) for i in ids]
    seen: dict[str, int] = {}
    for t in texts:
        seen[t] = seen.get(t, 0) + 1
    return [f"{t} #{i}" if seen[t] > 1 else t for t, i in zip(texts, ids, strict=True)]


def _fmt(x: float, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}g}"


def count_axis(max_count: float, *, ticks: int = 6) -> dict[str, object]:
    """Axis settings for counts: whole-number ticks only (a step of at least 1, so a small
    count never gets 0.5 or a repeated label), from 0, about ``ticks`` of them.

    >>> count_axis(3)
    {'tickformat': ',d', 'tick0': 0, 'dtick': 1, 'rangemode': 'tozero'}
    >>> count_axis(130)["dtick"]
    22
    """
    top = max(float(max_count), 1.0) if max_count == max_count else 1.0
    return dict(tickformat=",d", tick0=0, dtick=max(1, math.ceil(top / ticks)), rangemode="tozero")
