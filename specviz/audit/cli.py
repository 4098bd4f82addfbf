"""``specviz audit``: the command-line face of :func:`specviz.audit.audit`.

Example (llama.cpp without / with prompt lookup on two ports)::

    specviz audit --a http://127.0.0.1:8080 --b http://127.0.0.1:8081 \\
        --prompt "Once upon a time" --n-samples 300 --max-tokens 4 --out audit-out

Exit status: 0 consistent, 1 inconsistent (so CI can gate on it), 2 the audit could not run
(the message names the endpoint and the problem).
"""

from __future__ import annotations

import argparse
import json
import sys
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


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="specviz audit",
        description="Does an OpenAI-compatible server's speculative decoding keep the output "
        "distribution, and at which load does it pay? A = speculation off, B = on.",
    )
    ap.add_argument("--a", required=True, help="base URL of the reference (speculation off)")
    ap.add_argument("--b", required=True, help="base URL with speculation on")
    ap.add_argument("--model-a", default=None, help="model id to request from A")
    ap.add_argument("--model-b", default=None, help="model id to request from B")
    ap.add_argument("--prompt", action="append", default=[], help="a prompt (repeatable)")
    ap.add_argument("--prompts-file", type=Path, help="one prompt per line, or JSONL with 'prompt'")
    ap.add_argument("--n-samples", type=int, default=200, help="completions per prompt and arm")
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
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--retries", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    ap.add_argument("--no-greedy", action="store_true", help="skip the greedy identity report")
    ap.add_argument("--greedy-max-tokens", type=int, default=32)
    ap.add_argument("--near-tie", type=float, default=0.05, help="logit margin called numerics")
    ap.add_argument("--load-levels", type=_levels, default=(1, 2, 4), help="e.g. 1,2,4,8; '' skips")
    ap.add_argument("--load-requests", type=int, default=8, help="requests per level")
    ap.add_argument("--load-max-tokens", type=int, default=64)
    ap.add_argument("--load-temperature", type=float, default=0.0)
    ap.add_argument("--out", type=Path, default=Path("specviz-audit"), help="output folder")
    ap.add_argument("--api-key", default=None)
    tls = ap.add_mutually_exclusive_group()
    tls.add_argument("--ca-bundle", default=None, help="CA file to verify https servers")
    tls.add_argument("--insecure", action="store_true", help="do not verify TLS certificates")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    return ap


def _read_prompts(path: Path) -> list[str]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            out.append(json.loads(line)["prompt"])
        else:
            out.append(line)
    return out


def main(argv: list[str] | None = None) -> int:
    from ..audit import AuditError
    from .client import Endpoint
    from .run import audit

    args = build_parser().parse_args(argv)
    prompts = list(args.prompt)
    if args.prompts_file:
        prompts += _read_prompts(args.prompts_file)
    if not prompts:
        print("specviz audit: give at least one --prompt or --prompts-file", file=sys.stderr)
        return 2
    try:
        extra = json.loads(args.extra)
        if not isinstance(extra, dict):
            raise ValueError
    except ValueError:
        print(f"specviz audit: --extra must be a JSON object, got {args.extra!r}", file=sys.stderr)
        return 2
    verify: bool | str = False if args.insecure else (args.ca_bundle or True)
    common = dict(api_key=args.api_key, verify=verify, timeout=args.timeout, extra=extra)
    a = Endpoint(args.a, model=args.model_a, label="A", **common)
    b = Endpoint(args.b, model=args.model_b, label="B", **common)
    try:
        report = audit(
            a,
            b,
            prompts,
            out_dir=args.out,
            progress=not args.quiet,
            n_samples=args.n_samples,
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            seed=args.seed,
            outcome=args.outcome,
            alpha=args.alpha,
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
    except (AuditError, ValueError) as err:
        print(f"specviz audit: {err}", file=sys.stderr)
        return 2
    print(report.summary())
    print(f"report: {args.out / 'report.html'}  raw results: {args.out / 'raw.jsonl'}")
    return 0 if report.verdict == "consistent" else 1
