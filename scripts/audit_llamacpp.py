"""The longer audit run whose report is committed under ``reports/audit/``.

One command (about 10-15 minutes on 2 CPU cores)::

    .venv/bin/python scripts/audit_llamacpp.py --out reports/audit

It starts, on 127.0.0.1 only, and stops again:

* llama.cpp's server (llama-cpp-python) serving SmolLM2-135M-Instruct Q4_1, once plain and
  once with prompt-lookup speculative decoding, and audits the pair: verdict, greedy identity
  and load curves (TTFT, inter-token latency, completion time, throughput) for both;
* specviz's broken server (toy model): plain sampling vs lossless speculation (honest) and vs
  ``always_accept`` / ``residual_from_target`` (broken), audited with the same sample sizes
  per prompt and configuration as llama.cpp.

It writes one folder per audit (``report.html``, ``summary.json``, ``raw.jsonl``) and
``reports/audit/README.md`` with the verdicts. Rerunning resumes from the raw files; delete the
folder for a fresh run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from specviz.audit import Endpoint, audit
from specviz.audit_local import (
    broken_server_command,
    llamacpp_command,
    local_servers,
    smollm2_gguf,
)

# Prompts with repeated structure, so that prompt lookup finds drafts, and an uncertain next
# token, so that the sampled comparison has something to compare.
LLAMA_PROMPTS = [
    "The cat sat on the mat. The dog sat on the rug. The cat sat on the",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "Monday, Tuesday, Wednesday, Thursday, Monday, Tuesday,",
    "Once upon a time, there was a little girl who",
]
TOY_PROMPTS = ["ab", "cd", "e", "aab"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("reports/audit"))
    ap.add_argument("--n-samples", type=int, default=300)
    ap.add_argument("--max-tokens", type=int, default=3)
    ap.add_argument("--load-levels", default="1,2,4,8")
    ap.add_argument("--load-requests", type=int, default=8)
    ap.add_argument("--num-pred-tokens", type=int, default=10)
    args = ap.parse_args(argv)
    levels = tuple(int(x) for x in args.load_levels.split(","))
    common = dict(
        n_samples=args.n_samples,
        max_tokens=args.max_tokens,
        temperature=1.0,
        alpha=0.01,
        seed=0,
        progress=sys.stderr.isatty(),
    )
    t0 = time.perf_counter()
    results: dict[str, dict] = {}

    gguf = smollm2_gguf()
    servers = {
        "off": llamacpp_command(gguf, prompt_lookup=False),
        "pld": llamacpp_command(gguf, prompt_lookup=True, num_pred_tokens=args.num_pred_tokens),
    }
    with local_servers(servers) as urls:
        # repeat_penalty=1: llama-cpp-python's default (1.1) applies at temperature 0 too, so
        # greedy picks would not be the argmax of the logprobs the server reports and the
        # margin at a greedy divergence would mean nothing.
        plain = {"repeat_penalty": 1.0}
        report = audit(
            Endpoint(urls["off"], model="smollm2", label="llama.cpp", extra=plain),
            Endpoint(urls["pld"], model="smollm2", label="llama.cpp + prompt lookup", extra=plain),
            LLAMA_PROMPTS,
            out_dir=args.out / "llamacpp",
            # llama-cpp-python's logprobs cost ~0.15 s per token (a Python sort of the whole
            # vocabulary): sample without them and compare client-side pieces of the text.
            outcome="text",
            concurrency=2,
            greedy_max_tokens=32,
            # Q4_1 on CPU: batched verification moves logprobs of identical prefixes by up to
            # ~0.2 nats (see the report's greedy table), so near ties are judged at 0.5 logits
            # (the bf16 setting of stats.greedy_consistency), not the fp32 default 0.05.
            near_tie=0.5,
            load_levels=levels,
            load_requests=args.load_requests,
            load_max_tokens=64,
            **common,
        )
        print(f"== llama.cpp: plain vs prompt lookup ({time.perf_counter() - t0:.0f} s)")
        print(report.summary(), flush=True)
        results["llamacpp"] = report.to_json()

    toys = {
        "off": broken_server_command(speculation=False),
        "lossless": broken_server_command(verifier="lossless"),
        "always_accept": broken_server_command(verifier="always_accept"),
        "residual_from_target": broken_server_command(verifier="residual_from_target"),
    }
    with local_servers(toys) as urls:
        for name in ("lossless", "always_accept", "residual_from_target"):
            report = audit(
                Endpoint(urls["off"], label="specviz plain"),
                Endpoint(urls[name], label=f"specviz {name}"),
                TOY_PROMPTS,
                out_dir=args.out / f"toy-{name}",
                concurrency=4,
                load_levels=(1, 4),
                load_requests=8,
                load_max_tokens=16,
                **common,
            )
            print(f"== toy: plain vs {name} ({time.perf_counter() - t0:.0f} s)")
            print(report.summary(), flush=True)
            results[f"toy-{name}"] = report.to_json()

    lines = [
        "# Audit reports (generated by `scripts/audit_llamacpp.py`)",
        "",
        f"{args.n_samples} completions per prompt and configuration, {args.max_tokens} tokens,"
        " temperature 1, Holm at alpha=0.01. Open each `report.html` (self-contained).",
        "",
        "| audit | verdict | smallest Holm p | min. detectable first-token TV | greedy |",
        "|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| [{name}]({name}/report.html) | {r['verdict']} | {r['min_holm']:.3g} | "
            f"{r['min_detectable_tv']:.3f} | {r['greedy_verdict']} |"
        )
    lines += ["", f"Wall time {time.perf_counter() - t0:.0f} s on this machine.", ""]
    (args.out / "README.md").write_text("\n".join(lines), encoding="utf-8")
    (args.out / "summary.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"done in {time.perf_counter() - t0:.0f} s")
    # Exit status checks the audit itself (honest toy passes, broken toys are flagged); the
    # llama.cpp verdict is a finding, reported either way.
    ok = results["toy-lossless"]["verdict"] == "consistent" and all(
        results[f"toy-{b}"]["verdict"] == "inconsistent"
        for b in ("always_accept", "residual_from_target")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
