"""onnxruntime-genai audited in-process on SmolLM2-135M (fp32, converted once offline by its
model builder). Its sources verify with min(1, p/q) and resample from norm(max(0, p - q)):
with the model as its own draft it must accept every drafted token and keep the law, and with
a truncated draft (the first 8 layers, q != p) keep the law at these sizes.
"""

from __future__ import annotations

import pytest
from _engine_memo import Memo

pytest.importorskip("onnxruntime_genai", reason="the [onnxruntime] extra is not installed")

from specviz.audit import engine_audit  # noqa: E402
from specviz.audit.engines import engine_from_spec  # noqa: E402
from specviz.audit.engines.convert import onnx_model  # noqa: E402

pytestmark = pytest.mark.slow

PROMPT = ["The cat sat on the mat. The dog sat on the"]
SIZE = dict(n_samples=60, max_tokens=3, temperature=1.0, greedy_max_tokens=8, progress=False)


@pytest.fixture(scope="module")
def plain():
    onnx_model("smollm2-135m", progress=False)
    return Memo(engine_from_spec("onnxruntime:smollm2-135m,threads=1", "A"))


def test_identity_draft_accepts_every_token(plain, tmp_path):
    b = engine_from_spec("onnxruntime:smollm2-135m,draft=target,threads=1", "B")
    r = engine_audit(plain, b, PROMPT, out_dir=tmp_path, identity=True, **SIZE)
    assert r.identity_outcome == "pass", r.summary()
    assert r.verdict == "consistent"
    assert r.greedy_verdict == "identical"


def test_truncated_draft_keeps_the_law(plain):
    b = engine_from_spec("onnxruntime:smollm2-135m,draft=smollm2-135m@8,threads=1", "B")
    r = engine_audit(plain, b, PROMPT, **SIZE)
    assert r.verdict == "consistent", r.summary()
    acc = r.response_counters["b"]["samples T=1"]["acceptance_rate"]
    assert 0 < acc < 1
