"""One command for the committed drafter table: benchmarks/results/drafters.{md,csv}.

    python scripts/results_table.py                                   # the committed table
    python scripts/results_table.py --smol-per-category 5 --qwen-per-category 3
    python scripts/results_table.py --skip-qwen                       # SmolLM2 only

Runs :func:`specviz.analysis.run_grid` on the ``heldout`` prompts (the head was trained on
``train``) for

* SmolLM2-135M: prompt lookup, suffix (one session across the prompts), early exit, the trained
  EAGLE-style head, and the head with prompt lookup in front of it;
* Qwen2.5-Coder-1.5B: the 0.5B model as draft, prompt lookup, suffix, early exit;

then pools per drafter x category (mean accepted length = tokens per target call, speedup =
tokens/s over the plain baseline measured in the same run) and writes a Markdown table and a
CSV. Greedy cells must reproduce the baseline's tokens exactly: the script refuses to write
the table (and exits non-zero, naming the cells) if any differs. Every cell is cached
(``--cache-dir``), so a re-run only formats, and an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402
import torch  # noqa: E402

from specviz.drafting import EarlyExitDrafter, PromptLookupDrafter  # noqa: E402
from specviz.drafting.heads import HeadDrafter  # noqa: E402
from specviz.drafting.suffix import SuffixDrafter  # noqa: E402
from specviz.lab.analysis import Session, run_grid, session, summarize  # noqa: E402
from specviz.models import load_model, load_pair, load_tokenizer  # noqa: E402
from specviz.prompts import load_prompts  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "drafters"
# Most structured first, open writing last: the order the article's argument reads in.
ORDER = [
    "structured",
    "extraction",
    "code",
    "summarization",
    "math_reasoning",
    "translation",
    "question_answering",
    "chat_writing",
]


def log(msg: str) -> None:
    print(f"[results_table {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def smollm2_grid(args) -> pd.DataFrame:
    """Two grids: the drafters that need no trained weights, then the head cells, whose cache
    key carries the weights' hash (retraining recomputes them and nothing else). Each grid
    measures its own baseline, so every speedup is against a baseline of the same run."""
    model, tok = load_model("smollm2-135m", progress=False), load_tokenizer("smollm2-135m")
    layers = args.early_exit_layers
    plain = {
        "prompt lookup": PromptLookupDrafter,
        "suffix (session)": session(SuffixDrafter),
        f"early exit (L={layers})": lambda: EarlyExitDrafter(model, layers),
    }
    heads = {  # drafter objects: start() resets them per generation
        "EAGLE-style head": HeadDrafter.from_pretrained(model),
        "EAGLE-style head + lookup": HeadDrafter.from_pretrained(
            model, lookup=PromptLookupDrafter(max_ngram=3, min_ngram=2)
        ),
    }
    prompts = load_prompts(split="heldout", per_category=args.smol_per_category)
    log(f"SmolLM2-135M: {len(prompts)} prompts x {len(plain) + len(heads)} drafters")
    kw = dict(
        tokenizer=tok,
        gammas=(args.gamma,),
        modes=tuple(args.modes),
        max_new_tokens=args.smol_max_new_tokens,
        seed=args.seed,
        cache_dir=args.cache_dir,
        model_name="smollm2-135m",
        progress=True,
    )
    parts = [] if args.skip_plain else [run_grid(model, plain, prompts, **kw)]
    if not args.skip_head:
        tag = f"head={heads['EAGLE-style head'].cache_tag}"  # the weights' fingerprint
        parts.append(run_grid(model, heads, prompts, tag=tag, **kw))
    df = pd.concat(parts, ignore_index=True)
    df.attrs = {k: sum(p.attrs.get(k, 0) for p in parts) for k in ("computed", "cached")}
    df["model"] = "SmolLM2-135M"
    return df


def qwen_grid(args) -> pd.DataFrame:
    target, draft, tok = load_pair("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", progress=False)
    layers = args.qwen_early_exit_layers
    drafters = {
        "draft model (0.5B)": draft,
        "prompt lookup": PromptLookupDrafter,
        "suffix (session)": session(SuffixDrafter),
        f"early exit (L={layers})": lambda: EarlyExitDrafter(target, layers),
    }
    prompts = load_prompts(split="heldout", per_category=args.qwen_per_category)
    if args.fill_cache_reverse:  # a second process: the non-session cells, last prompt first
        drafters = {k: v for k, v in drafters.items() if not isinstance(v, Session)}
        prompts = prompts[::-1]
    log(f"Qwen2.5-Coder-1.5B: {len(prompts)} prompts x {len(drafters)} drafters (+ baseline)")
    df = run_grid(
        target,
        drafters,
        prompts,
        tokenizer=tok,
        gammas=(args.gamma,),
        modes=tuple(args.modes),
        max_new_tokens=args.qwen_max_new_tokens,
        seed=args.seed,
        cache_dir=args.cache_dir,
        model_name="qwen2.5-coder-1.5b",
        progress=True,
    )
    df["model"] = "Qwen2.5-Coder-1.5B"
    return df


def check_greedy_identity(df: pd.DataFrame) -> None:
    """Raise if any greedy cell's tokens differ from the baseline's on the same prompt."""
    g = df[(df["mode"] == "greedy") & (df["drafter"] != "baseline")]
    bad = g[g["greedy_identical"] != True]  # noqa: E712 (None/NaN count as failures too)
    if len(bad):
        cells = ", ".join(f"{r.model}/{r.drafter}/{r.prompt_id}" for r in bad.itertuples())
        raise SystemExit(
            f"greedy identity FAILED in {len(bad)} of {len(g)} cells: {cells}. "
            "Not writing the table."
        )


# -- formatting ------------------------------------------------------------------------------


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    parts = []
    for model, g in df.groupby("model", sort=False):
        s = summarize(g, by=("drafter", "category", "gamma", "mode"))
        parts.append(s.assign(model=model))
    out = pd.concat(parts, ignore_index=True)
    cols = ["model", "mode", "gamma", "drafter", "category"]
    return out[cols + [c for c in out.columns if c not in cols]]


def _pivot(s: pd.DataFrame, value: str, fmt: str, identity: bool = False) -> str:
    """drafter x category table of ``value``; with ``identity`` a last column counts the
    greedy cells (prompts) whose tokens equal the baseline's."""
    cats = [c for c in ORDER if c in set(s["category"])] + ["all"]
    p = s.pivot_table(index="drafter", columns="category", values=value, sort=False)[cats]
    alls = s[s["category"] == "all"].set_index("drafter")
    extra = " greedy identical |" if identity else ""
    head = "| drafter | " + " | ".join(c.replace("_", " ") for c in cats) + " |" + extra
    rule = "| --- |" + " ---: |" * len(cats) + (" :---: |" if identity else "")
    rows = []
    for d in p.index:
        row = f"| {d} | " + " | ".join(fmt.format(v) for v in p.loc[d]) + " |"
        if identity:
            n, frac = int(alls.loc[d, "prompts"]), float(alls.loc[d, "greedy_identical"])
            row += f" {round(frac * n)}/{n} |"
        rows.append(row)
    return "\n".join([head, rule, *rows])


