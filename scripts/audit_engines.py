"""The in-process engine audits whose reports are committed under ``reports/audit/`` -- one
command each (``--n-samples`` / ``--prompts`` shrink them for a quick run)::

    .venv/bin/python scripts/audit_engines.py ov-qwen-draft      # OpenVINO, Qwen 1.5B +- 0.5B draft
    .venv/bin/python scripts/audit_engines.py ov-qwen-lookup     # OpenVINO, prompt lookup
    .venv/bin/python scripts/audit_engines.py ov-qwen-identity   # OpenVINO, 0.5B as its own draft
    .venv/bin/python scripts/audit_engines.py ov-qwen-identity-int8  # ... 1.5B, int8 weights
    .venv/bin/python scripts/audit_engines.py ov-qwen-draft-int8     # the pair, int8 weights
    .venv/bin/python scripts/audit_engines.py ort-qwen-draft     # onnxruntime-genai, Qwen pair
    .venv/bin/python scripts/audit_engines.py hf-qwen-assisted   # transformers assisted generation
    .venv/bin/python scripts/audit_engines.py hf-qwen-ensemble   # ... assistant_ensemble_weight=0.5
    .venv/bin/python scripts/audit_engines.py smollm2-<engine>-<mode>   # the SmolLM2 versions
    .venv/bin/python scripts/audit_engines.py smollm2-hf-draft-tv05  # sized for TV 0.05 at pos 2
    .venv/bin/python scripts/audit_engines.py smollm2-ort-draft-tv05 # (scripts/draft_tv05_prompt.py)
    .venv/bin/python scripts/audit_engines.py hf-qwen-assisted-tv05  # the Qwen pair, sized the
    .venv/bin/python scripts/audit_engines.py ort-qwen-draft-tv05    # same way (--pair qwen)
    .venv/bin/python scripts/audit_engines.py list

Each runs :func:`specviz.audit.engine_audit` (A = the engine without speculation, B = with it;
temperature 1, no top-k/top-p, Holm at alpha 0.01), writes ``reports/audit/<name>/``
(``report.html``, ``summary.json``, ``raw.jsonl``, ``run.json`` with the command, wall and CPU
seconds, peak RSS and what else ran) and regenerates ``reports/audit/README.md``. An interrupted
audit resumes from its raw file (rerun the same command; ``--fresh`` starts over).

Sizes: ov-qwen-lookup runs 4000 samples per arm, both arms batched, and is the benchmark of
"a Qwen-pair audit that sees TV 0.05 at position 2 within 20 minutes on 2 cores" (on its
prompt the 1.5B model is nearly certain of its continuation, so it is not a test of the
rejection path: smollm2-ov-lookup is). The others run their speculative arm one request at a
time; each report states the TV it could see at each position. smollm2-hf-draft-tv05 /
smollm2-ort-draft-tv05 and hf-qwen-assisted-tv05 / ort-qwen-draft-tv05 take their prompt, size
and new tokens from the plan scripts/draft_tv05_prompt.py writes from the two models' own laws
(prompt_choice.json in each folder: TV 0.05 at position 2, 90% power; ``--pair qwen`` for the
Qwen pair). The Qwen audits convert their models on first use (OpenVINO IR: int8 weights above
1B parameters unless weights= says otherwise, f16 below; onnxruntime-genai int4) and load
Qwen-size models: on a shared machine run them one at a time (e.g. each under ``flock
/tmp/specviz-qwen.lock``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from audit_llama_server import _write_json, write_table  # noqa: E402

from specviz.audit import engine_audit  # noqa: E402
from specviz.audit.engines import identity_spec  # noqa: E402

# First token nearly certain, second uncertain: the law of the first two tokens has few
# outcomes, so a TV of 0.05 at position 2 is within reach of a few thousand samples.
QWEN_PROMPTS = ["def fibonacci(n):\n    ", "import numpy as np\n\ndef normalize(x):\n    "]
SMOLLM2_PROMPTS = ["The cat sat on the mat. The dog sat on the"]
LOOKUP_PROMPTS = [
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n"
]

CHOICE = (
    Path(__file__).resolve().parent.parent / "reports/audit/hf-qwen-ensemble/prompt_choice.json"
)


def _chosen_prompt() -> str | None:
    """The prompt scripts/ensemble_prompt.py chose from the predicted bias (first row)."""
    if not CHOICE.is_file():
        return None
    return json.loads(CHOICE.read_text())["candidates"][0]["prompt"]


ENSEMBLE_PROMPT = _chosen_prompt()
Q15, Q05, SMOL = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m"
AUDITS: dict[str, dict[str, Any]] = {
    # The benchmark of the bar "TV 0.05 at position 2 within 20 minutes on 2 cores": both arms
    # in batches of 32 (ContinuousBatchingPipeline; prompt lookup batches, a draft model does
    # not: its batches raise), one prompt, 4000 samples per arm.
    "ov-qwen-lookup": dict(
        title="OpenVINO GenAI: Qwen2.5-Coder-1.5B (int8 weights) without vs with prompt lookup",
        a=f"openvino:{Q15},threads=2,batch=32",
        b=f"openvino:{Q15},lookup=3,threads=2,batch=32",
        prompts=LOOKUP_PROMPTS,
        n_samples=4000,
    ),
    # B runs one request at a time (per-request counters; batches raise): fewer samples. On
    # f16 weights (named: OpenVINO engines convert models above 1B parameters to int8 unless
    # told, convert.default_weights), as committed: 12.6 GB peak, above the 10 GB bar.
    "ov-qwen-draft": dict(
        title="OpenVINO GenAI: Qwen2.5-Coder-1.5B without vs with the 0.5B draft model",
        a=f"openvino:{Q15},threads=2,batch=32,weights=f16",
        b=f"openvino:{Q15},draft={Q05},threads=2,weights=f16",
        prompts=QWEN_PROMPTS[:1],
        n_samples=1500,
        max_tokens=4,
    ),
    "ov-qwen-identity": dict(
        title="OpenVINO GenAI identity probe: Qwen2.5-Coder-0.5B as its own draft",
        a=f"openvino:{Q05},threads=2,batch=32",
        b=f"openvino:{Q05},threads=2,draft=target",
        prompts=QWEN_PROMPTS[:1],
        n_samples=1000,
        max_tokens=4,
        identity=True,
    ),
    "ort-qwen-draft": dict(
        title="onnxruntime-genai (int4): Qwen2.5-Coder-1.5B without vs with the 0.5B draft",
        a=f"onnxruntime:{Q15},precision=int4,threads=2",
        b=f"onnxruntime:{Q15},draft={Q05},precision=int4,threads=2",
        prompts=QWEN_PROMPTS[:1],
        n_samples=1500,
    ),
    # The plain arms of the transformers Qwen audits take 4 requests per generate call: 16
    # (num_return_sequences=16) peaked at 11.0 GB RSS on the stock bf16 kernels, above the
    # 10 GB bar (docs/findings.md).
    "hf-qwen-assisted": dict(
        title="transformers: Qwen2.5-Coder-1.5B without vs with assistant_model=0.5B (bf16)",
        a=f"transformers:{Q15},dtype=bfloat16,threads=2,batch=4",
        b=f"transformers:{Q15},draft={Q05},dtype=bfloat16,threads=2",
        prompts=QWEN_PROMPTS[:1],
        n_samples=800,
    ),
    # The ensemble's bias is exact and known before sampling: the prompt is the candidate of
    # scripts/ensemble_prompt.py (its prompt_choice.json) that needs the fewest samples, and
    # n_samples="plan" sizes the audit from the predicted laws (90% power, first token).
    "hf-qwen-ensemble": dict(
        title="transformers: assistant_ensemble_weight=0.5 with the Qwen pair (lossy: must be caught)",
        a=f"transformers:{Q15},dtype=bfloat16,threads=2,batch=4",
        b=f"transformers:{Q15},draft={Q05},ensemble=0.5,dtype=bfloat16,threads=2",
        prompts=[ENSEMBLE_PROMPT],
        n_samples="plan",
        ensemble=(Q15, Q05, 0.5, "bfloat16"),
    ),
}
# int8 weights (weights=int8: a Q8_0 GGUF -> IR, kept compressed by the CPU plugin, where it
# holds the f16 IR's weights as f32: 12.6 GB peak for ov-qwen-draft): the same audits on int8
# weights in both arms and both models -- another model than the f16 one, the reports say so.
# int8 is what an OpenVINO spec without weights= gives a model above 1B parameters (the 1.5B
# Qwen): these are the default route.
# The identity probe uses the pair's target, the 1.5B, as its own draft.
AUDITS["ov-qwen-identity-int8"] = dict(
    AUDITS["ov-qwen-identity"],
    title="OpenVINO GenAI identity probe, int8 weights: Qwen2.5-Coder-1.5B as its own draft",
    a=f"openvino:{Q15},threads=2,batch=32,weights=int8",
    b=f"openvino:{Q15},threads=2,draft=target,weights=int8",
    n_samples=100,
)
AUDITS["ov-qwen-draft-int8"] = dict(
    AUDITS["ov-qwen-draft"],
    title="OpenVINO GenAI, int8 weights: Qwen2.5-Coder-1.5B without vs with the 0.5B draft",
    a=AUDITS["ov-qwen-draft"]["a"].replace("weights=f16", "weights=int8"),
    b=AUDITS["ov-qwen-draft"]["b"].replace("weights=f16", "weights=int8"),
    n_samples=500,
)
for engine in ("openvino", "onnxruntime", "transformers"):
    key = (
        engine.replace("openvino", "ov").replace("onnxruntime", "ort").replace("transformers", "hf")
    )
    base = f"{engine}:{SMOL},threads=1"
    AUDITS[f"smollm2-{key}-identity"] = dict(
        title=f"{engine}: SmolLM2-135M identity probe (the model as its own draft)",
        a=base, b=identity_spec(base), prompts=SMOLLM2_PROMPTS, n_samples=400, identity=True,
        max_tokens=4,
    )  # fmt: skip
    AUDITS[f"smollm2-{key}-draft"] = dict(
        title=f"{engine}: SmolLM2-135M without vs with a truncated draft (its first 8 layers)",
        a=base, b=f"{base},draft={SMOL}@8", prompts=SMOLLM2_PROMPTS, n_samples=400,
        max_tokens=4,
    )  # fmt: skip
AUDITS["smollm2-hf-ensemble"] = dict(
    title="transformers: SmolLM2-135M, assistant_ensemble_weight=0.5 with the truncated draft",
    a=f"transformers:{SMOL},threads=1",
    b=f"transformers:{SMOL},draft={SMOL}@8,ensemble=0.5,threads=1",
    prompts=SMOLLM2_PROMPTS,
    n_samples=400,
    ensemble=(SMOL, f"{SMOL}@8", 0.5, "float32"),
)
# Sized to see TV 0.05 at position 2: prompt, samples per arm and new tokens from the plan
# scripts/draft_tv05_prompt.py writes (prompt_choice.json in the audit's folder) from the two
# models' own laws before any sampling (a prompt whose first two tokens have few likely values
# and where the truncated draft is accepted about 30% of the time at positions 1 and 2).
# transformers' plain arm samples 16 requests per generate call (batch=16).
for engine, key, plain in (("transformers", "hf", ",batch=16"), ("onnxruntime", "ort", "")):
    AUDITS[f"smollm2-{key}-draft-tv05"] = dict(
        title=f"{engine}: SmolLM2-135M without vs with its first 8 layers as the draft, sized "
        "for TV 0.05 at position 2",
        a=f"{engine}:{SMOL},threads=1{plain}",
        b=f"{engine}:{SMOL},threads=1,draft={SMOL}@8",
        plan=CHOICE.name,
    )
# The Qwen pair sized for TV 0.05 at position 2 the same way (scripts/draft_tv05_prompt.py
# --pair qwen, the models' own laws in the audit's dtype). onnxruntime-genai samples with its
# runtime's default top_k of 50 in both arms: with no cut its verifier builds a rejection's
# residual in k x k steps over Qwen's 151,936-token vocabulary (docs/findings.md); the plan
# is computed with the same cut (--top-k 50).
AUDITS["hf-qwen-assisted-tv05"] = dict(
    AUDITS["hf-qwen-assisted"],
    title="transformers: Qwen2.5-Coder-1.5B without vs with assistant_model=0.5B (bf16), sized "
    "for TV 0.05 at position 2",
    plan=CHOICE.name,
)
AUDITS["ort-qwen-draft-tv05"] = dict(
    AUDITS["ort-qwen-draft"],
    title="onnxruntime-genai (int4): Qwen2.5-Coder-1.5B without vs with the 0.5B draft, top-k "
    "50, sized for TV 0.05 at position 2",
    plan=CHOICE.name,
    top_k=50,
)
AUDITS["smollm2-ov-lookup"] = dict(
    title="OpenVINO GenAI: SmolLM2-135M without vs with prompt lookup",
    a=f"openvino:{SMOL},threads=1",
    b=f"openvino:{SMOL},lookup=3,threads=1",
    prompts=LOOKUP_PROMPTS,
    n_samples=400,
)


def run(name: str, args: argparse.Namespace) -> None:
    spec = AUDITS[name]
    out = args.out / name
    if args.fresh and out.is_dir():  # the raw file and report; a prompt choice stays
        for f in out.iterdir():
            if f.name != CHOICE.name:
                shutil.rmtree(f) if f.is_dir() else f.unlink()
    plan = None
    if spec.get("plan"):  # prompt, size and new tokens planned before any sampling
        plan_file = out / spec["plan"]
        if not plan_file.is_file():
            raise SystemExit(f"{name}: no plan {plan_file}: run scripts/draft_tv05_prompt.py")
        plan = json.loads(plan_file.read_text())
        planned_k = plan.get("sampling", {}).get("top_k")
        if planned_k != spec.get("top_k"):
            raise SystemExit(
                f"{name}: the plan {plan_file} was computed with top_k={planned_k}, the audit "
                f"samples with top_k={spec.get('top_k')}: rerun scripts/draft_tv05_prompt.py"
            )
        spec = {**spec, "prompts": [plan["prompt"]], "n_samples": plan["n_per_arm"],
                "max_tokens": plan["max_tokens"]}  # fmt: skip
    prompts = spec["prompts"][: args.prompts] if args.prompts else spec["prompts"]
    if None in prompts:
        raise SystemExit(f"{name}: no {CHOICE} yet: run scripts/ensemble_prompt.py first")
    t0, c0 = time.perf_counter(), time.process_time()
    load0 = os.getloadavg()
    pred: list[dict[str, Any]] = []
    if "ensemble" in spec:
        # predicted before any sample, with the models loaded once and freed before the arms
        # load theirs (the audit never holds two copies of the pair)
        pred = _ensemble_prediction(spec["ensemble"], prompts)
    planned = max((p["planned_n_per_arm"] for p in pred), default=None)
    n = args.n_samples or (planned if spec["n_samples"] == "plan" else spec["n_samples"])
    report = engine_audit(
        spec["a"],
        spec["b"],
        prompts,
        out_dir=out,
        identity=spec.get("identity", False),
        progress=sys.stderr.isatty(),
        n_samples=n,
        max_tokens=args.max_tokens or spec.get("max_tokens", 3),
        temperature=1.0,
        top_k=spec.get("top_k"),
        alpha=0.01,
        tv_threshold=0.05,
        greedy_max_tokens=24,
        seed=0,
    )
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    meta = {
        "title": spec["title"],
        "command": f"python scripts/audit_engines.py {name}"
        + (f" --n-samples {n}" if args.n_samples else "")
        + (f" --prompts {args.prompts}" if args.prompts else ""),
        "a": spec["a"],
        "b": spec["b"],
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu + children.ru_utime + children.ru_stime, 1),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2),
        "peak_rss_children_gb": round(children.ru_maxrss / 1e6, 2),
        "machine": args.note,
        "load_average_start_end": [round(load0[0], 2), round(os.getloadavg()[0], 2)],
    }
    if plan is not None:
        meta["plan"] = {k: plan[k] for k in ("prompt", "n_per_arm", "max_tokens", "rule")}
    if pred:
        tv = report.tv
        measured = [
            tv[(tv.prompt == i) & (tv.position == 0)].iloc[0][["estimate", "low", "high"]].tolist()
            for i in range(len(prompts))
        ]
        joint = _joint_tv(out / "raw.jsonl", len(prompts), n)
        meta["ensemble_first_token"] = [
            {"prompt": i, **pr, "measured_tv": m[0], "measured_low": m[1], "measured_high": m[2],
             "measured_tv2": j[0], "measured_tv2_low": j[1], "measured_tv2_high": j[2]}
            for i, (pr, m, j) in enumerate(zip(pred, measured, joint, strict=True))
        ]  # fmt: skip
        meta["n_samples_rule"] = (
            "planned from the predicted first-token laws (scripts/ensemble_prompt.py: 90% power "
            "of the first-token test at alpha 0.01/6)"
            if spec["n_samples"] == "plan" and not args.n_samples
            else "given"
        )
    _write_json(out / "run.json", meta)
    print(f"== {name}: {spec['title']} (wall {wall:.0f} s, cpu {meta['cpu_s']:.0f} s)")
    print(report.summary(), flush=True)
    if "ensemble_first_token" in meta:
        for row in meta["ensemble_first_token"]:
            print(
                f"ensemble, prompt {row['prompt']}: predicted TV at the first token (1-w)*TV(p,q)"
                f" = {row['predicted_tv']:.3f} (TV(p,q) = {row['tv_pq']:.3f}); measured "
                f"{row['measured_tv']:.3f} [{row['measured_low']:.3f}, {row['measured_high']:.3f}]"
                f"; first two tokens: predicted {row['predicted_tv2']:.3f}, measured "
                f"{row['measured_tv2']:.3f} [{row['measured_tv2_low']:.3f}, "
                f"{row['measured_tv2_high']:.3f}]"
            )


def _ensemble_prediction(ens: tuple, prompts: list[str]) -> list[dict[str, Any]]:
    """The ensemble's predicted bias per prompt and the samples per arm it needs (both
    models loaded once, in the audit's dtype, and freed before the arms load)."""
    import gc

    from ensemble_prompt import planned_n

    from specviz.audit.engines.hf import ensemble_bias, load_bias_pair
    from specviz.core.heap import trim_heap

    target, draft, w, dtype = ens
    tok, tm, dm = load_bias_pair(target, draft, dtype)
    rows = []
    for p in prompts:
        pr = ensemble_bias(tm, dm, p, w, tokenizer=tok, laws=True)
        n = planned_n(pr)
        rows.append({k: v for k, v in pr.items() if not k.endswith("_law")})
        rows[-1]["planned_n_per_arm"] = n
    del tm, dm
    gc.collect()
    trim_heap()
    return rows


