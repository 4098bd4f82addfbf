"""logits_to_probs reproduces transformers' generate processing exactly."""

from __future__ import annotations

import pytest
import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from specviz.core.sampling import SamplingParams, logits_to_probs, sample


def hf_probs(logits, temperature, top_k, top_p):
    procs = LogitsProcessorList()
    if temperature != 1.0:
        procs.append(TemperatureLogitsWarper(temperature))
    if top_k is not None:
        procs.append(TopKLogitsWarper(top_k))
    if top_p is not None and top_p < 1.0:
        procs.append(TopPLogitsWarper(top_p))
    return torch.softmax(procs(torch.zeros(1, 1, dtype=torch.long), logits.clone()), dim=-1)


@pytest.mark.parametrize("temperature", [0.3, 1.0, 1.7])
@pytest.mark.parametrize("top_k", [None, 1, 5, 200])
@pytest.mark.parametrize("top_p", [None, 0.05, 0.5, 0.95, 1.0])
def test_matches_transformers(temperature, top_k, top_p):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 100, generator=g) * 3
    logits[0, :10] = 2.0  # ties at the top-k boundary are kept, as in transformers
    ours = logits_to_probs(logits, SamplingParams(True, temperature, top_k, top_p))
    theirs = hf_probs(logits, temperature, top_k, top_p)
    assert torch.allclose(ours, theirs, atol=1e-7)
    assert torch.equal(ours > 0, theirs > 0)


def test_greedy_is_argmax_point_mass():
    logits = torch.tensor([[0.1, 3.0, 3.0, -1.0]])
    p = logits_to_probs(logits, SamplingParams(False))
    assert p.tolist() == [[0.0, 1.0, 0.0, 0.0]]  # first of tied maxima, like torch.argmax


def test_sample_consumes_the_generator_reproducibly():
    probs = torch.softmax(torch.randn(3, 50), dim=-1)
    a = sample(probs, torch.Generator().manual_seed(5))
    b = sample(probs, torch.Generator().manual_seed(5))
    assert torch.equal(a, b) and a.shape == (3,)
