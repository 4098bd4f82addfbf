"""HTTP side of ``specviz audit``: talk to an OpenAI-compatible ``/v1/completions`` or
``/v1/chat/completions`` endpoint (``api="completions"`` / ``"chat"``).

Both response shapes of per-token logprobs are parsed: the legacy completions shape
(``logprobs.tokens`` / ``token_logprobs`` / ``top_logprobs`` as ``{piece: logprob}`` dicts) and
the chat shape (``logprobs.content[{token, logprob, top_logprobs: [{token, logprob}]}]``), which
llama.cpp's ``llama-server`` returns on ``/v1/completions`` too. Per-response draft counts
(llama.cpp's ``timings.draft_n`` / ``draft_n_accepted``) are kept when present.

Every failure becomes an :class:`AuditError` whose message names the endpoint and the problem
(unreachable, bad TLS, timeout, no logprobs, unknown or mismatched model, HTTP error), and a
result is only ever returned complete: a completion without a finish reason, without logprobs
or with fewer tokens than it claims raises :class:`IncompleteResult` and is retried, never
counted.

Retries use exponential backoff (0.5 s, 1 s, 2 s, ...) on connection resets, timeouts, 429 and
5xx answers; a refused connection or a TLS failure at preflight fails at once since waiting
does not fix those.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = [
    "APIS",
    "AuditError",
    "Completion",
    "Endpoint",
    "IncompleteResult",
    "StreamTiming",
    "complete",
    "list_models",
    "preflight",
    "stream",
]


APIS = ("completions", "chat")


class AuditError(RuntimeError):
    """An audit cannot go on; the message says which endpoint and why."""


class IncompleteResult(AuditError):
    """A response arrived but is not a whole completion (never counted as a sample)."""


class MalformedAnswer(IncompleteResult):
    """A response whose JSON does not have the shape the OpenAI API gives it (retried like
    an incomplete one: a proxy or an overloaded server can send garbage once)."""


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _malformed(ep: Endpoint, where: str, field: str, got: Any, expected: str) -> MalformedAnswer:
    return MalformedAnswer(
        f"{ep.name} ({ep.base_url}): malformed answer to {where}: {field} is {_show(got)}, "
        f"expected {expected}"
    )


def _json(resp: httpx.Response, ep: Endpoint, where: str) -> Any:
    try:
        return resp.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise MalformedAnswer(
            f"{ep.name} ({ep.base_url}): the answer to {where} is not JSON: {_show(resp.text[:200])}"
        ) from err


def _number(value: Any) -> float | None:
    """A logprob: a JSON number (None -> NaN, checked later); anything else is None."""
    if value is None:
        return math.nan
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _count(value: Any) -> int | None:
    """A token count: a non-negative JSON integer (or None when absent)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    raise ValueError(value)


@dataclass(frozen=True)
class Endpoint:
    """One server configuration. ``base_url`` is the part before ``/v1``.

    ``verify`` is passed to httpx: ``True`` (system CAs), ``False`` (no TLS verification) or a
    path to a CA bundle. ``extra`` is merged into every request body (engine-specific sampling
    knobs such as llama.cpp's ``min_p``/``repeat_penalty``). ``metrics_url`` is where the
    engine's Prometheus metrics are (default: ``/metrics`` next to ``/v1``).

    >>> Endpoint("http://127.0.0.1:8080/v1").metrics_endpoint()
    'http://127.0.0.1:8080/metrics'
    """

    base_url: str
    model: str | None = None
    label: str = ""
    api_key: str | None = None
    verify: bool | str = True
    timeout: float = 60.0
    extra: dict[str, Any] = field(default_factory=dict)
    metrics_url: str | None = None

    @property
    def name(self) -> str:
        return self.label or self.base_url

    def _root(self) -> str:
        base = self.base_url.rstrip("/")
        return base[:-3] if base.endswith("/v1") else base

    def metrics_endpoint(self) -> str:
        return self.metrics_url or f"{self._root()}/metrics"

    def url(self, path: str) -> str:
        return f"{self._root()}/v1/{path.lstrip('/')}"

    def client(self, *, concurrency: int = 8) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        return httpx.AsyncClient(
            verify=self.verify,
            timeout=httpx.Timeout(self.timeout, connect=min(10.0, self.timeout)),
            headers=headers,
            limits=limits,
        )


