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
``seed``, ``logprobs``, ``stream``), ``POST /v1/chat/completions`` (the last user message is
the prompt, no template; ``logprobs=true`` + ``top_logprobs``; the chat response shapes) and
``GET /metrics``: Prometheus counters of its own speculation under the names of vLLM (default),
SGLang or llama.cpp (``--metrics vllm|sglang|llamacpp|none``), so that the audit's reading of
engine counters can be checked against a server whose true counts are known. ``logprobs`` are
the target's log-softmax of its raw logits (temperature 1, like llama.cpp), recomputed by
teacher forcing so both modes report the same quantity.

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
METRICS_STYLES = ("vllm", "sglang", "llamacpp", "none")


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
    metrics: str = "vllm"  # names of the /metrics counters: vllm, sglang, llamacpp or none
    # Report logprob 0.0 without alternatives for every token after the first, as llama-server
    # does for the tokens of its speculative path (it never computes their probabilities).
    unreported_logprobs: bool = False


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
        if config.metrics not in METRICS_STYLES:
            raise ValueError(f"metrics must be one of {METRICS_STYLES}, got {config.metrics!r}")
        self.config = config
        self.lock = threading.Lock()
        # true speculation counts (what /metrics publishes)
        self.counts = {"requests": 0, "tokens": 0, "drafts": 0, "draft_tokens": 0, "accepted": 0}
        self.per_pos: list[int] = [0] * config.gamma
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

        chat = "messages" in body
        if chat:
            msgs = body["messages"]
            users = [m for m in msgs if isinstance(m, dict) and m.get("role") == "user"]
            if not users or not isinstance(users[-1].get("content"), str):
                raise ValueError("'messages' needs a user message with string content")
            prompt = users[-1]["content"]
        else:
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
            drafted = [int(d) for d in res.drafted_counts]
            accepted = [int(a) for a in res.accepted_counts]
            self.counts["requests"] += 1
            self.counts["tokens"] += len(res.new_tokens)
            self.counts["drafts"] += sum(1 for d in drafted if d > 0)
            self.counts["draft_tokens"] += sum(drafted)
            self.counts["accepted"] += sum(accepted)
            for a in accepted:
                for i in range(min(a, len(self.per_pos))):
                    self.per_pos[i] += 1
            new = list(res.new_tokens)
            finish = "length"
            if new and new[-1] in self.eos:
                new, finish = new[:-1], "stop"
            logprobs = None
            n_top = body.get("logprobs")
            if chat:
                n_top = body.get("top_logprobs", 1) if body.get("logprobs") else None
            if isinstance(n_top, bool):
                n_top = int(n_top)
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
                if self.config.unreported_logprobs:
                    for i in range(1, len(new)):
                        logprobs["token_logprobs"][i] = 0.0
                        logprobs["top_logprobs"][i] = {}
        text = "".join(self.piece(t) for t in new)
        usage = {
            "prompt_tokens": len(ids),
            "completion_tokens": len(new),
            "total_tokens": len(ids) + len(new),
        }
        out: dict[str, Any]
        if chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
            }
            if logprobs is not None:  # the chat shape
                choice["logprobs"] = {
                    "content": [
                        {
                            "token": tok,
                            "logprob": lp,
                            "top_logprobs": [{"token": k, "logprob": v} for k, v in top.items()],
                        }
                        for tok, lp, top in zip(
                            logprobs["tokens"],
                            logprobs["token_logprobs"],
                            logprobs["top_logprobs"],
                            strict=True,
                        )
                    ]
                }
            out = {
                "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.name,
                "choices": [choice],
                "usage": usage,
            }
        else:
            out = {
                "id": f"cmpl-{uuid.uuid4().hex[:16]}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": self.name,
                "choices": [
                    {"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish}
                ],
                "usage": usage,
            }
        if self.config.metrics == "llamacpp" and sum(drafted):
            out["timings"] = {"draft_n": sum(drafted), "draft_n_accepted": sum(accepted)}
        return out

    def metrics_text(self) -> str | None:
        """The Prometheus exposition of the counters so far, in the configured engine's names
        (None: no /metrics)."""
        from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

        style = self.config.metrics
        if style == "none":
            return None
        reg = CollectorRegistry()
        with self.lock:
            c, per = dict(self.counts), list(self.per_pos)
        spec = self.config.speculation
        if style == "vllm":
            labels = {"model_name": self.name, "engine": "0"}
            Counter("vllm:generation_tokens", "Number of generation tokens processed.",
                    list(labels), registry=reg).labels(**labels).inc(c["tokens"])  # fmt: skip
            if spec:
                for key, name in (
                    ("drafts", "vllm:spec_decode_num_drafts"),
                    ("draft_tokens", "vllm:spec_decode_num_draft_tokens"),
                    ("accepted", "vllm:spec_decode_num_accepted_tokens"),
                ):
                    Counter(name, f"Number of spec decoding {key}.", list(labels),
                            registry=reg).labels(**labels).inc(c[key])  # fmt: skip
                pos = Counter(
                    "vllm:spec_decode_num_accepted_tokens_per_pos",
                    "Accepted tokens per draft position.",
                    [*labels, "position"],
                    registry=reg,
                )
                for i, v in enumerate(per):
                    pos.labels(**labels, position=str(i)).inc(v)
        elif style == "sglang":
            labels = {"model_name": self.name}
            Counter("sglang:generation_tokens", "Number of generation tokens processed.",
                    list(labels), registry=reg).labels(**labels).inc(c["tokens"])  # fmt: skip
            Counter("sglang:num_requests", "The number of processed requests.",
                    list(labels), registry=reg).labels(**labels).inc(c["requests"])  # fmt: skip
            if spec:
                # running averages since boot, as SGLang publishes them
                steps = c["tokens"] - c["accepted"]  # one target token per verification step
                length = c["tokens"] / steps if steps else 0.0
                rate = c["accepted"] / c["draft_tokens"] if c["draft_tokens"] else 0.0
                Gauge("sglang:spec_accept_length", "The average acceptance length of "
                      "speculative decoding.", list(labels), registry=reg
                      ).labels(**labels).set(length)  # fmt: skip
                Gauge("sglang:spec_accept_rate", "The average acceptance rate of speculative "
                      "decoding.", list(labels), registry=reg).labels(**labels).set(rate)  # fmt: skip
        else:  # llamacpp
            lines = []
            for key, name in (
                ("tokens", "tokens_predicted_total"),
                ("draft_tokens", "spec_decode_num_draft_tokens_total"),
                ("accepted", "spec_decode_num_accepted_tokens_total"),
                ("drafts", "spec_decode_num_drafts_total"),
            ):
                lines += [
                    f"# HELP llamacpp:{name} {key}",
                    f"# TYPE llamacpp:{name} counter",
                    f"llamacpp:{name} {c[key]}",
                ]
            if spec:
                name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
                lines += [f"# HELP {name} Accepted tokens per draft position"]
                lines += [f"# TYPE {name} counter"]
                lines += [f'{name}{{position="{i}"}} {v}' for i, v in enumerate(per)]
            return "\n".join(lines) + "\n"
        return generate_latest(reg).decode()


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
            path = self.path.rstrip("/")
            text = backend.metrics_text() if path == "/metrics" else None
            if path == "/v1/models":
                self._json(
                    200,
                    {"object": "list", "data": [{"id": backend.name, "object": "model"}]},
                )
            elif text is not None:
                data = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self._error(404, f"no route {self.path}")

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.rstrip("/") not in ("/v1/completions", "/v1/chat/completions"):
                self._error(404, f"no route {self.path}")
                return
            try:
                body = json.loads(raw or b"{}")
                if ("messages" in body) != self.path.rstrip("/").endswith("/chat/completions"):
                    self._error(
                        400,
                        "'messages' belong on /v1/chat/completions, 'prompt' on /v1/completions",
                    )
                    return
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
            head = {k: v for k, v in out.items() if k not in ("usage", "timings")}  # last chunk
            chat = "message" in choice
            if chat:
                lp = choice.get("logprobs")
                text = choice["message"]["content"]
                pieces = [t["token"] for t in lp["content"]] if lp else list(text)
            else:
                pieces = (
                    choice["logprobs"]["tokens"] if choice["logprobs"] else list(choice["text"])
                )
            for piece in pieces:
                body = {"delta": {"content": piece}} if chat else {"text": piece}
                chunk = {**head, "choices": [{**body, "index": 0, "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            end = {"delta": {}} if chat else {"text": ""}
            last = {
                **out,
                "choices": [{**end, "index": 0, "finish_reason": choice["finish_reason"]}],
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
    backend = _Backend(config)
    server = ThreadingHTTPServer((host, port), _handler(backend))
    server.daemon_threads = True
    server.backend = backend  # type: ignore[attr-defined]  # its true counts, for tests
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
    ap.add_argument(
        "--unreported-logprobs",
        action="store_true",
        help="logprob 0.0 without alternatives after the first token (as llama-server's "
        "speculative path)",
    )
    ap.add_argument(
        "--metrics",
        choices=METRICS_STYLES,
        default="vllm",
        help="publish speculation counters at /metrics under these engine names",
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
        metrics=args.metrics,
        unreported_logprobs=args.unreported_logprobs,
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
