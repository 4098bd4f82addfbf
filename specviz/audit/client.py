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
import ssl
import time
from typing import Any

import httpx

from .endpoint import (  # noqa: F401  (their former home)
    APIS,
    AuditError,
    Completion,
    Endpoint,
    IncompleteResult,
    MalformedAnswer,
    StreamTiming,
    _count,
    _json,
    _malformed,
    _number,
    _show,
)
from .parsing import (  # noqa: F401  (their former home)
    _PIECE,
    _body,
    _choice_text,
    _draft_counts,
    _logprob_lists,
    _parse_choice,
    _path,
    _usage,
    parse_completion,
    split_text,
)

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
