"""A small OpenAI-compatible server around specviz's engine, honest or deliberately broken.

It exists so that ``specviz audit`` can be checked end to end against a server whose truth
is known: with ``speculation=False`` it samples plainly from the target
(:func:`specviz.engine.autoregressive_generate`); with ``speculation=True`` it runs
:func:`specviz.engine.speculative_generate` with a chosen verifier -- ``"lossless"`` (honest)
or one of the bug zoo in :data:`specviz.verify.VERIFIERS` (``"always_accept"``,
``"residual_from_target"``, ...). The audit must pass the honest pair and flag the broken one
with the same sample sizes.

Endpoints (a subset of the OpenAI API, enough for the audit): ``GET /v1/models``,
``POST /v1/completions`` (``prompt``, ``max_tokens``, ``temperature``, ``top_p``, ``top_k``,
``seed``, ``logprobs``, ``stream``). ``logprobs`` are the target's log-softmax of its raw
logits (temperature 1, like llama.cpp), recomputed by teacher forcing so both modes report the
same quantity.

Models: ``"toy"`` is :func:`specviz.toy.toy_pair` (5 tokens written ``a``-``e``, prompts are
strings of those letters) -- fast enough for CI; any built-in name (``"smollm2-135m"``) loads
the model and tokenizer with :mod:`specviz.models` and drafts with prompt lookup.

Run it::

    python -m specviz.audit.broken_server --port 8001 --speculation on --verifier always_accept

Streaming note: the engine has no token callback, so a streamed response is sent after the
whole completion is generated (TTFT here equals completion time; the load sweep on this server
measures request handling, not token pacing).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
import uuid
import zlib
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch

__all__ = ["ServerConfig", "make_server", "main"]

TOY_LETTERS = "abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class ServerConfig:
    """What the server serves. ``model`` is ``"toy"`` or a built-in specviz model name."""

    model: str = "toy"
    speculation: bool = True
    verifier: str = "lossless"
    gamma: int = 4
    logprobs: bool = True  # False imitates a server without logprobs support
    toy_seed: int = 0  # a different seed is a different model (for the mismatch check)
    toy_vocab: int = 5
    model_name: str | None = None  # the id in /v1/models; default derived from the model
    # Reported logprobs move by up to this many nats per token, the same for the same text (a
    # fixed function of the token ids): the last-bits drift of another kernel or batch shape,
    # which an audit must not call a bug.
    logprob_noise: float = 0.0


class _Backend:
    """Tokenizer + (target, draft) behind one lock (torch runs one request at a time)."""

    def __init__(self, config: ServerConfig) -> None:
        from ..verification.base import VERIFIERS

        if not (isinstance(config.logprob_noise, (int, float)) and config.logprob_noise >= 0):
            raise ValueError(f"logprob_noise must be >= 0, got {config.logprob_noise!r}")
        if config.verifier not in VERIFIERS:
            raise ValueError(
                f"unknown verifier {config.verifier!r}; choose from {sorted(VERIFIERS)}"
            )
        self.config = config
        self.lock = threading.Lock()
        if config.model == "toy":
            from ..fixtures.toy import toy_pair

            if not 2 <= config.toy_vocab <= len(TOY_LETTERS):
                raise ValueError(f"toy_vocab must be in [2, {len(TOY_LETTERS)}]")
            self.target, self.draft = toy_pair(config.toy_vocab, 2, seed=config.toy_seed)
            self.letters = TOY_LETTERS[: config.toy_vocab]
            self.tokenizer = None
            self.eos: list[int] = []
            self.name = config.model_name or self.target.name
        else:
            from ..drafting.lookup import PromptLookupDrafter
            from ..models import load_model, load_tokenizer

            self.target = load_model(config.model, progress=False)
            self.tokenizer = load_tokenizer(config.model, progress=False)
            self.draft = PromptLookupDrafter(max_ngram=3)
            eos = self.tokenizer.eos_token_id
            self.eos = [] if eos is None else [int(eos)]
            self.name = config.model_name or config.model

    # -- text <-> ids ------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            bad = sorted(set(text) - set(self.letters))
            if bad or not text:
                raise ValueError(
                    f"toy prompts are non-empty strings over {self.letters!r}; got {bad or 'empty'}"
                )
            return [self.letters.index(c) for c in text]
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def piece(self, token: int) -> str:
        if self.tokenizer is None:
            return self.letters[token]
        return self.tokenizer.decode([token])

    # -- generation --------------------------------------------------------------------
    @torch.inference_mode()
    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        from ..core.runners import as_runner
        from ..decoding.serial import autoregressive_generate, speculative_generate

        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise ValueError("'prompt' must be a string")
        ids = self.encode(prompt)
        max_tokens = int(body.get("max_tokens", 16))
        if max_tokens < 1:
            raise ValueError("'max_tokens' must be >= 1")
        temperature = float(body.get("temperature", 1.0))
        seed = body.get("seed")
        seed = int(seed) if seed is not None else int.from_bytes(os.urandom(4), "little")
        top_k = body.get("top_k")
        top_k = int(top_k) if top_k not in (None, 0, -1) else None
        top_p = body.get("top_p")
        top_p = float(top_p) if top_p is not None and float(top_p) < 1.0 else None
        kw: dict[str, Any] = dict(
            max_new_tokens=max_tokens,
            do_sample=temperature > 0,
            temperature=temperature if temperature > 0 else 1.0,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            eos_token_id=self.eos or None,
        )
        with self.lock:
            if self.config.speculation:
                res = speculative_generate(
                    self.target,
                    self.draft,
                    ids,
                    gamma=self.config.gamma,
                    verifier=self.config.verifier,
                    trace=False,
                    **kw,
                )
            else:
                res = autoregressive_generate(self.target, ids, **kw)
            new = list(res.new_tokens)
            finish = "length"
            if new and new[-1] in self.eos:
                new, finish = new[:-1], "stop"
            logprobs = None
            n_top = body.get("logprobs")
            if n_top is not None and self.config.logprobs and new:
                # Teacher forcing: row i of the logits predicts new[i].
                runner = as_runner(self.target)
                logits = runner.extend(torch.tensor(ids + new[:-1]), len(new))  # [L, V]
                logp = torch.log_softmax(logits.float(), dim=-1)
                if self.config.logprob_noise:
                    text_key = zlib.crc32(json.dumps(ids + new).encode())
                    g = torch.Generator().manual_seed(text_key)
                    jitter = torch.rand(logp.shape, generator=g) * 2 - 1
                    logp = logp + self.config.logprob_noise * jitter
                k = max(1, min(int(n_top), logp.shape[-1]))
                top = torch.topk(logp, k, dim=-1)
                pieces = [self.piece(t) for t in new]
                offsets, pos = [], len(prompt)
                for p in pieces:
                    offsets.append(pos)
                    pos += len(p)
                logprobs = {
                    "tokens": pieces,
                    "token_logprobs": [float(logp[i, t]) for i, t in enumerate(new)],
                    "top_logprobs": [
                        {self.piece(int(t)): float(v) for t, v in zip(ti, vi, strict=True)}
                        for ti, vi in zip(top.indices.tolist(), top.values.tolist(), strict=True)
                    ],
                    "text_offset": offsets,
                }
        text = "".join(self.piece(t) for t in new)
        return {
            "id": f"cmpl-{uuid.uuid4().hex[:16]}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.name,
            "choices": [{"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": len(ids),
                "completion_tokens": len(new),
                "total_tokens": len(ids) + len(new),
            },
        }


def _handler(backend: _Backend) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the audit sends thousands of requests

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            pass

        def _json(self, code: int, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, code: int, message: str) -> None:
            self._json(code, {"error": {"message": message, "type": "invalid_request_error"}})

        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            if self.path.rstrip("/") == "/v1/models":
                self._json(
                    200,
                    {"object": "list", "data": [{"id": backend.name, "object": "model"}]},
                )
            else:
                self._error(404, f"no route {self.path}")

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.rstrip("/") != "/v1/completions":
                self._error(404, f"no route {self.path}")
                return
            try:
                body = json.loads(raw or b"{}")
                model = body.get("model")
                if model not in (None, backend.name):
                    self._error(404, f"model {model!r} not served (serving {backend.name!r})")
                    return
                out = backend.complete(body)
            except (ValueError, TypeError) as err:
                self._error(400, str(err))
                return
            if not body.get("stream"):
                self._json(200, out)
                return
            self._stream(out)

        def _stream(self, out: dict[str, Any]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            choice = out["choices"][0]
            head = {k: v for k, v in out.items() if k != "usage"}  # usage: last chunk only
            pieces = choice["logprobs"]["tokens"] if choice["logprobs"] else list(choice["text"])
            for piece in pieces:
                chunk = {**head, "choices": [{"text": piece, "index": 0, "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            last = {
                **out,
                "choices": [{"text": "", "index": 0, "finish_reason": choice["finish_reason"]}],
            }
            self.wfile.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
            self.wfile.flush()

    return Handler


def make_server(
    config: ServerConfig, host: str = "127.0.0.1", port: int = 0
) -> ThreadingHTTPServer:
    """Build (not start) the server; ``port=0`` picks a free port (``server.server_port``).

    >>> srv = make_server(ServerConfig(model="toy", verifier="always_accept"))
    >>> import threading; t = threading.Thread(target=srv.serve_forever, daemon=True); t.start()
    >>> srv.shutdown(); srv.server_close()
    """
    server = ThreadingHTTPServer((host, port), _handler(_Backend(config)))
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m specviz.audit.broken_server", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8001)
    ap.add_argument("--model", default="toy", help='"toy" or a built-in model name')
    ap.add_argument("--speculation", choices=["on", "off"], default="on")
    ap.add_argument("--verifier", default="lossless", help="lossless or a bug-zoo name")
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--toy-seed", type=int, default=0)
    ap.add_argument("--toy-vocab", type=int, default=5)
    ap.add_argument("--no-logprobs", action="store_true", help="imitate a server without logprobs")
    ap.add_argument("--model-name", default=None)
    ap.add_argument(
        "--logprob-noise",
        type=float,
        default=0.0,
        help="move reported logprobs by up to this many nats (imitates other numerics)",
    )
    args = ap.parse_args(argv)
    # The server runs torch in request threads; one intra-op thread avoids oversubscribing the
    # cores that the client (and, in tests, other servers) need too.
    torch.set_num_threads(1)
    config = ServerConfig(
        model=args.model,
        speculation=args.speculation == "on",
        verifier=args.verifier,
        gamma=args.gamma,
        logprobs=not args.no_logprobs,
        toy_seed=args.toy_seed,
        toy_vocab=args.toy_vocab,
        model_name=args.model_name,
        logprob_noise=args.logprob_noise,
    )
    server = make_server(config, args.host, args.port)
    print(f"serving {config} on http://{args.host}:{server.server_port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
