"""The engine's own cost per call, on a toy whose model costs nothing (issue 30: <= 10 ms).

    .venv/bin/python benchmarks/call_overhead.py [--calls 200] [--tokens 16]

``speculative_generate`` on the 7-token toy pair (gamma 4, traced, the default entry point),
sampled and greedy, at 1 and at ``--tokens`` new tokens: everything measured is validation,
drafting, verification, the trace and cache set-up, since a toy forward pass is a table
look-up. Prints the median CPU time per call (``time.process_time``: another process on the
machine does not inflate it; wall time is printed too), the fixed part (a 1-token call) and the
per-step part, and the share of the top functions under cProfile. The reference in the same
run is ``autoregressive_generate`` on the same toy and tokens (plain decoding: no drafting,
no verification).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import torch

import specviz as sv


def _per_call(fn, calls: int) -> tuple[float, float]:
    """(median CPU ms, median wall ms) per call over ``calls`` calls, in 10 batches."""
    cpu, wall = [], []
    per = max(1, calls // 10)
    for b in range(10):
        c0, w0 = time.process_time(), time.perf_counter()
        for i in range(per):
            fn(b * per + i)
        cpu.append((time.process_time() - c0) / per * 1e3)
        wall.append((time.perf_counter() - w0) / per * 1e3)
    return statistics.median(cpu), statistics.median(wall)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--profile", action="store_true", help="print the top functions")
    args = ap.parse_args()
    target, draft = sv.toy_pair()
    ids = [0, 1]
    print(f"toy pair (V={target.vocab_size}), gamma 4, trace on, torch threads "
          f"{torch.get_num_threads()}, {args.calls} calls per cell")  # fmt: skip
    for mode, kw in (("sampled", dict(do_sample=True)), ("greedy", {})):
        cells = {}
        for tokens in (1, args.tokens):
            spec = lambda i, t=tokens, kw=kw: sv.speculative_generate(  # noqa: E731
                target, draft, ids, gamma=4, max_new_tokens=t, seed=i, **kw
            )
            plain = lambda i, t=tokens, kw=kw: sv.autoregressive_generate(  # noqa: E731
                target, ids, max_new_tokens=t, seed=i, **kw
            )
            for fn in (spec, plain):
                fn(0)  # warm-up
            cells[tokens] = (_per_call(spec, args.calls), _per_call(plain, args.calls))
            steps = spec(0).target_calls
            (sc, sw), (pc, pw) = cells[tokens]
            print(f"  {mode:<8} {tokens:3d} tokens ({steps} target calls): speculative "
                  f"{sc:6.2f} ms CPU ({sw:6.2f} wall), plain {pc:6.2f} ms CPU ({pw:6.2f} wall); "
                  f"speculative / plain {sc / pc:.2f}x  (budget <= 10 ms per call)")  # fmt: skip
        if args.profile:
            pr = cProfile.Profile(time.process_time)
            pr.enable()
            for i in range(50):
                sv.speculative_generate(target, draft, ids, gamma=4, max_new_tokens=args.tokens,
                                        seed=i, **kw)  # fmt: skip
            pr.disable()
            pstats.Stats(pr).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
