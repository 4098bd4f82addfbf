"""Batch size vs speed: speculative and plain batched decoding, measured in one run.

    .venv/bin/python benchmarks/batch_sweep.py [--target smollm2-135m] [--draft early_exit:28]
        [--batch-sizes 1,2,4,8,16,32] [--tokens 32] [--gamma 4] [--repeats 2]
        [--verifier lossless] [--categories structured,code,...]
    .venv/bin/python benchmarks/batch_sweep.py --target qwen2.5-coder-1.5b \
        --draft qwen2.5-coder-0.5b --batch-sizes 1,4,16 --tokens 24 --repeats 1

For each batch size the rows take distinct prompts of data/prompts.jsonl (categories mixed);
plain (`autoregressive_generate_batch`) and speculative (`speculative_generate_batch`) runs
alternate within each repeat, and the median wall time is kept. Greedy decoding; the two
modes should produce identical tokens (checked per batch size; a difference is reported).
Prints tokens/s of each mode and their ratio per batch size, and writes
benchmarks/results/batch_sweep_<target>_<draft>.csv. Ratios are measured in the same run;
absolute numbers on a shared machine are noise. `--verifier synthetic:0.9` swaps in the
LOSSY benchmark-only verifier (fixed acceptance) -- then outputs differ and are not checked.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
from pathlib import Path

import torch
from _bench import packed_flag

from specviz.lab import load_models
from specviz.load import batch_sweep, make_engine, mixed_prompts

RESULTS = Path(__file__).resolve().parent / "results"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--draft", default="early_exit:28", help="early_exit:L or a draft model name")
    ap.add_argument("--batch-sizes", default="1,2,4,8,16,32")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--verifier", default="lossless")
    ap.add_argument("--categories", default=None, help="comma-separated; default: all")
    ap.add_argument("--dtype", default="float32", help="e.g. bfloat16 for the Qwen pair")
    packed_flag(ap)
    ap.add_argument("--out", default=None, help="CSV path (default under benchmarks/results/)")
    args = ap.parse_args()
    sizes = [int(b) for b in args.batch_sizes.split(",")]

    models = load_models(args.target, args.draft, dtype=args.dtype, packed=args.packed)
    cats = args.categories.split(",") if args.categories else None
    # distinct prompts, one per row at the largest batch, tasks mixed
    prompts = mixed_prompts(models.tokenizer, max(sizes), categories=cats)
    kw = dict(max_new_tokens=args.tokens, gamma=args.gamma, seed=0)
    engines = [
        make_engine(models.target, None, speculative=False, **kw),
        make_engine(models.target, models.draft, speculative=True, verifier=args.verifier, **kw),
    ]
    print(
        f"{models.label}: batch sizes {sizes}, {args.tokens} new tokens, gamma {args.gamma}, "
        f"verifier {args.verifier}, {args.dtype}{' packed' if args.packed else ''}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{platform.processor() or platform.machine()}"
    )
    df = batch_sweep(
        models.target,
        models.draft,
        prompts,
        batch_sizes=sizes,
        max_new_tokens=args.tokens,
        repeats=args.repeats,
        engines=engines,
    )
    if args.verifier == "lossless":  # greedy + lossless: identical tokens, row by row
        bad = df[(df["mode"] == "speculative") & ~df["same_tokens_as_plain"].astype(bool)]
        if len(bad):
            print(f"WARNING: speculative tokens differ from plain at batch sizes "
                  f"{bad.batch_size.tolist()} (float near ties? see greedy_check)")  # fmt: skip
    sp = df[df["mode"] == "speculative"].set_index("batch_size")
    pl = df[df["mode"] == "plain"].set_index("batch_size")
    print("end to end = prompt prefill included; decode = after each batch's first token")
    print(f"{'batch':>5} {'plain tok/s':>12} {'spec tok/s':>11} {'spec/plain':>10} "
          f"{'decode ratio':>12} {'1st token plain/spec (s)':>25} {'accept':>7} {'tok/call':>8}")  # fmt: skip
    for b in sizes:
        p, s = pl.loc[b], sp.loc[b]
        print(
            f"{b:>5} {p.tokens_per_s:>12.1f} {s.tokens_per_s:>11.1f} {s.speedup:>9.2f}x "
            f"{s.decode_speedup:>11.2f}x {p.first_token_s:>12.2f} / {s.first_token_s:<10.2f} "
            f"{s.acceptance_rate:>7.2f} {s.tokens_per_target_call:>8.2f}"
        )
    df["target"], df["draft"], df["verifier"] = args.target, args.draft, args.verifier
    df["gamma"], df["torch_threads"] = args.gamma, torch.get_num_threads()
    df["packed"] = args.packed
    df["device"] = str(next(models.target.parameters()).device)
    # machine load (other processes) while it ran: timings on a busy machine are noise
    df["load_avg_1min"] = os.getloadavg()[0]
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    out = (
        Path(args.out)
        if args.out
        else RESULTS
        / (
            f"batch_sweep_{slug(args.target)}_{slug(args.draft)}"
            + ("" if args.verifier == "lossless" else f"_{slug(args.verifier)}")
            + ("_packed" if args.packed else "")
            + ".csv"
        )
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    print(f"wrote {os.path.relpath(out)}")


if __name__ == "__main__":
    main()
