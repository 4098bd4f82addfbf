"""Cross-vocabulary drafting on a real pair: SmolLM2-135M drafts for Qwen2.5-Coder-1.5B.

    .venv/bin/python benchmarks/cross_vocab.py --tokens 16 --samples 600 --zoo-cap 300 --threads 1

Two model families, two tokenizers (49,152 vs 151,936 tokens). One run, four parts:

1. Greedy, held-out prompts of every category (``specviz.prompts``): specviz plain decoding,
   ``cross_vocab="string"`` and ``cross_vocab="intersection"`` with the SmolLM2 draft, the
   same-family Qwen2.5-Coder-0.5B draft, and transformers ``generate`` with
   ``assistant_model=, tokenizer=, assistant_tokenizer=`` (universal assisted generation;
   ``--hf-plain`` adds transformers plain ``generate``).
   Systems run interleaved (order rotated per prompt); every output must be token for token
   plain greedy decoding, or the script stops. transformers runs on the stock kernels of the
   same model objects; specviz too unless ``--packed``: then the packed oneDNN weights
   *replace* the dense ones once packed (``keep_dense=False``; peak RSS measured 16.7 GiB, since
   each model's two copies coexist while it is packed, where keeping both copies thrashed this
   23 GB machine) and transformers runs on the same packed kernels, so its ratio to specviz
   compares the decoding loops on one set of kernels.
2. Per category: mean accepted length, draft cost ratio c (seconds per drafted token over
   seconds per plain decode step of the same prompt) and speedup over plain decoding
   (tokens/s ratio, same cell), SmolLM2-135M -> 1.5B against Qwen 0.5B -> 1.5B.
3. The intersection's coverage: the share of the target's probability mass on tokens the
   SmolLM2 draft can propose, at every position of the plain greedy outputs, per category.
4. Sampled ``"intersection"`` through ``consistency_check`` (with its power statement), and the
   exact first-token TV of each cross-vocabulary shortcut on the same real context with the
   samples a test needs; each shortcut is then run through ``consistency_check`` at that size
   (capped by ``--zoo-cap``; a shortcut that needs more says so).

Write the committed output with ``... | tee benchmarks/results/cross_vocab.txt``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import statistics
import time
from collections import defaultdict

import torch

import specviz as sv
from specviz.core.packed import stock_linears
from specviz.core.runners import as_runner
from specviz.core.sampling import SamplingParams
from specviz.drafting import CrossVocabDrafter
from specviz.drafting.cross_vocab import target_mass_coverage
from specviz.effects.cross_vocab import cross_vocab_zoo_effects
from specviz.models import load_model, load_pair, load_tokenizer
from specviz.perf.metrics import aggregate, peak_rss_bytes, request_metrics
from specviz.prompts import CATEGORIES, load_prompts, render_prompt
from specviz.verification.zoo import CROSS_VOCAB_ZOO

TARGET, SMOL, QWEN_DRAFT = "qwen2.5-coder-1.5b", "smollm2-135m", "qwen2.5-coder-0.5b"


def hf_generate(target, ids, tokens, eos, assistant=None, tok=None, assistant_tok=None, gamma=4):
    x = torch.tensor([ids])
    kw: dict = {}
    if assistant is not None:
        cfg = assistant.generation_config
        cfg.num_assistant_tokens = gamma  # the same gamma as specviz, every step
        cfg.num_assistant_tokens_schedule = "constant"
        cfg.assistant_confidence_threshold = 0.0
        kw = dict(assistant_model=assistant, tokenizer=tok, assistant_tokenizer=assistant_tok)
    out = target.generate(
        x,
        attention_mask=torch.ones_like(x),
        max_new_tokens=tokens,
        do_sample=False,
        temperature=None,
        top_p=None,
        top_k=None,
        repetition_penalty=None,
        eos_token_id=eos,
        pad_token_id=eos,
        **kw,
    )
    return out[0, len(ids) :].tolist()


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--samples", type=int, default=1000, help="consistency_check, per arm")
    ap.add_argument("--check-tokens", type=int, default=2)
    ap.add_argument("--zoo-cap", type=int, default=2000, help="most samples per shortcut check")
    ap.add_argument("--stride", type=int, default=4, help="shortcut contexts: every Nth position")
    ap.add_argument("--limit", type=int, default=None, help="first N prompts only (smoke runs)")
    ap.add_argument(
        "--packed",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="packed (oneDNN) weights in place of the dense ones, for specviz and transformers "
        "alike (default: stock kernels)",
    )
    ap.add_argument("--hf-plain", action="store_true", help="also transformers plain generate")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    T, G = args.tokens, args.gamma

    # load_pair refuses two tokenizers unless told how to bridge them
    try:
        load_pair(TARGET, SMOL, progress=False)
        raise SystemExit("load_pair accepted two different tokenizers")
    except sv.models.VocabMismatchError as err:
        refusal = str(err)
    lean = dict(packed=args.packed, keep_dense=not args.packed)
    target, inter, tok = load_pair(TARGET, SMOL, cross_vocab="intersection", progress=False,
                                   **lean)  # fmt: skip
    smol = inter.draft_model
    smol_tok = load_tokenizer(SMOL, progress=False)
    string = CrossVocabDrafter(smol, smol_tok, tok, method="string",
                               target_vocab_size=inter.vocab_size)  # fmt: skip
    qdraft = load_model(QWEN_DRAFT, progress=False, **lean)
    eos = tok.eos_token_id
    models = (target, smol, qdraft)
    print(f"# benchmarks/cross_vocab.py --per-category {args.per_category} --tokens {T} "
          f"--gamma {G} --samples {args.samples} --check-tokens {args.check_tokens} "
          f"--zoo-cap {args.zoo_cap}")  # fmt: skip
    print(f"# {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPU cores, torch {torch.__version__}"
          f" with {torch.get_num_threads()} threads, fp32, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f} at start; specviz on "
          f"{'packed' if args.packed else 'stock'} weights, transformers on "
          f"{'the same packed' if args.packed else 'stock'} kernels")  # fmt: skip
    print(f"target {TARGET} ({len(tok):,} tokens), drafts {SMOL} ({len(smol_tok):,} tokens, "
          f"another tokenizer) and {QWEN_DRAFT} (the target's tokenizer)")  # fmt: skip
    print(f"load_pair({TARGET!r}, {SMOL!r}) without cross_vocab refuses: ...{refusal[-150:]}")
    print(f"intersection: {len(inter.shared_tokens()):,} of {len(smol_tok):,} draft tokens have "
          f"a target token of the same bytes")  # fmt: skip

    def plain(x):
        return sv.autoregressive_generate(target, x, max_new_tokens=T, eos_token_id=eos)

    def spec(draft):
        return lambda x: sv.speculative_generate(target, draft, x, gamma=G, max_new_tokens=T,
                                                 eos_token_id=eos)  # fmt: skip

    def stock_if_dense():
        return contextlib.nullcontext() if args.packed else stock_linears(*models)

    def on_stock(fn):
        def run(x):
            with stock_if_dense():
                return fn(x)

        return run

    systems = {
        "sv_plain": plain,
        "sv_string[smol]": spec(string),
        "sv_intersection[smol]": spec(inter),
        "sv_spec[qwen0.5b]": spec(qdraft),
        "hf_universal[smol]": on_stock(
            lambda x: hf_generate(target, x, T, eos, smol, tok, smol_tok, G)
        ),
    }
    if args.hf_plain:
        systems["hf_plain"] = on_stock(lambda x: hf_generate(target, x, T, eos))
    held = load_prompts(split="heldout", per_category=args.per_category)
    cells = [(p.category, render_prompt(tok, p)) for p in held][: args.limit]
    # warm-up, short: first calls pay one-off costs
    sv.autoregressive_generate(target, cells[0][1], max_new_tokens=4)
    for draft in (inter, string, qdraft):
        sv.speculative_generate(target, draft, cells[0][1], gamma=G, max_new_tokens=4)
    with stock_if_dense():
        hf_generate(target, cells[0][1], 4, eos, smol, tok, smol_tok, G)

    names = list(systems)
    rows = []  # (category, prompt index, system, tokens, seconds, result or None)
    identical = defaultdict(int)
    text_identical = 0
    print(f"\n## 1. greedy, {len(cells)} held-out prompts x {T} tokens, gamma {G}, order rotated")
    for i, (cat, x) in enumerate(cells):
        order = names[i % len(names) :] + names[: i % len(names)]
        outs = {}
        for name in order:
            t0 = time.perf_counter()
            out = systems[name](x)
            took = time.perf_counter() - t0
            toks = out if isinstance(out, list) else out.new_tokens
            outs[name] = toks
            rows.append((cat, i, name, len(toks), took, None if isinstance(out, list) else out))
        ref = outs["sv_plain"]
        for name, toks in outs.items():
            if toks != ref:
                first = next((j for j, (a, b) in enumerate(zip(toks, ref, strict=False)) if a != b),
                             min(len(toks), len(ref)))  # fmt: skip
                raise SystemExit(f"prompt {i} ({cat}): {name} differs from plain greedy at "
                                 f"token {first}")  # fmt: skip
            identical[name] += 1
        text_identical += tok.decode(outs["hf_universal[smol]"]) == tok.decode(ref)
        took = {r[2]: r[4] for r in rows if r[1] == i}
        print(f"  [{i}] {cat:<18} {len(ref)} tokens; seconds: "
              + ", ".join(f"{n} {took[n]:.1f}" for n in names), flush=True)  # fmt: skip
    n = len(cells)
    print("greedy tokens identical to specviz plain greedy decoding: "
          + ", ".join(f"{k} {v}/{n}" for k, v in identical.items()))  # fmt: skip
    print(
        f"transformers universal assisted generation: decoded text identical {text_identical}/{n}"
    )

    def cell_tps(name):
        return {r[1]: r[3] / r[4] for r in rows if r[2] == name}

    tps = {name: cell_tps(name) for name in names}
    print("\ntokens/s (median over prompts) and same-cell ratios (geometric mean over prompts):")
    for name in names:
        print(f"  {name:<24} {statistics.median(tps[name].values()):6.2f} tok/s")

    def ratio(a, b):
        return geomean([tps[a][i] / tps[b][i] for i in tps[a]])

    for a, b in [
        ("sv_string[smol]", "hf_universal[smol]"),
        ("sv_intersection[smol]", "hf_universal[smol]"),
        *([("hf_universal[smol]", "hf_plain"), ("sv_plain", "hf_plain")] if args.hf_plain else []),
        ("sv_string[smol]", "sv_plain"),
        ("sv_intersection[smol]", "sv_plain"),
        ("sv_spec[qwen0.5b]", "sv_plain"),
    ]:
        print(f"  {a} / {b}: {ratio(a, b):.2f}x")

    # -- 2. the table ---------------------------------------------------------------------------
    print("\n## 2. per category (greedy, gamma 4): mean accepted length L (tokens per target "
          "call), draft cost ratio c, speedup over plain (same prompt, same run)")  # fmt: skip
    plain_step = {r[1]: r[4] / max(r[3], 1) for r in rows if r[2] == "sv_plain"}
    drafters = [("SmolLM2-135M (intersection)", "sv_intersection[smol]"),
                ("SmolLM2-135M (string)", "sv_string[smol]"),
                ("Qwen 0.5B", "sv_spec[qwen0.5b]")]  # fmt: skip
    cats = [c for c in CATEGORIES if any(cat == c for cat, _ in cells)]
    header = "| draft -> Qwen2.5-Coder-1.5B | " + " | ".join(c.replace("_", " ") for c in cats)
    for label, key in [("mean accepted length", "L"), ("draft cost ratio c", "c"),
                       ("speedup over plain", "s")]:  # fmt: skip
        print(f"\n{label}:\n\n{header} | all |\n|---|" + "---:|" * (len(cats) + 1))
        for dname, sys_name in drafters:
            vals = []
            for c in [*cats, None]:
                sel = [r for r in rows if r[2] == sys_name and (c is None or r[0] == c)]
                if key == "s":
                    vals.append(
                        f"{geomean([tps[sys_name][r[1]] / tps['sv_plain'][r[1]] for r in sel]):.2f}x"
                    )
                    continue
                agg = aggregate([request_metrics(r[5], target_step_time=plain_step[r[1]])
                                 for r in sel])  # fmt: skip
                vals.append(f"{agg.mean_accepted_length:.2f}" if key == "L"
                            else f"{agg.draft_cost_ratio:.3f}")  # fmt: skip
            print(f"| {dname} | " + " | ".join(vals) + " |")

    # -- 3. coverage ----------------------------------------------------------------------------
    print("\n## 3. the intersection's coverage: target probability mass on tokens the SmolLM2 "
          "draft can propose (T = 1), along each plain greedy output")  # fmt: skip
    reach = inter.reachable()
    by_cat = defaultdict(list)
    greedy_in = defaultdict(list)
    contexts = []  # (category, context ids, target logits there): the shortcuts' candidates
    for cat, i, name, _, _, res in rows:
        if name != "sv_plain":
            continue
        x, new = cells[i][1], res.new_tokens
        with torch.inference_mode():  # one target pass over prompt + output
            logits = as_runner(target).extend(torch.tensor(x + new[:-1]), len(new))
        by_cat[cat] += target_mass_coverage(logits, reach).tolist()
        greedy_in[cat] += reach[torch.tensor(new)].tolist()
        for pos in range(0, len(new), args.stride):
            contexts.append((cat, x + new[:pos], logits[pos], len(x)))
    print("\n| category | positions | mean coverage | min coverage | greedy token reachable |")
    print("|---|---:|---:|---:|---:|")
    for c in cats:
        v = by_cat[c]
        print(f"| {c.replace('_', ' ')} | {len(v)} | {statistics.mean(v):.4f} | {min(v):.4f} | "
              f"{sum(greedy_in[c]) / len(greedy_in[c]):.1%} |")  # fmt: skip
    allv = [x for c in cats for x in by_cat[c]]
    print(
        f"| all | {len(allv)} | {statistics.mean(allv):.4f} | {min(allv):.4f} | "
        f"{sum(sum(greedy_in[c]) for c in cats) / sum(len(greedy_in[c]) for c in cats):.1%} |"
    )

    # -- 4. sampling ------------------------------------------------------------------------------
    params = SamplingParams(True, 1.0)
    print(f"\n## 4. the shortcuts on real logits: exact first-token TV at {len(contexts)} contexts "
          f"(every {args.stride}th position of the plain greedy outputs above, T = 1)\n")  # fmt: skip
    found = []
    for cat, ctx, logits, n_prompt in contexts:
        effects = cross_vocab_zoo_effects(logits, inter, tuple(ctx), params)
        found.append((cat, ctx, effects, n_prompt))
    print("| shortcut | median TV | max TV | category of the max | lossless TV (max) |")
    print("|---|---:|---:|---|---:|")
    for name in CROSS_VOCAB_ZOO:
        tvs = [e.loc[name, "tv"] for _, _, e, _ in found]
        k = max(range(len(tvs)), key=tvs.__getitem__)
        print(f"| `{name}` | {statistics.median(tvs):.4f} | {tvs[k]:.4f} | {found[k][0]} | "
              f"{max(e.loc['lossless', 'tv'] for _, _, e, _ in found):.1e} |")  # fmt: skip
    # the stated context: where the smallest of the shortcuts' TVs is largest
    cat, x, effects, n_prompt = max(
        found, key=lambda f: min(f[2].loc[n, "tv"] for n in CROSS_VOCAB_ZOO)
    )
    print(f"\nstated context: {cat}, {len(x)} tokens (prompt + {len(x) - n_prompt} "
          f"generated); sampled intersection, T = 1, {args.check_tokens}-token continuations, "
          f"gamma 2")  # fmt: skip
    t0 = time.perf_counter()
    rep = sv.consistency_check(target, inter, [x], n_samples=args.samples,
                               max_new_tokens=args.check_tokens, gamma=2, seed=0,
                               eos_token_id=eos, progress=False)  # fmt: skip
    print(f"consistency_check (lossless): {rep.outcome}, {time.perf_counter() - t0:.0f} s")
    print(rep.summary())
    print(
        "\nexact first-token law on the stated context (the drafter's own law functions), "
        "90% power at alpha 0.01:\n"
    )
    print(
        "| verifier | first-token TV | n one-sample | n per arm, two-sample | consistency_check |"
    )
    print("|---|---:|---:|---:|---|")
    for name, r in effects.iterrows():
        n2 = r.n_two_sample
        shown = "-" if math.isinf(n2) else f"{int(n2):,}"
        n1 = "-" if math.isinf(r.n_one_sample) else f"{int(r.n_one_sample):,}"
        if name == "lossless":
            verdict = f"{rep.outcome} at {args.samples:,} per arm"
        elif math.isinf(n2) or n2 > args.zoo_cap:
            verdict = f"not run: needs {shown} per arm (> cap {args.zoo_cap:,})"
        else:
            size = max(int(n2), 200)
            t0 = time.perf_counter()
            bad = sv.consistency_check(target, inter, [x], n_samples=size,
                                       max_new_tokens=args.check_tokens, gamma=2, seed=1,
                                       verifier=name, eos_token_id=eos, progress=False)  # fmt: skip
            worst = float(bad.tests.holm.min())
            verdict = (f"{bad.verdict} at {size:,} per arm (Holm p = {worst:.2g}, "
                       f"{time.perf_counter() - t0:.0f} s)")  # fmt: skip
        print(f"| `{name}` | {r.tv:.4f} | {n1} | {shown} | {verdict} |", flush=True)
    assert set(CROSS_VOCAB_ZOO) <= set(effects.index)
    print(f"\ntotal wall time {time.perf_counter() - t_start:.0f} s, load average "
          f"{os.getloadavg()[0]:.1f} at the end, peak RSS {peak_rss_bytes() / 2**30:.1f} GiB")  # fmt: skip


if __name__ == "__main__":
    main()
