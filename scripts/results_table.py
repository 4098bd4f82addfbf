"""One command for the committed drafter table: benchmarks/results/drafters.{md,csv}.

    python scripts/results_table.py                                   # default sizes
    python scripts/results_table.py --smol-per-category 5 --qwen-per-category 3
    python scripts/results_table.py --skip-qwen                       # SmolLM2 only

Runs :func:`specviz.analysis.run_grid` on the ``heldout`` prompts (the head was trained on
``train``) for

* SmolLM2-135M: prompt lookup, suffix (one session across the prompts), early exit, the trained
  EAGLE-style head;
* Qwen2.5-Coder-1.5B: the 0.5B model as draft, prompt lookup, suffix;

then pools per drafter x category (mean accepted length = tokens per target call, speedup =
tokens/s over the plain baseline measured in the same run) and writes a Markdown table and a
CSV. Every cell is cached (``--cache-dir``), so a re-run only formats, and an interrupted run
resumes.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
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

from specviz.analysis import run_grid, session, summarize  # noqa: E402
from specviz.drafters import EarlyExitDrafter, PromptLookupDrafter  # noqa: E402
from specviz.heads import HeadDrafter, default_head_path  # noqa: E402
from specviz.models import load_model, load_pair, load_tokenizer  # noqa: E402
from specviz.prompts import load_prompts  # noqa: E402
from specviz.suffix import SuffixDrafter  # noqa: E402

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


def _head_tag() -> str:
    stem = default_head_path()
    data = stem.with_name(stem.name + ".safetensors").read_bytes()
    return hashlib.sha256(data).hexdigest()[:12]


def smollm2_grid(args) -> pd.DataFrame:
    model, tok = load_model("smollm2-135m", progress=False), load_tokenizer("smollm2-135m")
    head = HeadDrafter.from_pretrained(model)  # start() resets it per generation
    drafters = {
        "prompt lookup": PromptLookupDrafter,
        "suffix (session)": session(SuffixDrafter),
        f"early exit (L={args.early_exit_layers})": lambda: EarlyExitDrafter(
            model, args.early_exit_layers
        ),
        "EAGLE-style head": head,
    }
    prompts = load_prompts(split="heldout", per_category=args.smol_per_category)
    log(f"SmolLM2-135M: {len(prompts)} prompts x {len(drafters)} drafters (+ baseline)")
    df = run_grid(
        model,
        drafters,
        prompts,
        tokenizer=tok,
        gammas=(args.gamma,),
        modes=tuple(args.modes),
        max_new_tokens=args.smol_max_new_tokens,
        seed=args.seed,
        cache_dir=args.cache_dir,
        model_name="smollm2-135m",
        tag=f"head={_head_tag()}",
        progress=True,
    )
    return df.assign(model="SmolLM2-135M")


def qwen_grid(args) -> pd.DataFrame:
    target, draft, tok = load_pair("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", progress=False)
    drafters = {
        "draft model (0.5B)": draft,
        "prompt lookup": PromptLookupDrafter,
        "suffix (session)": session(SuffixDrafter),
    }
    prompts = load_prompts(split="heldout", per_category=args.qwen_per_category)
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
    return df.assign(model="Qwen2.5-Coder-1.5B")


# -- formatting ------------------------------------------------------------------------------


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    parts = []
    for model, g in df.groupby("model", sort=False):
        s = summarize(g, by=("drafter", "category", "gamma", "mode"))
        parts.append(s.assign(model=model))
    out = pd.concat(parts, ignore_index=True)
    cols = ["model", "mode", "gamma", "drafter", "category"]
    return out[cols + [c for c in out.columns if c not in cols]]


def _pivot(s: pd.DataFrame, value: str, fmt: str) -> str:
    cats = [c for c in ORDER if c in set(s["category"])] + ["all"]
    p = s.pivot_table(index="drafter", columns="category", values=value, sort=False)[cats]
    head = "| drafter | " + " | ".join(c.replace("_", " ") for c in cats) + " |"
    rule = "| --- |" + " ---: |" * len(cats)
    rows = [f"| {d} | " + " | ".join(fmt.format(v) for v in p.loc[d]) + " |" for d in p.index]
    return "\n".join([head, rule, *rows])


def markdown(summary: pd.DataFrame, args, command: str, loads: tuple) -> str:
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    lines = [
        "# Drafters by task type",
        "",
        f"Generated {date} by `{command}`.",
        "",
        f"- Prompts: `data/prompts.jsonl`, `heldout` split; SmolLM2-135M "
        f"{args.smol_per_category} per category x {args.smol_max_new_tokens} new tokens; "
        f"Qwen2.5-Coder-1.5B {args.qwen_per_category} per category x "
        f"{args.qwen_max_new_tokens} new tokens.",
        f"- gamma = {args.gamma}; modes: {', '.join(args.modes)} "
        "(greedy = greedy matching; sampled = T 0.7, top-p 0.9, lossless rule).",
        "- **Mean accepted length** = generated tokens per target call (pooled over prompts). "
        "**Speedup** = tokens/s over the plain baseline (`autoregressive_generate`) on the same "
        "prompt, measured in the same run; `all` pools every prompt.",
        f"- Machine: {os.cpu_count()} CPU cores, torch {torch.__version__} with "
        f"{torch.get_num_threads()} threads, fp32, Python {platform.python_version()}. "
        f"Load average (1 min) {loads[0]:.1f} at the start and {loads[1]:.1f} at the end: "
        "the cores are shared, so speedups carry timing noise; accepted lengths do not.",
        "- Suffix = `SuffixDrafter`, one session per model and mode: its memory grows over "
        "the prompts in table order (cross-request reuse), so later prompts profit from "
        "earlier ones.",
        "",
    ]
    for (model, mode), s in summary.groupby(["model", "mode"], sort=False):
        ident = s.loc[s["category"] == "all", "greedy_identical"]
        lines += [f"## {model} ({mode})", ""]
        lines += ["Mean accepted length (tokens per target call):", ""]
        lines += [_pivot(s, "mean_accepted_length", "{:.2f}"), ""]
        lines += ["Speedup over the plain baseline (tokens/s ratio):", ""]
        lines += [_pivot(s, "speedup", "{:.2f}x"), ""]
        if mode == "greedy" and ident.notna().any():
            lines += [
                f"Greedy outputs identical to the baseline: {ident.mean():.0%} of "
                "drafter x prompt cells.",
                "",
            ]
        lines += [_point(s), ""]
    return "\n".join(lines)


def _point(s: pd.DataFrame) -> str:
    """One sentence with the table's point: structured vs open writing."""
    best = s[s["category"] != "all"].groupby("category")["mean_accepted_length"].max()
    if "structured" not in best or "chat_writing" not in best:
        return ""
    return (
        f"Best drafter per task: structured {best['structured']:.2f} vs chat/writing "
        f"{best['chat_writing']:.2f} tokens per target call."
    )


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smol-per-category", type=int, default=3)
    ap.add_argument("--smol-max-new-tokens", type=int, default=64)
    ap.add_argument("--qwen-per-category", type=int, default=2)
    ap.add_argument("--qwen-max-new-tokens", type=int, default=48)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--modes", nargs="+", default=["greedy"], choices=["greedy", "sampled"])
    ap.add_argument("--early-exit-layers", type=int, default=16)
    ap.add_argument("--skip-qwen", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", type=Path, default=None, help="grid cache (default: user)")
    ap.add_argument("--out", type=Path, default=OUT, help="output stem (.md and .csv)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> Path:
    args = parse(argv)
    raw = sys.argv[1:] if argv is None else argv
    command = " ".join(["python scripts/results_table.py", *map(shlex.quote, raw)])
    load0 = os.getloadavg()[0]
    frames = [smollm2_grid(args)]
    gc.collect()
    if not args.skip_qwen:
        frames.append(qwen_grid(args))
    summary = summary_table(pd.concat(frames, ignore_index=True))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    csv = args.out.with_suffix(".csv")
    summary.to_csv(csv, index=False, float_format="%.4f")
    md = args.out.with_suffix(".md")
    md.write_text(markdown(summary, args, command, (load0, os.getloadavg()[0])))
    log(f"wrote {md} and {csv}")
    return md


if __name__ == "__main__":
    main()
