"""`make demo`: baseline vs speculative decoding on the default pair, prompt by prompt.

Prints, per prompt, the acceptance rate, mean accepted length (tokens per target call),
tokens/s of both runs, the speedup and whether greedy outputs are identical; saves every
trace under ``reports/traces/`` so notebooks can reload them.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..decoding.serial import autoregressive_generate, speculative_generate
from ..models import (
    BUILTIN_MODELS,
    ModelIntegrityError,
    ModelNotAvailableError,
    VocabMismatchError,
    load_pair,
    resolve_dtype,
)
from ..models import _looks_like_path as looks_like_path
from ..prompts import CATEGORIES, load_prompts, render_prompt

DEFAULT_TARGET = "qwen2.5-coder-1.5b"
DEFAULT_DRAFT = "qwen2.5-coder-0.5b"
DEFAULT_CATEGORIES = ("structured", "code", "extraction", "chat_writing")


@dataclass(frozen=True)
class DemoRow:
    prompt_id: str
    category: str
    new_tokens: int
    acceptance_rate: float
    mean_accepted_length: float
    baseline_tps: float
    speculative_tps: float
    identical: bool

    @property
    def speedup(self) -> float:
        return self.speculative_tps / self.baseline_tps


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=DEFAULT_TARGET, help="built-in name, folder or hub id")
    p.add_argument("--draft", default=DEFAULT_DRAFT, help="built-in name, folder or hub id")
    p.add_argument("--gamma", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument(
        "--categories", default=",".join(DEFAULT_CATEGORIES), help=f"from {', '.join(CATEGORIES)}"
    )
    p.add_argument("--per-category", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument(
        "--packed",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="pre-pack linear weights for oneDNN on CPU (ignored on other devices)",
    )
    p.add_argument("--out", default="reports/traces", help="where traces are saved")


def run(args: argparse.Namespace) -> list[DemoRow]:
    print(f"loading target {args.target} and draft {args.draft} ...", flush=True)
    t0 = time.perf_counter()
    packed = args.packed and torch.device(args.device).type == "cpu"
    # Nothing here reads the dense linear weights once they are packed: free them (peak memory
    # ~ one copy of each model, not two).
    target, draft, tok = load_pair(
        args.target, args.draft, dtype=args.dtype, device=args.device, packed=packed,
        keep_dense=not packed,
    )  # fmt: skip
    note = " (linear weights packed for oneDNN, in place of the dense ones)" if packed else ""
    print(f"loaded in {time.perf_counter() - t0:.1f} s{note}", flush=True)
    prompts = load_prompts(
        categories=[c.strip() for c in args.categories.split(",")], per_category=args.per_category
    )
    out = Path(args.out)
    rows: list[DemoRow] = []
    for p in tqdm(prompts, desc="prompts", unit="prompt"):
        ids = render_prompt(tok, p)
        kw = dict(max_new_tokens=args.max_new_tokens, eos_token_id=tok.eos_token_id)
        base = autoregressive_generate(target, ids, **kw)
        spec = speculative_generate(target, draft, ids, gamma=args.gamma, **kw)
        spec.trace.save(out / f"{p.id}.speculative.jsonl")
        base.trace.save(out / f"{p.id}.baseline.jsonl")
        s = spec.summary()
        rows.append(
            DemoRow(
                p.id,
                p.category,
                len(spec.new_tokens),
                s.acceptance_rate,
                s.mean_accepted_length,
                base.tokens_per_second,
                spec.tokens_per_second,
                base.new_tokens == spec.new_tokens,
            )
        )
        tqdm.write(_format(rows[-1]))
    return rows


def _format(r: DemoRow) -> str:
    return (
        f"{r.prompt_id:<22} {r.category:<14} tokens={r.new_tokens:<4d} "
        f"accept={r.acceptance_rate:5.1%} tokens/call={r.mean_accepted_length:4.2f} "
        f"baseline={r.baseline_tps:5.2f} tok/s speculative={r.speculative_tps:5.2f} tok/s "
        f"speedup={r.speedup:4.2f}x greedy-identical={'yes' if r.identical else 'NO'}"
    )


def check_arguments(args: argparse.Namespace) -> None:
    """Every setting, before any model loads (a ``ValueError`` naming the flag)."""
    if args.gamma < 1:
        raise ValueError(f"--gamma must be an integer >= 1, got {args.gamma}")
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be an integer >= 1, got {args.max_new_tokens}")
    if args.per_category < 1:
        raise ValueError(f"--per-category must be an integer >= 1, got {args.per_category}")
    cats = [c.strip() for c in args.categories.split(",") if c.strip()]
    unknown = [c for c in cats if c not in CATEGORIES]
    if not cats or unknown:
        raise ValueError(
            f"--categories: unknown {', '.join(map(repr, unknown)) or 'empty list'}; choose "
            f"from {', '.join(CATEGORIES)}"
        )
    try:
        resolve_dtype(args.dtype)
    except ValueError as err:
        raise ValueError(f"--dtype: {err}") from None
    try:
        device = torch.device(args.device)
    except (RuntimeError, ValueError):
        raise ValueError(
            f"--device: {args.device!r} is not a torch device (e.g. cpu, cuda:0)"
        ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {args.device}: CUDA is not available on this machine")
    out = Path(args.out).expanduser()
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {args.out}: a file is in the way (the traces need a folder)")
    for flag, name in (("--target", args.target), ("--draft", args.draft)):
        if (
            name not in BUILTIN_MODELS
            and looks_like_path(name)
            and not Path(name).expanduser().exists()
        ):
            raise ValueError(f"{flag}: no model folder or GGUF file at {name!r}")


def _fail(message: str) -> int:
    print(f"specviz demo: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Run ``specviz demo``; returns the exit status (0 done, 2 a usage error or a model
    that cannot be loaded, 130 interrupted)."""
    parser = argparse.ArgumentParser(prog="specviz demo", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)  # argparse's own errors exit 2
    try:
        check_arguments(args)
    except ValueError as err:
        return _fail(str(err))
    try:
        rows = run(args)
    except (
        ModelNotAvailableError,
        ModelIntegrityError,
        VocabMismatchError,
        FileNotFoundError,
    ) as err:
        return _fail(str(err).splitlines()[0])
    except OSError as err:  # the traces folder: not writable, a file in the way
        return _fail(f"{type(err).__name__}: {err}")
    except KeyboardInterrupt:
        print("specviz demo: interrupted", file=sys.stderr)
        return 130
    total_tokens = sum(r.new_tokens for r in rows)
    base_time = sum(r.new_tokens / r.baseline_tps for r in rows)
    spec_time = sum(r.new_tokens / r.speculative_tps for r in rows)
    print("\nsummary")
    for r in rows:
        print("  " + _format(r))
    print(
        f"  overall: {total_tokens} tokens, baseline {total_tokens / base_time:.2f} tok/s, "
        f"speculative {total_tokens / spec_time:.2f} tok/s, speedup {base_time / spec_time:.2f}x, "
        f"greedy identical on {sum(r.identical for r in rows)}/{len(rows)} prompts"
    )
    print(f"  traces saved under {Path(args.out).resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
