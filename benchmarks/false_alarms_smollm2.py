"""Does consistency_check raise false alarms on a real model? (issue 13)

    .venv/bin/python benchmarks/false_alarms_smollm2.py [--runs 20] [--n 600]
        > benchmarks/results/false_alarms_smollm2.txt

SmolLM2-135M-Instruct (packed fp32 weights) as the target; the lossless verifier with two
drafters -- the trained EAGLE-style head and prompt lookup -- through the batched engine.
``--runs`` seeded ``consistency_check`` calls per drafter, max_new_tokens cycling through
2, 4, 6, 8, at temperature 0.8 / top-k 50, on two prompts (a copy-heavy one, where prompt
lookup drafts, and an open one). The verdict is Holm at alpha = 0.01 over every test of the
report, so each run raises a false alarm with probability <= 0.01; the script prints the count
next to its 99% binomial upper bound, the smallest adjusted p-value of every run, and the
numerics line (how far the two arms' log-probabilities for the same continuation differ).
"""

from __future__ import annotations

import argparse
import time

import torch
from scipy import stats as st

from specviz.checks import consistency_check
from specviz.drafting import PromptLookupDrafter
from specviz.drafting.heads import HeadDrafter
from specviz.models import load_model, load_tokenizer
from specviz.prompts import render_prompt

PROMPTS = (
    "Repeat this list exactly: red, green, blue, red, green, blue, red, green",
    "Write one sentence about the sea.",
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--n", type=int, default=600, help="samples per arm and prompt")
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument("--drafters", default="eagle_head,prompt_lookup",
                    help="comma-separated; runs are seeded per drafter and run, so drafters can "
                         "run in separate processes and their lines be concatenated")  # fmt: skip
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only-runs", default=None,
                    help="e.g. 15-19: these runs only (to split a drafter over processes)")  # fmt: skip
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    model = load_model("smollm2-135m", progress=False, packed=True)
    tok = load_tokenizer("smollm2-135m", progress=False)
    prompts = [render_prompt(tok, p) for p in PROMPTS]
    drafters = {
        "eagle_head": lambda: HeadDrafter.from_pretrained(model),
        "prompt_lookup": lambda: PromptLookupDrafter(max_ngram=3),
    }
    bound = int(st.binom.ppf(0.995, args.runs, args.alpha))
    print(
        f"# SmolLM2-135M, lossless verifier, {args.runs} seeded runs per drafter, {args.n} "
        f"samples per arm and prompt, {len(prompts)} prompts, T=0.8 top-k 50, Holm at "
        f"alpha={args.alpha}; 99% upper bound on false alarms: {bound}"
    )
    chosen = args.drafters.split(",")
    unknown = set(chosen) - set(drafters)
    if unknown:
        raise SystemExit(f"unknown drafters {sorted(unknown)}; choose from {sorted(drafters)}")
    for name in chosen:
        make = drafters[name]
        alarms = 0
        lo, hi = (
            (int(x) for x in args.only_runs.split("-")) if args.only_runs else (0, args.runs - 1)
        )
        for run in range(lo, hi + 1):
            tokens = 2 + 2 * (run % 4)
            t0 = time.perf_counter()
            report = consistency_check(
                model,
                make(),
                prompts,
                n_samples=args.n,
                max_new_tokens=tokens,
                temperature=0.8,
                top_k=50,
                gamma=4,
                alpha=args.alpha,
                seed=1000 * run,
                batch_size=300,
                eos_token_id=tok.eos_token_id,
                n_boot=50,
                progress=False,
            )
            alarms += report.verdict == "inconsistent"
            worst = report.tests.sort_values("holm").iloc[0]
            print(
                f"{name:<13s} run {run:2d} tokens {tokens}: {report.verdict:<12s} min Holm p "
                f"{worst.holm:.3g} ({worst.test}, prompt {worst.prompt}); {len(report.tests)} "
                f"tests; {report.numerics_statement}; {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
        print(f"# {name}: {alarms} false alarms in {args.runs} runs (99% bound {bound})\n")
    print(f"# total {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
