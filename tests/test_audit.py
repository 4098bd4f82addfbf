"""``specviz audit`` against real servers on 127.0.0.1 that the tests start and stop.

* The broken server (toy model, fast): the honest pair (plain sampling vs lossless
  speculation) passes, and the same audit with the same sample sizes flags ``always_accept``
  (negative control). Seeds are fixed per request, so the verdicts are reproducible; the
  honest pair's false-positive rate is alpha=0.01 (Holm over all tests).
* Clear errors: unreachable server, no logprobs, mismatched models, bad TLS, timeouts; a
  partial completion is never counted; an interrupted audit resumes from its raw file.
* Both APIs (``/v1/completions`` and ``/v1/chat/completions``) and both logprob response shapes;
  a server that reports logprobs it did not compute (llama.cpp's speculative path) gets its
  logprob tests skipped with a note, not a false alarm.
* llama.cpp's own ``llama-server`` is audited in tests/test_audit_llama_server.py.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import ssl
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest

from specviz import stats
from specviz.audit import AuditError, Endpoint, audit
from specviz.audit.broken_server import ServerConfig, make_server
from specviz.audit.client import IncompleteResult, parse_completion
from specviz.audit.local import broken_server_command, free_port, local_servers

TOY_PROMPTS = ["ab", "cd"]
NOISE = 1e-6
TOY_SETTINGS = dict(
    n_samples=200,
    max_tokens=3,
    load_levels=(1, 2),
    load_requests=4,
    load_max_tokens=8,
    progress=False,
)


@pytest.fixture(scope="module")
def toy_servers():
    """Broken-server processes: plain sampling, lossless and always_accept speculation, and
    lossless speculation whose reported logprobs drift by float noise (up to 1e-6 nats per
    token, as another kernel would give). The broken one drifts too."""
    commands = {
        "off": broken_server_command(speculation=False),
        "on": broken_server_command(verifier="lossless"),
        "noisy": broken_server_command(verifier="lossless", logprob_noise=NOISE),
        "broken": broken_server_command(verifier="always_accept", logprob_noise=NOISE),
    }
    with local_servers(commands, timeout=120) as urls:
        yield urls


@pytest.fixture
def thread_server():
    """Start broken-server instances in this process (cheap; for the error cases)."""
    servers = []

    def start(config: ServerConfig, tls: ssl.SSLContext | None = None) -> str:
        srv = make_server(config)
        if tls is not None:
            srv.socket = tls.wrap_socket(srv.socket, server_side=True)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        scheme = "https" if tls else "http"
        return f"{scheme}://127.0.0.1:{srv.server_port}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


# ------------------------------------------------------------------- the audit's verdicts


def test_honest_pair_passes_and_broken_verifier_is_flagged_with_the_same_samples(
    toy_servers, tmp_path
):
    honest = audit(
        toy_servers["off"], toy_servers["on"], TOY_PROMPTS, out_dir=tmp_path / "h", **TOY_SETTINGS
    )
    broken = audit(
        toy_servers["off"],
        toy_servers["broken"],
        TOY_PROMPTS,
        out_dir=tmp_path / "b",
        **TOY_SETTINGS,
    )
    assert honest.verdict == "consistent", honest.summary()
    assert honest.greedy_verdict == "identical"
    assert broken.verdict == "inconsistent", broken.summary()
    assert broken.greedy_verdict == "bug"
    assert broken.tests.holm.min() < 1e-6  # not a borderline call
    # same sample sizes, per prompt and arm
    assert honest.n_samples == broken.n_samples == 200
    raw = [json.loads(x) for x in (tmp_path / "b" / "raw.jsonl").read_text().splitlines()]
    assert sum(r["kind"] == "sample" for r in raw) == 2 * 2 * 200
    # power statement and load curves for both configurations
    assert "would be detected with 90% probability" in honest.power_statement
    assert set(honest.load.arm) == {"a", "b"} and (honest.load.failed == 0).all()
    assert (honest.load.tokens_per_s > 0).all() and (honest.load.ttft_p50 > 0).all()
    page = (tmp_path / "h" / "report.html").read_text()
    assert f"Verdict: {honest.outcome}" in page and "plotly" in page.lower()
    # the verdict carries its power: consistent only where the samples could see the threshold
    assert honest.outcome == (
        "consistent" if honest.min_detectable_tv <= honest.config.tv_threshold else "inconclusive"
    )
    assert summary_of(tmp_path / "h")["outcome"] == honest.outcome
    assert "<script src=" not in page  # plotly.js inlined: the page works offline
    assert len(page) > 1_000_000
    summary = summary_of(tmp_path / "b")
    assert summary["verdict"] == summary["outcome"] == "inconsistent"


def summary_of(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_float_noise_in_reported_logprobs_is_reported_not_flagged(toy_servers, tmp_path):
    """Issue 13: the toy's 3-token continuations are few atoms; the noisy configuration
    reports each with slightly different logprobs. One value per distinct continuation keeps
    KS/AD valid, and the drift is its own line of the report. The raw per-arm values (what the
    audit used to feed KS) are the negative control: they reject the honest pair outright."""
    settings = {**TOY_SETTINGS, "load_levels": (), "temperature": 0.5}  # peaked: big atoms
    report = audit(
        toy_servers["off"], toy_servers["noisy"], TOY_PROMPTS, out_dir=tmp_path, **settings
    )
    assert report.verdict == "consistent", report.summary()
    lp_tests = report.tests[report.tests.test.str.startswith("logprob")]
    assert len(lp_tests) == 2 * len(TOY_PROMPTS)
    drift = [n.max_gap for n in report.numerics if n is not None and n.shared]
    assert drift and 1e-7 < max(drift) <= 3 * NOISE * 2, report.numerics
    assert "numerics: up to" in report.summary() and "between configurations" in report.summary()
    raw = [json.loads(x) for x in (tmp_path / "raw.jsonl").read_text().splitlines()]
    samples = [r for r in raw if r.get("kind") == "sample"]
    old_way = []
    for pi in range(len(TOY_PROMPTS)):
        a, b = (
            [sum(r["logprobs"]) for r in samples if r["arm"] == arm and r["prompt"] == pi]
            for arm in ("a", "b")
        )
        old_way.append(stats.ks_2sample(a, b).pvalue)
    assert max(old_way) < 1e-4, old_way  # per-arm values: the honest pair rejected


def test_resume_reuses_complete_results_and_refuses_other_settings(toy_servers, tmp_path):
    kw = dict(TOY_SETTINGS, n_samples=30, load_levels=(), greedy=False)
    first = audit(toy_servers["off"], toy_servers["on"], ["ab"], out_dir=tmp_path, **kw)
    raw = tmp_path / "raw.jsonl"
    lines = raw.read_text().splitlines()
    assert len(lines) == 1 + 2 * 30
    # simulate a crash: last record half-written, ten records missing
    raw.write_text("\n".join(lines[:-10]) + "\n" + lines[-10][:15])
    again = audit(toy_servers["off"], toy_servers["on"], ["ab"], out_dir=tmp_path, **kw)
    records = [json.loads(x) for x in raw.read_text().splitlines()[1:]]
    assert len(records) == 2 * 30
    assert len({(r["arm"], r["index"]) for r in records}) == 60
    # seeded requests: the redone samples are the same, so the tests are too
    assert list(again.tests.pvalue) == pytest.approx(list(first.tests.pvalue))
    with pytest.raises(AuditError, match="different prompts, sampling"):
        audit(
            toy_servers["off"],
            toy_servers["on"],
            ["ab"],
            out_dir=tmp_path,
            **dict(kw, temperature=0.7),
        )


def test_cli_audit_exit_codes(toy_servers, tmp_path, capsys):
    from specviz.cli import main

    base = ["audit", "--prompt", "ab", "--n-samples", "200", "--max-tokens", "3"]
    base += ["--load-levels", "", "--no-greedy", "--quiet", "--tv-threshold", "0.3"]
    rc_ok = main(
        base + ["--a", toy_servers["off"], "--b", toy_servers["on"], "--out", str(tmp_path / "1")]
    )
    rc_bad = main(
        base
        + ["--a", toy_servers["off"], "--b", toy_servers["broken"], "--out", str(tmp_path / "2")]
    )
    assert (rc_ok, rc_bad) == (0, 1)
    assert "verdict: inconsistent" in capsys.readouterr().out
    assert (tmp_path / "2" / "report.html").exists()
    rc = main(base + ["--a", "http://127.0.0.1:1", "--b", toy_servers["on"]])
    assert rc == 2 and "cannot reach" in capsys.readouterr().err


# ------------------------------------------------------------------------- clear errors


def test_unreachable_server_is_named():
    port = free_port()  # nothing listens there
    with pytest.raises(AuditError, match=rf"cannot reach A \(http://127.0.0.1:{port}\)"):
        audit(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}", ["ab"], progress=False)


def test_server_without_logprobs_is_refused(thread_server):
    a = thread_server(ServerConfig(speculation=False))
    b = thread_server(ServerConfig(logprobs=False))
    with pytest.raises(AuditError, match="B returned no logprobs.*--outcome text"):
        audit(a, b, ["ab"], progress=False)
    # text outcomes need no logprobs (pieces are split client-side)
    report = audit(a, b, ["ab"], outcome="text", n_samples=40, load_levels=(), progress=False)
    assert report.verdict == "consistent" and report.greedy_verdict == "identical"
    assert not report.tests.test.str.startswith("logprob").any()


def test_mismatched_models_are_refused(thread_server):
    a = thread_server(ServerConfig(speculation=False, toy_seed=0))
    b = thread_server(ServerConfig(toy_seed=1, model_name="toy-v5-o2-s0"))  # same name, other model
    with pytest.raises(AuditError, match="mismatched models"):
        audit(a, b, ["ab"], progress=False)
    with pytest.raises(AuditError, match="does not serve model 'other'"):
        audit(a, Endpoint(b, model="other"), ["ab"], progress=False)


def test_bad_tls_is_explained(thread_server, tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    url = thread_server(ServerConfig(), tls=ctx)
    plain = thread_server(ServerConfig(speculation=False))
    with pytest.raises(AuditError, match="TLS failed for B .*CERTIFICATE_VERIFY_FAILED"):
        audit(plain, url, ["ab"], progress=False)


def test_timeout_is_explained():
    # A socket that accepts connections (kernel backlog) but never answers.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        ep = Endpoint(url, label="slow", timeout=0.5)
        t0 = time.monotonic()
        with pytest.raises(AuditError, match=r"slow .* timed out after 0.5 s"):
            audit(ep, ep, ["ab"], progress=False)
        assert time.monotonic() - t0 < 10


def test_partial_completions_are_never_counted():
    ep = Endpoint("http://x", label="S")
    lp = {"tokens": ["a", "b"], "token_logprobs": [-0.1, -0.2], "top_logprobs": [{}, {}]}
    ok = {"choices": [{"text": "ab", "finish_reason": "length", "logprobs": lp}]}
    assert parse_completion(ok, ep, max_tokens=2, seconds=0.0).tokens == ("a", "b")
    cut = {"choices": [{"text": "ab", "finish_reason": None, "logprobs": lp}]}
    with pytest.raises(IncompleteResult, match="finish_reason=None"):
        parse_completion(cut, ep, max_tokens=2, seconds=0.0)
    with pytest.raises(IncompleteResult, match="asked 3"):
        parse_completion(ok, ep, max_tokens=3, seconds=0.0)
    short = {
        "choices": [
            {"text": "ab", "finish_reason": "stop", "logprobs": {**lp, "token_logprobs": [-0.1]}}
        ]
    }
    with pytest.raises(IncompleteResult, match="2 tokens but 1 logprobs"):
        parse_completion(short, ep, max_tokens=2, seconds=0.0)
    with pytest.raises(IncompleteResult, match="without choices"):
        parse_completion({"choices": []}, ep, max_tokens=2, seconds=0.0)


@pytest.mark.parametrize("ending", ["close", "reset"])
def test_truncated_stream_is_incomplete(ending):
    """A stream cut before [DONE] raises instead of being timed as a short completion,
    whether the server closes the connection cleanly or resets it."""
    from specviz.audit.client import stream

    class Cut(threading.Thread):
        def __init__(self) -> None:
            super().__init__(daemon=True)
            self.sock = socket.socket()
            self.sock.bind(("127.0.0.1", 0))
            self.sock.listen(4)

        def run(self) -> None:
            conn, _ = self.sock.accept()
            # Read the whole request first: closing with unread bytes sends a reset, and
            # the client would see a read error instead of a clean early end of stream.
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            head, _, body = request.partition(b"\r\n\r\n")
            length = int(re.search(rb"content-length: *(\d+)", head, re.I).group(1))
            while len(body) < length:
                body += conn.recv(65536)
            chunk = json.dumps({"choices": [{"text": "a", "finish_reason": None}]})
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                + f"data: {chunk}\n\n".encode()
            )
            if ending == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:
                conn.shutdown(socket.SHUT_WR)
            conn.close()

    srv = Cut()
    srv.start()
    ep = Endpoint(f"http://127.0.0.1:{srv.sock.getsockname()[1]}", label="cut", timeout=5)

    async def go():
        async with ep.client() as client:
            return await stream(client, ep, "ab", max_tokens=4, temperature=0.0, retries=0)

    with pytest.raises(AuditError, match="cut: stream ended without"):
        asyncio.run(go())
    srv.sock.close()


# --------------------------------------------------------------------- chat API, logprobs


def test_chat_api_passes_the_honest_pair_and_flags_the_broken_one(toy_servers, tmp_path):
    """/v1/chat/completions (chat-shape logprobs, delta streaming) with the same settings as
    the completions audit above: the verdicts must not depend on the API."""
    kw = {**TOY_SETTINGS, "api": "chat", "load_temperature": (0, 0.7), "top_p": 0.9}
    honest = audit(toy_servers["off"], toy_servers["on"], TOY_PROMPTS, out_dir=tmp_path / "h", **kw)
    broken = audit(toy_servers["off"], toy_servers["broken"], TOY_PROMPTS, **kw)
    assert honest.verdict == "consistent", honest.summary()
    assert broken.verdict == "inconsistent", broken.summary()
    assert broken.tests.holm.min() < 1e-6
    assert honest.tests.test.str.startswith("logprob").any()  # chat-shape logprobs were parsed
    assert set(honest.load.temperature) == {0.0, 0.7}
    assert (honest.load.failed == 0).all() and (honest.load.tokens_per_s > 0).all()
    assert len(honest.crossovers) == 2 * 2  # per temperature: throughput, completion time
    assert honest.to_json()["api"] == "chat" and honest.config.api == "chat"


def test_both_logprob_shapes_are_parsed_alike():
    ep = Endpoint("http://x", label="S")
    legacy = {
        "choices": [
            {
                "text": " a b",
                "finish_reason": "length",
                "logprobs": {
                    "tokens": [" a", " b"],
                    "token_logprobs": [-0.5, -1.5],
                    "top_logprobs": [{" a": -0.5, " c": -1.0}, {" b": -1.5}],
                },
            }
        ]
    }
    chat = {
        "choices": [
            {
                "message": {"role": "assistant", "content": " a b"},
                "finish_reason": "length",
                "logprobs": {
                    "content": [
                        {"token": " a", "logprob": -0.5, "top_logprobs": [
                            {"token": " a", "logprob": -0.5}, {"token": " c", "logprob": -1.0}]},
                        {"token": " b", "logprob": -1.5, "top_logprobs": [
                            {"token": " b", "logprob": -1.5}]},
                    ]
                },
            }
        ],
        "timings": {"draft_n": 3, "draft_n_accepted": 2},
    }  # fmt: skip
    a = parse_completion(legacy, ep, max_tokens=2, seconds=0.0)
    b = parse_completion(chat, ep, max_tokens=2, seconds=0.0)
    assert (a.text, a.tokens, a.logprobs, a.top) == (b.text, b.tokens, b.logprobs, b.top)
    assert (a.draft_tokens, b.draft_tokens, b.draft_accepted) == (None, 3, 2)
    # llama-server answers /v1/completions with "text" and chat-shape logprobs
    mixed = {"choices": [{**chat["choices"][0], "text": " a b"}]}
    del mixed["choices"][0]["message"]
    assert parse_completion(mixed, ep, max_tokens=2, seconds=0.0).tokens == (" a", " b")
    # a chat answer cut short is still incomplete
    cut = {"choices": [{**chat["choices"][0], "finish_reason": None}]}
    with pytest.raises(IncompleteResult, match="finish_reason=None"):
        parse_completion(cut, ep, max_tokens=2, seconds=0.0)
    with pytest.raises(AuditError, match="returned no logprobs"):
        parse_completion(
            {"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]},
            ep,
            max_tokens=2,
            seconds=0.0,
        )


def test_logprobs_the_server_did_not_compute_skip_the_logprob_tests(thread_server, tmp_path):
    """llama-server reports logprob 0.0 with no alternatives for the tokens of its speculative
    path. Comparing those sums would flag an honest server; the audit says so and tests the
    tokens only. Negative control: the same sums, compared as reported, reject outright."""
    a = thread_server(ServerConfig(speculation=False))
    b = thread_server(ServerConfig(verifier="lossless", unreported_logprobs=True))
    kw = dict(n_samples=200, max_tokens=3, load_levels=(), progress=False)
    report = audit(a, b, ["ab", "cd"], out_dir=tmp_path, **kw)
    assert report.verdict == "consistent", report.summary()
    assert not report.tests.test.str.startswith("logprob").any()
    assert report.logprob_note and "B reported no logprob for" in report.logprob_note
    assert "A reported" not in report.logprob_note
    assert "reported logprobs:" in report.summary()
    assert all(g is None or g < 1e-5 for g in report.greedy_logprob_gap)
    raw = [json.loads(x) for x in (tmp_path / "raw.jsonl").read_text().splitlines()[1:]]
    sums = {
        arm: [sum(r["logprobs"]) for r in raw if r["kind"] == "sample" and r["arm"] == arm]
        for arm in ("a", "b")
    }
    assert stats.ks_2sample(sums["a"], sums["b"]).pvalue < 1e-6
    # an honest server with real logprobs keeps its logprob tests
    honest = audit(a, thread_server(ServerConfig(verifier="lossless")), ["ab"], **kw)
    assert honest.logprob_note is None and honest.tests.test.str.startswith("logprob").any()


def test_cli_chat_api_and_several_load_temperatures(toy_servers, tmp_path, capsys):
    from specviz.cli import main

    argv = ["audit", "--a", toy_servers["off"], "--b", toy_servers["on"], "--prompt", "ab"]
    argv += ["--n-samples", "60", "--max-tokens", "2", "--no-greedy", "--quiet", "--api", "chat"]
    argv += ["--load-levels", "1,2", "--load-requests", "2", "--load-max-tokens", "4"]
    argv += ["--load-temperature", "0,0.7", "--out", str(tmp_path)]
    assert main(argv) == 3  # 60 samples cannot see a TV of 0.1: inconclusive, not a pass
    out = capsys.readouterr().out
    assert "load T=0.7 c=2" in out and "crossover: T=0," in out
    assert "engine counters (vllm)" in out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["api"] == "chat" and len(summary["crossovers"]) == 4
    page = (tmp_path / "report.html").read_text()
    assert "Engine counters vs the audit" in page and "Crossover" in page


def test_transient_errors_are_retried_with_backoff():
    """503 twice, then a good answer: one complete result after two backoff waits (0.05 s,
    0.1 s); a 400 is not retried (retrying a bad request cannot help)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from specviz.audit.client import complete

    calls: list[float] = []
    good = {
        "choices": [
            {
                "text": "ab",
                "finish_reason": "length",
                "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-0.1, -0.2]},
            }
        ]
    }

    class Flaky(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            calls.append(time.monotonic())
            code, payload = (503, {"error": "busy"}) if len(calls) < 3 else (200, good)
            if "bad" in self.path:
                code, payload = 400, {"error": {"message": "max_tokens too large"}}
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        ep = Endpoint(f"http://127.0.0.1:{srv.server_port}", label="flaky", timeout=5)
        bad = Endpoint(f"http://127.0.0.1:{srv.server_port}/bad", label="bad", timeout=5)

        async def go(e: Endpoint):
            async with e.client() as client:
                return await complete(
                    client, e, "ab", max_tokens=2, temperature=1.0, retries=3, backoff=0.05
                )

        c = asyncio.run(go(ep))
        assert c.tokens == ("a", "b") and len(calls) == 3
        assert calls[1] - calls[0] >= 0.05 and calls[2] - calls[1] >= 0.1
        calls.clear()
        with pytest.raises(AuditError, match="bad answered HTTP 400 .* max_tokens too large"):
            asyncio.run(go(bad))
        assert len(calls) == 1
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_killed_audit_leaves_no_server_behind():
    """SIGTERM to a process inside local_servers stops its servers (before, a killed audit
    left its llama-server processes running)."""
    import sys

    import httpx

    code = (
        "import time\n"
        "from specviz.audit.local import broken_server_command, local_servers\n"
        "with local_servers({'s': broken_server_command(speculation=False)}) as urls:\n"
        "    print(urls['s'], flush=True)\n"
        "    time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert httpx.get(f"{url}/v1/models", timeout=5).status_code == 200
        proc.terminate()
        assert proc.wait(timeout=30) == 128 + 15
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/v1/models", timeout=2)
    finally:
        proc.kill()
        proc.stdout.close()
