"""``specviz audit`` exit codes (0 consistent, 1 inconsistent, 2 could not run) and
:class:`AuditConfig`'s validation, against toy servers started in this process."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading

import pytest

from specviz.audit import AuditConfig
from specviz.audit.broken_server import ServerConfig, make_server
from specviz.audit.cli import main
from specviz.audit.local import free_port

SMALL = ["--n-samples", "100", "--max-tokens", "3", "--load-levels", "", "--no-greedy"]
SMALL += ["--quiet"]
# 100 samples see a first-token TV of ~0.26: tests about something else ask for no less
LOOSE = ["--tv-threshold", "0.5"]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """The default --out folder (specviz-audit) must not land in the working tree."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def thread_server():
    """Start broken-server instances in this process (a toy server starts in milliseconds)."""
    servers = []

    def start(config: ServerConfig) -> str:
        srv = make_server(config)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_port}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


@pytest.fixture(scope="module")
def urls():
    """Plain sampling, lossless and always_accept speculation (shared by the module)."""
    servers = {
        "off": make_server(ServerConfig(speculation=False)),
        "on": make_server(ServerConfig(verifier="lossless")),
        "broken": make_server(ServerConfig(verifier="always_accept")),
    }
    for srv in servers.values():
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield {k: f"http://127.0.0.1:{srv.server_port}" for k, srv in servers.items()}
    for srv in servers.values():
        srv.shutdown()
        srv.server_close()


def _usage_error(capsys, argv: list[str], *needles: str) -> str:
    """``main(argv)`` exits 2 with one line on stderr that holds every needle, no traceback."""
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specviz audit: "), err
    for needle in needles:
        assert needle in lines[0], err
    return lines[0]


# ------------------------------------------------------------------------------ 0 and 1


def test_honest_pair_exits_0_and_broken_verifier_exits_1(urls, tmp_path, capsys):
    # 100 samples can only see a TV of ~0.4 at position 2 (where speculation acts): asked for
    # 0.1 the honest pair is inconclusive (exit 3), never a pass; asked for 0.7 it is
    # consistent (exit 0)
    honest = ["--a", urls["off"], "--b", urls["on"], "--prompt", "ab"]
    weak = main(SMALL + honest + ["--out", str(tmp_path / "weak")])
    out = capsys.readouterr().out
    assert weak == 3, out
    assert "verdict: inconclusive (could not see TV < " in out
    assert "verdict: consistent" not in out
    ok = main(SMALL + honest + ["--tv-threshold", "0.7", "--out", str(tmp_path / "ok")])
    out = capsys.readouterr().out
    assert ok == 0, out
    assert "verdict: consistent (a position-2 TV of " in out
    bad = main(
        SMALL
        + ["--a", urls["off"], "--b", urls["broken"], "--prompt", "ab"]
        + ["--out", str(tmp_path / "bad")]
    )
    out = capsys.readouterr().out
    assert bad == 1, out
    assert "verdict: inconsistent" in out
    assert (tmp_path / "bad" / "report.html").exists()


def _raw_prompts(out_dir) -> list[int]:
    lines = (out_dir / "raw.jsonl").read_text().splitlines()[1:]
    return [json.loads(x)["prompt"] for x in lines]