def _joint_tv(raw: Path, n_prompts: int, n: int) -> list[list[float]]:
    """Measured TV of the law of the first two tokens per prompt (bootstrap interval), from
    the raw file."""
    import numpy as np

    from specviz import stats

    seqs: dict[tuple[str, int], list[tuple]] = {}
    for line in raw.read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") == "sample" and r["index"] < n:
            seqs.setdefault((r["arm"], r["prompt"]), []).append(tuple(r["tokens"][:2]))
    out = []
    for i in range(n_prompts):
        _, ca, cb = stats.counts_from_samples(seqs[("a", i)], seqs[("b", i)])
        est = stats.estimate_tv(ca, cb, n_boot=500, rng=np.random.default_rng(0))
        out.append([est.estimate, est.low, est.high])
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("audit", choices=[*AUDITS, "list", "table"])
    ap.add_argument("--out", type=Path, default=Path("reports/audit"))
    ap.add_argument("--n-samples", type=int, default=None, help="per prompt and arm")
    ap.add_argument("--prompts", type=int, default=None, help="use only the first N prompts")
    ap.add_argument("--max-tokens", type=int, default=None, help="default 3 (4 with a draft)")
    ap.add_argument("--fresh", action="store_true", help="discard an interrupted audit")
    ap.add_argument("--note", default="", help="what else ran on the machine (run.json)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.audit == "list":
        for name, spec in AUDITS.items():
            print(f"{name:28s} {spec['title']}")
        return 0
    if args.audit != "table":
        run(args.audit, args)
    write_table(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
