"""Tokenizers seen as bytes, for drafting across vocabularies (:mod:`.cross_vocab`).

:class:`Vocabulary` is one tokenizer's view of its ids as byte strings, with its own text ->
ids rule; :class:`StringTokenizer` is the tests' and notebooks' small tokenizer-like toy;
:func:`vocabulary_of` builds the view of a transformers tokenizer (byte-level BPE decoded
exactly through GPT-2's byte alphabet).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["StringTokenizer", "Vocabulary", "vocabulary_of"]


def _byte_chars() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character -> byte: byte-level BPE vocabularies store each
    token's bytes as these printable characters ('Ġ' = 0x20, 'Ċ' = 0x0A)."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    cs = list(bs)
    extra = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


_SURROGATE = re.compile("([\udc80-\udcff])")


@dataclass(frozen=True, eq=False)
class Vocabulary:
    """One tokenizer seen as bytes: ``pieces[i]`` are the bytes id ``i`` stands for (None: no
    string, e.g. padding rows of the logits), ``encode_text`` the tokenizer's own text -> ids."""

    pieces: tuple[bytes | None, ...]
    encode_text: Callable[[str], list[int]]
    name: str = "vocabulary"

    def __post_init__(self) -> None:
        first: dict[bytes, int] = {}
        for i, b in enumerate(self.pieces):
            if b and b not in first:
                first[b] = i
        object.__setattr__(self, "_by_bytes", first)

    def __len__(self) -> int:
        return len(self.pieces)

    def id_of(self, piece: bytes) -> int | None:
        """The lowest id that stands for exactly these bytes."""
        return self._by_bytes.get(piece)  # type: ignore[attr-defined]

    def text(self, ids: Sequence[int]) -> bytes:
        """The bytes of a sequence of ids (ids without a string contribute nothing)."""
        pieces = self.pieces
        return b"".join(pieces[i] or b"" for i in ids)

    def show(self, i: int) -> str:
        """Id ``i`` as readable text (bytes that are no complete character escaped)."""
        b = self.pieces[i] if 0 <= i < len(self.pieces) else None
        return "" if b is None else b.decode("utf-8", errors="backslashreplace")

    def encode(self, data: bytes) -> list[int]:
        """Bytes -> ids with the tokenizer's own rules. Bytes that are no valid UTF-8 (a
        multi-byte character split across tokens) become their single-byte tokens."""
        text = data.decode("utf-8", errors="surrogateescape")
        if not _SURROGATE.search(text):
            return list(self.encode_text(text)) if text else []
        out: list[int] = []
        for part in _SURROGATE.split(text):
            if not part:
                continue
            if _SURROGATE.fullmatch(part):
                byte = bytes([ord(part) - 0xDC00])
                i = self.id_of(byte)
                if i is None:
                    raise ValueError(f"{self.name}: no token for the byte {byte!r}")
                out.append(i)
            else:
                out.extend(self.encode_text(part))
        return out

    def encode_lenient(self, data: bytes) -> tuple[list[int], int]:
        """As :meth:`encode`, but text this tokenizer has no token for is left out instead of
        raising (SmolLM2 has no token for 21 byte values); returns the ids and how many bytes
        were left out."""
        text = data.decode("utf-8", errors="surrogateescape")
        out: list[int] = []
        dropped = 0
        for part in _SURROGATE.split(text):
            if not part:
                continue
            if _SURROGATE.fullmatch(part):
                i = self.id_of(bytes([ord(part) - 0xDC00]))
                if i is None:
                    dropped += 1
                else:
                    out.append(i)
                continue
            try:
                out.extend(self.encode_text(part))
            except ValueError:  # a character without a token: encode around it
                ids, lost = self._encode_around(part)
                out.extend(ids)
                dropped += lost
        return out, dropped

    def _encode_around(self, text: str) -> tuple[list[int], int]:
        out: list[int] = []
        dropped, run = 0, ""
        for ch in text:
            try:
                self.encode_text(ch)
            except ValueError:
                if run:
                    out.extend(self.encode_text(run))
                    run = ""
                ids = [self.id_of(bytes([b])) for b in ch.encode("utf-8")]
                if all(i is not None for i in ids):
                    out.extend(ids)  # type: ignore[arg-type]
                else:
                    dropped += len(ch.encode("utf-8"))
            else:
                run += ch
        if run:
            out.extend(self.encode_text(run))
        return out, dropped


