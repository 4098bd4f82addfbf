"""The int4 / int8 onnxruntime-genai models specviz makes are the model builder's own bytes.

specviz builds the fp32 model with onnxruntime-genai's builder and quantizes its MatMul
weights in a process of its own, one weight at a time (the builder's own quantization held a
float32 copy of the whole graph beside the transformers model: 14.3 GB on the 1.5B Qwen).
On SmolLM2-135M's first 8 layers with an LM head of their own (the route for models that do
not tie it to the embedding), the result must be the graph and the weight bytes the builder
writes itself for the same precision; a block size other than the builder's must come out
different (the negative control: the comparison can fail). A tied model goes through the
builder's own quantization (it shares the int4 LM head with the embedding), also checked.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime_genai", reason="the [onnxruntime] extra is not installed")

from specviz.audit.engines.convert import (  # noqa: E402
    _ort_build,
    _ort_build_quantized,
    _ort_quantize,
    hf_folder,
    ort_model_differences,
)

pytestmark = pytest.mark.slow

NAME = "smollm2-135m@8"


@pytest.fixture(scope="module")
def untied(tmp_path_factory) -> Path:
    """SmolLM2's first 8 layers with the LM head stored apart from the embedding."""
    from safetensors.torch import load_file, save_file

    src = hf_folder(NAME, progress=False)
    out = tmp_path_factory.mktemp("untied") / "hf"
    shutil.copytree(src, out)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["tie_word_embeddings"] is True
    cfg["tie_word_embeddings"] = False
    (out / "config.json").write_text(json.dumps(cfg))
    (weights,) = out.glob("*.safetensors")
    tensors = load_file(weights)
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    save_file(tensors, weights, metadata={"format": "pt"})
    return out


@pytest.fixture(scope="module")
def fp32(untied, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ort") / "fp32"
    _ort_build(untied, out, NAME)
    return out


@pytest.mark.parametrize("precision", ["int4", "int8"])
def test_quantized_apart_is_the_builders_model(untied, fp32, tmp_path, precision):
    direct = tmp_path / "builder"
    _ort_build(untied, direct, NAME, precision)  # the builder's own quantization
    ours = tmp_path / "specviz"
    _ort_build_quantized(untied, ours, precision, NAME)
    assert not (ours / "fp32-build").exists()
    assert ort_model_differences(ours, direct) == []
    # Negative control: blocks of 64 instead of the builder's 32 are another model.
    other = tmp_path / "block64"
    _ort_quantize(fp32, other, precision, NAME, block=64)
    assert {"nodes", "initializers", "weight bytes"} <= set(ort_model_differences(other, direct))


def test_a_tied_model_is_quantized_by_the_builder(tmp_path):
    hf = hf_folder(NAME, progress=False)
    direct = tmp_path / "builder"
    _ort_build(hf, direct, NAME, "int4")
    ours = tmp_path / "specviz"
    _ort_build_quantized(hf, ours, "int4", NAME)
    assert ort_model_differences(ours, direct) == []
    # Its shared int4 embedding is what quantizing the fp32 model apart would not make.
    fp32 = tmp_path / "fp32"
    _ort_build(hf, fp32, NAME)
    apart = tmp_path / "apart"
    _ort_quantize(fp32, apart, "int4", NAME)
    assert "nodes" in ort_model_differences(apart, direct)