def test_single_prompt_string_is_one_prompt(urls, tmp_path, capsys):
    # toy prompts are strings over the letters a-e: five letters, one prompt
    out_dir = tmp_path / "one"
    argv = SMALL + LOOSE + ["--a", urls["off"], "--b", urls["on"], "--out", str(out_dir)]
    rc = main(argv + ["--prompt", "abcab"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "100 samples per arm and prompt, 1 prompts]" in out
    assert sorted(set(_raw_prompts(out_dir))) == [0]
    assert len(_raw_prompts(out_dir)) == 2 * 100


def test_prompts_file_lines_and_jsonl(urls, tmp_path, capsys):
    path = tmp_path / "prompts.txt"
    path.write_text('ab\n\n{"prompt": "cd"}\n', encoding="utf-8")
    out_dir = tmp_path / "out"
    argv = SMALL + LOOSE + ["--a", urls["off"], "--b", urls["on"], "--out", str(out_dir)]
    rc = main(argv + ["--prompts-file", str(path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "100 samples per arm and prompt, 2 prompts]" in out
    assert sorted(set(_raw_prompts(out_dir))) == [0, 1]


# ------------------------------------------------------------------------------ 2


def test_missing_prompts_file_exits_2_naming_it(capsys, tmp_path):
    missing = tmp_path / "nope.txt"
    _usage_error(
        capsys,
        ["--a", "http://127.0.0.1:1", "--b", "http://127.0.0.1:1", "--prompts-file", str(missing)],
        str(missing),
        "no such file",
    )


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("", "has no prompts"),
        ("\n  \n\n", "has no prompts"),
        ('{"prompt": "ab"\n', ":1: a line starting with '{' must be a JSON object"),
        ('ab\n{"text": "ab"}\n', ":2: the JSON object has no non-empty 'prompt' string"),
    ],
    ids=["empty", "blank-lines", "bad-json", "no-prompt-key"],
)
def test_bad_prompts_file_exits_2(capsys, tmp_path, content, needle):
    path = tmp_path / "prompts.txt"
    path.write_text(content, encoding="utf-8")
    base = ["--a", "http://127.0.0.1:1", "--b", "http://127.0.0.1:1"]
    _usage_error(capsys, base + ["--prompts-file", str(path)], str(path), needle)


def test_prompts_file_that_is_a_directory_or_not_utf8_exits_2(capsys, tmp_path):
    base = ["--a", "http://127.0.0.1:1", "--b", "http://127.0.0.1:1", "--prompts-file"]
    _usage_error(capsys, base + [str(tmp_path)], "is a directory")
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("caf\xe9\n".encode("latin-1"))
    _usage_error(capsys, base + [str(latin)], "not UTF-8")


def test_no_prompt_exits_2(capsys):
    _usage_error(
        capsys, ["--a", "http://127.0.0.1:1", "--b", "http://127.0.0.1:1"], "at least one --prompt"
    )


def test_unreachable_server_exits_2(capsys, thread_server):
    port = free_port()  # nothing listens there
    on = thread_server(ServerConfig(verifier="lossless"))
    _usage_error(
        capsys,
        SMALL + ["--a", f"http://127.0.0.1:{port}", "--b", on, "--prompt", "ab"],
        f"cannot reach A (http://127.0.0.1:{port})",
    )


def test_server_errors_exit_2(capsys, thread_server):
    off = thread_server(ServerConfig(speculation=False))
    other = thread_server(ServerConfig(toy_seed=1, model_name="toy-v5-o2-s0"))
    nolp = thread_server(ServerConfig(logprobs=False))
    base = SMALL + ["--prompt", "ab", "--a", off]
    _usage_error(capsys, base + ["--b", other], "mismatched models")
    _usage_error(capsys, base + ["--b", nolp], "B returned no logprobs")
    _usage_error(capsys, base + ["--b", off, "--model-b", "other"], "does not serve model")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--temperature", "-1"], "--temperature must be a finite number >= 0"),
        (["--temperature", "0"], "--temperature must be > 0"),
        (["--temperature", "nan"], "--temperature must be a finite number"),
        (["--retries", "-1"], "--retries must be an integer >= 0"),
        (["--top-p", "1.5"], "--top-p must be None or in (0, 1]"),
        (["--top-p", "0"], "--top-p must be None or in (0, 1]"),
        (["--top-k", "0"], "--top-k must be an integer >= 1"),
        (["--n-samples", "1"], "--n-samples must be an integer >= 2"),
        (["--max-tokens", "0"], "--max-tokens must be an integer >= 1"),
        (["--alpha", "1"], "--alpha must be in (0, 1)"),
        (["--tv-threshold", "0"], "--tv-threshold must be in (0, 1]"),
        (["--tv-threshold", "1.5"], "--tv-threshold must be in (0, 1]"),
        (["--concurrency", "0"], "--concurrency must be an integer >= 1"),
        (["--load-levels", "1,0"], "--load-levels must be integers >= 1"),
        (["--greedy-max-tokens", "0"], "--greedy-max-tokens must be an integer >= 1"),
        (["--near-tie", "-0.1"], "--near-tie must be a finite number >= 0"),
        (["--load-requests", "0"], "--load-requests must be an integer >= 1"),
        (["--load-max-tokens", "0"], "--load-max-tokens must be an integer >= 1"),
        (["--load-temperature", "-1"], "--load-temperature must be a finite number >= 0"),
        (["--seed", "-1"], "--seed must be an integer >= 0"),
        (["--timeout", "0"], "--timeout must be a finite number of seconds > 0"),
        (["--extra", "[1]"], "--extra must be a JSON object"),
        (["--prompt", ""], "--prompt: prompt 1 is an empty string"),
        (["--ca-bundle", "/nonexistent/ca.pem"], "--ca-bundle /nonexistent/ca.pem: no such"),
    ],
)
def test_bad_numbers_exit_2_before_contacting_a_server(capsys, args, needle):
    port = free_port()  # a server would be unreachable: validation must come first
    url = f"http://127.0.0.1:{port}"
    line = _usage_error(capsys, ["--a", url, "--b", url, "--prompt", "ab"] + args, needle)
    assert "cannot reach" not in line


def test_url_without_scheme_exits_2(capsys):
    _usage_error(
        capsys, ["--a", "127.0.0.1:8080", "--b", "http://x", "--prompt", "ab"], "--a must be"
    )


def test_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--a", "http://x", "--b", "http://x", "--n-samples", "many"])
    assert exc.value.code == 2
    assert "invalid int value" in capsys.readouterr().err


def test_output_folder_blocked_by_a_file_exits_2(urls, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    _usage_error(
        capsys,
        SMALL + ["--a", urls["off"], "--b", urls["on"], "--prompt", "ab", "--out", str(blocker)],
        "cannot write the results",
    )


@pytest.mark.parametrize(
    ("exc", "code", "last_line"),
    [
        (
            ZeroDivisionError("a bug"),
            2,
            "specviz audit: internal error (the traceback above; please report it)",
        ),
        (
            KeyboardInterrupt(),
            130,
            "specviz audit: interrupted; complete results are saved in out/raw.jsonl "
            "(rerun the same command to resume)",
        ),
    ],
    ids=["bug", "ctrl-c"],
)
def test_internal_error_is_never_a_verdict(capsys, monkeypatch, exc, code, last_line):
    import specviz.audit.run as run

    async def boom(*args, **kwargs):
        raise exc

    monkeypatch.setattr(run, "run_audit", boom)
    rc = main(["--a", "http://x", "--b", "http://x", "--prompt", "ab", "--out", "out"])
    err = capsys.readouterr().err
    assert rc == code
    assert err.strip().splitlines()[-1] == last_line
    assert ("Traceback" in err and "ZeroDivisionError: a bug" in err) == (code == 2)


def test_python_m_specviz_audit_exit_code(tmp_path):
    missing = tmp_path / "missing.txt"
    proc = subprocess.run(
        [sys.executable, "-m", "specviz", "audit", "--a", "http://127.0.0.1:1"]
        + ["--b", "http://127.0.0.1:1", "--prompts-file", str(missing)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == f"specviz audit: --prompts-file {missing}: no such file\n"


# ------------------------------------------------------------------------------ AuditConfig


def test_config_prompt_string_is_one_prompt():
    assert AuditConfig(prompts="ab").prompts == ("ab",)
    assert AuditConfig(prompts=["ab", "cd"]).prompts == ("ab", "cd")
    assert AuditConfig(prompts=("ab",), load_prompts="cd").load_prompts == ("cd",)
    assert AuditConfig(prompts="ab", load_levels=[1, 2]).load_levels == (1, 2)


GOOD = dict(prompts=("ab",))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("prompts", ()),
        ("prompts", ""),
        ("prompts", ("ab", "")),
        ("prompts", ("ab", 3)),
        ("prompts", 3),
        ("prompts", b"ab"),
        ("prompts", ("ab",) * 1000),
        ("load_prompts", ("",)),
        ("n_samples", 1),
        ("n_samples", 0),
        ("n_samples", 10**5),
        ("n_samples", 100.0),
        ("n_samples", True),
        ("max_tokens", 0),
        ("temperature", -1.0),
        ("temperature", 0.0),
        ("temperature", math.nan),
        ("temperature", math.inf),
        ("temperature", "1"),
        ("temperature", True),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_p", math.nan),
        ("top_k", 0),
        ("top_k", 2.0),
        ("seed", -1),
        ("seed", 2**31),
        ("seed", 1.5),
        ("alpha", 0.0),
        ("alpha", 1.0),
        ("alpha", math.nan),
        ("concurrency", 0),
        ("concurrency", True),
        ("retries", -1),
        ("retries", 1.0),
        ("retries", False),
        ("greedy", 1),
        ("greedy_max_tokens", 0),
        ("near_tie", -0.1),
        ("near_tie", math.inf),
        ("load_levels", (1, 0)),
        ("load_levels", (1, True)),
        ("load_levels", (1.5,)),
        ("load_levels", "12"),
        ("load_levels", 4),
        ("load_requests", 0),
        ("load_max_tokens", 0),
        ("load_temperature", -0.5),
        ("load_temperature", math.nan),
        ("n_boot", 0),
        ("outcome", "logits"),
    ],
)
def test_config_bad_field_raises_value_error_naming_it(field, value):
    with pytest.raises(ValueError) as exc:
        AuditConfig(**{**GOOD, field: value})
    assert str(exc.value).startswith(field), str(exc.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("top_p", 1.0),
        ("top_p", 0.5),
        ("top_k", 1),
        ("retries", 0),
        ("n_samples", 2),
        ("near_tie", 0.0),
        ("load_temperature", 0),
        ("load_levels", ()),
        ("temperature", 2),
        ("seed", 2**31 - 1 - 10**8 - 200),
    ],
)
def test_config_edge_values_are_accepted(field, value):
    AuditConfig(**{**GOOD, field: value})


def test_audit_from_python_takes_a_single_prompt_string_as_one_prompt(urls):
    from specviz.audit import audit

    report = audit(urls["off"], urls["on"], "abcab", n_samples=50, max_tokens=2,
                   load_levels=(), greedy=False, progress=False)  # fmt: skip
    assert report.config.prompts == ("abcab",)
    assert set(report.tests.prompt) == {0}


def test_identity_probe_over_http_checks_the_greedy_acceptance(urls, tmp_path, capsys):
    """--identity-probe over HTTP: B's greedy acceptance (from its /metrics) must be exactly 1.
    The toy server's draft is not its target, so the probe must fail (exit 1) even though the
    law is kept; the same pair without the flag is not 'inconsistent'."""
    argv = ["--n-samples", "100", "--max-tokens", "3", "--load-levels", "", "--quiet"]
    argv += ["--greedy-max-tokens", "8", "--tv-threshold", "0.9", "--prompt", "ab"]
    argv += ["--a", urls["off"], "--b", urls["on"]]
    assert main(argv + ["--out", str(tmp_path / "plain")]) == 0
    capsys.readouterr()
    assert main(argv + ["--identity-probe", "--out", str(tmp_path / "probe")]) == 1
    out = capsys.readouterr().out
    assert "identity probe (draft = target): FAILED" in out and "greedy T=0" in out