class StringTokenizer:
    """A tokenizer-like toy: id ``i`` is ``strings[i]``; text is encoded by greedy longest
    match from the left (the tests' and notebooks' small vocabularies).

    >>> tok = StringTokenizer(["a", "b", "ba"])
    >>> tok.encode("abab"), tok.decode([2, 2])
    ([0, 2, 1], 'baba')
    """

    def __init__(self, strings: Sequence[str]) -> None:
        strings = list(strings)
        if not strings or any(not isinstance(s, str) or not s for s in strings):
            raise ValueError("StringTokenizer needs a list of non-empty strings")
        if len(set(strings)) != len(strings):
            raise ValueError("StringTokenizer strings must be distinct")
        self.strings = tuple(strings)
        self._ids = {s: i for i, s in enumerate(strings)}
        self._longest = max(len(s) for s in strings)

    def __len__(self) -> int:
        return len(self.strings)

    def get_vocab(self) -> dict[str, int]:
        return dict(self._ids)

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        return [self.strings[i] for i in ids]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.strings[int(i)] for i in ids)

    def encode(self, text: str) -> list[int]:
        out, pos = [], 0
        while pos < len(text):
            for n in range(min(self._longest, len(text) - pos), 0, -1):
                i = self._ids.get(text[pos : pos + n])
                if i is not None:
                    out.append(i)
                    pos += n
                    break
            else:
                raise ValueError(f"StringTokenizer cannot encode {text[pos:]!r}: no token for it")
        return out


def vocabulary_of(tokenizer: Any, size: int | None = None, name: str = "vocabulary") -> Vocabulary:
    """The byte view of a tokenizer over ids ``[0, size)`` (default: the tokenizer's length):
    a :class:`StringTokenizer`, or a transformers tokenizer (byte-level BPE decoded exactly
    through GPT-2's byte alphabet; added/special tokens by their content; other tokenizers
    through ``convert_tokens_to_string``)."""
    if isinstance(tokenizer, StringTokenizer):
        n = len(tokenizer) if size is None else size
        pieces = tuple(
            tokenizer.strings[i].encode() if i < len(tokenizer) else None for i in range(n)
        )
        return Vocabulary(pieces, tokenizer.encode, name)
    if not callable(getattr(tokenizer, "get_vocab", None)):
        raise TypeError(
            f"{name}: expected a tokenizer (get_vocab, encode) or a StringTokenizer, got "
            f"{type(tokenizer).__name__}"
        )
    by_id = {int(i): s for s, i in tokenizer.get_vocab().items()}
    n = (max(by_id) + 1 if by_id else 0) if size is None else size
    added = {int(i): t.content for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()}
    backend = getattr(tokenizer, "backend_tokenizer", None)
    byte_level = type(getattr(backend, "decoder", None)).__name__ == "ByteLevel"
    chars = _byte_chars()
    pieces: list[bytes | None] = []
    for i in range(n):
        if i in added:
            pieces.append(added[i].encode("utf-8"))
            continue
        s = by_id.get(i)
        if s is None:
            pieces.append(None)
        elif byte_level and all(c in chars for c in s):
            pieces.append(bytes(chars[c] for c in s))
        else:
            pieces.append(tokenizer.convert_tokens_to_string([s]).encode("utf-8"))

    def encode_text(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    return Vocabulary(tuple(pieces), encode_text, name)
