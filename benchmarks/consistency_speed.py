"""How long does consistency_check take on SmolLM2-135M? (issue 30's bar: <= 180 s)

    .venv/bin/python benchmarks/consistency_speed.py [--n 5000] [--tokens 8] [--layers 4] [--dtype bfloat16]

Samples --n continuations of --tokens tokens per arm (speculative and standard) for one
prompt, with the target's own first --layers layers as the draft (early exit, no second
model in memory), and prints the wall time, the CPU time and the verdict. An untrained early
exit agrees with SmolLM2 on ~3% of the mass (measured at 4..16 layers), so gamma=1 is the
cheapest honest setting: every round still exercises drafting, rejection and the residual.
Both arms run the model once per distinct state (rows that share their tokens so far share a
row), and every row of a step is verified and sampled at once (one CDF per distinct law).

Measured in the same run: the share of the CPU time spent inside the model's forward passes
(target and draft; the rest is the engine, the sampling and the statistics), the kernels and
threads in force (``specviz.perf.kernel_report``; big batched calls may run at another,
measured count: ``specviz.core.batch_runners.batch_threads``) and the load average while it
ran.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from specviz.checks import consistency_check
from specviz.checks.consistency import default_batch
from specviz.core.batch_runners import batch_threads
from specviz.drafting import early_exit_model
from specviz.models import load_model, load_tokenizer
from specviz.perf import kernel_report
from specviz.prompts import render_prompt


def _model_clock(model: torch.nn.Module) -> list[float]:
    """CPU seconds spent inside ``model``'s forward passes (its early-exit views included:
    they share the hooked modules)."""
    spent = [0.0]
    start: list[float] = []
    model.register_forward_pre_hook(lambda m, a: start.append(time.process_time()))
    model.register_forward_hook(
        lambda m, a, o: spent.__setitem__(0, spent[0] + time.process_time() - start.pop())
    )
    return spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--gamma", type=int, default=1)
    ap.add_argument(
        "--batch-size", type=int, default=None, help="default: consistency_check's own choice"
    )
    ap.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="the model's weights and compute (SmolLM2 was released in bfloat16)",
    )
    args = ap.parse_args()
    model = load_model("smollm2-135m", dtype=getattr(torch, args.dtype))
    tok = load_tokenizer("smollm2-135m")
    print(kernel_report(model) or "kernels: not chosen (CPU float model expected)", flush=True)
    draft = early_exit_model(model, args.layers)
    inner = _model_clock(model.model)
    head = _model_clock(model.lm_head)
    prompt = render_prompt(tok, "Write one sentence about the sea.")
    t0, c0 = time.perf_counter(), time.process_time()
    report = consistency_check(
        model,
        draft,
        [prompt],
        n_samples=args.n,
        max_new_tokens=args.tokens,
        gamma=args.gamma,
        temperature=1.0,
        batch_size=args.batch_size,
        seed=0,
    )
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    batch = args.batch_size or f"{default_batch(model.config.vocab_size, args.gamma)} (default)"
    print(report.summary())
    in_model = inner[0] + head[0]
    big = batch_threads(model, 10**6) or torch.get_num_threads()  # the choice already made
    print(
        f"consistency_check: {args.n} samples per arm x {args.tokens} tokens in {seconds:.0f} s "
        f"wall ({seconds / 180:.2f} of the 180 s bar), {cpu:.0f} s CPU on "
        f"{torch.get_num_threads()} torch threads ({big} in batched calls of >= 32 tokens); "
        f"model forward passes {in_model / cpu:.0%} of "
        f"the CPU time; {args.dtype}; batch size {batch}; load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores"
    )


if __name__ == "__main__":
    main()
