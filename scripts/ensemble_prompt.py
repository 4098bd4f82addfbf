"""Choose the prompt of the ``hf-qwen-ensemble`` audit from the models alone, before any
sampling: transformers' ``assistant_ensemble_weight=w`` has an exact, predictable bias (its
output law at a drafted position is v = w*p + (1-w)*q; :func:`specviz.audit.engines.hf.
ensemble_bias`), so the prompt and the sample size can be planned from the two models' laws.

For each candidate (short, natural coding prompts written before looking at any law) it
prints the predicted first-token TV (1-w)*TV(p, q), the predicted TV of the law of the first
two tokens, and the samples per arm the audit's first-token test needs for 90% power at
alpha = 0.01 / 6 (Bonferroni over the audit's 6 tests at 3 new tokens: a conservative stand-in
for its Holm correction), and writes ``reports/audit/hf-qwen-ensemble/prompt_choice.json``.
The audit takes the candidate that needs the fewest samples::

    .venv/bin/python scripts/ensemble_prompt.py
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

CANDIDATES = [
    "def fibonacci(n):\n    ",
    "import numpy as np\n\ndef normalize(x):\n    ",
    "def is_prime(n):\n",
    "# Read a CSV file and print the number of rows\nimport ",
    "class Stack:\n    def __init__(self):\n",
    "def reverse_string(s):\n    return ",
    "for i in range(10):\n",
    "import os\nimport ",
    "def factorial(n):\n    if n == 0:\n        return 1\n    return ",
    "#include <stdio.h>\n\nint main() {\n",
    "SELECT name, age FROM users WHERE ",
    "def binary_search(arr, target):\n    ",
    "const express = require('express');\nconst app = ",
    "def main():\n",
    "with open('data.txt') as f:\n    ",
    "if __name__ == ",
]
TARGET, DRAFT, WEIGHT, DTYPE = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", 0.5, "bfloat16"
N_TESTS = 6  # the audit's tests of one prompt at 3 new tokens (hf-qwen-ensemble at 40/arm)


def planned_n(pred: dict[str, Any], *, alpha: float = 0.01, power: float = 0.9) -> int:
    """Samples per arm for ``power`` of the first-token homogeneity test at alpha/N_TESTS, from
    the predicted laws (``p_law`` / ``v_law``: numpy arrays)."""
    from specviz.stats import power_homogeneity

    p, v = pred["p_law"], pred["v_law"]
    lo, hi = 2, 2
    while power_homogeneity(p, v, hi, alpha / N_TESTS) < power:
        lo, hi = hi, hi * 2
        if hi > 1 << 20:
            return math.inf
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if power_homogeneity(p, v, mid, alpha / N_TESTS) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("reports/audit/hf-qwen-ensemble"))
    args = ap.parse_args(argv)
    from specviz.audit.engines.hf import ensemble_bias, load_bias_pair

    t0 = time.perf_counter()
    tok, target, draft = load_bias_pair(TARGET, DRAFT, DTYPE)
    rows = []
    for prompt in CANDIDATES:
        # the first-token laws only (the plan's test): the two-token prediction costs a
        # batched pass of each model per candidate; the audit computes it for its prompt
        pred = ensemble_bias(target, draft, prompt, WEIGHT, tokenizer=tok, laws=True, max_first=0)
        n = planned_n(pred)
        row = {k: v for k, v in pred.items() if not k.endswith("_law")}
        rows.append({"prompt": prompt, "planned_n_per_arm": n, **row})
        print(
            f"{n:>8} per arm  TV1 {pred['predicted_tv']:.3f}"
            f"  p {pred['p_top'][:3]}  v {pred['v_top'][:3]}  {prompt!r}",
            flush=True,
        )
    rows.sort(key=lambda r: (r["planned_n_per_arm"], -r["predicted_tv"]))
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {
        "what": "predicted bias of assistant_ensemble_weight=0.5 per candidate prompt, from "
        "the two models' laws (bf16) before any sampling; the audit uses the first row",
        "command": "python scripts/ensemble_prompt.py",
        "target": TARGET,
        "draft": DRAFT,
        "weight": WEIGHT,
        "dtype": DTYPE,
        "n_rule": f"90% power of the first-token Pearson homogeneity test at alpha 0.01/{N_TESTS}",
        "seconds": round(time.perf_counter() - t0, 1),
        "candidates": rows,
    }
    text = json.dumps(_no_nan(meta), indent=1, default=str, allow_nan=False)
    (args.out / "prompt_choice.json").write_text(text + "\n")
    print(f"chosen: {rows[0]['prompt']!r}, {rows[0]['planned_n_per_arm']} per arm", flush=True)
    return 0


def _no_nan(x):
    """Strict JSON: a value the first-token choice does not compute (NaN) is null."""
    if isinstance(x, float) and x != x:
        return None
    if isinstance(x, dict):
        return {k: _no_nan(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_no_nan(v) for v in x]
    return x


if __name__ == "__main__":
    sys.exit(main())
