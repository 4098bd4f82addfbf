"""What serving engines report about their own speculative decoding, read from their
Prometheus metrics (``GET /metrics``) before and after each phase of an audit.

The exposition text is parsed with :func:`prometheus_client.parser.text_string_to_metric_families`
and the speculation counters of three engines are recognised by name:

* **vLLM** -- counters ``vllm:spec_decode_num_drafts``, ``vllm:spec_decode_num_draft_tokens``,
  ``vllm:spec_decode_num_accepted_tokens`` and ``vllm:spec_decode_num_accepted_tokens_per_pos``
  (label ``position``), exposed with the ``_total`` suffix;
* **llama.cpp** (``llama-server --metrics``) -- the same quantities as
  ``llamacpp:spec_decode_num_drafts_total`` (verification steps with a draft),
  ``llamacpp:spec_decode_num_draft_tokens_total``, ``llamacpp:spec_decode_num_accepted_tokens_total``
  and ``llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position=...}``;
* **SGLang** -- gauges ``sglang:spec_accept_length`` and ``sglang:spec_accept_rate``, running
  averages since the server started. A run's own values come from the averages before and after
  it, weighted by the counter ``sglang:generation_tokens_total``: a mean acceptance length L over
  T generated tokens stands for T / L verification steps, so the run's length is
  ``(T1 - T0) / (T1 / L1 - T0 / L0)`` and its rate the step-weighted difference of the rates.

From counters, over a run: acceptance rate = accepted / draft tokens, mean acceptance length =
1 + accepted / drafts (tokens per verification step), and per-position acceptance = accepted at
position i / drafts (the probability that a draft's token i is accepted). Label sets other than
``position`` (engine, model_name, ranks) are summed.

A server without ``/metrics``, or whose metrics carry no speculation counters, is reported as
"engine counters: not published" with the reason -- never an error: the audit's own measurements
do not depend on it.

>>> text = '''# TYPE vllm:spec_decode_num_drafts_total counter
... vllm:spec_decode_num_drafts_total{model_name="m"} 10.0
... # TYPE vllm:spec_decode_num_draft_tokens_total counter
... vllm:spec_decode_num_draft_tokens_total{model_name="m"} 30.0
... # TYPE vllm:spec_decode_num_accepted_tokens_total counter
... vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 12.0
... '''
>>> before = parse_metrics(text.replace("10.0", "0").replace("30.0", "0").replace("12.0", "0"))
>>> d = counter_delta(before, parse_metrics(text))
>>> d.acceptance_rate, d.mean_acceptance_length
(0.4, 2.2)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ENGINE_NAMES",
    "EngineCounters",
    "EngineSnapshot",
    "counter_delta",
    "fetch_snapshot",
    "parse_metrics",
    "response_counters",
]

# canonical quantity -> exposition sample name (``_total`` stripped) per engine
ENGINE_NAMES: dict[str, dict[str, str]] = {
    "vllm": {
        "drafts": "vllm:spec_decode_num_drafts",
        "draft_tokens": "vllm:spec_decode_num_draft_tokens",
        "accepted": "vllm:spec_decode_num_accepted_tokens",
        "per_pos": "vllm:spec_decode_num_accepted_tokens_per_pos",
    },
    "llamacpp": {
        "drafts": "llamacpp:spec_decode_num_drafts",
        "draft_tokens": "llamacpp:spec_decode_num_draft_tokens",
        "accepted": "llamacpp:spec_decode_num_accepted_tokens",
        "per_pos": "llamacpp:spec_decode_num_accepted_tokens_per_pos",
    },
    "sglang": {
        "accept_length": "sglang:spec_accept_length",
        "accept_rate": "sglang:spec_accept_rate",
        "gen_tokens": "sglang:generation_tokens",
        "requests": "sglang:num_requests",
    },
}
_NOT_PUBLISHED = "engine counters: not published"


@dataclass(frozen=True)
class EngineSnapshot:
    """The speculation counters of one ``/metrics`` scrape (``engine`` None: not published,
    ``reason`` says why)."""

    engine: str | None
    values: dict[str, float] = field(default_factory=dict)
    per_pos: dict[int, float] = field(default_factory=dict)
    reason: str = ""
    series: int = 0  # how many time series the scrape had (all metrics)


@dataclass(frozen=True)
class EngineCounters:
    """What an engine says about its speculation over one run (the difference of two
    snapshots). ``engine`` None: not published (``note`` says why)."""

    engine: str | None
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted: float | None = None
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    per_position: tuple[float, ...] = ()  # accepted at position i / drafts
    note: str = ""

    @property
    def published(self) -> bool:
        return self.engine is not None

    def statement(self) -> str:
        """One line for the report."""
        if self.engine is None:
            return f"{_NOT_PUBLISHED} ({self.note})" if self.note else _NOT_PUBLISHED
        parts = []
        if self.drafts is not None:
            parts.append(f"{self.drafts:.0f} drafts")
        if self.draft_tokens is not None:
            parts.append(f"{self.draft_tokens:.0f} draft tokens")
        if self.accepted is not None:
            parts.append(f"{self.accepted:.0f} accepted")
        if self.drafts == 0 and self.draft_tokens in (0, None):
            parts.append("no speculation in this run")
        if self.acceptance_rate is not None:
            parts.append(f"acceptance rate {self.acceptance_rate:.3f}")
        if self.mean_acceptance_length is not None:
            parts.append(f"mean acceptance length {self.mean_acceptance_length:.3f}")
        if self.per_position:
            pos = ", ".join(f"{v:.2f}" for v in self.per_position)
            parts.append(f"per position [{pos}]")
        text = f"engine counters ({self.engine}): " + ", ".join(parts)
        return text + (f" ({self.note})" if self.note else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted": self.accepted,
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "per_position": list(self.per_position),
            "note": self.note,
            "statement": self.statement(),
        }


def _strip(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


def parse_metrics(text: str) -> EngineSnapshot:
    """The speculation counters in a Prometheus exposition text (never raises: text that is
    not the exposition format is "not published", with the parser's complaint)."""
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    gauges: dict[str, list[float]] = {}
    per_pos: dict[str, dict[int, float]] = {}
    n = 0
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                n += 1
                if s.name.endswith(("_created", "_bucket", "_sum", "_count")):
                    continue
                name = _strip(s.name)
                value = float(s.value)
                if "position" in s.labels:
                    try:
                        pos = int(s.labels["position"])
                    except ValueError:
                        continue
                    slot = per_pos.setdefault(name, {})
                    slot[pos] = slot.get(pos, 0.0) + value
                    continue
                sums[name] = sums.get(name, 0.0) + value
                gauges.setdefault(name, []).append(value)
    except (ValueError, TypeError, KeyError, IndexError) as err:
        return EngineSnapshot(None, reason=f"/metrics is not Prometheus text: {err}")
    for engine, names in ENGINE_NAMES.items():
        if engine == "sglang":
            if names["accept_length"] not in gauges:
                continue
            values = {}
            for key in ("accept_length", "accept_rate"):
                if names[key] in gauges:  # a gauge per rank: their mean
                    vals = gauges[names[key]]
                    values[key] = sum(vals) / len(vals)
            for key in ("gen_tokens", "requests"):
                if names[key] in sums:
                    values[key] = sums[names[key]]
            return EngineSnapshot(engine, values, {}, series=n)
        if names["drafts"] in sums or names["draft_tokens"] in sums:
            values = {k: sums[v] for k, v in names.items() if k != "per_pos" and v in sums}
            return EngineSnapshot(engine, values, dict(per_pos.get(names["per_pos"], {})), series=n)
    if n == 0:
        return EngineSnapshot(None, reason="/metrics is empty", series=0)
    return EngineSnapshot(
        None, reason=f"no speculative-decoding counters among {n} series", series=n
    )


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


def counter_delta(before: EngineSnapshot, after: EngineSnapshot) -> EngineCounters:
    """The engine's account of the run between two snapshots."""
    if after.engine is None or before.engine is None:
        reason = after.reason or before.reason
        return EngineCounters(None, note=reason)
    if before.engine != after.engine:
        return EngineCounters(
            None, note=f"the engine changed during the run ({before.engine} -> {after.engine})"
        )
    if after.engine == "sglang":
        return _sglang_delta(before, after)
    d = {k: after.values.get(k, 0.0) - before.values.get(k, 0.0) for k in after.values}
    if any(v < 0 for v in d.values()):
        return EngineCounters(
            None, note="the counters went down during the run (the server restarted?)"
        )
    drafts, tokens, accepted = d.get("drafts"), d.get("draft_tokens"), d.get("accepted")
    per: tuple[float, ...] = ()
    if after.per_pos and drafts:
        n_pos = max(after.per_pos) + 1
        per = tuple(
            (after.per_pos.get(i, 0.0) - before.per_pos.get(i, 0.0)) / drafts for i in range(n_pos)
        )
    length = None if accepted is None or not drafts else 1.0 + accepted / drafts
    return EngineCounters(
        after.engine,
        drafts=drafts,
        draft_tokens=tokens,
        accepted=accepted,
        acceptance_rate=_ratio(accepted, tokens),
        mean_acceptance_length=length,
        per_position=per,
    )


def _sglang_delta(before: EngineSnapshot, after: EngineSnapshot) -> EngineCounters:
    b, a = before.values, after.values
    la, lb = a.get("accept_length"), b.get("accept_length", 0.0)
    note = "from SGLang's running averages since boot"
    if "gen_tokens" in a:
        # T tokens at mean length L: S = T / L verification steps, T - S accepted draft tokens
        # (one target token per step), (T - S) / rate draft tokens.
        t1, t0 = a["gen_tokens"], b.get("gen_tokens", 0.0)
        if t1 - t0 <= 0:
            return EngineCounters("sglang", note="no tokens generated in this run")
        s1 = t1 / la if la else 0.0
        s0 = t0 / lb if lb and t0 else 0.0
        steps = s1 - s0
        if steps <= 0:
            return EngineCounters(
                None, note="SGLang's averages are inconsistent over the run (restarted?)"
            )
        length = (t1 - t0) / steps
        rate = None
        if "accept_rate" in a:
            acc1, acc0 = t1 - s1, t0 - s0
            r1, r0 = a["accept_rate"], b.get("accept_rate", 0.0)
            d1 = acc1 / r1 if r1 > 0 else (0.0 if acc1 <= 1e-9 else math.nan)
            d0 = acc0 / r0 if r0 > 0 else (0.0 if acc0 <= 1e-9 else math.nan)
            if d1 - d0 > 0:
                rate = (acc1 - acc0) / (d1 - d0)
        return EngineCounters(
            "sglang",
            acceptance_rate=rate,
            mean_acceptance_length=length,
            note=note + ", weighted by sglang:generation_tokens_total",
        )
    if "requests" in a:  # cruder: weighted by requests
        n1, n0 = a["requests"], b.get("requests", 0.0)
        if n1 - n0 <= 0:
            return EngineCounters("sglang", note="no requests in this run")
        length = (la * n1 - lb * n0) / (n1 - n0) if la is not None else None
        rate = None
        if "accept_rate" in a:
            rate = (a["accept_rate"] * n1 - b.get("accept_rate", 0.0) * n0) / (n1 - n0)
        return EngineCounters(
            "sglang",
            acceptance_rate=rate,
            mean_acceptance_length=length,
            note=note + ", weighted by sglang:num_requests_total (approximate)",
        )
    return EngineCounters(
        "sglang",
        acceptance_rate=a.get("accept_rate"),
        mean_acceptance_length=la,
        note="SGLang's running averages since boot (no counter to isolate this run)",
    )


async def fetch_snapshot(client: Any, url: str) -> EngineSnapshot:
    """Scrape ``url`` (an engine's ``/metrics``); any failure is "not published" with the
    reason, never an exception."""
    import httpx

    try:
        resp = await client.get(url)
    except httpx.HTTPError as err:
        return EngineSnapshot(None, reason=f"GET {url} failed: {type(err).__name__}")
    if resp.status_code != 200:
        return EngineSnapshot(None, reason=f"GET {url} answered HTTP {resp.status_code}")
    return parse_metrics(resp.text)


def response_counters(draft_tokens: list[int | None], accepted: list[int | None]) -> dict:
    """The audit's own sum of per-response draft counts (llama.cpp's ``timings.draft_n`` /
    ``draft_n_accepted``): ``{}`` when no response carried them."""
    pairs = [(d, a) for d, a in zip(draft_tokens, accepted, strict=True) if d is not None]
    if not pairs:
        return {}
    d = sum(p[0] for p in pairs)
    acc = sum(p[1] or 0 for p in pairs)
    return {
        "responses": len(pairs),
        "draft_tokens": d,
        "accepted": acc,
        "acceptance_rate": acc / d if d else math.nan,
    }
