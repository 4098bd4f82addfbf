"""Engine-reported speculation counters (``specviz.audit.counters``): the parsers on recorded
``/metrics`` text of vLLM, SGLang and llama.cpp, the before/after differences, the "not
published" cases, and the audit reading a live server whose true counts are known.

The vLLM and SGLang texts are written by hand from their documented metric names in the
exposition format their ``prometheus_client`` produces (``_total`` and ``_created`` series,
label sets per engine / rank); the llama.cpp texts were recorded from ``llama-server --metrics``
built by ``make .venv/.installed-llama-server`` (SmolLM2-135M drafting for itself) -- a fresh
server and the same server after three requests.
"""

from __future__ import annotations

import asyncio
import math
import threading

import httpx
import pytest

from specviz.audit import audit
from specviz.audit.broken_server import ServerConfig, make_server
from specviz.audit.counters import (
    EngineCounters,
    EngineSnapshot,
    counter_delta,
    fetch_snapshot,
    parse_metrics,
    response_counters,
)

VLLM_BEFORE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 0.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 5120.0
vllm:generation_tokens_total{engine="1",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 4980.0
# HELP vllm:generation_tokens_created Number of generation tokens processed.
# TYPE vllm:generation_tokens_created gauge
vllm:generation_tokens_created{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 1.7650e+09
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 1500.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 1400.0
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 1.7650e+09
vllm:spec_decode_num_drafts_created{engine="1",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 1.7650e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 4500.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 4200.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 2600.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 2500.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct",position="0"} 1200.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct",position="1"} 850.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct",position="2"} 550.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct",position="0"} 1150.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct",position="1"} 820.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct",position="2"} 530.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.05",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 90.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 100.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 100.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 3.2
"""


def _vllm_after() -> str:
    """The same server after a run of 1000 drafts (engine 0: 600, engine 1: 400) of 3 tokens
    each: 1800 + 1200 = 3000 draft tokens, 1400 + 800 = 2200 accepted, per position 900 /
    750 / 550 accepted."""
    t = VLLM_BEFORE
    for old, new in [
        ('engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 1500.0', "2100.0"),
        ('engine="1",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 1400.0', "1800.0"),
        ('engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 4500.0', "6300.0"),
        ('engine="1",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 4200.0', "5400.0"),
        ('engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 2600.0', "4000.0"),
        ('engine="1",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 2500.0', "3300.0"),
        ('position="0"} 1200.0', "1750.0"),
        ('position="1"} 850.0', "1300.0"),
        ('position="2"} 550.0', "900.0"),
        ('position="0"} 1150.0', "1500.0"),
        ('position="1"} 820.0', "1120.0"),
        ('position="2"} 530.0', "730.0"),
    ]:
        assert old in t, old
        t = t.replace(old, old.rsplit(" ", 1)[0] + " " + new)
    return t


SGLANG_TEMPLATE = """\
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 81289.0
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} {gen}
# HELP sglang:num_requests_total The number of processed requests.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} {req}
# HELP sglang:token_usage The token usage
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 0.28
# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{dp_rank="0",engine_type="unified",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct",tp_rank="0"} {length}
# HELP sglang:spec_accept_rate The average acceptance rate of speculative decoding.
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{dp_rank="0",engine_type="unified",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct",tp_rank="0"} {rate}
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_sum{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 235.2
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 10.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 40.0
sglang:time_to_first_token_seconds_count{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 40.0
"""


def _sglang(gen: float, req: float, length: float, rate: float) -> str:
    t = SGLANG_TEMPLATE
    for k, v in dict(gen=gen, req=req, length=length, rate=rate).items():
        t = t.replace("{" + k + "}", repr(float(v)))
    return t


# Recorded from `llama-server --metrics` (llama.cpp vendored in llama-cpp-python 0.3.36, built
# by `make .venv/.installed-llama-server`): SmolLM2-135M-Instruct Q4_1 as target and draft,
# --spec-type draft-simple, fresh and after three requests. (HELP/TYPE lines as recorded.)
LLAMACPP_FRESH = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 0
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 0
# HELP llamacpp:prompt_seconds_total Total time spent processing prompts
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 0
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 0
# HELP llamacpp:tokens_predicted_seconds_total Total time spent generating tokens
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 0
# HELP llamacpp:n_decode_total Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 0
# HELP llamacpp:n_tokens_max Largest observed sequence length (prompt + generation)
# TYPE llamacpp:n_tokens_max counter
llamacpp:n_tokens_max 0
# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 0
# HELP llamacpp:spec_decode_num_accepted_tokens_total Speculative: Total draft tokens accepted by the target model
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 0
# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative decoding verification steps
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 0
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 0
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 0
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 0
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode gauge
llamacpp:n_busy_slots_per_decode 0
"""

LLAMACPP_AFTER = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 44
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 0
# HELP llamacpp:prompt_seconds_total Total time spent processing prompts
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 0.862575
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 10
# HELP llamacpp:tokens_predicted_seconds_total Total time spent generating tokens
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 1.42515
# HELP llamacpp:n_decode_total Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 7
# HELP llamacpp:n_tokens_max Largest observed sequence length (prompt + generation)
# TYPE llamacpp:n_tokens_max counter
llamacpp:n_tokens_max 35
# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 9
# HELP llamacpp:spec_decode_num_accepted_tokens_total Speculative: Total draft tokens accepted by the target model
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 3
# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative decoding verification steps
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 4
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 51.0101
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 5.61346
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 0
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode gauge
llamacpp:n_busy_slots_per_decode 1
# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 2
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 1
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 0
"""


# ------------------------------------------------------------------------------ parsers


def test_vllm_counters_are_differenced_and_summed_over_engines():
    before, after = parse_metrics(VLLM_BEFORE), parse_metrics(_vllm_after())
    assert before.engine == after.engine == "vllm"
    assert before.values == {"drafts": 2900.0, "draft_tokens": 8700.0, "accepted": 5100.0}
    d = counter_delta(before, after)
    assert (d.drafts, d.draft_tokens, d.accepted) == (1000.0, 3000.0, 2200.0)
    assert d.acceptance_rate == pytest.approx(2200 / 3000)
    assert d.mean_acceptance_length == pytest.approx(1 + 2200 / 1000)
    assert d.per_position == pytest.approx((0.9, 0.75, 0.55))
    # per position sums to the accepted tokens: the three counters agree with each other
    assert sum(d.per_position) * d.drafts == pytest.approx(d.accepted)
    text = d.statement()
    assert text.startswith("engine counters (vllm): 1000 drafts, 3000 draft tokens")
    assert "acceptance rate 0.733" in text and "mean acceptance length 3.200" in text
    # negative control: the cumulative values since boot are not this run's
    since_boot = counter_delta(EngineSnapshot("vllm", {k: 0.0 for k in after.values}), after)
    assert since_boot.acceptance_rate != pytest.approx(d.acceptance_rate, abs=0.01)


def test_sglang_running_averages_are_diffed_by_the_tokens_they_cover():
    # boot -> before: 1000 tokens in 500 steps (L=2), 500 of 1500 drafts accepted (r=1/3);
    # the run: 600 tokens in 200 steps (L=3), 400 of 600 accepted (r=2/3);
    # after: 1600 tokens, 700 steps (L=16/7), 900 of 2100 (r=3/7).
    before = parse_metrics(_sglang(1000, 40, 2.0, 1 / 3))
    after = parse_metrics(_sglang(1600, 60, 1600 / 700, 900 / 2100))
    assert before.engine == "sglang"
    d = counter_delta(before, after)
    assert d.mean_acceptance_length == pytest.approx(3.0)
    assert d.acceptance_rate == pytest.approx(2 / 3)
    assert "running averages" in d.statement() and "generation_tokens_total" in d.statement()
    # negative control: the gauge after the run is not the run's value
    assert after.values["accept_length"] != pytest.approx(3.0, abs=0.1)
    # without the tokens counter: weighted by requests, said to be approximate
    no_tokens = "\n".join(
        x for x in _sglang(0, 0, 0, 0).splitlines() if "generation_tokens" not in x
    )
    only_req = parse_metrics(no_tokens.replace("} 0.0", "} 20.0"))
    assert "gen_tokens" not in only_req.values
    d2 = counter_delta(parse_metrics(_sglang(0, 10, 2.0, 0.5)), only_req)
    assert "approximate" in d2.note or "num_requests" in d2.note


def test_llamacpp_recorded_counters():
    fresh, after = parse_metrics(LLAMACPP_FRESH), parse_metrics(LLAMACPP_AFTER)
    assert fresh.engine == after.engine == "llamacpp"
    assert fresh.per_pos == {}  # llama-server prints the per-position block once it has data
    d = counter_delta(fresh, after)
    assert (d.drafts, d.draft_tokens, d.accepted) == (4.0, 9.0, 3.0)
    assert d.acceptance_rate == pytest.approx(3 / 9)
    assert d.mean_acceptance_length == pytest.approx(1 + 3 / 4)
    assert d.per_position == pytest.approx((0.5, 0.25, 0.0))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "/metrics is empty"),
        (VLLM_BEFORE.split("# HELP vllm:spec_decode_num_drafts_total")[0], "no speculative"),
        ("<html><body>Not Found</body></html>\n", "not Prometheus text"),
    ],
)
def test_no_speculation_counters_is_not_published(text, reason):
    snap = parse_metrics(text)
    assert snap.engine is None and reason in snap.reason
    d = counter_delta(snap, snap)
    assert not d.published
    assert d.statement().startswith("engine counters: not published (")


def test_counters_that_go_down_are_not_trusted():
    d = counter_delta(parse_metrics(LLAMACPP_AFTER), parse_metrics(LLAMACPP_FRESH))
    assert not d.published and "went down" in d.note


def test_plain_server_counters_say_no_speculation():
    d = counter_delta(parse_metrics(LLAMACPP_FRESH), parse_metrics(LLAMACPP_FRESH))
    assert d.engine == "llamacpp" and d.drafts == 0
    assert d.acceptance_rate is None and d.mean_acceptance_length is None
    assert "no speculation in this run" in d.statement()


def test_response_counters_sum_what_responses_carry():
    assert response_counters([None, None], [None, None]) == {}
    r = response_counters([3, None, 5], [1, None, 4])
    assert r == {"responses": 2, "draft_tokens": 8, "accepted": 5, "acceptance_rate": 5 / 8}


def test_unreachable_or_missing_metrics_endpoint_is_not_an_error():
    async def go(url: str) -> EngineSnapshot:
        async with httpx.AsyncClient(timeout=2) as client:
            return await fetch_snapshot(client, url)

    from specviz.audit.local import free_port

    snap = asyncio.run(go(f"http://127.0.0.1:{free_port()}/metrics"))
    assert snap.engine is None and "ConnectError" in snap.reason
    srv = make_server(ServerConfig(metrics="none"))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        snap = asyncio.run(go(f"http://127.0.0.1:{srv.server_port}/metrics"))
        assert snap.engine is None and "HTTP 404" in snap.reason
    finally:
        srv.shutdown()
        srv.server_close()


# ------------------------------------------------------------------- the audit reads them


@pytest.fixture
def servers():
    started = []

    def start(**kw) -> tuple[str, object]:
        srv = make_server(ServerConfig(**kw))
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        started.append(srv)
        return f"http://127.0.0.1:{srv.server_port}", srv

    yield start
    for srv in started:
        srv.shutdown()
        srv.server_close()


def _backend(srv):
    """The broken server's backend (its true counts)."""
    return srv.backend


@pytest.mark.parametrize("style", ["vllm", "llamacpp", "sglang", "none"])
def test_audit_reports_the_engine_counters_of_its_run(servers, style):
    off, _ = servers(speculation=False, metrics=style)
    on, srv = servers(verifier="lossless", metrics=style)
    backend = _backend(srv)
    backend.counts["tokens"] = 77  # activity before the audit: the difference must remove it
    backend.counts["requests"] = 5
    kw = dict(n_samples=60, max_tokens=3, load_levels=(), greedy=False, progress=False)
    report = audit(off, on, ["ab", "cd"], **kw)
    phase = "samples T=1"
    b = report.engine_counters["b"][phase]
    a = report.engine_counters["a"][phase]
    true = backend.counts
    if style == "none":
        assert not b.published and "HTTP 404" in b.note
        assert "engine counters: not published" in report.summary()
        return
    assert b.engine == style
    if style in ("vllm", "llamacpp"):
        assert (b.drafts, b.draft_tokens, b.accepted) == (
            true["drafts"],
            true["draft_tokens"],
            true["accepted"],
        )
        assert b.acceptance_rate == pytest.approx(true["accepted"] / true["draft_tokens"])
        assert b.mean_acceptance_length == pytest.approx(1 + true["accepted"] / true["drafts"])
        assert len(b.per_position) == 4 and b.per_position[0] >= b.per_position[-1]
    else:  # SGLang: from running averages, exact here since the server's history is known
        run_tokens = true["tokens"] - 77 - 1  # before the run: 77 + the 1-token preflight probe
        steps = run_tokens - true["accepted"]
        assert b.mean_acceptance_length == pytest.approx(run_tokens / steps)
        assert b.acceptance_rate == pytest.approx(true["accepted"] / true["draft_tokens"])
    # the plain server publishes no speculation counters (vLLM names them only when on)
    if style == "llamacpp":
        assert a.engine == "llamacpp" and a.drafts == 0
        own = report.response_counters["b"][phase]
        assert own["draft_tokens"] == true["draft_tokens"]  # per-response timings agree
    else:
        assert not a.published
    assert b.statement() in report.summary()
    js = report.to_json()
    assert js["engine_counters"]["b"][phase]["engine"] == style
    assert not math.isnan(js["acceptance"][0]["engine_drafts"] or 0.0)


def test_engine_counters_distinguish_honest_and_always_accept(servers):
    """Not a verdict (the engine can lie), but the counters must be the server's: always_accept
    reports acceptance 1.0, the honest lossless verifier less."""
    off, _ = servers(speculation=False)
    on, _ = servers(verifier="lossless")
    bad, _ = servers(verifier="always_accept")
    kw = dict(n_samples=60, max_tokens=3, load_levels=(), greedy=False, progress=False)
    honest = audit(off, on, ["ab"], **kw).engine_counters["b"]["samples T=1"]
    broken = audit(off, bad, ["ab"], **kw).engine_counters["b"]["samples T=1"]
    assert broken.acceptance_rate == 1.0
    assert 0 < honest.acceptance_rate < 1.0


def test_engine_counters_type_is_exported():
    assert EngineCounters(None).statement() == "engine counters: not published"