def markdown(
    summary: pd.DataFrame, args, command: str, loads: tuple, cells: tuple[int, int] = (0, 0)
) -> str:
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    lines = [
        "# Drafters by task type",
        "",
        f"Generated {date} by `{command}`.",
        "",
        "- Prompts: `data/prompts.jsonl`, `heldout` split; "
        + "; ".join(
            f"{m} {n} per category x {t} new tokens"
            for m, n, t in (
                ("SmolLM2-135M", args.smol_per_category, args.smol_max_new_tokens),
                ("Qwen2.5-Coder-1.5B", args.qwen_per_category, args.qwen_max_new_tokens),
            )
            if m in set(summary["model"])
        )
        + ".",
        f"- gamma = {args.gamma}; modes: {', '.join(args.modes)} "
        "(greedy = greedy matching; sampled = T 0.7, top-p 0.9, lossless rule).",
        "- **Mean accepted length** = generated tokens per target call (pooled over prompts). "
        "**Speedup** = tokens/s over the plain baseline (`autoregressive_generate`) on the same "
        "prompt, measured in the same run; `all` pools every prompt.",
        f"- Machine: {os.cpu_count()} CPU cores, torch {torch.__version__} with "
        f"{torch.get_num_threads()} threads, fp32, Python {platform.python_version()}. "
        f"This invocation computed {cells[0]} cells and loaded {cells[1]} from the grid cache "
        "(timings are those of the run that computed each cell); load average (1 min) "
        f"{loads[0]:.1f} at its start and {loads[1]:.1f} at its end. The cores are shared with "
        "other work, so speedups carry timing noise; accepted lengths do not.",
        "- Suffix = `SuffixDrafter`, one session per model and mode: its memory grows over "
        "the prompts in table order (cross-request reuse), so later prompts profit from "
        "earlier ones.",
        "",
    ]
    for (model, mode), s in summary.groupby(["model", "mode"], sort=False):
        ident = s.loc[s["category"] == "all", "greedy_identical"]
        lines += [f"## {model} ({mode})", ""]
        lines += ["Mean accepted length (tokens per target call):", ""]
        greedy = mode == "greedy" and ident.notna().any()
        lines += [_pivot(s, "mean_accepted_length", "{:.2f}", identity=greedy), ""]
        lines += ["Speedup over the plain baseline (tokens/s ratio):", ""]
        lines += [_pivot(s, "speedup", "{:.2f}x"), ""]
        if greedy:
            lines += [
                f"Greedy outputs identical to the baseline: {ident.mean():.0%} of "
                "drafter x prompt cells (token for token; the script refuses to write the "
                "table otherwise).",
                "",
            ]
        lines += [_point(s), ""]
    return "\n".join(lines)


