"""Requests and answers of the OpenAI API as the audit reads them: the request body, a
completion's text, token pieces and logprobs, draft counts, and text split into pieces."""

from __future__ import annotations

import math
import re
from typing import Any

from .endpoint import (
    APIS,
    AuditError,
    Completion,
    Endpoint,
    IncompleteResult,
    _count,
    _malformed,
    _number,
)

__all__ = ["parse_completion", "split_text"]


def _path(api: str) -> str:
    if api not in APIS:
        raise ValueError(f"api must be one of {APIS}, got {api!r}")
    return "chat/completions" if api == "chat" else "completions"


def _body(ep: Endpoint, prompt: str, api: str = "completions", **kw: Any) -> dict[str, Any]:
    """The request body. On the chat API the prompt is one user message and ``logprobs=k``
    becomes ``logprobs=true, top_logprobs=k``."""
    if api == "chat":
        body: dict[str, Any] = {"messages": [{"role": "user", "content": prompt}], "n": 1}
        k = kw.pop("logprobs", None)
        if k is not None:
            body.update(logprobs=True, top_logprobs=int(k))
    else:
        body = {"prompt": prompt, "n": 1}
    body.update(ep.extra)
    if ep.model:
        body["model"] = ep.model
    body.update({k: v for k, v in kw.items() if v is not None})
    return body


def _draft_counts(data: dict[str, Any]) -> tuple[int | None, int | None]:
    timings = data.get("timings")
    if not isinstance(timings, dict) or "draft_n" not in timings:
        return None, None
    try:
        return int(timings["draft_n"]), int(timings.get("draft_n_accepted") or 0)
    except (TypeError, ValueError):
        return None, None


def _logprob_lists(lp: Any) -> tuple[tuple[str, ...], tuple, tuple] | None:
    """(pieces, logprobs, top alternatives) from either response shape; None if absent.
    A present but malformed field raises ``ValueError((field, value, expected))``."""
    if not isinstance(lp, dict):
        return None
    content = lp.get("content")
    if isinstance(content, list):  # chat shape (also llama-server's /v1/completions)
        tokens, values, tops = [], [], []
        for i, item in enumerate(content):
            where = f"logprobs.content[{i}]"
            if not isinstance(item, dict):
                raise ValueError((where, item, "an object {token, logprob, top_logprobs}"))
            token, v = item.get("token", ""), _number(item.get("logprob"))
            if not isinstance(token, str):
                raise ValueError((f"{where}.token", token, "a string piece"))
            if v is None:
                raise ValueError((f"{where}.logprob", item.get("logprob"), "a number"))
            tokens.append(token)
            values.append(v)
            top: dict[str, float] = {}
            alts = item.get("top_logprobs") or []
            if not isinstance(alts, list):
                raise ValueError((f"{where}.top_logprobs", alts, "a list of {token, logprob}"))
            for j, alt in enumerate(alts):
                if not isinstance(alt, dict):
                    raise ValueError(
                        (f"{where}.top_logprobs[{j}]", alt, "an object {token, logprob}")
                    )
                if alt.get("logprob") is None:
                    continue
                a = _number(alt["logprob"])
                if a is None or not isinstance(alt.get("token", ""), str):
                    raise ValueError(
                        (f"{where}.top_logprobs[{j}]", alt, "a string token and a number")
                    )
                top.setdefault(alt.get("token", ""), a)
            tops.append(top)
        return tuple(tokens), tuple(values), tuple(tops)
    if content is not None:
        raise ValueError(("logprobs.content", content, "a list"))
    if lp.get("tokens") is None or lp.get("token_logprobs") is None:
        return None
    raw_tokens, raw_values = lp["tokens"], lp["token_logprobs"]
    if not isinstance(raw_tokens, list) or not all(isinstance(t, str) for t in raw_tokens):
        bad = next((t for t in raw_tokens if not isinstance(t, str)), raw_tokens) if isinstance(
            raw_tokens, list) else raw_tokens  # fmt: skip
        raise ValueError(("logprobs.tokens", bad, "a list of string pieces"))
    values = tuple(_number(v) for v in raw_values) if isinstance(raw_values, list) else (None,)
    if any(v is None for v in values):
        raise ValueError(("logprobs.token_logprobs", raw_values, "a list of numbers"))
    top_raw = lp.get("top_logprobs") or [{}] * len(raw_tokens)
    if not isinstance(top_raw, list):
        raise ValueError(("logprobs.top_logprobs", top_raw, "a list of {piece: logprob} objects"))
    tops = []
    for j, t in enumerate(top_raw):
        t = t or {}
        if not isinstance(t, dict) or any(
            not isinstance(k, str) or _number(v) is None for k, v in t.items()
        ):
            raise ValueError((f"logprobs.top_logprobs[{j}]", t, "an object {piece: logprob}"))
        tops.append({k: _number(v) for k, v in t.items()})
    return tuple(raw_tokens), values, tuple(tops)


