"""Every signature adapter tested both ways (issue 25): a correct and a broken pure-PyTorch
implementation written to the signature (``specviz.testing.reference``); the correct one passes,
the broken one fails with a counterexample. The real vLLM / FlashInfer / TensorRT-LLM / SGLang
kernels need CUDA: ``benchmarks/conformance_gpu.py`` runs them where a GPU is.
"""

from __future__ import annotations

import pytest
import torch

from specviz.testing import check_sampler
from specviz.testing import reference as R
from specviz.verification.base import VERIFIERS, verify_lossless

pytestmark = pytest.mark.usefixtures("one_thread")

#: (signature, correct, broken, families that show the broken one) -- the broken ones
#: reproduce shipped mistakes in each signature.
BOTH_WAYS = [
    ("transformers", R.transformers_speculative_sampling, R.transformers_softmax_residual, None),
    ("vllm", R.vllm_rejection_sample, R.vllm_ragged_row_permutation, ["random", "ragged"]),
    ("flashinfer", R.flashinfer_chain_speculative_sampling, R.flashinfer_trace_reference, None),
    ("trtllm", R.trtllm_rejection_sampling_one_model, R.trtllm_one_position_late, None),
    ("sglang_tree", R.sglang_tree_target_only, R.sglang_inclusive_coin, None),
    (
        "sglang_tree",
        R.sglang_tree_target_only,
        R.sglang_stale_draft_probs,
        ["random", "zeros", "disjoint"],
    ),
    ("specviz", verify_lossless, VERIFIERS["residual_from_target"].verify, None),
]


@pytest.mark.parametrize(
    "signature, correct, broken, families", BOTH_WAYS, ids=[f"{s}-{b.__name__}" for s, _, b, _ in BOTH_WAYS]
)  # fmt: skip
def test_adapter_both_ways(signature, correct, broken, families):
    n = 1000 if signature in ("transformers", "specviz", "vllm") else 2000
    good = check_sampler(correct, signature, n=n, families=families)
    assert good.passed, good.summary()
    bad = check_sampler(broken, signature, n=n, families=families)
    assert not bad.passed and bad.counterexample is not None, bad.summary()
    assert bad.counterexample.signature == signature


def test_vllm_permuted_rows_pass_when_every_row_drafts_as_many():
    """vLLM #14645 passes at batch 1 and with equal lengths: only the ragged family sees it."""
    same = check_sampler(
        R.vllm_ragged_row_permutation, "vllm", n=1000, families=["random", "rounds"]
    )
    assert same.passed, same.summary()


def test_vllm_one_hot_drafts_go_without_draft_probs():
    seen = []

    def spy(*args):
        seen.append(args[4])  # draft_probs
        return R.vllm_rejection_sample(*args)

    assert check_sampler(spy, "vllm", n=200, families=["one_hot"]).passed
    assert seen and all(d is None for d in seen)


def test_flashinfer_counters_are_checked():
    """emitted_num must count the emitted drafts; a kernel that miscounts fails the verdict."""

    def miscount(*args, **kw):
        out, accepted, emitted = R.flashinfer_chain_speculative_sampling(*args, **kw)
        return out, accepted, emitted + 1

    report = check_sampler(miscount, "flashinfer", n=300, families=["random"], shrink=False)
    assert not report.passed
    assert report.worst["context"].startswith("emitted_num differs from the emitted drafts")


def test_trtllm_gets_seed_and_advancing_offset():
    calls = []

    def spy(draft_probs, draft_token_ids, target_probs, deterministic=True, seed=None, offset=None):
        calls.append((seed, offset))
        return R.trtllm_rejection_sampling_one_model(draft_probs, draft_token_ids, target_probs, seed=seed, offset=offset)  # fmt: skip

    assert check_sampler(spy, "trtllm", n=200, families=["rounds"]).passed
    assert len(calls) == 2 and calls[0][0] == calls[1][0] and calls[1][1] > calls[0][1]


def test_sglang_boundary_coins_catch_the_inclusive_comparison():
    report = check_sampler(R.sglang_inclusive_coin, "sglang_tree", n=800, families=["disjoint"])
    assert not report.passed
    assert "coin of exactly 0" in report.worst["context"]


def test_specviz_takes_names_specs_callables_and_trees():
    spec = VERIFIERS["lossless"]
    assert check_sampler(spec, "specviz", n=500, families=["tree", "random"]).passed
    assert check_sampler(lambda t, q, p, g: verify_lossless(t, q, p, g), "specviz", n=500, families=["random"]).passed  # fmt: skip
    bad_tree = check_sampler("tree_stale_residual", "specviz", n=1000, families=["tree"])
    assert not bad_tree.passed, bad_tree.summary()
    assert "token after" in bad_tree.worst["context"]


def test_the_kit_runs_on_a_device_argument():
    report = check_sampler(R.flashinfer_chain_speculative_sampling, "flashinfer", n=200, families=["random"], device=torch.device("cpu"))  # fmt: skip
    assert report.passed
