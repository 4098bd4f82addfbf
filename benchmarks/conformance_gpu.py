"""The conformance kit on the engines' real CUDA kernels (issue 25). Needs a GPU.

    python benchmarks/conformance_gpu.py [--n 2000] [--out results.txt]

For every engine package importable here -- FlashInfer (``flashinfer.sampling.
chain_speculative_sampling``), TensorRT-LLM (``tensorrt_llm._torch.speculative.one_model_sampler.
rejection_sampling_one_model``), SGLang's kernel (``sgl_kernel.tree_speculative_sampling_target_
only``) and vLLM v1 (``vllm.v1.sample.rejection_sampler.rejection_sample``) -- runs
``specviz.testing.check_sampler`` on the kernel with ``device="cuda"`` and prints the verdict
and, on failure, the shrunk counterexample. The pure-PyTorch references of the same signatures
(``specviz.testing.reference``: one correct, one broken each) run first on the GPU as the
controls: the correct one must pass and the broken one fail, or the run proves nothing.

Without CUDA it says so and exits 0: CPU CI never depends on it. The kernels' packages are not
dependencies of specviz; install the ones you want checked next to it on the GPU machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
import time


def _vllm_kernel():
    """vLLM's rejection_sample, fed a real SamplingMetadata built from the kit's namespace."""
    rs = importlib.import_module("vllm.v1.sample.rejection_sampler")
    from vllm.v1.sample.metadata import SamplingMetadata

    def call(draft_token_ids, num_draft_tokens, max_spec_len, cu, draft_probs, target_probs, bonus, meta):  # fmt: skip
        B = len(num_draft_tokens)
        known = dict(
            temperature=meta.temperature, all_greedy=False, all_random=True, top_p=None,
            top_k=None, generators=meta.generators, max_num_logprobs=None, no_penalties=True,
            prompt_token_ids=None, output_token_ids=[[] for _ in range(B)],
            allowed_token_ids_mask=None, bad_words_token_ids={},
        )  # fmt: skip
        kw = {}
        for f in dataclasses.fields(SamplingMetadata):
            if f.name in known:
                kw[f.name] = known[f.name]
            elif f.default is not dataclasses.MISSING:
                kw[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                kw[f.name] = f.default_factory()  # type: ignore[misc]
            else:
                kw[f.name] = None
        return rs.rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu, draft_probs,
                                   target_probs, bonus, SamplingMetadata(**kw))  # fmt: skip

    return call


KERNELS = {
    "flashinfer": lambda: importlib.import_module("flashinfer.sampling").chain_speculative_sampling,
    "trtllm": lambda: (
        importlib.import_module(
            "tensorrt_llm._torch.speculative.one_model_sampler"
        ).rejection_sampling_one_model
    ),
    "sglang_tree": lambda: (
        importlib.import_module("sgl_kernel").tree_speculative_sampling_target_only
    ),  # fmt: skip
    "vllm": _vllm_kernel,
}


def controls():
    from specviz.testing import reference as R

    return {
        "flashinfer": (R.flashinfer_chain_speculative_sampling, R.flashinfer_trace_reference),
        "trtllm": (R.trtllm_rejection_sampling_one_model, R.trtllm_one_position_late),
        "sglang_tree": (R.sglang_tree_target_only, R.sglang_inclusive_coin),
        "vllm": (R.vllm_rejection_sample, R.vllm_ragged_row_permutation),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--out", default=None, help="also write the lines here")
    args = ap.parse_args()
    import torch

    from specviz.testing import check_sampler

    lines: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    if not torch.cuda.is_available():
        say("no CUDA device: nothing to check here (the kit's CPU tests cover the references)")
        return 0
    say(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, n = {args.n} per case")
    for signature, (good, bad) in controls().items():
        g = check_sampler(good, signature, n=args.n, device="cuda", shrink=False)
        b = check_sampler(bad, signature, n=args.n, device="cuda", shrink=False)
        ok = g.passed and not b.passed
        say(f"control {signature}: reference {g.verdict}, broken reference {b.verdict} -> {'ok' if ok else 'CONTROL FAILED'}")  # fmt: skip
        try:
            kernel = KERNELS[signature]()
        except Exception as exc:  # noqa: BLE001 -- a missing or broken package is a line in the report
            say(f"{signature}: not checked ({type(exc).__name__}: {exc})")
            continue
        t0 = time.perf_counter()
        report = check_sampler(kernel, signature, n=args.n, device="cuda")
        say(f"{signature}: {report.summary()} [{time.perf_counter() - t0:.1f} s wall]")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
