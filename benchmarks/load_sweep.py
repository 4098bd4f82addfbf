"""Load vs latency: speculation on and off under a closed- or open-loop load, one run.

    .venv/bin/python benchmarks/load_sweep.py [--target smollm2-135m] [--draft early_exit:28]
        [--concurrencies 1,2,4,8,16] | [--rates 0.5,1,2,4] [--requests 32] [--max-batch 16]
        [--tokens 32] [--gamma 4] [--verifier lossless]

Requests are prompts of data/prompts.jsonl (seeded order); they arrive from N closed-loop
clients (--concurrencies) or as a Poisson process (--rates, requests/s) and are served by one
server in static batches of at most --max-batch (see specviz/load.py: service times are
measured, the arrival clock is virtual, so nothing sleeps). Prints, per load level, TTFT /
time per output token / completion p50 and throughput for both modes with their ratios, the
crossover where speculation stops paying for each metric, and writes
benchmarks/results/load_sweep_<target>_<draft>_<scenario>.csv. Ratios are measured in one
run; absolute times on a shared machine are noise.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

import torch
from _bench import packed_flag

from specviz.lab import load_models
from specviz.load import load_sweep, mixed_prompts

RESULTS = Path(__file__).resolve().parent / "results"
METRICS = ("throughput_tok_s", "ttft_p50", "tpot_p50", "completion_p50", "completion_p90")


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--draft", default="early_exit:28")
    ap.add_argument("--concurrencies", default=None)
    ap.add_argument("--rates", default=None)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--verifier", default="lossless")
    ap.add_argument("--categories", default=None)
    ap.add_argument("--dtype", default="float32", help="e.g. bfloat16 for the Qwen pair")
    packed_flag(ap)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.rates and args.concurrencies:
        raise SystemExit("give --rates or --concurrencies, not both")
    if args.rates:
        levels = {"rates": [float(x) for x in args.rates.split(",")]}
    else:
        conc = args.concurrencies or "1,2,4,8,16"
        levels = {"concurrencies": [int(x) for x in conc.split(",")]}

    models = load_models(args.target, args.draft, dtype=args.dtype, packed=args.packed)
    cats = args.categories.split(",") if args.categories else None
    # at least max-batch distinct prompts, so no batch repeats one
    prompts = mixed_prompts(models.tokenizer, max(16, args.max_batch), categories=cats)
    print(
        f"{models.label}: {levels}, {args.requests} requests, max batch {args.max_batch}, "
        f"{args.tokens} new tokens, gamma {args.gamma}, verifier {args.verifier}, "
        f"{'packed' if args.packed else 'stock'} kernels, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    sw = load_sweep(
        models.target,
        models.draft,
        prompts,
        n_requests=args.requests,
        max_batch=args.max_batch,
        max_new_tokens=args.tokens,
        gamma=args.gamma,
        verifier=args.verifier,
        **levels,
    )
    t = sw.table
    cols = ["level", "mode", "mean_batch_size", "utilization", *METRICS, "acceptance_rate"]
    print(t[cols].round(3).to_string(index=False))
    print("\nspeed-up of speculation per level (> 1: speculation better)")
    sp = {m: sw.speedups(m).set_index("level")["speedup"] for m in METRICS}
    print(f"{'level':>7} " + " ".join(f"{m:>16}" for m in METRICS))
    for lv in sp[METRICS[0]].index:
        print(f"{lv:>7g} " + " ".join(f"{sp[m][lv]:>15.2f}x" for m in METRICS))
    print()
    for m in METRICS:
        print("crossover:", sw.crossover(m).describe())
    t = t.assign(
        target=args.target,
        draft=args.draft,
        verifier=args.verifier,
        gamma=args.gamma,
        packed=args.packed,
        load_avg_1min=os.getloadavg()[0],  # other processes: timings on a busy machine are noise
    )
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    scen = sw.scenario
    out = (
        Path(args.out)
        if args.out
        else RESULTS
        / (
            f"load_sweep_{slug(args.target)}_{slug(args.draft)}_{scen}"
            + ("" if args.verifier == "lossless" else f"_{slug(args.verifier)}")
            + ("_packed" if args.packed else "")
            + ".csv"
        )
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    t.to_csv(out, index=False)
    print(f"wrote {os.path.relpath(out)}")


if __name__ == "__main__":
    main()
