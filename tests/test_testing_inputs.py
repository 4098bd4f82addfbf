"""Bad input to the conformance kit gets a clear error naming the argument and the expected
shape, before any statistics (issue 25): a callable with the wrong signature, outputs of the
wrong shape or dtype, ids out of range, NaN, malformed cases and settings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import specviz.testing._run as run_module
from specviz.testing import check_case, check_sampler
from specviz.testing import reference as R

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def no_statistics(monkeypatch):
    """Fail loudly if the kit reaches its statistics."""

    def refuse(*_a, **_k):
        raise AssertionError("statistics ran before the bad input was refused")

    monkeypatch.setattr(run_module, "test_family", refuse)
    import specviz.testing._kit as kit_module

    monkeypatch.setattr(kit_module, "test_family", refuse)


def _vllm_returning(make):
    def fn(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
           target_probs, bonus_token_ids, sampling_metadata):  # fmt: skip
        out = R.vllm_rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens,
                                      draft_probs, target_probs, bonus_token_ids, sampling_metadata)  # fmt: skip
        return make(out)

    return fn


@pytest.mark.parametrize(
    "fn, signature, error, match",
    [
        (
            lambda a, b: None,
            "vllm",
            TypeError,
            r"'vllm' signature rejection_sample\(draft_token_ids \[N\]",
        ),
        (lambda a, b, c, d, e: None, "transformers", TypeError, r"candidate_input_ids \[1, L\+K\]"),
        (42, "flashinfer", TypeError, r"fn must be callable with the 'flashinfer' signature"),
        (lambda x: x, "specviz", TypeError, r"verify\(tokens \[k\], q_draft \[k, V\] \| None"),
        ("no_such_rule", "specviz", ValueError, r"unknown verifier"),
    ],
)
def test_a_callable_with_the_wrong_signature(no_statistics, fn, signature, error, match):
    with pytest.raises(error, match=match):
        check_sampler(fn, signature, n=100)


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda out: out[:, :-1], ValueError, r"must have shape \[\d+, 4\], got \[\d+, 3\]"),
        (lambda out: out.float(), TypeError, r"must hold integer token ids .*float32"),
        (lambda out: torch.full(out.shape, float("nan")), TypeError, r"integer token ids"),
        (lambda out: out.masked_fill(out >= 0, 8), ValueError, r"token id 8, outside \[0, V=8\)"),
        (
            lambda out: torch.cat([torch.full_like(out[:, :1], -1), out[:, 1:]], 1),
            ValueError,
            r"padding must only follow|tokens emitted",
        ),  # fmt: skip
        (lambda out: out.tolist(), TypeError, r"must be a torch.Tensor of shape"),
    ],
    ids=["shape", "dtype", "nan", "id-range", "padding", "not-a-tensor"],
)
def test_vllm_outputs_are_checked_before_any_statistics(no_statistics, make, error, match):
    with pytest.raises(error, match=match):
        check_sampler(_vllm_returning(make), "vllm", n=100)


def test_flashinfer_and_trtllm_and_transformers_outputs(no_statistics):
    with pytest.raises(TypeError, match=r"must return \(output_token_ids \[B, K\+1\], accepted_num \[B\], emitted_num \[B\]\)"):  # fmt: skip
        check_sampler(lambda d, i, t, **kw: d, "flashinfer", n=100)
    with pytest.raises(ValueError, match=r"accepted_num must have shape \[\d+\]"):
        check_sampler(
            lambda d, i, t, **kw: (R.flashinfer_chain_speculative_sampling(d, i, t)[0], torch.zeros(2, dtype=torch.int32), torch.zeros(2, dtype=torch.int32)),  # fmt: skip
            "flashinfer", n=100,
        )  # fmt: skip
    with pytest.raises(
        TypeError, match=r"must return \(accepted_tokens \[B, K\+1\], num_emitted \[B\]\)"
    ):
        check_sampler(lambda d, i, t, **kw: R.flashinfer_chain_speculative_sampling(d, i, t), "trtllm", n=100)  # fmt: skip
    with pytest.raises(TypeError, match=r"\(valid_tokens \[1, n\+1\], n_matches\)"):
        check_sampler(lambda a, b, c, d: a, "transformers", n=100)
    with pytest.raises(
        ValueError, match=r"valid_tokens must have shape \[1, n\+1\] with n\+1 in 1..4"
    ):
        check_sampler(
            lambda a, b, c, d: (torch.zeros(1, 9, dtype=torch.long), 8), "transformers", n=100
        )


def test_specviz_verdicts_are_checked(no_statistics):
    with pytest.raises(
        TypeError, match=r"must return a Verdict \(with num_accepted and next_token\)"
    ):
        check_sampler(lambda t, q, p, g: (0, 1), "specviz", n=100)

    class Bad:
        num_accepted, next_token = 9, 0

    with pytest.raises(ValueError, match=r"num_accepted = 9 outside \[0, k = 3\]"):
        check_sampler(lambda t, q, p, g: Bad(), "specviz", n=100)


def test_sglang_outputs_are_checked(no_statistics):
    def wrong_index(predicts, accept_index, accept_token_num, *rest, **kw):
        R.sglang_tree_target_only(predicts, accept_index, accept_token_num, *rest, **kw)
        accept_index.fill_(10**6)

    with pytest.raises(ValueError, match=r"accept_index\[0\] = .* points outside row 0's slots"):
        check_sampler(wrong_index, "sglang_tree", n=100)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            dict(p_target=np.full((2, 3), np.nan), q_draft=np.full((1, 3), 1 / 3)),
            r"p_target \[2, V\] holds NaN",
        ),  # fmt: skip
        (
            dict(p_target=np.full((3, 3), 1 / 3), q_draft=np.full((1, 3), 1 / 3)),
            r"p_target must be a \[2, V\] array",
        ),  # fmt: skip
        (
            dict(p_target=np.full((2, 3), 1 / 3), q_draft=np.full((1, 4), 1 / 4)),
            r"disagree on V \(3 vs 4\)",
        ),  # fmt: skip
        (
            dict(p_target=np.full((2, 3), 0.5), q_draft=np.full((1, 3), 1 / 3)),
            r"row 0 sums to 1.5, not 1",
        ),  # fmt: skip
        (
            dict(p_target=np.array([[1.5, -0.5], [0.5, 0.5]]), q_draft=np.full((1, 2), 0.5)),
            r"negative",
        ),  # fmt: skip
        (dict(p_target=np.full((2, 2), 0.5)), r"give cases="),
        (dict(cases=[(np.full((2, 2), 0.5),)]), r"cases\[0\] must be a \(p_target, q_draft\) pair"),
        (
            dict(p_target=np.full((2, 2), 0.5), q_draft=np.full((1, 2), 0.5), layout="zigzag"),
            r"layout must be",
        ),  # fmt: skip
        (
            dict(p_target=np.full((2, 2), 0.5), q_draft=np.full((1, 2), 0.5), layout="rounds"),
            r"exactly two cases",
        ),  # fmt: skip
        (
            dict(p_target=np.full((2, 2), 0.5), q_draft=np.full((1, 2), 0.5), deterministic=True),
            r"one-hot q_draft",
        ),  # fmt: skip
    ],
)
def test_check_case_refuses_malformed_cases(no_statistics, kwargs, match):
    with pytest.raises(ValueError, match=match):
        check_case("lossless", "specviz", **kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(signature="mlx"), r"unknown signature 'mlx'"),
        (dict(n=10), r"n must be an integer >= 50"),
        (dict(alpha=0.7), r"alpha must be a number in \(0, 0.5\)"),
        (dict(seed=-1), r"seed must be an integer >= 0"),
        (dict(families=["random", "nope"]), r"unknown families \['nope'\]"),
        (dict(vocab=1), r"vocab must be an integer >= 2"),
        (dict(k=0), r"k must be an integer >= 1"),
    ],
)
def test_check_sampler_refuses_bad_settings(no_statistics, kwargs, match):
    kw = dict(signature="specviz") | kwargs
    with pytest.raises(ValueError, match=match):
        check_sampler("lossless", **kw)
