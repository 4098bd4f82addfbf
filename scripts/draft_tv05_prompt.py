"""Choose the prompt and the size of the SmolLM2 in-process draft audits sized for TV 0.05 at
position 2 (``smollm2-hf-draft-tv05``: transformers assisted generation; ``smollm2-ort-draft-tv05``:
onnxruntime-genai with a draft model) before any sampling: SmolLM2-135M without vs with its
own first 8 layers as the draft, T=1, no top-k / top-p, 3 new tokens.

For each candidate (short prompts written down, with a guess, before any law was looked at)
it computes from the two models themselves -- loaded as the transformers engine loads them
(float32, stock kernels), one batched forward pass per model and candidate, no sampling --
the target's and the draft's law of the first token and, for the first tokens holding 99.9%
of the target's mass (64 at most), of the second token; from them
(:func:`specviz.audit.planning.draft_plan`):

- the predicted law of the first two tokens, binned as the audit bins samples (200 outcomes
  and a tail), and the samples per arm the position-2 test needs for 90% power at TV 0.05
  (the report's own head-tail alternative and, for comparison, the least-favourable one);
- the predicted acceptance of a drafted token at positions 1 and 2 (both engines draft with
  the draft model's sampled tokens and verify with min(1, p/q); transformers drafts the first
  token too): speculation must act there, accepted sometimes and rejected sometimes;
- the report's own power statement at the planned size, over simulated audits drawn from the
  predicted law (it is computed on the law the samples show, not on the true one).

Rule (fixed before the laws were seen): among candidates with predicted acceptance in
[0.1, 0.98] at positions 1 and 2 and >= 2 outcomes at position 2, the one whose position-2
test needs the fewest samples per arm; planned n = 1.15 x that, rounded up to 50, then raised
in steps of 10% until at least 90% of 100 simulated reports state a detectable TV <= 0.05 at
position 2. It writes ``prompt_choice.json`` into both audits' folders; the audits
(``scripts/audit_engines.py smollm2-hf-draft-tv05`` / ``smollm2-ort-draft-tv05``) take the
prompt and size from it::

    .venv/bin/python scripts/draft_tv05_prompt.py

``--pair qwen`` plans the Qwen pair's audits the same way (Qwen2.5-Coder-1.5B without vs with
the 0.5B as the draft, the laws in bfloat16 as the transformers audit loads them, candidates
from ``scripts/tv05_prompt.py``); ``--top-k K`` computes the laws with the same top-k cut in
both arms (onnxruntime-genai's Qwen audit samples with top_k 50); ``--audits`` names the
folders that take the plan::

    .venv/bin/python scripts/draft_tv05_prompt.py --pair qwen --threads 2
    .venv/bin/python scripts/draft_tv05_prompt.py --pair qwen --threads 2 --top-k 50 \
        --audits ort-qwen-draft-tv05
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from specviz.audit.planning import (
    ALPHA,
    MARGIN,
    POWER,
    TV,
    draft_plan,
    next_token_laws,
    planned_size,
    simulated_statement,
)

# (prompt, the guess written down before any law was seen)
CANDIDATES: list[tuple[str, str]] = [
    (
        "The cat sat on the mat. The dog sat on the",
        "the current smollm2 draft audits' prompt: spread (~9,000 per arm from 100 samples, "
        "reports/audit/sizes.md); the reference",
    ),
    ("1, 2, 3, 4, 5, 6, 7, 8,", "' 9' then ',' almost surely: one dominant outcome; the "
     "8-layer draft may count too (high acceptance)"),
    ("Monday, Tuesday, Wednesday, Thursday,", "' Friday' then ',' almost surely; the draft "
     "may not know the days (lower acceptance)"),
    ("The United States of", "' America' almost surely, then spread (',', '.', ' and', "
     "' is'): many outcomes at position 2"),
    ("Once upon a", "' time' almost surely, then ',' / ' there': 2-3 outcomes"),
    ("Twinkle, twinkle, little", "' star' then ',' likely"),
    ("The quick brown fox jumps over the lazy", "' dog' then '.' mostly"),
    ("import numpy as", "' np' then a newline: the 135M model knows it"),
    ("A, B, C, D, E, F,", "' G' then ','"),
    ("red, green, blue, red, green, blue, red, green,", "' blue' then ',': a copy pattern "
     "the 8-layer draft may follow"),
    ("Q: What is the capital of France?\nA:", "' Paris' or ' The': 2-3 first tokens, spread "
     "second"),
    ("Happy birthday to", "' you' then spread (',', '!', '.', ' my')"),
    ("January, February, March, April,", "' May' then ','"),
    ("To be or not to be, that is the", "' question' then '.' / ':' / ','"),
]  # fmt: skip
COVER, MAX_FIRST = 0.999, 64  # first tokens expanded for the second token's law
ACCEPT = (0.1, 0.98)  # speculation acts: accepted sometimes, rejected sometimes
SIM_REPS, SIM_SHARE, SIM_STEP, SIM_MAX = 100, 0.9, 1.1, 4.0
# (target, draft, dtype, candidates, audits that take the plan) per pair; the Qwen pair's
# candidates are scripts/tv05_prompt.py's coding prompts, written down for llama-server
# before any law was seen. top_k: --top-k, the same cut in both arms (onnxruntime-genai's
# verifier builds a rejection's residual in k x k steps: with k = Qwen's 151,936-token
# vocabulary a rejection costs seconds, so its Qwen audit samples with its runtime's default
# top_k of 50 in both arms).
PAIRS: dict[str, dict[str, Any]] = {
    "smollm2": dict(
        target="smollm2-135m", draft="smollm2-135m@8", dtype="float32",
        candidates=CANDIDATES, audits=("smollm2-hf-draft-tv05", "smollm2-ort-draft-tv05"),
    ),
    "qwen": dict(
        target="qwen2.5-coder-1.5b", draft="qwen2.5-coder-0.5b", dtype="bfloat16",
        candidates=None, audits=("hf-qwen-assisted-tv05",),  # None: the coding prompts
    ),
}  # fmt: skip


def coding_candidates() -> list[tuple[str, str]]:
    """scripts/tv05_prompt.py's candidates (imported when asked for: it needs the scripts
    folder on the path, which running a script gives)."""
    from tv05_prompt import CANDIDATES as CODING

    return CODING


def predict(
    tok: Any, target: Any, draft: Any, prompt: str, top_k: int | None = None
) -> dict[str, Any]:
    """:func:`draft_plan` for one prompt from the two loaded models."""
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    p1, _ = next_token_laws(target, ids, top_k=top_k)
    q1, _ = next_token_laws(draft, ids, top_k=top_k)
    first: list[int] = []
    for t in np.argsort(-p1, kind="stable")[:MAX_FIRST]:
        first.append(int(t))
        if p1[first].sum() >= COVER:
            break
    _, p2 = next_token_laws(target, ids, first, top_k=top_k)
    _, q2 = next_token_laws(draft, ids, first, top_k=top_k)
    row = draft_plan(p1, q1, first, p2, q2, decode=lambda t: tok.decode([t]))
    return {"prompt": prompt, "prompt_tokens": int(ids.shape[1]), **row}


def qualifies(row: dict[str, Any]) -> bool:
    lo, hi = ACCEPT
    a2_low = row["predicted_accept_pos2"]
    a2_high = a2_low + row["uncovered"]
    return (
        lo <= row["predicted_accept_pos1"] <= hi
        and lo <= a2_low
        and a2_high <= hi
        and row["position2"]["outcomes"] >= 2
        and math.isfinite(row["position2"]["n_head-tail"])
    )


def choose(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The qualifying candidate whose position-2 test needs the fewest samples (None: none
    qualifies)."""
    ok = [r for r in rows if qualifies(r)]
    return min(ok, key=lambda r: r["position2"]["n_head-tail"]) if ok else None


