"""Tracing on vs off: wall time of speculative decoding (same run, same prompts).

    .venv/bin/python benchmarks/trace_overhead.py [--repeats 3] [--tokens 64] [--pair smollm2]

Alternates trace=True / trace=False runs (order flipped every repeat to cancel drift), asserts
that both produce the same tokens (greedy, and sampled with the same seed), and prints the
ratio of the medians. The budget (issue #5) is <= 5% slower with tracing on.
"""

from __future__ import annotations

import argparse
import statistics
import time

from _bench import packed_flag

import specviz as sv
from specviz.drafting import EarlyExitDrafter, PromptLookupDrafter
from specviz.models import load_model, load_tokenizer
from specviz.prompts import load_prompts, render_prompt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=4)
    packed_flag(ap)
    args = ap.parse_args()
    model = load_model("smollm2-135m", packed=args.packed)
    tok = load_tokenizer("smollm2-135m")
    print(f"SmolLM2-135M, {'packed' if args.packed else 'stock'} linear kernels", flush=True)
    prompts = [render_prompt(tok, p) for p in load_prompts(per_category=1)[: args.prompts]]
    for name, make in [
        ("prompt_lookup", PromptLookupDrafter),
        ("early_exit(L=20)", lambda: EarlyExitDrafter(model, 20)),
    ]:
        for mode, kwargs in [("greedy", {}), ("T=0.8", {"do_sample": True, "temperature": 0.8})]:
            times: dict[bool, list[float]] = {True: [], False: []}
            for rep in range(args.repeats):
                outs: dict[bool, list[list[int]]] = {True: [], False: []}
                for trace in (True, False) if rep % 2 == 0 else (False, True):
                    t0 = time.perf_counter()
                    for ids in prompts:
                        r = sv.speculative_generate(
                            model,
                            make(),
                            ids,
                            gamma=4,
                            max_new_tokens=args.tokens,
                            trace=trace,
                            seed=0,
                            **kwargs,
                        )
                        outs[trace].append(r.new_tokens)
                    times[trace].append(time.perf_counter() - t0)
                assert outs[True] == outs[False], "tracing changed the generated tokens"
            on, off = statistics.median(times[True]), statistics.median(times[False])
            print(
                f"{name:<18} {mode:<7} trace on {on:6.2f} s  off {off:6.2f} s  "
                f"overhead {on / off - 1:+.1%}  (budget +5%; identical tokens)",
                flush=True,
            )


if __name__ == "__main__":
    main()
