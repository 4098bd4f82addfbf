"""Peak memory of OpenVINO GenAI's draft-model pipeline on the Qwen pair (1.5B target, 0.5B
draft), per way of loading it: why models above a billion parameters convert to int8 weights
by default (specviz.audit.engines.convert.default_weights; issue 24's 10 GB bar).

Each variant loads ``LLMPipeline(target, "CPU", draft_model=draft(...))`` in its own process,
samples four 4-token requests (T=1, three drafted tokens per step) and one 8-token greedy
request, and reports the process's peak RSS (``ru_maxrss``) after loading and at the end::

    .venv/bin/python benchmarks/ov_weights_memory.py               # every variant
    .venv/bin/python benchmarks/ov_weights_memory.py f16 int8      # some of them

Variants: ``f16`` (the f16 IR, the plugin's defaults), ``f16-bf16`` (INFERENCE_PRECISION_HINT
bf16), ``f16-nommap`` (ENABLE_MMAP off), ``f16-cache`` (a CACHE_DIR blob written by a first
load, then measured on a second one), ``int8`` (the Q8_0 route, the default above 1B). The
models convert on first use (cached; minutes). Run it alone: the peaks are of this process only,
but a busy machine makes the load times noise.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time

VARIANTS = {
    "f16": ("f16", {}),
    "f16-bf16": ("f16", {"INFERENCE_PRECISION_HINT": "bf16"}),
    "f16-nommap": ("f16", {"ENABLE_MMAP": False}),
    "f16-cache": ("f16", {"CACHE_DIR": None}),  # a fresh folder, loaded twice
    "int8": ("int8", {}),
}
PROMPT = "def fibonacci(n):\n    "

_CHILD = r"""
import json, resource, sys, time
import openvino_genai as g
target, draft, props = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
t0 = time.perf_counter()
pipe = g.LLMPipeline(target, "CPU", draft_model=g.draft_model(draft, "CPU", **props), **props)
load_s = time.perf_counter() - t0
after_load = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
ids = pipe.get_tokenizer().encode(sys.argv[4]).input_ids
failed = 0
for seed in range(1, 5):
    c = g.GenerationConfig()
    c.max_new_tokens, c.do_sample, c.temperature, c.top_p = 4, True, 1.0, 1.0
    c.rng_seed, c.num_assistant_tokens = seed, 3
    try:
        pipe.generate(ids, c)
    except RuntimeError:  # 2026.4.1 raises on some sampled drafts (docs/findings.md)
        failed += 1
c = g.GenerationConfig()
c.max_new_tokens, c.do_sample, c.num_assistant_tokens = 8, False, 3
greedy = [int(t) for t in pipe.generate(ids, c).tokens[0]]
print(json.dumps({"load_s": round(load_s, 1), "after_load_gb": round(after_load, 2),
                  "peak_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2),
                  "sampled_failed": failed, "greedy": greedy}))
"""


def _load(target: str, draft: str, props: dict) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, target, draft, json.dumps(props), PROMPT],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"the child failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    from specviz.audit.engines.convert import openvino_model

    names = argv or list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; choose from {list(VARIANTS)}")
    print(f"OpenVINO GenAI draft-model pipeline, Qwen2.5-Coder-1.5B + 0.5B draft, {time.ctime()}")
    print(f"{'variant':12s} {'peak GB':>8s} {'after load':>10s} {'load s':>7s}  greedy tokens")
    for name in names:
        weights, props = VARIANTS[name]
        target = str(openvino_model("qwen2.5-coder-1.5b", weights=weights, progress=False))
        draft = str(openvino_model("qwen2.5-coder-0.5b", weights=weights, progress=False))
        props = {"INFERENCE_NUM_THREADS": 2, **props}
        with tempfile.TemporaryDirectory() as tmp:
            if "CACHE_DIR" in props:
                props["CACHE_DIR"] = tmp
                _load(target, draft, props)  # writes the compiled blobs
            r = _load(target, draft, props)
        print(f"{name:12s} {r['peak_gb']:8.2f} {r['after_load_gb']:10.2f} {r['load_s']:7.1f}  "
              f"{r['greedy']}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
