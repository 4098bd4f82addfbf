"""A conformance kit for rejection samplers: is what your sampler emits the target's law?

Engine teams call their own sampler -- written to the signature of transformers, vLLM,
FlashInfer, TensorRT-LLM, SGLang's tree kernel or specviz -- on families of small exact (p, q)
cases where the law of every emitted position is known, and get a verdict with its false-alarm
rate, the smallest TV it could see, the worst case found and, on failure, a shrunk
counterexample that pastes into a test::

    from transformers.generation.utils import _speculative_sampling
    from specviz.testing import assert_lossless

    assert_lossless(_speculative_sampling, signature="transformers")  # passes

or, under pytest, the ``lossless`` fixture of :mod:`specviz.testing.pytest_plugin`. Pure-PyTorch
implementations written to each signature (one correct, at least one broken) are in
:mod:`specviz.testing.reference`; ``docs/testing.md`` has the design and the measured numbers.

>>> from specviz.testing import SIGNATURES, FAMILIES
>>> SIGNATURES
('transformers', 'vllm', 'flashinfer', 'trtllm', 'sglang_tree', 'specviz')
>>> "rounds" in FAMILIES
True
"""

from __future__ import annotations

from ._cases import FAMILIES, Case
from ._kit import CALIBRATION, SIGNATURES, assert_lossless, check_case, check_sampler
from ._report import ConformanceReport, Counterexample

__all__ = [
    "CALIBRATION",
    "FAMILIES",
    "SIGNATURES",
    "Case",
    "ConformanceReport",
    "Counterexample",
    "assert_lossless",
    "check_case",
    "check_sampler",
]
