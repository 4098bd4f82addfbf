"""`make demo`: baseline vs speculative decoding on the default pair, prompt by prompt -- and
whether it pays on this host, predicted before it is measured.

Before the per-prompt runs the demo prints the kernels chosen for each model
(:func:`specviz.use_fastest_kernels`), measures what a drafted token costs (c) and what a verify
pass costs (v(n)) on this host, and says whether speculation can pay here at all (if not, why,
in numbers -- and it switches to the pair that pays on CPUs, SmolLM2-135M with its trained
EAGLE-style head). For each prompt it decodes plainly, reads the draft's exact acceptance of
that text (one forward pass of the draft model), picks the gamma the measured costs favour
(0: decode plainly) and prints the predicted speedup next to the measured one, the acceptance
rate, tokens per target call and whether the greedy outputs are identical. Every trace is
saved under ``reports/traces/`` so notebooks can reload it.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from ..core.kernels import kernel_report
from ..decoding.serial import autoregressive_generate, speculative_generate
from ..models import (
    BUILTIN_MODELS,
    ModelIntegrityError,
    ModelNotAvailableError,
    VocabMismatchError,
    resolve_dtype,
)
from ..models import _looks_like_path as looks_like_path
from ..prompts import CATEGORIES, load_prompts, render_prompt
from .payoff import Calibration, GammaChoice, acceptance_record, calibrate, choose_gamma
from .policy_lab import ReplayCost, record_from_trace, replay

DEFAULT_TARGET = "qwen2.5-coder-1.5b"
DEFAULT_DRAFT = "qwen2.5-coder-0.5b"
DEFAULT_CATEGORIES = ("structured", "code", "extraction", "chat_writing")
#: The pair that pays on CPUs (1.45x at batch 1): offered when the default pair cannot pay.
FALLBACK = ("smollm2-135m", "eagle_head")
MAX_GAMMA = 8


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
    gamma: int = 4
    predicted_speedup: float = float("nan")

    @property
    def speedup(self) -> float:
        return self.speculative_tps / self.baseline_tps


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=DEFAULT_TARGET, help="built-in name, folder or hub id")
    p.add_argument(
        "--draft",
        default=DEFAULT_DRAFT,
        help="a model (built-in name, folder, hub id), or prompt_lookup, eagle_head, "
        "eagle_head+lookup, early_exit:L",
    )
    p.add_argument(
        "--gamma", type=int, default=None, help="drafts per target call (default: chosen per "
        "prompt from the measured costs and acceptance; 0 = plain decoding)",
    )  # fmt: skip
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument(
        "--categories", default=",".join(DEFAULT_CATEGORIES), help=f"from {', '.join(CATEGORIES)}"
    )
    p.add_argument("--per-category", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument(
        "--kernels",
        choices=("fastest", "packed", "stock"),
        default=None,
        help="CPU linear kernels: measured per host (default), oneDNN packed, or stock",
    )
    p.add_argument(
        "--packed", action=argparse.BooleanOptionalAction, default=None,
        help="same as --kernels packed / --kernels stock",
    )  # fmt: skip
    p.add_argument(
        "--fallback", action=argparse.BooleanOptionalAction, default=True,
        help=f"when the pair cannot pay on this host, run {' + '.join(FALLBACK)} instead",
    )  # fmt: skip
    p.add_argument("--out", default="reports/traces", help="where traces are saved")


@dataclass
class _Pair:
    target: Any
    drafter: Any
    tokenizer: Any
    label: str


def _packed(args: argparse.Namespace) -> bool | None:
    kernels = args.kernels or {True: "packed", False: "stock", None: "fastest"}[args.packed]
    return {"fastest": None, "packed": True, "stock": False}[kernels]


def _load(target: str, draft: str, args: argparse.Namespace) -> _Pair:
    from .experiments import load_models

    print(f"loading target {target} and draft {draft} ...", flush=True)
    t0 = time.perf_counter()
    cpu = torch.device(args.device).type == "cpu"
    packed = _packed(args) if cpu else False
    # Nothing here reads dense linear weights once packed: packed weights replace them (peak
    # memory ~ one copy of each model), and the kernel choice keeps one kernel per model.
    m = load_models(target, draft, dtype=args.dtype, device=args.device, packed=packed,
                    keep_dense=packed is False, progress=True)  # fmt: skip
    print(f"loaded {m.label} in {time.perf_counter() - t0:.1f} s", flush=True)
    for model in {id(x): x for x in (m.target, getattr(m.draft, "model", m.draft))}.values():
        report = kernel_report(model) if isinstance(model, torch.nn.Module) else None
        if report is not None:
            print(report.summary(), flush=True)
    return _Pair(m.target, m.draft, m.tokenizer, m.label)


def _pilot(tok: Any) -> list[int]:
    """A held-out prompt (not among the demo's) for calibrating drafters without a model."""
    p = load_prompts(categories="summarization", per_category=1)[0]
    return render_prompt(tok, p)


def _calibrate(pair: _Pair, args: argparse.Namespace) -> Calibration:
    print("measuring what speculation costs on this host (c, v(n)) ...", flush=True)
    cal = calibrate(pair.target, pair.drafter, max_gamma=MAX_GAMMA, pilot=_pilot(pair.tokenizer),
                    eos_token_id=pair.tokenizer.eos_token_id)  # fmt: skip
    vs = ", ".join(f"v({n})={cal.v(n):.2f}" for n in (2, 3, 5, 7, 9))
    print(f"  target step {cal.target_step * 1e3:.0f} ms, c={cal.c:.2f} ({cal.source}), {vs} "
          f"[{cal.seconds:.0f} s]", flush=True)  # fmt: skip
    print("  " + cal.explain(gamma=args.gamma or 4, max_gamma=MAX_GAMMA), flush=True)
    return cal


def _predicted(choice: GammaChoice | None, spec: Any, cal: Calibration) -> float:
    """The speedup predicted for the run: from the exact record before it (model drafters),
    else from the run's own measured acceptance replayed with the measured costs."""
    if choice is not None:
        return choice.speedup
    rec = record_from_trace(spec.trace)
    gamma = spec.trace.meta.get("gamma", 4)
    return replay(gamma, rec, ReplayCost(cal.draft_step, cal.verify, cal.target_step)).speedup


def _one_prompt(pair: _Pair, p: Any, cal: Calibration, args: argparse.Namespace) -> DemoRow:
    ids = render_prompt(pair.tokenizer, p)
    kw = dict(max_new_tokens=args.max_new_tokens, eos_token_id=pair.tokenizer.eos_token_id)
    base = autoregressive_generate(pair.target, ids, **kw)
    record = acceptance_record(pair.drafter, ids, base.new_tokens)
    choice = choose_gamma(record, cal, max_gamma=MAX_GAMMA) if record is not None else None
    gamma = args.gamma if args.gamma is not None else (choice.gamma if choice else 4)
    if choice is not None and gamma not in (0, choice.gamma):  # a forced gamma: predict it
        choice = _at_gamma(record, cal, gamma)
    out = Path(args.out)
    base.trace.save(out / f"{p.id}.baseline.jsonl")
    if gamma == 0:  # speculation predicted to lose: decode plainly, measured speedup 1
        return DemoRow(p.id, p.category, len(base.new_tokens), choice.acceptance if choice
                       else float("nan"), 1.0, base.tokens_per_second, base.tokens_per_second,
                       True, 0, 1.0)  # fmt: skip
    spec = speculative_generate(pair.target, pair.drafter, ids, gamma=gamma, **kw)
    spec.trace.save(out / f"{p.id}.speculative.jsonl")
    s = spec.summary()
    return DemoRow(
        p.id, p.category, len(spec.new_tokens), s.acceptance_rate, s.mean_accepted_length,
        base.tokens_per_second, spec.tokens_per_second, base.new_tokens == spec.new_tokens,
        gamma, _predicted(choice, spec, cal),
    )  # fmt: skip


def _at_gamma(record: Any, cal: Calibration, gamma: int) -> GammaChoice:
    r = replay(gamma, record, ReplayCost(cal.draft_step, cal.verify, cal.target_step))
    acc = sum(record.accept) / max(len(record.accept), 1)
    return GammaChoice(gamma, r.speedup, r.tokens_per_call, {gamma: r.speedup}, acc)


def run(args: argparse.Namespace) -> list[DemoRow]:
    pair = _load(args.target, args.draft, args)
    cal = _calibrate(pair, args)
    if not cal.can_pay(MAX_GAMMA) and args.fallback and (args.target, args.draft) != FALLBACK:
        print(f"\n  -> switching to the pair that pays on CPUs: {' + '.join(FALLBACK)} "
              "(--no-fallback keeps this pair)\n", flush=True)  # fmt: skip
        del pair
        gc.collect()
        pair = _load(*FALLBACK, args)
        cal = _calibrate(pair, args)
    prompts = load_prompts(
        categories=[c.strip() for c in args.categories.split(",")], per_category=args.per_category
    )
    print(f"\n{pair.label}: greedy, {args.max_new_tokens} new tokens per prompt", flush=True)
    rows: list[DemoRow] = []
    t0 = time.perf_counter()
    for p in tqdm(prompts, desc="prompts", unit="prompt"):
        rows.append(_one_prompt(pair, p, cal, args))
        tqdm.write(_format(rows[-1]))
    print(f"per-prompt part: {time.perf_counter() - t0:.0f} s (calibration before it: "
          f"{cal.seconds:.0f} s)", flush=True)  # fmt: skip
    return rows


def _format(r: DemoRow) -> str:
    plan = "plain (speculation predicted to lose)" if r.gamma == 0 else f"gamma={r.gamma}"
    return (
        f"{r.prompt_id:<22} {r.category:<14} tokens={r.new_tokens:<4d} {plan} "
        f"accept={r.acceptance_rate:5.1%} tokens/call={r.mean_accepted_length:4.2f} "
        f"baseline={r.baseline_tps:5.2f} tok/s speculative={r.speculative_tps:5.2f} tok/s "
        f"speedup predicted={r.predicted_speedup:4.2f}x measured={r.speedup:4.2f}x "
        f"greedy-identical={'yes' if r.identical else 'NO'}"
    )


def _summary(rows: list[DemoRow]) -> None:
    print("\nsummary")
    for r in rows:
        print("  " + _format(r))
    cats: dict[str, list[DemoRow]] = {}
    for r in rows:
        cats.setdefault(r.category, []).append(r)
    for cat, rs in cats.items():
        tokens = sum(r.new_tokens for r in rs)
        base = sum(r.new_tokens / r.baseline_tps for r in rs)
        spec = sum(r.new_tokens / r.speculative_tps for r in rs)
        pred = base / sum(r.new_tokens / r.baseline_tps / r.predicted_speedup for r in rs)
        print(f"  {cat:<14} {tokens:4d} tokens: predicted {pred:.2f}x, measured "
              f"{base / spec:.2f}x")  # fmt: skip
    total = sum(r.new_tokens for r in rows)
    base_time = sum(r.new_tokens / r.baseline_tps for r in rows)
    spec_time = sum(r.new_tokens / r.speculative_tps for r in rows)
    print(
        f"  overall: {total} tokens, baseline {total / base_time:.2f} tok/s, "
        f"speculative {total / spec_time:.2f} tok/s, speedup {base_time / spec_time:.2f}x, "
        f"greedy identical on {sum(r.identical for r in rows)}/{len(rows)} prompts"
    )


def check_arguments(args: argparse.Namespace) -> None:
    """Every setting, before any model loads (a ``ValueError`` naming the flag)."""
    if args.gamma is not None and args.gamma < 0:
        raise ValueError(
            f"--gamma must be an integer >= 0 (0: plain decoding; leave it out to let the "
            f"measured costs choose), got {args.gamma}"
        )
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
    t0 = time.perf_counter()
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
    _summary(rows)
    print(f"  traces saved under {Path(args.out).resolve()}")
    print(f"  demo: {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