# Tasks whose answer re-uses the prompt's text or a rigid format, and tasks that write freely.
COPY_HEAVY = ("structured", "extraction", "summarization", "translation")
OPEN = ("chat_writing", "question_answering")


def _point(s: pd.DataFrame) -> str:
    """The table's point in numbers: copy-heavy tasks vs open writing, per drafter (the mean
    over categories of the pooled mean accepted length)."""
    per = s[s["category"] != "all"].pivot_table(
        index="drafter", columns="category", values="mean_accepted_length", sort=False
    )
    rows = [
        "Copy-heavy tasks (structured, extraction, summarization, translation) vs open ones "
        "(chat writing, question answering), mean accepted length:",
        "",
        "| drafter | copy-heavy | open | ratio |",
        "| --- | ---: | ---: | ---: |",
    ]
    flat = []
    for d in per.index:
        a = per.loc[d, [c for c in COPY_HEAVY if c in per.columns]].mean()
        b = per.loc[d, [c for c in OPEN if c in per.columns]].mean()
        rows.append(f"| {d} | {a:.2f} | {b:.2f} | {a / b:.2f}x |")
        if a / b < 1.2:
            flat.append(f"{d} ({a / b:.2f}x)")
    if flat:  # say so when a drafter does not show the point
        rows += [
            "",
            "Not every drafter shows it: " + ", ".join(flat) + " -- drafters that predict "
            "rather than copy gain little from text that repeats the prompt.",
        ]
    return "\n".join(rows)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smol-per-category", type=int, default=1)
    ap.add_argument("--smol-max-new-tokens", type=int, default=64)
    ap.add_argument("--qwen-per-category", type=int, default=1)
    ap.add_argument("--qwen-max-new-tokens", type=int, default=48)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--modes", nargs="+", default=["greedy"], choices=["greedy", "sampled"])
    ap.add_argument("--early-exit-layers", type=int, default=24, help="SmolLM2 (of 30)")
    ap.add_argument("--qwen-early-exit-layers", type=int, default=21, help="Qwen 1.5B (of 28)")
    ap.add_argument("--skip-qwen", action="store_true")
    ap.add_argument("--skip-smollm2", action="store_true")
    ap.add_argument("--skip-head", action="store_true", help="SmolLM2 without the trained head")
    ap.add_argument("--skip-plain", action="store_true", help="SmolLM2: only the head cells")
    ap.add_argument(
        "--fill-cache-reverse",
        action="store_true",
        help="only fill the grid cache: Qwen, non-session drafters, prompts in reverse order "
        "(run beside the main command to share the work; a shared CPU's time is the limit)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: robust when shared)")
    ap.add_argument("--cache-dir", type=Path, default=None, help="grid cache (default: user)")
    ap.add_argument("--out", type=Path, default=OUT, help="output stem (.md and .csv)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> Path:
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    raw = sys.argv[1:] if argv is None else argv
    command = " ".join(["python scripts/results_table.py", *map(shlex.quote, raw)])
    load0 = os.getloadavg()[0]
    frames = [] if args.skip_smollm2 else [smollm2_grid(args)]
    gc.collect()
    if not args.skip_qwen:
        frames.append(qwen_grid(args))
    if not frames:
        raise SystemExit("nothing to run: both --skip-smollm2 and --skip-qwen")
    df = pd.concat(frames, ignore_index=True)
    check_greedy_identity(df)
    if args.fill_cache_reverse:
        log("grid cache filled; no table written (--fill-cache-reverse)")
        return args.cache_dir or Path()
    summary = summary_table(df)
    cells = tuple(sum(f.attrs.get(k, 0) for f in frames) for k in ("computed", "cached"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    csv = args.out.with_suffix(".csv")
    summary.to_csv(csv, index=False, float_format="%.4f")
    md = args.out.with_suffix(".md")
    md.write_text(markdown(summary, args, command, (load0, os.getloadavg()[0]), cells))
    log(f"wrote {md} and {csv}")
    return md


if __name__ == "__main__":
    main()
