"""Is every test of consistency_check calibrated on real transformers models? (issue 13)

    .venv/bin/python benchmarks/calibration.py [--replicates 200] [--quick]
        > benchmarks/results/calibration.txt

For tiny random ``LlamaForCausalLM`` pairs (specviz.tiny_llama: 2 layers, hidden 32, LM head
scaled so laws are peaked; several seeds and vocabularies 7-50) and sampling settings with
temperature / top-k / top-p, runs the lossless verifier's ``consistency_check`` --replicates
times on the null and prints, per cell, every test's rejection count at alpha = 0.05 against
its central 99% binomial interval, and the verdict's false alarms at alpha = 0.01 against
their 99% bound. Then the negative controls: broken verifiers caught at their stated size
(zoo_effects' two-sample n for 90% power on the pair's exact first-token law, 20 seeded
replicates) and greedy_check, which must never call the lossless rule a bug.

Each cell is an independent calibration check that a calibrated test fails with ~1%
probability per row, so over ~200 rows a couple of rows outside their interval are expected
by chance; the script prints the count expected and the count seen.
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
import torch

from specviz.checks import calibrate_check, consistency_check, greedy_check
from specviz.core.sampling import SamplingParams
from specviz.effects.zoo import zoo_effects
from specviz.fixtures.llamas import tiny_llama_pair

PROMPT = [2, 5, 1]
SETTINGS = {
    "T=1": dict(temperature=1.0),
    "T=0.7": dict(temperature=0.7),
    "top-k 4": dict(top_k=4),
    "top-p 0.8": dict(top_p=0.8),
    "T=0.7 k=20 p=0.9": dict(temperature=0.7, top_k=20, top_p=0.9),
}
ZOO = ("always_accept", "threshold", "typical", "residual_from_target", "unprocessed_q")


def _finished_cells(path: str) -> dict[str, str]:
    """Cell lines of an earlier run's output, by their ``seed=... eos=... |`` prefix."""
    out = {}
    with open(path) as f:
        for line in f:
            if line.startswith("seed=") and line.count(" | ") >= 4:
                out[line.split(" | ")[0] + " |"] = line.rstrip("\n")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicates", type=int, default=200)
    ap.add_argument("--n-samples", type=int, default=300)
    ap.add_argument("--quick", action="store_true", help="two cells only (a smoke run)")
    ap.add_argument(
        "--resume",
        metavar="FILE",
        help="an interrupted run's output: its finished cells are reprinted, not rerun",
    )
    args = ap.parse_args()
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    cells = list(itertools.product((0, 1), (7, 20, 50), SETTINGS, (2, 4)))
    if args.quick:
        cells = cells[:2]
    print(
        f"# consistency_check calibration on tiny random Llamas: {len(cells)} cells x "
        f"{args.replicates} replicates, {args.n_samples} samples per arm, prompt {PROMPT}"
    )
    print("# cell: seed vocab setting new_tokens eos | rows in interval | false alarms (bound)")
    done = _finished_cells(args.resume) if args.resume else {}
    rows_total = rows_bad = cells_alarm = 0
    for seed, vocab, setting, tokens in cells:
        eos = 3 if tokens == 4 else None  # the longer cells end early sometimes: lengths vary
        key = f"seed={seed} V={vocab:<3d} {setting:<17s} L={tokens} eos={eos} |"
        if key in done:
            line = done[key]
            in_interval, alarms = line.split(" | ")[1:3]
            ok, total = map(int, in_interval.split("/"))
            count, bound = alarms.replace("(", "").replace(")", "").split()
            rows_total += total
            rows_bad += total - ok
            cells_alarm += int(count) > int(bound)
            print(line, flush=True)
            continue
        target, draft = tiny_llama_pair(vocab, seed=seed, peak=6.0)
        cal = calibrate_check(
            target,
            draft,
            [PROMPT],
            replicates=args.replicates,
            seed=seed,
            n_samples=args.n_samples,
            batch_size=args.n_samples,
            n_boot=20,
            max_new_tokens=tokens,
            eos_token_id=eos,
            **SETTINGS[setting],
        )
        bad = cal.table[~cal.table.calibrated]
        rows_total += len(cal.table)
        rows_bad += len(bad)
        cells_alarm += cal.false_alarms > cal.false_alarm_high
        detail = " ".join(f"{r.test}={r.rejections}" for r in cal.table.itertuples())
        print(
            f"seed={seed} V={vocab:<3d} {setting:<17s} L={tokens} eos={eos} | "
            f"{len(cal.table) - len(bad)}/{len(cal.table)} | {cal.false_alarms} "
            f"({cal.false_alarm_high}) | {cal.seconds:.0f}s | {detail} "
            f"[interval {cal.table.low.iloc[0]}-{cal.table.high.iloc[0]}]",
            flush=True,
        )
    print(
        f"# rows outside their 99% interval: {rows_bad} of {rows_total} (about "
        f"{0.01 * rows_total:.1f} expected by chance); cells whose verdict false alarms "
        f"exceed their bound: {cells_alarm} of {len(cells)}"
    )

    print("\n# broken verifiers at their stated size (V=7 seed 0, T=0.7 top-k 4 top-p 0.8)")
    target, draft = tiny_llama_pair(7, seed=0, peak=8.0)
    params = SamplingParams(True, 0.7, 4, 0.8)
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        effects = zoo_effects(target(ids).logits[0, -1], draft(ids).logits[0, -1], params)
    for name in ZOO:
        n = effects.loc[name, "n_two_sample"]
        if not np.isfinite(n) or n > 20_000:
            print(f"{name:<22s} TV {effects.loc[name, 'tv']:.4f}: stated n {n} -- skipped")
            continue
        token_hits = verdict_hits = 0
        for rep in range(20):
            report = consistency_check(
                target,
                draft,
                [PROMPT],
                n_samples=int(n),
                max_new_tokens=2,
                temperature=0.7,
                top_k=4,
                top_p=0.8,
                verifier=name,
                seed=rep,
                n_boot=20,
                progress=False,
            )
            token_hits += float(report.tests.set_index("test").loc["token@0", "pvalue"]) < 0.01
            verdict_hits += report.verdict == "inconsistent"
        print(
            f"{name:<22s} TV {effects.loc[name, 'tv']:.4f} n={int(n):>5d}: token@0 rejects "
            f"{token_hits}/20 at alpha=0.01 (claim: 90%), verdict (Holm over every test) "
            f"{verdict_hits}/20"
        )

    print("\n# greedy_check, 24 prompts x 24 tokens per pair")
    prompts = [[int(x) for x in np.random.default_rng(i).integers(0, 7, 4)] for i in range(24)]
    for seed, vocab in itertools.product((0, 1, 2), (7, 20, 50)):
        target, draft = tiny_llama_pair(vocab, seed=seed, peak=6.0)
        ok = greedy_check(target, draft, prompts, max_new_tokens=24, progress=False)
        bug = greedy_check(
            target, draft, prompts, max_new_tokens=24, verifier="always_accept", progress=False
        )
        print(
            f"seed={seed} V={vocab:<3d} lossless: {ok.verdict} "
            f"(exact {ok.result.exact_match_rate:.0%}, numerics {ok.result.n_numerics}); "
            f"always_accept: {bug.verdict} ({bug.result.n_bug} of {bug.result.n} flagged)"
        )
    print(f"\n# total {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