def simulated_size(row: dict[str, Any], n0: int) -> tuple[int, list[dict[str, Any]]]:
    """The smallest n >= n0 (steps of 10%, rounded up to 50) at which at least 90% of the
    simulated reports state a detectable TV <= 0.05 at position 2, and the trials."""
    trials = []
    n = n0
    while n <= SIM_MAX * n0:
        mdt = simulated_statement(row["_joint_sorted"], row["uncovered"], n, reps=SIM_REPS)
        share = float((mdt <= TV).mean())
        trials.append({"n": n, "share_at_or_below_tv": share, "median": float(np.median(mdt)),
                       "p90": float(np.quantile(mdt, 0.9))})  # fmt: skip
        if share >= SIM_SHARE:
            return n, trials
        n = int(math.ceil(n * SIM_STEP / 50.0) * 50)
    raise SystemExit(f"no size up to {SIM_MAX} x {n0} gives the statement in simulations")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("reports/audit"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--pair", choices=sorted(PAIRS), default="smollm2")
    ap.add_argument("--top-k", type=int, default=None, help="the same cut in both arms")
    ap.add_argument("--audits", nargs="+", default=None, help="folders that take the plan")
    args = ap.parse_args(argv)
    pair = PAIRS[args.pair]
    candidates = pair["candidates"] or coding_candidates()
    audits = args.audits or pair["audits"]
    import torch

    from specviz.audit.engines.hf import load_bias_pair

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    tok, target, draft = load_bias_pair(pair["target"], pair["draft"], pair["dtype"])
    rows = []
    for prompt, guess in candidates:
        row = predict(tok, target, draft, prompt, args.top_k) | {"guess": guess}
        rows.append(row)
        p1, p2 = row["position1"], row["position2"]
        print(
            f"{prompt!r}: pos1 {p1['outcomes']} bins, pos2 {p2['outcomes']} bins, uncovered "
            f"{row['uncovered']:.4f}, acceptance@1 {row['predicted_accept_pos1']:.3f}, "
            f"@2 {row['predicted_accept_pos2']:.3f}; n for TV {TV} at pos 2: "
            f"{p2['n_head-tail']:,.0f} (least-favourable {p2['n_least-favourable']:,.0f})",
            flush=True,
        )
    best = choose(rows)
    if best is None:
        print("no candidate qualifies", file=sys.stderr)
        return 1
    n0 = planned_size(best["position2"]["n_head-tail"])
    n, trials = simulated_size(best, n0)
    choice = {
        "rule": (
            f"among candidates with predicted acceptance in [{ACCEPT[0]}, {ACCEPT[1]}] at "
            f"positions 1 and 2 (position 2 over the expanded first tokens, bounds with the "
            f"uncovered mass) and >= 2 outcomes at position 2, the one whose position-2 test "
            f"needs the fewest samples per arm for {POWER:.0%} power at TV {TV} (head-tail "
            f"alternative, the report's own; the law binned as the audit bins it, 200 "
            f"outcomes and a tail; two-sample Pearson, alpha {ALPHA} before Holm); planned n "
            f"= {MARGIN} x that, rounded up to 50, raised by 10% steps until >= "
            f"{SIM_SHARE:.0%} of {SIM_REPS} simulated reports state TV <= {TV} at position 2"
        ),
        "models": {"target": pair["target"], "draft": pair["draft"], "dtype": pair["dtype"]},
        "sampling": {"temperature": 1.0, "top_k": args.top_k, "top_p": None},
        "prompt": best["prompt"],
        "n_per_arm": n,
        "n_analytic_planned": n0,
        "simulated_statement": trials,
        "max_tokens": 3,
        "why_max_tokens": (
            "transformers' assistant drafts min(k, max_new_tokens - generated - 1) tokens: "
            "with 3 new tokens it drafts positions 1 and 2 in the first step and, after a "
            "rejection at position 1, position 2 in the second, so both are drafted in every "
            "request; position 3 is drafted in no request"
        ),
        "seconds": time.perf_counter() - t0,
        "candidates": [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows],
    }
    for name in audits:
        out = args.out / name
        out.mkdir(parents=True, exist_ok=True)
        (out / "prompt_choice.json").write_text(json.dumps(choice, indent=1), encoding="utf-8")
    print(f"chosen: {best['prompt']!r}, {n} per arm (analytic {n0}); simulated: {trials}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
