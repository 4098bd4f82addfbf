"""``specviz audit``: the command-line face of :func:`specviz.audit.audit`.

Example (llama.cpp without / with prompt lookup on two ports)::

    specviz audit --a http://127.0.0.1:8080 --b http://127.0.0.1:8081 \\
        --prompt "Once upon a time" --n-samples 300 --max-tokens 4 --out audit-out

In-process engines (OpenVINO GenAI, onnxruntime-genai, transformers) take a spec instead of a
URL, and ``--identity-probe`` runs the target as its own draft::

    specviz audit --a openvino:smollm2-135m --b openvino:smollm2-135m,draft=smollm2-135m@8 ...
    specviz audit --identity-probe --a openvino:qwen2.5-coder-0.5b ...

Exit status (so CI can gate on it):

* 0 -- consistent: no test rejected, and a first-token TV of ``--tv-threshold`` would have
  been seen with 90% probability;
* 1 -- inconsistent (speculation changes the output law);
* 3 -- inconclusive: no test rejected, but these samples could only see a larger TV (raise
  ``--n-samples``); not evidence that B keeps A's law;
* 2 -- the audit could not run: a usage error (bad option or number, a missing, unreadable or
  empty prompts file; one line on stderr, no traceback), a connection or server error
  (unreachable, TLS, timeout, mismatched models, no logprobs: the message names the endpoint
  and the problem), or an internal error (with its traceback).

An interrupted audit (Ctrl-C) exits 130; rerunning the same command resumes it.

``--sequential`` (:mod:`specviz.audit.sequential`) samples ``--batch`` completions per prompt
and arm at a time and stops at the first of: inconsistent (exit 1), equivalent within
``--tv-tolerance`` (exit 0), the cap ``--n-samples`` (default 1.5x the fixed-n design for the
tolerance; inconclusive, exit 3). It runs no greedy report and no load sweep. It works with
two HTTP servers and with in-process engines (each arm's engine loaded per batch and freed,
or both kept loaded with ``--keep-loaded``); with engines, ``--identity-probe`` checks B's
acceptance after every batch (a rejected draft equal to the target: inconsistent). With HTTP
servers the identity probe stays refused: its acceptance check runs at temperature 0, in the
greedy phase a sequential audit does not run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import traceback
from pathlib import Path

__all__ = ["main"]


def _levels(text: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    return out


def _temperatures(text: str) -> float | tuple[float, ...]:
    try:
        out = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number or comma-separated numbers, got {text!r}"
        ) from None
    if not out:
        raise argparse.ArgumentTypeError("expected at least one temperature")
    return out[0] if len(out) == 1 else out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="specviz audit",
        description="Does an OpenAI-compatible server's speculative decoding keep the output "
        "distribution, and at which load does it pay? A = speculation off, B = on.",
    )
    ap.add_argument(
        "--a",
        required=True,
        help="the reference (speculation off): a base URL, or an in-process engine spec "
        "ENGINE:MODEL[,key=value...] (ENGINE: transformers, openvino, onnxruntime, specviz), "
        "e.g. openvino:smollm2-135m",
    )
    ap.add_argument(
        "--b",
        default=None,
        help="speculation on: a base URL or an engine spec, e.g. "
        "openvino:smollm2-135m,draft=smollm2-135m@8 (with --identity-probe and an engine "
        "--a: derived from it)",
    )
    ap.add_argument(
        "--identity-probe",
        action="store_true",
        help="B runs the target as its own draft (llama-server -md equal to -m; for an engine "
        "--a, B is built that way): a lossless engine accepts every drafted token (acceptance "
        "exactly 1) and keeps the law; a lower acceptance is 'inconsistent' (exit 1)",
    )
    ap.add_argument("--model-a", default=None, help="model id to request from A")
    ap.add_argument("--model-b", default=None, help="model id to request from B")
    ap.add_argument("--prompt", action="append", default=[], help="a prompt (repeatable)")
    ap.add_argument("--prompts-file", type=Path, help="one prompt per line, or JSONL with 'prompt'")
    ap.add_argument(
        "--n-samples",
        type=int,
        default=None,
        help="completions per prompt and arm (default 200); with --sequential the cap "
        "(default 1.5x the fixed-n design for --tv-tolerance)",
    )
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=None)
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument(
        "--extra",
        default="{}",
        help='JSON merged into every request body, e.g. \'{"min_p": 0, "repeat_penalty": 1}\'',
    )
    ap.add_argument(
        "--outcome",
        choices=["tokens", "text"],
        default="tokens",
        help="tokens: server-reported tokens (needs logprobs); text: client-side pieces",
    )
    ap.add_argument(
        "--api",
        choices=["completions", "chat"],
        default="completions",
        help="completions: /v1/completions (prompt as text); chat: /v1/chat/completions "
        "(prompt as one user message, the server's chat template)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument(
        "--tv-threshold",
        type=float,
        default=0.1,
        help="first-token TV the audit must be able to see; with less power a run where no "
        "test rejected is 'inconclusive' (exit 3), not 'consistent'",
    )
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--retries", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    ap.add_argument("--no-greedy", action="store_true", help="skip the greedy identity report")
    ap.add_argument("--greedy-max-tokens", type=int, default=32)
    ap.add_argument("--near-tie", type=float, default=0.05, help="logit margin called numerics")
    ap.add_argument("--load-levels", type=_levels, default=(1, 2, 4), help="e.g. 1,2,4,8; '' skips")
    ap.add_argument("--load-requests", type=int, default=8, help="requests per level")
    ap.add_argument("--load-max-tokens", type=int, default=64)
    ap.add_argument(
        "--load-temperature",
        type=_temperatures,
        default=0.0,
        help="temperature of the load sweep; several (e.g. 0,0.7) run one sweep each",
    )
    ap.add_argument("--out", type=Path, default=Path("specviz-audit"), help="output folder")
    ap.add_argument("--metrics-a", default=None, help="A's Prometheus URL (default: /metrics)")
    ap.add_argument("--metrics-b", default=None, help="B's Prometheus URL (default: /metrics)")
    ap.add_argument("--api-key", default=None)
    tls = ap.add_mutually_exclusive_group()
    tls.add_argument("--ca-bundle", default=None, help="CA file to verify https servers")
    tls.add_argument("--insecure", action="store_true", help="do not verify TLS certificates")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    seq = ap.add_argument_group("sequential (stop when decided)")
    seq.add_argument("--sequential", action="store_true", help="stop at reject / equivalent / cap")
    seq.add_argument("--tv-tolerance", type=float, default=0.05, help="'equivalent within' TV")
    seq.add_argument("--batch", type=int, default=50, help="completions per check and arm")
    seq.add_argument(
        "--keep-loaded",
        action="store_true",
        help="in-process engines: keep both arms' engines loaded between batches (saves a "
        "model load per arm and batch; needs memory for both)",
    )
    return ap


class _UsageError(Exception):
    """A problem with the command line or its files: one line on stderr, exit 2."""


def _read_prompts(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _UsageError(f"--prompts-file {path}: no such file") from None
    except IsADirectoryError:
        raise _UsageError(f"--prompts-file {path}: is a directory, not a file") from None
    except UnicodeDecodeError as err:
        raise _UsageError(f"--prompts-file {path}: not UTF-8 text ({err.reason})") from None
    except OSError as err:
        raise _UsageError(f"--prompts-file {path}: cannot read it: {err.strerror or err}") from None
    out = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as err:
                raise _UsageError(
                    f"--prompts-file {path}:{i}: a line starting with '{{' must be a JSON "
                    f"object with a 'prompt' string ({err.msg})"
                ) from None
            prompt = rec.get("prompt") if isinstance(rec, dict) else None
            if not isinstance(prompt, str) or not prompt:
                raise _UsageError(
                    f"--prompts-file {path}:{i}: the JSON object has no non-empty 'prompt' string"
                )
            out.append(prompt)
        else:
            out.append(line)
    if not out:
        raise _UsageError(f"--prompts-file {path}: the file has no prompts")
    return out


def _flag_message(message: str) -> str:
    """AuditConfig's messages start with the field's name; say the option instead."""
    m = re.match(r"[a-z_]+", message)
    if m:
        flag = "--prompt" if m.group() == "prompts" else "--" + m.group().replace("_", "-")
        if flag in build_parser()._option_string_actions:
            return flag + message[m.end() :]
    return message


def _fail(message: str) -> int:
    print(f"specviz audit: {message}", file=sys.stderr)
    return 2


def _settings(args: argparse.Namespace) -> tuple[list[str], dict]:
    """Prompts and the request body extras from the command line (or a _UsageError)."""
    prompts = list(args.prompt)
    if args.prompts_file is not None:
        prompts += _read_prompts(args.prompts_file)
    if not prompts:
        raise _UsageError("give at least one --prompt or --prompts-file")
    try:
        extra = json.loads(args.extra)
    except ValueError:
        extra = None
    if not isinstance(extra, dict):
        raise _UsageError(f"--extra must be a JSON object, got {args.extra!r}")
    from .engines import identity_spec, is_engine_spec

    engines = [is_engine_spec(x) for x in (args.a, args.b) if x is not None]
    if args.b is None:
        if not (args.identity_probe and engines and engines[0]):
            raise _UsageError("give --b (or --identity-probe with an engine spec as --a)")
        args.b = identity_spec(args.a)
        engines.append(True)
    if args.sequential and args.identity_probe and not all(engines):
        raise _UsageError(
            "--identity-probe with --sequential needs in-process engine specs: with http(s) "
            "servers the probe's acceptance check runs at temperature 0 (the greedy phase), "
            "which a sequential audit does not run; drop --sequential for the HTTP probe"
        )
    if args.keep_loaded and not (args.sequential and all(engines)):
        raise _UsageError("--keep-loaded is for --sequential with in-process engine specs")
    if any(engines) and not all(engines):
        raise _UsageError(
            "--a and --b must both be URLs or both be in-process engine specs (ENGINE:MODEL,...)"
        )
    for flag, url in (
        ("--a", None if engines[0] else args.a),
        ("--b", None if engines[0] else args.b),
        ("--metrics-a", args.metrics_a),
        ("--metrics-b", args.metrics_b),
    ):
        if url is not None and not url.startswith(("http://", "https://")):
            raise _UsageError(
                f"{flag} must be an http:// or https:// URL or an engine spec "
                f"(ENGINE:MODEL[,key=value...]), got {url!r}"
            )
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise _UsageError(f"--timeout must be a finite number of seconds > 0, got {args.timeout}")
    if args.ca_bundle is not None and not Path(args.ca_bundle).is_file():
        raise _UsageError(f"--ca-bundle {args.ca_bundle}: no such file")
    return prompts, extra


def main(argv: list[str] | None = None) -> int:
    """Run ``specviz audit``; returns the exit status (0 consistent, 1 inconsistent, 2 the
    audit could not run: a usage, connection or server error, or an internal error)."""
    from .client import AuditError, Endpoint
    from .config import AuditConfig
    from .run import run_audit

    args = build_parser().parse_args(argv)  # argparse's own errors exit 2
    try:
        prompts, extra = _settings(args)
    except _UsageError as err:
        return _fail(str(err))
    try:
        cfg = AuditConfig(
            prompts=tuple(prompts),
            n_samples=args.n_samples or (max(2, args.batch) if args.sequential else 200),
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            seed=args.seed,
            outcome=args.outcome,
            api=args.api,
            alpha=args.alpha,
            tv_threshold=args.tv_threshold,
            concurrency=args.concurrency,
            retries=args.retries,
            greedy=not args.no_greedy,
            greedy_max_tokens=args.greedy_max_tokens,
            near_tie=args.near_tie,
            load_levels=args.load_levels,
            load_requests=args.load_requests,
            load_max_tokens=args.load_max_tokens,
            load_temperature=args.load_temperature,
        )
        if args.sequential:
            from .. import stats

            stats.check_sequential_settings(
                alpha=args.alpha,
                tv_tolerance=args.tv_tolerance,
                cap=args.n_samples,
                batch=args.batch,
            )
    except (TypeError, ValueError) as err:
        return _fail(_flag_message(str(err)))
    verify: bool | str = False if args.insecure else (args.ca_bundle or True)
    common = dict(api_key=args.api_key, verify=verify, timeout=args.timeout, extra=extra)
    from .engines import engine_from_spec, is_engine_spec

    if is_engine_spec(args.a):
        try:
            ea, eb = engine_from_spec(args.a, "A"), engine_from_spec(args.b, "B")
        except ValueError as err:
            return _fail(str(err))
        return _run_engines(ea, eb, cfg, args)
    a = Endpoint(args.a, model=args.model_a, label="A", metrics_url=args.metrics_a, **common)
    b = Endpoint(args.b, model=args.model_b, label="B", metrics_url=args.metrics_b, **common)
    try:
        if args.sequential:
            from .sequential import run_sequential_audit

            report = asyncio.run(
                run_sequential_audit(
                    a,
                    b,
                    cfg,
                    tv_tolerance=args.tv_tolerance,
                    batch=args.batch,
                    cap=args.n_samples,
                    out_dir=args.out,
                    progress=not args.quiet,
                )
            )
        else:
            report = asyncio.run(
                run_audit(
                    a,
                    b,
                    cfg,
                    out_dir=args.out,
                    progress=not args.quiet,
                    identity_probe=args.identity_probe,
                )
            )
    except AuditError as err:
        # connection, TLS, timeout, HTTP, model mismatch, no logprobs, a foreign raw file
        return _fail(str(err))
    except OSError as err:
        # the output folder: not writable, a file in the way, disk full
        if err.filename is None:
            return _fail(f"{type(err).__name__}: {err}")
        return _fail(f"cannot write the results to {args.out}: {err.filename}: {err.strerror}")
    except KeyboardInterrupt:
        print(
            f"specviz audit: interrupted; complete results are saved in {args.out / 'raw.jsonl'}"
            " (rerun the same command to resume)",
            file=sys.stderr,
        )
        return 130
    except Exception:
        # A bug, not a verdict: show the traceback, and never exit 0 or 1.
        traceback.print_exc()
        return _fail("internal error (the traceback above; please report it)")
    print(report.summary())
    print(f"report: {args.out / 'report.html'}  raw results: {args.out / 'raw.jsonl'}")
    codes = {"consistent": 0, "equivalent": 0, "inconsistent": 1}
    return codes.get(report.outcome.split()[0], 3)


def _run_engines(ea, eb, cfg, args: argparse.Namespace) -> int:
    """In-process engines: the same report, raw file, resume and exit statuses."""
    from dataclasses import replace

    from .client import AuditError
    from .inprocess import run_engine_audit
    from .sequential import identity_refusal, run_sequential_engine_audit

    if args.sequential and args.identity_probe and (why := identity_refusal(eb)):
        return _fail(why)
    try:
        if args.sequential:
            report = run_sequential_engine_audit(
                ea,
                eb,
                replace(cfg, load_levels=(), greedy=False),
                tv_tolerance=args.tv_tolerance,
                batch=args.batch,
                cap=args.n_samples,
                out_dir=args.out,
                progress=not args.quiet,
                identity=args.identity_probe,
                keep_loaded=args.keep_loaded,
            )
        else:
            report = run_engine_audit(
                ea,
                eb,
                replace(cfg, load_levels=()),
                out_dir=args.out,
                progress=not args.quiet,
                identity=args.identity_probe,
            )
    except AuditError as err:  # EngineError: not installed, does not convert, crashes
        return _fail(str(err))
    except OSError as err:
        if err.filename is None:
            return _fail(f"{type(err).__name__}: {err}")
        return _fail(f"cannot write the results to {args.out}: {err.filename}: {err.strerror}")
    except KeyboardInterrupt:
        print(
            f"specviz audit: interrupted; complete results are saved in {args.out / 'raw.jsonl'}"
            " (rerun the same command to resume)",
            file=sys.stderr,
        )
        return 130
    except Exception:
        traceback.print_exc()
        return _fail("internal error (the traceback above; please report it)")
    print(report.summary())
    print(f"report: {args.out / 'report.html'}  raw results: {args.out / 'raw.jsonl'}")
    codes = {"consistent": 0, "equivalent": 0, "inconsistent": 1}
    return codes.get(report.outcome.split()[0], 3)


if __name__ == "__main__":
    sys.exit(main())