@dataclass(frozen=True)
class Completion:
    """One whole completion: token pieces as the server reports them, their target logprobs,
    and the top alternatives at each position (``{piece: logprob}``)."""

    text: str
    tokens: tuple[str, ...]
    logprobs: tuple[float, ...]
    top: tuple[dict[str, float], ...]
    finish_reason: str
    seconds: float
    # the engine's own per-response draft counts, when it reports them (llama.cpp timings)
    draft_tokens: int | None = None
    draft_accepted: int | None = None
    completion_tokens: int | None = None  # the server's usage count, when it reports one


@dataclass(frozen=True)
class StreamTiming:
    """Client-side timings of one streamed request (seconds from sending it)."""

    ttft: float
    chunk_times: tuple[float, ...]  # arrival of each content chunk
    tokens: int
    total: float
    finish_reason: str
    draft_tokens: int | None = None
    draft_accepted: int | None = None

    def bursts(self, ratio: float = 0.2) -> int:
        """Verification steps seen from the client: content chunks that arrive together
        (a gap below ``ratio`` times the request's 90th-percentile gap) are one step's
        accepted tokens. A server without speculation sends one token per step."""
        times = self.chunk_times
        if len(times) < 2:
            return len(times)
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        cut = ratio * sorted(gaps)[int(0.9 * (len(gaps) - 1))]
        return 1 + sum(g > cut for g in gaps)


def _is_tls(err: BaseException) -> bool:
    seen: set[int] = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, ssl.SSLError) or "SSL" in str(e) or "CERTIFICATE" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def explain(err: BaseException, ep: Endpoint) -> AuditError:
    """Turn an httpx exception into a message a user can act on."""
    where = f"{ep.name} ({ep.base_url})"
    if isinstance(err, AuditError):
        return err
    if _is_tls(err):
        return AuditError(
            f"TLS failed for {where}: {err}. Pass a CA bundle (--ca-bundle / verify=path), "
            "or --insecure for a self-signed test server; an https URL on a plain-http server "
            "fails the same way."
        )
    if isinstance(err, httpx.TimeoutException):
        return AuditError(
            f"{where} timed out after {ep.timeout:g} s ({type(err).__name__}); raise --timeout "
            "or lower --concurrency/--max-tokens"
        )
    if isinstance(err, httpx.ConnectError):
        return AuditError(f"cannot reach {where}: {err}. Is the server running on that port?")
    if isinstance(err, httpx.HTTPError):
        return AuditError(f"HTTP failure talking to {where}: {type(err).__name__}: {err}")
    return AuditError(f"{where}: {type(err).__name__}: {err}")


def _retryable(err: BaseException) -> bool:
    if isinstance(err, IncompleteResult):
        return True
    if isinstance(err, httpx.HTTPStatusError):
        code = err.response.status_code
        return code == 429 or code >= 500
    if _is_tls(err):
        return False
    if isinstance(err, httpx.ConnectError):
        return "refused" not in str(err).lower()
    return isinstance(err, (httpx.TimeoutException, httpx.TransportError))


def _raise_for_status(resp: httpx.Response, ep: Endpoint) -> None:
    if resp.status_code < 400:
        return
    try:
        detail = resp.json().get("error", resp.text)
        if isinstance(detail, dict):
            detail = detail.get("message", detail)
    except (json.JSONDecodeError, AttributeError):
        detail = resp.text[:300]
    if resp.status_code in (429,) or resp.status_code >= 500:
        raise httpx.HTTPStatusError(
            f"{resp.status_code}: {detail}", request=resp.request, response=resp
        )
    raise AuditError(f"{ep.name} answered HTTP {resp.status_code} to {resp.request.url}: {detail}")


async def _with_retries(fn, ep: Endpoint, retries: int, backoff: float):
    delay = backoff
    for attempt in range(retries + 1):
        try:
            return await fn()
        except Exception as err:  # noqa: BLE001 - classified below
            if attempt == retries or not _retryable(err):
                raise explain(err, ep) from err
            await asyncio.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


