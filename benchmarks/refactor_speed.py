"""Before vs after a refactor, in one run: two source trees alternated, ratios per round.

    .venv/bin/python benchmarks/refactor_speed.py --before /path/to/main --after . \
        [--rounds 6] [--tokens 40] [--prompts 2] > benchmarks/results/refactor_speed.txt

Issue 29's bar for "behaviour unchanged" includes "the speed benchmarks within noise of
before (ratios in one run)". On a shared machine wall times drift with the load, so a number
measured today cannot be held against one measured yesterday: this script runs both trees in
the same run, alternating them (B A A B B A ... so neither always goes first), each round in a
fresh process (``PYTHONPATH`` = the tree) that loads SmolLM2-135M on the stock kernels, warms
up, then times the workload: serial speculative decoding with model drafts -- the early-exit
drafter (the target's first layers, a ``ModelDrafter``) -- greedy and sampled, and the batched
engine's model drafts (``ModelGroups``) on two rows. It prints, per round, after / before of
wall time and of CPU time (``time.process_time``: this process's CPU seconds, less sensitive
to other jobs than wall time but not immune: cache and memory-bandwidth contention remain),
then the median ratio and its range over rounds, and the load average before and after. Each
round's tokens are hashed and must be identical in the two trees (asserted).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time


def worker(tokens: int, n_prompts: int, threads: int) -> None:
    """One measurement in this process (PYTHONPATH selects the tree); prints one JSON line."""
    import torch

    import specviz as sv
    from specviz.decoding import speculative_generate_batch
    from specviz.drafting import EarlyExitDrafter
    from specviz.models import load_model, load_tokenizer
    from specviz.prompts import load_prompts, render_prompt

    torch.set_num_threads(threads)
    tok = load_tokenizer("smollm2-135m", progress=False)
    model = load_model("smollm2-135m", progress=False, packed=False)
    ids = [render_prompt(tok, p) for p in load_prompts(per_category=1)[:n_prompts]]
    common = dict(max_new_tokens=tokens, eos_token_id=tok.eos_token_id)

    def workload() -> list:
        out = []
        for x in ids:
            for kw in (dict(do_sample=False), dict(do_sample=True, temperature=0.7, seed=1)):
                r = sv.speculative_generate(model, EarlyExitDrafter(model, 12), x, gamma=4,
                                            trace=False, **common, **kw)  # fmt: skip
                out.append(r.new_tokens)
        b = speculative_generate_batch(model, EarlyExitDrafter(model, 12), ids[:2], gamma=4,
                                       do_sample=True, temperature=0.7, seed=2, **common)  # fmt: skip
        out += [list(s) for s in b.sequences]
        return out

    workload_small = sv.speculative_generate(model, EarlyExitDrafter(model, 12), ids[0], gamma=4,
                                             max_new_tokens=8, trace=False)  # fmt: skip
    del workload_small  # warm-up: first calls pay one-off costs
    w0, c0 = time.perf_counter(), time.process_time()
    out = workload()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    digest = hashlib.sha256(json.dumps(out).encode()).hexdigest()[:16]
    print(json.dumps({"wall": wall, "cpu": cpu, "tokens": sum(map(len, out)), "hash": digest}))


def run_tree(tree: str, args: argparse.Namespace) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--tokens", str(args.tokens),
           "--prompts", str(args.prompts), "--threads", str(args.threads)]  # fmt: skip
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd="/")
    if res.returncode:
        raise SystemExit(f"worker on {tree} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def _line(name: str, ratios: list[float]) -> str:
    med = statistics.median(ratios)
    return f"{name}: median {med:.3f}, range {min(ratios):.3f}-{max(ratios):.3f} over {len(ratios)} rounds"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--before", default=None, help="tree before the change (e.g. main)")
    ap.add_argument("--after", default=".", help="tree after the change")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    if args.worker:
        worker(args.tokens, args.prompts, args.threads)
        return
    if args.before is None:
        raise SystemExit("--before TREE is required")
    load0 = os.getloadavg()
    print(f"# before {os.path.abspath(args.before)}, after {os.path.abspath(args.after)}")
    print(f"# SmolLM2-135M (stock kernels), early-exit drafts (12 of 30 layers), gamma 4, "
          f"{args.prompts} prompts x {args.tokens} tokens, greedy + sampled serial, a 2-row "
          f"sampled batch; {args.threads} torch thread(s); load average at start "
          f"{load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} on {os.cpu_count()} CPUs")  # fmt: skip
    print("| round | order | before wall s | after wall s | wall after/before | "
          "before cpu s | after cpu s | cpu after/before |")  # fmt: skip
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    walls, cpus = [], []
    for i in range(args.rounds):
        order = ("before", "after") if i % 4 in (1, 2) else ("after", "before")
        got = {}
        for which in order:
            got[which] = run_tree(args.before if which == "before" else args.after, args)
        b, a = got["before"], got["after"]
        if b["hash"] != a["hash"]:
            raise SystemExit(f"round {i}: the two trees generated different tokens ({b} vs {a})")
        walls.append(a["wall"] / b["wall"])
        cpus.append(a["cpu"] / b["cpu"])
        print(f"| {i} | {order[0]} first | {b['wall']:.2f} | {a['wall']:.2f} | {walls[-1]:.3f} | "
              f"{b['cpu']:.2f} | {a['cpu']:.2f} | {cpus[-1]:.3f} |", flush=True)  # fmt: skip
    load1 = os.getloadavg()
    print()
    print(_line("wall after/before", walls))
    print(_line("cpu  after/before", cpus))
    print(f"tokens per round {a['tokens']}, identical in both trees every round (hash {a['hash']})")
    print(
        f"# load average at end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


if __name__ == "__main__":
    main()
