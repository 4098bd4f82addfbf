"""Token trees vs chains at equal verified nodes per target call (issue 16).

    .venv/bin/python benchmarks/trees_vs_chains.py --pair smollm2 > benchmarks/results/trees_smollm2.txt
    .venv/bin/python benchmarks/trees_vs_chains.py --pair qwen --tokens 32 --per-category 1 \\
        --categories code,extraction,structured,chat_writing > benchmarks/results/trees_qwen.txt

Greedy decoding of held-out prompts (``specviz.prompts``, one or more per category), with:

* ``smollm2``: SmolLM2-135M and its trained EAGLE-style head -- a chain of n head drafts
  against head trees of n nodes (static shapes with exactly n nodes, and EAGLE-2-style dynamic
  trees: k candidates under each of the w best nodes per depth, reranked to the best n);
* ``qwen``: Qwen2.5-Coder-1.5B with the 0.5B draft model -- a chain of n against dynamic trees
  of n nodes (``TreeDrafter``).

Prints, per configuration, mean accepted tokens per target call (new tokens / target calls),
tokens per second and the speedup over plain decoding measured in the same run (configurations
interleaved per prompt), and checks that every output equals plain greedy decoding token for
token. Then the cost of one target call verifying n nodes: a tree pass (tree attention on the
masked cache) against a chain pass of n tokens (the serial runner), as a ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

import specviz as sv
from specviz.core.batch_runners import BatchRunner
from specviz.core.runners import as_runner
from specviz.drafting import ModelDrafter, TreeDrafter
from specviz.drafting.heads import HeadDrafter
from specviz.models import load_model, load_tokenizer
from specviz.prompts import CATEGORIES, load_prompts, render_prompt

STATIC = {4: [(4,), (2, 1)], 8: [(4, 1), (2, 1, 1, 1)], 16: [(4, 1, 1, 1), (8, 1)],
          32: [(8, 1, 1, 1), (16, 1)]}  # fmt: skip


def nodes_of(shape) -> int:
    total, width = 0, 1
    for k in shape:
        width *= k
        total += width
    return total


def configs(pair: str, draft, nodes: list[int]) -> dict:
    out = {}
    for n in nodes:
        if pair == "smollm2":
            out[(n, "chain")] = (lambda: HeadDrafter.from_pretrained(draft), n)
            for shape in STATIC.get(n, []):
                assert nodes_of(shape) == n, shape
                out[(n, f"tree {'x'.join(map(str, shape))}")] = (
                    lambda s=shape: HeadDrafter.from_pretrained(draft, tree=s, tree_sampling="deterministic"), n)  # fmt: skip
            for k, w in ((4, 4), (8, 8)):
                out[(n, f"dynamic k={k} w={w}")] = (
                    lambda n=n, k=k, w=w: HeadDrafter.from_pretrained(draft, tree=(k,), dynamic=True, budget=n,
                                                                      width=w, tree_sampling="deterministic"), n)  # fmt: skip
        else:
            out[(n, "chain")] = (lambda: ModelDrafter(draft), n)
            # max_depth=n: the tree may grow as deep as the chain it is compared with
            out[(n, "dynamic k=4 w=2")] = (
                lambda n=n: TreeDrafter(draft, (4,), "deterministic", dynamic=True, budget=n, width=2,
                                        max_depth=n), n)  # fmt: skip
    return out


def verify_cost(model, n: int, repeats: int) -> tuple[float, float]:
    """Seconds of one target call on n drafted nodes: a chain (serial runner) and a tree
    (a dynamic-looking tree: two children per node, breadth first, on the masked cache)."""
    prompt = torch.arange(10, 60).view(1, -1)
    chain, tree = [], []
    for _ in range(repeats):
        r = as_runner(model)
        r.extend(prompt[0], 1)
        t0 = time.perf_counter()
        r.extend(torch.arange(100, 101 + n), n + 1)
        chain.append(time.perf_counter() - t0)
        b = BatchRunner(model, 1)
        b.extend(prompt, torch.ones_like(prompt, dtype=torch.bool), 1)
        parents = torch.tensor([[-1] + [0] + [(i - 1) // 2 + 1 for i in range(1, n)]])[:, : n + 1]
        toks = torch.arange(100, 101 + n).view(1, -1)
        t0 = time.perf_counter()
        b.extend_tree(toks, torch.ones_like(toks, dtype=torch.bool), parents)
        tree.append(time.perf_counter() - t0)
    return statistics.median(chain), statistics.median(tree)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", choices=["smollm2", "qwen"], default="smollm2")
    ap.add_argument("--nodes", default="4,8,16,32")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--categories", default=",".join(CATEGORIES))
    ap.add_argument("--packed", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    nodes = [int(x) for x in args.nodes.split(",")]
    lean = dict(packed=args.packed, keep_dense=not args.packed)  # nothing here reads dense weights
    if args.pair == "smollm2":
        target = load_model("smollm2-135m", progress=False, **lean)
        tok = load_tokenizer("smollm2-135m", progress=False)
        draft = target
    else:
        target = load_model("qwen2.5-coder-1.5b", progress=False, **lean)
        draft = load_model("qwen2.5-coder-0.5b", progress=False, **lean)
        tok = load_tokenizer("qwen2.5-coder-1.5b", progress=False)
    cats = args.categories.split(",")
    chosen = load_prompts(split="heldout", categories=cats, per_category=args.per_category)
    prompts = [(p.category, render_prompt(tok, p)) for p in chosen]
    kw = dict(max_new_tokens=args.tokens, eos_token_id=tok.eos_token_id)
    cfgs = configs(args.pair, draft, nodes)
    sv.autoregressive_generate(target, prompts[0][1], max_new_tokens=4)  # warm-up (untimed)
    print(f"# {args.pair}: greedy, {len(prompts)} held-out prompts ({', '.join(cats)}), "
          f"{args.tokens} new tokens, packed={args.packed}, {args.threads} threads, "
          f"load average {os.getloadavg()[0]:.1f} at start")  # fmt: skip
    tokens = {c: 0 for c in cfgs}
    calls = {c: 0 for c in cfgs}
    secs = {c: 0.0 for c in cfgs}
    plain_secs = 0.0
    plain_tokens = 0
    identical = {c: 0 for c in cfgs}
    for pi, (cat, ids) in enumerate(prompts):
        t0 = time.perf_counter()
        ref = sv.autoregressive_generate(target, ids, **kw).new_tokens
        plain_secs += time.perf_counter() - t0
        plain_tokens += len(ref)
        order = list(cfgs)
        order = order[pi % len(order) :] + order[: pi % len(order)]  # rotate: drift hits all
        for c in order:
            make, gamma = cfgs[c]
            t0 = time.perf_counter()
            r = sv.speculative_generate(target, make(), ids, gamma=gamma, trace=False, **kw)
            secs[c] += time.perf_counter() - t0
            print(f"#   {c[1]} at {c[0]} nodes: {len(r.new_tokens)} tokens in {r.target_calls} "
                  f"calls, {time.perf_counter() - t0:.1f} s", flush=True)  # fmt: skip
            tokens[c] += len(r.new_tokens)
            calls[c] += r.target_calls
            identical[c] += r.new_tokens == ref
        print(f"# prompt {pi} ({cat}) done", flush=True)
    plain_tps = plain_tokens / plain_secs
    print(
        "\n| nodes per call | drafter | tokens per target call | vs chain | tokens/s | vs plain | greedy identical |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|")
    for n in nodes:
        base = tokens[(n, "chain")] / calls[(n, "chain")]
        for c in [c for c in cfgs if c[0] == n]:
            tpc = tokens[c] / calls[c]
            tps = tokens[c] / secs[c]
            print(f"| {n} | {c[1]} | {tpc:.2f} | {tpc / base:.2f}x | {tps:.1f} | "
                  f"{tps / plain_tps:.2f}x | {identical[c]}/{len(prompts)} |")  # fmt: skip
        best = max((tokens[c] / calls[c], c[1]) for c in cfgs if c[0] == n and c[1] != "chain")
        print(
            f"| {n} | **best tree: {best[1]}** | {best[0]:.2f} | **{best[0] / base:.2f}x** | | | |"
        )
    print(f"\nplain decoding: {plain_tps:.1f} tokens/s")
    print("\n| nodes | chain pass (s) | tree pass (s) | tree / chain |\n|---:|---:|---:|---:|")
    for n in nodes:
        c, t = verify_cost(target, n, repeats=5)
        print(f"| {n} | {c:.4f} | {t:.4f} | {t / c:.2f}x |")


if __name__ == "__main__":
    main()