async def list_models(client: httpx.AsyncClient, ep: Endpoint, retries: int = 0) -> list[str]:
    async def go() -> list[str]:
        url = ep.url("models")
        resp = await client.get(url)
        _raise_for_status(resp, ep)
        data = _json(resp, ep, f"GET {url}")
        entries = data.get("data", []) if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise _malformed(ep, f"GET {url}", "data", data, "an object with a 'data' list")
        ids = []
        for i, m in enumerate(entries):
            mid = m.get("id") if isinstance(m, dict) else None
            if not isinstance(mid, str):
                raise _malformed(
                    ep, f"GET {url}", f"data[{i}].id", m, "a model entry with an 'id' string"
                )
            ids.append(mid)
        return ids

    return await _with_retries(go, ep, retries, 0.5)


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


async def complete(
    client: httpx.AsyncClient,
    ep: Endpoint,
    prompt: str,
    *,
    max_tokens: int,
    temperature: float,
    top_p: float | None = None,
    top_k: int | None = None,
    seed: int | None = None,
    logprobs: int | None = 1,
    retries: int = 4,
    backoff: float = 0.5,
    api: str = "completions",
) -> Completion:
    """One complete, validated completion (retried with backoff). ``logprobs=None`` asks
    for none and splits the text client-side (:func:`split_text`)."""
    path = _path(api)
    body = _body(
        ep,
        prompt,
        api,
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        seed=seed,
        logprobs=logprobs,
        stream=False,
    )

    async def go() -> Completion:
        t0 = time.perf_counter()
        resp = await client.post(ep.url(path), json=body)
        _raise_for_status(resp, ep)
        try:
            data = resp.json()
        except json.JSONDecodeError as err:
            raise IncompleteResult(f"{ep.name}: answer is not JSON: {resp.text[:200]}") from err
        return parse_completion(
            data,
            ep,
            max_tokens,
            time.perf_counter() - t0,
            need_logprobs=logprobs is not None,
            request=f"POST {ep.url(path)}",
        )

    return await _with_retries(go, ep, retries, backoff)


async def stream(
    client: httpx.AsyncClient,
    ep: Endpoint,
    prompt: str,
    *,
    max_tokens: int,
    temperature: float,
    seed: int | None = None,
    retries: int = 2,
    backoff: float = 0.5,
    api: str = "completions",
    top_p: float | None = None,
    top_k: int | None = None,
) -> StreamTiming:
    """One streamed completion, timed chunk by chunk. A stream that ends without a finish
    reason or a ``[DONE]`` is incomplete and raises."""
    path = _path(api)
    body = _body(
        ep,
        prompt,
        api,
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        seed=seed,
        stream=True,
    )

    request = f"POST {ep.url(path)} (streamed)"

    async def go() -> StreamTiming:
        t0 = time.perf_counter()
        times: list[float] = []
        finish = None
        usage_tokens = None
        done = False
        cut = ""
        draft: tuple[int | None, int | None] = (None, None)
        async with client.stream("POST", ep.url(path), json=body) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                _raise_for_status(resp, ep)
            try:
                async for line in resp.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        done = True
                        break
                    chunk = _stream_chunk(payload, ep, request, len(times))
                    if chunk.get("usage"):
                        try:
                            usage_tokens = _usage(chunk)
                        except ValueError as err:
                            field, got, expected = err.args[0]
                            raise _malformed(ep, request, field, got, expected) from None
                    if "timings" in chunk:
                        draft = _draft_counts(chunk)
                    for choice in chunk.get("choices") or []:
                        if not isinstance(choice, dict):
                            raise _malformed(
                                ep, request, "a chunk's choices[0]", choice, "an object"
                            )
                        delta = choice.get("delta")
                        piece = (
                            delta.get("content") if isinstance(delta, dict) else choice.get("text")
                        )
                        if piece:
                            times.append(time.perf_counter() - t0)
                        if choice.get("finish_reason"):
                            finish = choice["finish_reason"]
            except (httpx.ReadError, httpx.RemoteProtocolError) as err:
                # A connection dropped mid-stream is the same failure as a stream that
                # closes early: whichever the OS reports depends on timing.
                cut = f", connection cut: {type(err).__name__}"
        total = time.perf_counter() - t0
        if not done or finish not in ("stop", "length"):
            raise IncompleteResult(
                f"{ep.name}: stream ended without [DONE]/finish_reason (finish={finish!r}{cut})"
            )
        if not times:
            raise IncompleteResult(f"{ep.name}: stream carried no tokens")
        n = usage_tokens if usage_tokens else len(times)
        return StreamTiming(times[0], tuple(times), n, total, finish, *draft)

    return await _with_retries(go, ep, retries, backoff)


