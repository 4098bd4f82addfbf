"""What the audit client talks about: the endpoint, its errors, and what one request returns
(:class:`Completion`, :class:`StreamTiming`), with the checks that read a server's JSON."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = [
    "APIS",
    "AuditError",
    "Completion",
    "Endpoint",
    "IncompleteResult",
    "MalformedAnswer",
    "StreamTiming",
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
