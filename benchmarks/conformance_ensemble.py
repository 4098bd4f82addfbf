"""transformers' assistant_ensemble_weight through the conformance kit: measured bias vs exact (issue 25)

    .venv/bin/python benchmarks/conformance_ensemble.py [--n 20000]
        > benchmarks/results/conformance_ensemble.txt

``_speculative_sampling(..., assistant_ensemble_weight=w)`` (transformers PR #45979, DIVERSED)
verifies against v = w p + (1 - w) q, so its output law is v and its bias is exactly
(1 - w) TV(p, q). For w = 0.25, 0.5, 0.75 and 1 (the lossless limit) this script runs the
*installed* function through ``specviz.testing.check_case`` on one exact case (the kit's
"random-0" case, first position) and prints the measured TV from p (plug-in, 95% basic
bootstrap interval, ``specviz.stats.estimate_tv``), the exact (1 - w) TV(p, q), the
goodness-of-fit p-value of the counts against v (the law the function should emit) and the
verdict of the full kit (``check_sampler``, default families).
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000)
    args = ap.parse_args()
    import torch
    from transformers import __version__ as tf_version
    from transformers.generation.utils import _speculative_sampling

    from specviz.stats import estimate_tv, goodness_of_fit
    from specviz.testing import check_case, check_sampler
    from specviz.testing._cases import family_plan

    torch.set_num_threads(1)
    case = family_plan("random", 8, 3, 0).cases[0]
    p, q = case.p_target, case.q_draft
    tv_pq = 0.5 * np.abs(p[0] - q[0]).sum()
    print(f"# transformers {tf_version}: _speculative_sampling(..., assistant_ensemble_weight=w)")
    print(f"# case: the kit's 'random-0' (V = 8, k = 3, seed 0); position 0: TV(p, q) = {tv_pq:.4f}; n = {args.n}")  # fmt: skip
    print("# w | exact (1-w) TV(p,q) | measured TV [95% CI] | GOF p vs v = w p + (1-w) q | kit verdict (default) | CPU s")  # fmt: skip
    for w in (0.25, 0.5, 0.75, 1.0):
        fn = functools.partial(_speculative_sampling, assistant_ensemble_weight=w)
        t0 = time.process_time()
        report = check_case(fn, "transformers", p_target=p, q_draft=q, n=args.n, seed=1)
        first = report.tests.set_index("context").loc["position 0"]
        counts = np.array(first.observed)
        est = estimate_tv(counts, probs_b=p[0], rng=np.random.default_rng(0))
        v = w * p[0] + (1 - w) * q[0]
        gof = goodness_of_fit(counts, v).pvalue
        verdict = check_sampler(fn, "transformers", shrink=False).verdict
        print(
            f"{w:4.2f} | {(1 - w) * tv_pq:.4f} | {est.estimate:.4f} [{est.low:.4f}, {est.high:.4f}] | "
            f"{gof:.3g} | {verdict} | {time.process_time() - t0:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