def _stream_chunk(payload: str, ep: Endpoint, request: str, seen: int) -> dict[str, Any]:
    """One ``data:`` line of a stream as a JSON object (or MalformedAnswer)."""
    try:
        chunk = json.loads(payload)
    except json.JSONDecodeError:
        raise MalformedAnswer(
            f"{ep.name} ({ep.base_url}): malformed answer to {request}: the data line after "
            f"{seen} token chunk(s) is not JSON: {_show(payload[:200])}"
        ) from None
    if not isinstance(chunk, dict):
        raise _malformed(ep, request, "a data line", chunk, "a JSON object")
    if not isinstance(chunk.get("choices") or [], list):
        raise _malformed(ep, request, "choices", chunk["choices"], "a list")
    return chunk


async def preflight(
    a: Endpoint,
    b: Endpoint,
    probe_prompt: str,
    *,
    tolerance: float = 0.1,
    need_logprobs: bool = True,
    api: str = "completions",
) -> dict[str, Any]:
    """Check both endpoints before spending samples: reachable, model served, logprobs
    present, and the same model behind both (the first token's top-5 logprobs under greedy
    decoding must agree within ``tolerance`` nats: speculation does not change the target's
    first-token law, a different model or quantization does)."""
    info: dict[str, Any] = {}
    firsts = []
    for ep in (a, b):
        async with ep.client(concurrency=1) as client:
            models = await list_models(client, ep)
            if ep.model and ep.model not in models:
                raise AuditError(f"{ep.name} does not serve model {ep.model!r}; it serves {models}")
            try:
                c = await complete(
                    client,
                    ep,
                    probe_prompt,
                    max_tokens=1,
                    temperature=0.0,
                    logprobs=5,
                    retries=1,
                    api=api,
                )
            except IncompleteResult:
                raise
            except AuditError as err:
                if need_logprobs or "no logprobs" not in str(err):
                    raise
                # Text outcomes: compare the greedy first piece instead of logprobs.
                c = await complete(
                    client, ep, probe_prompt, max_tokens=1, temperature=0.0, logprobs=None, api=api
                )
                info[ep.name] = {"models": models, "probe_text": c.text}
                firsts.append({c.text: 0.0})
                continue
            if not c.top or not c.top[0]:
                raise AuditError(f"{ep.name} returned no top_logprobs; the audit needs them")
            info[ep.name] = {"models": models, "probe_top": c.top[0]}
            firsts.append(c.top[0])
    if any("probe_text" in v for v in info.values()):
        # Without logprobs on one side only the greedy first piece can be compared.
        tops = [max(f, key=f.get) for f in firsts]
        if tops[0] != tops[1]:
            raise AuditError(
                f"mismatched models: on the probe prompt {a.name} and {b.name} choose "
                f"different greedy first tokens ({tops[0]!r} vs {tops[1]!r}); check that both "
                "servers load the same model file and quantization."
            )
        return info
    shared = set(firsts[0]) & set(firsts[1])
    best = max(firsts[0], key=firsts[0].get)
    diffs = [abs(firsts[0][t] - firsts[1][t]) for t in shared]
    if best not in firsts[1] or not diffs or max(diffs) > tolerance:
        raise AuditError(
            f"mismatched models: on the probe prompt {a.name} and {b.name} disagree on the "
            f"first token's top logprobs ({firsts[0]} vs {firsts[1]}). Speculation must not "
            "change them; check that both servers load the same model file and quantization."
        )
    info["probe_max_abs_diff"] = max(diffs)
    return info
