"""Shared fixtures: the built-in SmolLM2-135M model and a memoising wrapper for law tests."""

from __future__ import annotations

import os

import pytest
import torch

from specviz.fixtures.memo import MemoLM

# The suite runs on the stock kernels unless told otherwise: a kernel choice timed on a busy
# CI machine would make tests host-dependent. tests/test_kernels.py tests the measured choice.
os.environ.setdefault("SPECVIZ_KERNELS", "stock")

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One worker per core (make test): a second intra-op thread per worker would only compete.
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer) for SmolLM2-135M-Instruct, fp32 CPU, from the built-in GGUF."""
    from specviz.models import load_model, load_tokenizer

    return load_model("smollm2-135m", progress=False), load_tokenizer("smollm2-135m")


@pytest.fixture(scope="session")
def memo_pair(smollm2):
    """(target, draft) memoised: SmolLM2 and a noisy copy of it (untrained early exits of
    SmolLM2 agree with it almost nowhere, beta ~ 0, which would leave the accept path idle)."""
    target = MemoLM(smollm2[0])
    return target, target.noisy_copy(1.0)


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op torch thread for a module: on a shared 2-core machine two competing torch
    threads made forward passes up to ~10x slower. Use with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
