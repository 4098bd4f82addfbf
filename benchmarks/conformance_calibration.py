"""How often does the conformance kit call a correct sampler broken? (issue 25)

    .venv/bin/python benchmarks/conformance_calibration.py [--runs 200] [--samplers a,b,...]
        [--n 2000] >> benchmarks/results/conformance_calibration.txt

For each correct sampler -- specviz's lossless rule, transformers' installed
``_speculative_sampling`` and the pure-PyTorch references written to the vLLM, FlashInfer,
TensorRT-LLM and SGLang signatures (``specviz.testing.reference``) -- runs
``check_sampler(..., seed=s, shrink=False)`` for ``--runs`` seeds s = 0, 1, ... (the kit's
default families, n runs per case, alpha = 0.01 family-wise) and prints the verdict's false
alarms against alpha and its one-sided 99% binomial bound, the per-test p-values' uniformity
(KS; the sglang adapter's quasi-Monte-Carlo uniforms make its tests conservative, so its
p-values pile up near 1 by design) and the CPU seconds per verdict. Then the negative control:
the same runs on broken samplers at their stated strength must fail every time.

Runs are independent: split the samplers over several invocations (``--samplers``) and append
to one results file. CPU times are per verdict in this process (other processes on the machine
do not count, but they slow caches).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time

import numpy as np
from scipy import stats as st

CORRECT = ("specviz", "transformers", "vllm", "flashinfer", "trtllm", "sglang_tree")
BROKEN = ("shared_noise", "transformers_ensemble_0.5", "vllm_ragged", "sglang_inclusive_coin")


def sampler(name: str):
    """(fn, signature) of a named sampler."""
    from specviz.testing import reference as R

    if name == "specviz":
        return "lossless", "specviz"
    if name in ("transformers", "transformers_ensemble_0.5"):
        from transformers.generation.utils import _speculative_sampling

        if name == "transformers":
            return _speculative_sampling, "transformers"
        return functools.partial(
            _speculative_sampling, assistant_ensemble_weight=0.5
        ), "transformers"
    table = {
        "vllm": (R.vllm_rejection_sample, "vllm"),
        "flashinfer": (R.flashinfer_chain_speculative_sampling, "flashinfer"),
        "trtllm": (R.trtllm_rejection_sampling_one_model, "trtllm"),
        "sglang_tree": (R.sglang_tree_target_only, "sglang_tree"),
        "shared_noise": ("shared_noise", "specviz"),
        "vllm_ragged": (R.vllm_ragged_row_permutation, "vllm"),
        "sglang_inclusive_coin": (R.sglang_inclusive_coin, "sglang_tree"),
    }
    if name not in table:
        raise SystemExit(f"unknown sampler {name!r}; choose from {CORRECT + BROKEN}")
    return table[name]


def calibrate(name: str, runs: int, n: int, alpha: float) -> str:
    from specviz.testing import check_sampler

    fn, signature = sampler(name)
    fails, pvals, secs, tests = 0, [], [], []
    for seed in range(runs):
        t0 = time.process_time()
        rep = check_sampler(fn, signature, n=n, alpha=alpha, seed=seed, shrink=False)
        secs.append(time.process_time() - t0)
        fails += not rep.passed
        pvals += rep.tests.pvalue.tolist()
        tests.append(len(rep.tests))
        if (seed + 1) % 25 == 0:  # partial counts, for runs cut short
            print(f"  {name}: {fails} false alarms in {seed + 1} runs", file=sys.stderr, flush=True)
    bound = int(st.binom.ppf(0.99, runs, alpha))
    ks = st.kstest(np.asarray(pvals), "uniform").pvalue
    share = float(np.mean(np.asarray(pvals) < alpha))
    ok = "calibrated" if fails <= bound else "NOT calibrated"
    return (
        f"{name:14s} ({signature:12s}) runs={runs} n={n}: false alarms {fails}/{runs} = "
        f"{fails / runs:.3f} vs alpha {alpha:g} (99% bound {bound}) -> {ok}; "
        f"{statistics.median(tests)} tests/run, per-test p < {alpha:g}: {share:.4f}, KS uniform "
        f"p = {ks:.2g}; CPU s/run median {statistics.median(secs):.2f}"
    )


def negative(name: str, runs: int, n: int, alpha: float) -> str:
    from specviz.testing import check_sampler

    fn, signature = sampler(name)
    caught = sum(
        not check_sampler(fn, signature, n=n, alpha=alpha, seed=s, shrink=False).passed
        for s in range(runs)
    )
    return f"{name:26s} ({signature:12s}) runs={runs} n={n}: caught {caught}/{runs}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument("--samplers", default=",".join(CORRECT))
    ap.add_argument("--broken", default=",".join(BROKEN), help="negative controls ('' for none)")
    ap.add_argument("--broken-runs", type=int, default=20)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    print(f"# conformance kit calibration: alpha={args.alpha:g} family-wise (Holm), n={args.n} runs per case, seeds 0..{args.runs - 1}")  # fmt: skip
    for name in filter(None, args.samplers.split(",")):
        t0 = time.perf_counter()
        print(calibrate(name, args.runs, args.n, args.alpha), f"[{time.perf_counter() - t0:.0f} s wall]", flush=True)  # fmt: skip
    for name in filter(None, args.broken.split(",")):
        print("negative control:", negative(name, args.broken_runs, args.n, args.alpha), flush=True)


if __name__ == "__main__":
    main()