def _usage(data: dict[str, Any]) -> int | None:
    usage = data.get("usage")
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise ValueError(("usage", usage, "an object"))
    try:
        return _count(usage.get("completion_tokens"))
    except ValueError:
        raise ValueError(
            ("usage.completion_tokens", usage.get("completion_tokens"), "an integer >= 0")
        ) from None


def _choice_text(choice: dict[str, Any]) -> str | None:
    if isinstance(choice.get("text"), str):
        return choice["text"]
    message = choice.get("message")
    if isinstance(message, dict):
        content = message.get("content")
        return content if isinstance(content, str) else ("" if content is None else None)
    return None


_PIECE = re.compile(r"\s*\w+|\s*[^\w\s]|\s+")


def split_text(text: str) -> tuple[str, ...]:
    """Deterministic client-side pieces of a completion's text (words with their leading
    space, single punctuation marks), used when the server reports no tokens. Any function of
    the text is a valid outcome for a two-sample test, since both arms are mapped alike.

    >>> split_text(" mat, and the cat")
    (' mat', ',', ' and', ' the', ' cat')
    """
    return tuple(_PIECE.findall(text))


def parse_completion(
    data: dict[str, Any],
    ep: Endpoint,
    max_tokens: int,
    seconds: float,
    *,
    need_logprobs: bool = True,
    request: str = "the completion request",
) -> Completion:
    """Validate one non-streamed answer (completions or chat shape); raise IncompleteResult if
    any part is missing.

    Without ``need_logprobs`` the completion's pieces come from :func:`split_text` and its
    length is checked against ``usage.completion_tokens`` where the server reports it.

    >>> chat = {"choices": [{"finish_reason": "length", "message": {"content": "Hi!"},
    ...         "logprobs": {"content": [
    ...             {"token": "Hi", "logprob": -0.5, "top_logprobs": [{"token": "Hi", "logprob": -0.5}]},
    ...             {"token": "!", "logprob": -1.0, "top_logprobs": []}]}}]}
    >>> c = parse_completion(chat, Endpoint("http://x"), max_tokens=2, seconds=0.0)
    >>> c.text, c.tokens, c.logprobs, c.top[0]
    ('Hi!', ('Hi', '!'), (-0.5, -1.0), {'Hi': -0.5})
    """
    try:
        choice = data["choices"][0]
    except (KeyError, IndexError, TypeError) as err:
        raise IncompleteResult(f"{ep.name}: answer without choices: {str(data)[:200]}") from err
    if not isinstance(choice, dict):
        raise _malformed(ep, request, "choices[0]", choice, "an object")
    try:
        return _parse_choice(data, choice, ep, max_tokens, seconds, need_logprobs)
    except ValueError as err:
        if isinstance(err, AuditError) or not (isinstance(err.args[0], tuple)):
            raise
        field, got, expected = err.args[0]
        where = field if field.startswith("usage") else f"choices[0].{field}"
        raise _malformed(ep, request, where, got, expected) from None


def _parse_choice(data, choice, ep, max_tokens, seconds, need_logprobs) -> Completion:
    finish = choice.get("finish_reason")
    if finish not in ("stop", "length"):
        raise IncompleteResult(f"{ep.name}: completion ended with finish_reason={finish!r}")
    draft = _draft_counts(data)
    text = _choice_text(choice)
    if not need_logprobs:
        if text is None:
            raise IncompleteResult(f"{ep.name}: completion without text")
        used = _usage(data)
        if finish == "length" and used is not None and used != max_tokens:
            raise IncompleteResult(
                f"{ep.name}: finish_reason='length' with {used} tokens, asked {max_tokens}"
            )
        return Completion(text, split_text(text), (), (), finish, seconds, *draft, used)
    parsed = _logprob_lists(choice.get("logprobs"))
    if parsed is None:
        raise AuditError(
            f"{ep.name} returned no logprobs. The audit needs per-token logprobs to split "
            "completions into tokens (vLLM/SGLang/llama-server return them when asked), or "
            "use outcome='text' (--outcome text) to compare client-side pieces of the text "
            "instead."
        )
    tokens, logprobs, top = parsed
    if len(logprobs) != len(tokens) or len(top) != len(tokens):
        raise IncompleteResult(f"{ep.name}: {len(tokens)} tokens but {len(logprobs)} logprobs")
    used = _usage(data)
    # llama-server merges the pieces of a character split across tokens into one logprob
    # entry; the usage count says whether the completion is whole
    merged = used is not None and used == max_tokens and len(tokens) < max_tokens
    if len(tokens) > max_tokens or (
        finish == "length" and len(tokens) != max_tokens and not merged
    ):
        raise IncompleteResult(
            f"{ep.name}: finish_reason='length' with {len(tokens)} tokens, asked {max_tokens}"
        )
    if any(not math.isfinite(v) for v in logprobs):
        raise IncompleteResult(f"{ep.name}: non-finite logprob in {logprobs}")
    return Completion(text or "", tokens, logprobs, top, finish, seconds, *draft, used)
