"""Sequential verdicts (issue 26): false alarms under continuous peeking, samples to decision
against the fixed-n design, and how often an honest sampler is called "equivalent within 0.05".

    nice -n 10 .venv/bin/python benchmarks/sequential.py exact --runs 1000 --alt-runs 200 \\
        > benchmarks/results/sequential_exact.txt
    nice -n 10 .venv/bin/python benchmarks/sequential.py real --runs 200 [--only-runs 0-49] \\
        --out benchmarks/results/sequential_smollm2.jsonl     # resumable, splittable
    .venv/bin/python benchmarks/sequential.py summarize benchmarks/results/sequential_smollm2.jsonl \\
        > benchmarks/results/sequential_smollm2.txt

``exact``: draws from exact multinomials (Zipf and uniform laws, and SmolLM2-135M's exact
first-token law for notebook 05's prompt and sampling settings, computed from its logits), two
arms paired draw by draw, checked after every batch of 100 pairs.

* Null (both arms one law): the betting test is looked at after *every* batch up to the cap
  (1.5x the fixed-n design for TV 0.05 against the least-favourable difference, the default
  cap of ``consistency_check(sequential=True)``), never stopped for equivalence -- the strictest
  optional stopping; false alarms are counted against alpha = 0.01 and its binomial 99% upper
  bound. The same runs give the full procedure's outcome (first of reject / equivalent / cap):
  how often an honest sampler reaches "equivalent within 0.05" before the cap, and when.
* Alternatives at TV 0.05 / 0.1 / 0.2 (:func:`specviz.stats.tv_alternative`): the samples to
  rejection (median; 90th percentile = the samples the sequential test needs for 90% power)
  against the fixed-n design for that TV and alternative at 90% power
  (:func:`specviz.stats.sample_size_for_tv`), and against *both* designs for TV 0.05: the
  head-tail one (the cap's basis before issue 26's fix, and the generic power statements') and
  the least-favourable one (the cap's basis now). Alternatives of both kinds (the least-
  favourable kind only where it differs from the head-tail one).

``real``: ``consistency_check(..., sequential=True)`` itself on SmolLM2-135M (memoised target,
noisy-copy draft as in notebook 05, the lossless rule, 2-token continuations, T=0.7 top-k 20
top-p 0.8): one JSON line per seeded null run, appended as it finishes (a rerun skips done
runs; ``--only-runs`` splits the work over processes). ``tv_tolerance`` is set to 1e-6 so that
every run peeks after every batch until its cap; the first batch where the TV upper end was
<= 0.05 is read from the trajectory (the equivalence stop it would have made).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as st

from specviz import stats

ALPHA, TAU, BATCH = 0.01, 0.05, 100
PROMPT, TEMPERATURE, TOP_K, TOP_P = "Name a colour.", 0.7, 20, 0.8


def _cpu() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime


def _design(p: np.ndarray, tv: float, alternative: str = "head-tail") -> int:
    return stats.sample_size_for_tv(p, tv, alpha=ALPHA, two_sample=True, alternative=alternative)


def _load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def smollm2_first_token_law() -> np.ndarray:
    """SmolLM2-135M's exact first-token law for notebook 05's prompt and sampling settings."""
    import torch

    import specviz as sv
    from specviz.models import load_model, load_tokenizer
    from specviz.prompts import render_prompt

    model = load_model("smollm2-135m", progress=False)
    tok = load_tokenizer("smollm2-135m", progress=False)
    ids = render_prompt(tok, PROMPT)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
    p = sv.logits_to_probs(logits, sv.SamplingParams(True, TEMPERATURE, TOP_K, TOP_P))
    p = p.double().detach().numpy()
    return np.sort(p[p > 0])[::-1] / p[p > 0].sum()


def _null_run(p: np.ndarray, cap: int, rng: np.random.Generator) -> tuple[bool, int | None]:
    """One null run: did the test ever reject (peeking after every batch to the cap), and
    after how many pairs was the TV upper end first <= TAU (None: not before the cap)."""
    x = rng.choice(p.size, size=cap, p=p).tolist()
    y = rng.choice(p.size, size=cap, p=p).tolist()
    test, bound = stats.PairedBettingTest(), stats.TVConfidenceSequence(ALPHA, tv_tolerance=TAU)
    alarm, equivalent = False, None
    for s in range(0, cap, BATCH):
        xs, ys = x[s : s + BATCH], y[s : s + BATCH]
        test.update(xs, ys)
        alarm |= test.log_e >= math.log(1 / ALPHA)
        if equivalent is None and bound.update(xs, ys) <= TAU:
            equivalent = s + len(xs)
    return alarm, equivalent


def _alt_run(p: np.ndarray, q: np.ndarray, cap: int, rng: np.random.Generator) -> int | None:
    """Pairs until the test rejects (checked every batch), None if not by ``cap``."""
    x = rng.choice(p.size, size=cap, p=p).tolist()
    y = rng.choice(p.size, size=cap, p=q).tolist()
    test = stats.PairedBettingTest()
    for s in range(0, cap, BATCH):
        test.update(x[s : s + BATCH], y[s : s + BATCH])
        if test.log_e >= math.log(1 / ALPHA):
            return s + BATCH
    return None


def exact(args: argparse.Namespace) -> None:
    laws = {f"zipf-{k}": stats.zipf_law(k) for k in (4, 6, 10)}
    laws |= {f"uniform-{k}": stats.uniform_law(k) for k in (4, 10)}
    if not args.no_model:
        laws["smollm2 first token"] = smollm2_first_token_law()
    t0, c0 = time.perf_counter(), _cpu()
    print(f"# started {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {_load()}")
    print(
        f"# exact multinomials, alpha={ALPHA}, checks after every batch of {BATCH} pairs; "
        f"tolerance TV {TAU}; cap = 1.5x the fixed-n design for TV {TAU} against the "
        f"least-favourable difference (LF: two-sample Pearson, 90% power; the default cap of "
        f"consistency_check(sequential=True)); HT = the head-tail design (mass moved from the "
        f"likelier half to the rarer half, the generic power statements' alternative and the "
        f"cap's basis before); seeded (numpy default_rng per law and section)"
    )
    print("\n## Null: false alarms under continuous peeking (to the cap), equivalence stop")
    print(
        "law | outcomes | fixed-n HT(0.05) | fixed-n LF(0.05) | cap (1.5x LF) | runs | "
        "false alarms (rate; 99% bound) | equivalent before the cap | equivalent before 1.5x HT "
        "(the old cap) | median samples to equivalent (x LF; x HT)"
    )
    for i, (name, p) in enumerate(laws.items()):
        ht, lf = _design(p, TAU), _design(p, TAU, "least-favourable")
        cap = math.ceil(1.5 * lf)
        rng = np.random.default_rng(1000 + i)
        res = [_null_run(p, cap, rng) for _ in range(args.runs)]
        alarms = sum(a for a, _ in res)
        eq = np.array([e for _, e in res if e is not None])
        old = int(np.sum(eq <= math.ceil(1.5 * ht)))
        bound = int(st.binom.ppf(0.99, args.runs, ALPHA))
        med = (
            f"{np.median(eq):.0f} ({np.median(eq) / lf:.2f}x; {np.median(eq) / ht:.2f}x)"
            if eq.size
            else "-"
        )
        print(
            f"{name} | {p.size} | {ht} | {lf} | {cap} | {args.runs} | {alarms} "
            f"({alarms / args.runs:.4f}; {bound}) {'OK' if alarms <= bound else 'OVER'} | "
            f"{eq.size / args.runs:.3f} {'OK' if eq.size >= 0.8 * args.runs else 'BELOW 0.8'} "
            f"| {old / args.runs:.3f} | {med}",
            flush=True,
        )
    print(
        "\n## Alternatives: samples to rejection vs the fixed-n design (90% power) for the same "
        "alternative; HT alternatives on every law, LF alternatives where they differ from HT"
    )
    print(
        "law | alternative | TV | runs | fixed-n(TV, this alternative) | median | "
        "q90 (= n for 90% power) | q90 / fixed-n(TV) | median / fixed-n(TV) | "
        "median / fixed-n HT(0.05) | median / fixed-n LF(0.05) | rejected by the cap (1.5x LF)"
    )
    for i, (name, p) in enumerate(laws.items()):
        ht05, lf05 = _design(p, TAU), _design(p, TAU, "least-favourable")
        for k, kind in enumerate(("head-tail", "least-favourable")):
            for j, tv in enumerate((0.05, 0.1, 0.2)):
                q = stats.tv_alternative(p, tv, kind=kind)
                if kind != "head-tail" and np.allclose(q, stats.tv_alternative(p, tv)):
                    continue
                design = _design(p, tv, kind)
                rng = np.random.default_rng(2000 + 10 * i + j + 100 * k)
                cap = max(3 * design, math.ceil(1.5 * lf05))
                n = np.array(
                    [r or np.inf for r in (_alt_run(p, q, cap, rng) for _ in range(args.alt_runs))]
                )
                med, q90 = np.median(n), np.quantile(n, 0.9)
                print(
                    f"{name} | {'HT' if k == 0 else 'LF'} | {tv} | {args.alt_runs} | {design} | "
                    f"{med:.0f} | {q90:.0f} | {q90 / design:.2f} | {med / design:.2f} | "
                    f"{med / ht05:.3f} | {med / lf05:.3f} | {np.mean(n <= 1.5 * lf05):.3f}",
                    flush=True,
                )
    print(
        f"\n# {time.perf_counter() - t0:.0f} s wall, {_cpu() - c0:.0f} s CPU (2-core machine "
        f"shared with other helpers' jobs: wall time is not a speed claim); finished "
        f"{time.strftime('%H:%M UTC', time.gmtime())}, {_load()}"
    )


# ------------------------------------------------------------------------------ real model


def _runs(spec: str | None, total: int) -> range:
    if spec is None:
        return range(total)
    lo, hi = (int(x) for x in spec.split("-"))
    return range(lo, hi + 1)


def real(args: argparse.Namespace) -> None:
    import torch

    import specviz as sv
    from specviz.checks import consistency_check
    from specviz.checks.sequential import fixed_n_design
    from specviz.fixtures.memo import memo_pair
    from specviz.models import load_model, load_tokenizer
    from specviz.prompts import render_prompt

    torch.set_num_threads(args.threads)
    model = load_model("smollm2-135m", progress=False)
    tok = load_tokenizer("smollm2-135m", progress=False)
    ids = render_prompt(tok, PROMPT)
    target, draft = memo_pair(model, 1.0)
    params = sv.SamplingParams(True, TEMPERATURE, TOP_K, TOP_P)
    # the exact marginal laws of both positions -> the fixed-n design and the cap
    p0 = sv.logits_to_probs(target.next_logits(ids), params).double().numpy()
    p1 = sum(
        p0[t] * sv.logits_to_probs(target.next_logits(ids + [t]), params).double().numpy()
        for t in np.flatnonzero(p0)
    )
    design, _ = fixed_n_design([p0, p1], TAU, ALPHA)  # least-favourable: the default cap's
    head_tail = max(_design(p[p > 0] / p[p > 0].sum(), TAU) for p in (p0, p1))
    cap = math.ceil(1.5 * design)
    out = Path(args.out)
    done = set()
    if out.exists():
        done = {json.loads(line)["run"] for line in out.read_text().splitlines() if line.strip()}
    for run in _runs(args.only_runs, args.runs):
        if run in done:
            continue
        c0 = _cpu()
        rep = consistency_check(
            target,
            draft,
            [ids],
            n_samples=cap,
            max_new_tokens=2,
            temperature=TEMPERATURE,
            top_k=TOP_K,
            top_p=TOP_P,
            gamma=2,
            seed=1000 * run + 1,
            batch_size=BATCH,
            progress=False,
            sequential=True,
            tv_tolerance=1e-6,  # never stop for equivalence: peek to the cap
        )
        traj = rep.trajectory
        eq = traj.samples_per_arm[traj.tv_upper <= TAU]
        rec = dict(
            run=run,
            false_alarm=rep.decision == "inconsistent",
            samples_per_arm=rep.samples_per_arm,
            max_e=float(traj.e_value.max()),
            equivalent_at=int(eq.iloc[0]) if len(eq) else None,
            cap=cap,
            fixed_n=design,
            fixed_n_head_tail=head_tail,
            cpu_s=round(_cpu() - c0, 1),
            load=round(os.getloadavg()[0], 1),
        )
        with out.open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
        print(json.dumps(rec), flush=True)


def summarize(args: argparse.Namespace) -> None:
    recs = [json.loads(line) for line in Path(args.file).read_text().splitlines() if line]
    n = len(recs)
    alarms = sum(r["false_alarm"] for r in recs)
    eq = np.array([r["equivalent_at"] for r in recs if r["equivalent_at"] is not None])
    cap, design = recs[0]["cap"], recs[0]["fixed_n"]
    ht = recs[0].get("fixed_n_head_tail")
    bound = int(st.binom.ppf(0.99, n, ALPHA))
    print(
        f"# SmolLM2-135M (memoised target, noisy-copy draft, lossless rule), prompt {PROMPT!r}, "
        f"2-token continuations, T={TEMPERATURE} top-k {TOP_K} top-p {TOP_P}, gamma 2, "
        f"consistency_check(sequential=True), batches of {BATCH}, alpha={ALPHA}, "
        f"cap {cap} = 1.5x the fixed-n design for TV {TAU} ({design} per arm, exact marginals"
        + (
            f", least-favourable difference; the head-tail design, the cap's basis before, is {ht})"
            if ht
            else ")"
        )
    )
    loads = [r["load"] for r in recs if "load" in r]
    if loads:
        print(
            f"# 1-minute load average when runs finished: median {np.median(loads):.1f}, "
            f"max {max(loads):.1f} (2 cores shared with other helpers: CPU times are noisy)"
        )
    print(
        f"null runs: {n}; false alarms (peeking after every batch to the cap): {alarms} "
        f"({alarms / max(n, 1):.4f}; binomial 99% bound {bound}: "
        f"{'OK' if alarms <= bound else 'OVER'}); largest e-value seen "
        f"{max(r['max_e'] for r in recs):.3g}"
    )
    if eq.size:
        print(
            f"equivalent within {TAU} before the cap: {eq.size}/{n} = {eq.size / n:.3f} "
            f"{'OK' if eq.size >= 0.8 * n else 'BELOW 0.8'}; median samples {np.median(eq):.0f} "
            f"({np.median(eq) / design:.2f}x the fixed-n design)"
        )
        if ht:
            old = int(np.sum(eq <= math.ceil(1.5 * ht)))
            print(
                f"  of these, before 1.5x the head-tail design ({math.ceil(1.5 * ht)}, the old "
                f"cap): {old}/{n} = {old / n:.3f}"
            )
    print(f"CPU per run: median {np.median([r['cpu_s'] for r in recs]):.1f} s")
    missing = sorted(set(range(max(r["run"] for r in recs) + 1)) - {r["run"] for r in recs})
    if missing:
        print(f"runs missing (not yet run): {missing[:20]}{' ...' if len(missing) > 20 else ''}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="part", required=True)
    ex = sub.add_parser("exact")
    ex.add_argument("--runs", type=int, default=1000, help="null runs per law")
    ex.add_argument("--alt-runs", type=int, default=200, help="runs per law and TV")
    ex.add_argument("--no-model", action="store_true", help="skip SmolLM2's first-token law")
    re_ = sub.add_parser("real")
    re_.add_argument("--runs", type=int, default=200)
    re_.add_argument("--only-runs", default=None, help="e.g. 50-99 (to split over processes)")
    re_.add_argument("--out", default="benchmarks/results/sequential_smollm2.jsonl")
    re_.add_argument("--threads", type=int, default=1)
    su = sub.add_parser("summarize")
    su.add_argument("file")
    args = ap.parse_args()
    {"exact": exact, "real": real, "summarize": summarize}[args.part](args)


if __name__ == "__main__":
    sys.exit(main())
