"""Choose the prompt and the size of the ``qwen-draft-tv05`` audit before any sampling: the
llama-server audit of Qwen2.5-Coder-1.5B without vs with the 0.5B draft model that is to see
a TV of 0.05 at position 2 (where llama-server's speculation starts) with 90% probability.

For each candidate (short coding prompts written down, with a guess, before any law was
looked at) it asks the servers themselves -- the same GGUF files and the same sampling
settings the audit sends (T=0.7, top-p 0.9, llama-server's other defaults), one forward pass
per query, no sampling -- for:

- the law of the first token (``post_sampling_probs``: the probabilities after the sampler
  chain, i.e. the law the audit's samples are drawn from) and, for each first token, the law
  of the second token: the predicted law of the first two tokens;
- the draft model's greedy second token after each first token (llama-server's draft-simple
  drafts the draft model's top token) and so the predicted acceptance at position 2,
  sum_t1 p(t1) p(d2(t1) | t1): whether speculation acts there and how often it rejects;
- the samples per arm the audit's position-2 test (two-sample Pearson on the law of the first
  two tokens, alpha 0.01 before Holm) needs to see TV 0.05 with 90% probability:
  :func:`specviz.stats.sample_size_for_tv` with the report's own alternative (``head-tail``)
  and, for comparison, the ``least-favourable`` one (any difference of TV 0.05).

It writes ``reports/audit/qwen-draft-tv05/prompt_choice.json``; the audit
(``scripts/audit_llama_server.py qwen-draft-tv05``) takes the chosen prompt and size from it::

    .venv/bin/python scripts/tv05_prompt.py
    .venv/bin/python scripts/tv05_prompt.py --alternative least-favourable \
        --out reports/audit/qwen-draft-tv05-lf     # sized for any difference of TV 0.05
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from specviz.audit.planning import (
    ALPHA,
    MARGIN,
    POWER,
    TV,
    binned,
    planned_size,
    sizes,
    two_token_law,
)

# (prompt, the guess written down before any law was seen)
CANDIDATES: list[tuple[str, str]] = [
    (
        "# Sort a list of dictionaries by the value of a key\ndef sort_by_key(items, key):\n",
        "first token almost surely the indent; 2-3 likely second tokens (qwen-draft's prompt 2: "
        "3 outcomes at position 2 in 250 samples); draft agrees with the target most of the time",
    ),
    (
        "def add(a, b):\n    return",
        "' a' almost surely, then ' +' almost surely: too deterministic (acceptance ~1, "
        "one outcome)",
    ),
    (
        "for i in range(",
        "spread first token (len / 1 / 0 / n / 10): several outcomes at position 1 and 2",
    ),
    (
        "if __name__ == ",
        "'\"__' or \"'__\" (quote style), then '__main__' almost surely: 2-3 outcomes, "
        "draft agrees",
    ),
    (
        "import numpy as np\nimport pandas as pd\nimport matplotlib.pyplot as",
        "' plt' then '\\n' almost surely: nearly one outcome",
    ),
    (
        "def is_prime(n):\n    if n",
        "' <' / ' ==' / ' <=' at position 1; position 2 follows it ('=' / ' 1' / ' 2'): "
        "few outcomes, drafts often accepted",
    ),
    (
        "class Stack:\n    def __init__(self):\n        self.",
        "'items' / 'stack' at position 1, then ' =' almost surely",
    ),
    (
        "with open('data.txt') as f:\n    ",
        "'data' / 'lines' / 'for' / 'content' at position 1: spread",
    ),
    (
        "x = [3, 1, 2]\nx.sort()\nprint(",
        "'x' then ')' almost surely; some mass on 'sorted'",
    ),
    (
        "def factorial(n):\n    if n == 0:\n        return 1\n    else:\n        return",
        "' n' then ' *' almost surely: one dominant outcome with a small tail",
    ),
]
TARGET, DRAFT = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"
SAMPLING = dict(temperature=0.7, top_p=0.9)  # as scripts/audit_llama_server.py's audits
N_PROBS = 40  # llama-server's default top_k is 40: the post-sampling law has at most 40 tokens
MIN_P1 = 1e-4  # first tokens below this are left out of the two-token law (mass: 'uncovered')


def _post(client: httpx.Client, url: str, body: dict[str, Any]) -> dict[str, Any]:
    r = client.post(url, json=body)
    r.raise_for_status()
    return r.json()


def next_law(client: httpx.Client, url: str, ids: list[int]) -> dict[int, tuple[str, float]]:
    """The law the server samples the next token from (after its sampler chain)."""
    data = _post(
        client,
        f"{url}/completion",
        dict(prompt=ids, n_predict=1, n_probs=N_PROBS, post_sampling_probs=True, seed=0,
             cache_prompt=True, **SAMPLING),
    )  # fmt: skip
    top = data["completion_probabilities"][0]["top_probs"]
    return {int(t["id"]): (t["token"], float(t["prob"])) for t in top if t["prob"] > 0}


def greedy_token(client: httpx.Client, url: str, ids: list[int]) -> int:
    data = _post(
        client,
        f"{url}/completion",
        dict(prompt=ids, n_predict=1, temperature=0.0, n_probs=1, cache_prompt=True),
    )
    return int(data["completion_probabilities"][0]["id"])


def predict(client: httpx.Client, urls: dict[str, str], prompt: str) -> dict[str, Any]:
    ids = _post(client, f"{urls['target']}/tokenize", dict(content=prompt))["tokens"]
    law1 = next_law(client, urls["target"], ids)
    law2: dict[int, dict[int, tuple[str, float]]] = {}
    accept = 0.0
    for t1, (_piece1, p1) in sorted(law1.items(), key=lambda kv: -kv[1][1]):
        if p1 < MIN_P1:
            continue
        law2[t1] = next_law(client, urls["target"], [*ids, t1])
        d2 = greedy_token(client, urls["draft"], [*ids, t1])
        accept += p1 * law2[t1].get(d2, ("", 0.0))[1]
    two, uncovered = two_token_law(law1, law2)
    first = np.array(sorted((p for _, p in law1.values()), reverse=True))
    return {
        "prompt": prompt,
        "prompt_tokens": len(ids),
        "first_token": [[piece, p] for piece, p in sorted(law1.values(), key=lambda v: -v[1])],
        "first_two": [[list(k), p] for k, p in two[:20]],
        "uncovered": uncovered,
        "predicted_accept_pos2": accept,
        "position1": sizes(first / first.sum()),
        "position2": sizes(binned(two, uncovered)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("reports/audit/qwen-draft-tv05"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--alternative", choices=["head-tail", "least-favourable"], default="head-tail",
        help="size for the report's own power statement (head-tail, default) or for any "
        "difference of TV 0.05 (least-favourable; the qwen-draft-tv05-lf audit)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    from specviz.audit.local import llama_server_command, local_servers
    from specviz.models import BUILTIN_MODELS
    from specviz.models._files import _materialize_gguf

    t0 = time.perf_counter()
    ggufs = {k: _materialize_gguf(BUILTIN_MODELS[m], progress=False)
             for k, m in (("target", TARGET), ("draft", DRAFT))}  # fmt: skip
    servers = {
        k: llama_server_command(g, threads=args.threads, parallel=1, ctx_per_slot=512, alias=k)
        for k, g in ggufs.items()
    }
    rows = []
    with local_servers(servers, timeout=300) as urls, httpx.Client(timeout=300) as client:
        for prompt, guess in CANDIDATES:
            row = predict(client, urls, prompt) | {"guess": guess}
            rows.append(row)
            p1, p2 = row["position1"], row["position2"]
            print(
                f"{prompt!r}: pos1 {p1['outcomes']} outcomes, pos2 {p2['outcomes']} outcomes, "
                f"uncovered {row['uncovered']:.4f}, acceptance@2 "
                f"{row['predicted_accept_pos2']:.3f}; n for TV {TV} at pos 2: "
                f"{p2['n_head-tail']:,.0f} (least-favourable {p2['n_least-favourable']:,.0f})",
                flush=True,
            )
    # speculation must act at position 2 (drafts made and some accepted) and reject sometimes
    # (the residual path is what a broken rule gets wrong); at least two outcomes there
    ok = [
        r for r in rows
        if 0.2 <= r["predicted_accept_pos2"] <= 0.98 and r["position2"]["outcomes"] >= 2
        and math.isfinite(r["position2"][f"n_{args.alternative}"])
    ]  # fmt: skip
    if not ok:
        print("no candidate qualifies", file=sys.stderr)
        return 1
    best = min(ok, key=lambda r: r["position2"][f"n_{args.alternative}"])
    n = planned_size(best["position2"][f"n_{args.alternative}"])
    choice = {
        "rule": (
            f"among candidates with predicted acceptance at position 2 in [0.2, 0.98] and >= 2 "
            f"outcomes there, the one whose position-2 test needs the fewest samples per arm "
            f"for {POWER:.0%} power at TV {TV} ({args.alternative} alternative"
            + (", the report's own" if args.alternative == "head-tail" else ": any difference")
            + f"; two-sample Pearson, alpha {ALPHA} before Holm); planned n = {MARGIN} x that, "
            f"rounded up to 50"
        ),
        "alternative": args.alternative,
        "sampling": SAMPLING,
        "prompt": best["prompt"],
        "n_per_arm": n,
        "max_tokens": 3,
        "why_max_tokens": (
            "llama-server drafts at most n_remaining - 1 tokens: after the first token of a "
            "3-token request it drafts one token for position 2 (2 tokens would leave no room "
            "for a draft), so every drafted token of a request is a position-2 draft"
        ),
        "seconds": time.perf_counter() - t0,
        "candidates": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "prompt_choice.json").write_text(json.dumps(choice, indent=1), encoding="utf-8")
    print(f"chosen: {best['prompt']!r}, {n} per arm -> {args.out / 'prompt_choice.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
