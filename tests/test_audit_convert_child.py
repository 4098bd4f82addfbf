"""Model conversions for the in-process engines run in a child process (their memory goes back
when it ends; on the Qwen pair the audit's own process otherwise held the safetensors build
and the greedy check's transformers model: 16 GB). A tiny random Llama folder, truncated to
one layer, stands for any conversion: a few seconds.
"""

from __future__ import annotations

import pytest

from specviz.audit.engines import convert


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    monkeypatch.delenv(convert._IN_CHILD, raising=False)
    smol = convert.hf_folder("smollm2-135m", progress=False)  # from the real cache
    folder = tmp_path / "tiny"
    cfg = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    LlamaForCausalLM(cfg).save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(smol), local_files_only=True).save_pretrained(folder)
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    return folder


def test_a_conversion_runs_in_a_child_process_and_is_cached(tiny, monkeypatch):
    def here(*args, **kw):
        raise AssertionError("the conversion ran in the audit's own process")

    monkeypatch.setattr(convert, "_truncate", here)  # the parent must not build it
    out = convert.hf_folder(f"{tiny}@1", progress=False)
    assert convert._state(out) == ("ready", "")
    assert '"num_hidden_layers": 1' in (out / "config.json").read_text()
    assert convert.hf_folder(f"{tiny}@1", progress=False) == out  # cached: no child


def test_a_failing_child_raises_its_own_error_here(tiny):
    with pytest.raises(ValueError, match="has 2 layers; @5 keeps all of them"):
        convert.hf_folder(f"{tiny}@5", progress=False)
    with pytest.raises(FileNotFoundError, match="neither a built-in model"):
        convert.hf_folder(f"{tiny.parent / 'missing'}@1", progress=False)


def test_a_bf16_copy_is_built_in_a_child_and_loads_as_the_cast_float32_folder(tiny, monkeypatch):
    """``hf_folder(dtype="bfloat16")``: the float32 file cast once and cached (a bf16 load
    then maps it instead of converting float32 at load time: 10.9 GB on the 1.5B Qwen); the
    weights are exactly those of ``from_pretrained(float32 folder, dtype=bfloat16)``."""
    import torch
    from transformers import AutoModelForCausalLM

    def here(*args, **kw):
        raise AssertionError("the cast ran in the audit's own process")

    monkeypatch.setattr(convert, "_cast_folder", here)
    out = convert.hf_folder(str(tiny), dtype="bfloat16", progress=False)
    assert convert._state(out) == ("ready", "") and out.parent.name == "cast"
    assert convert.hf_folder(str(tiny), dtype="bfloat16", progress=False) == out  # cached
    got = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.bfloat16).state_dict()
    want = AutoModelForCausalLM.from_pretrained(str(tiny), dtype=torch.bfloat16).state_dict()
    assert got.keys() == want.keys()
    for k in want:
        assert got[k].dtype == torch.bfloat16 and torch.equal(got[k], want[k]), k
    assert '"dtype": "bfloat16"' in (out / "config.json").read_text()
    with pytest.raises(ValueError, match="float32, bfloat16 or float16"):
        convert.hf_folder(str(tiny), dtype="int3", progress=False)


def test_a_damaged_cast_is_caught_by_its_own_check(tiny, tmp_path, monkeypatch):
    """The cast checks what it wrote against the source, chunk by chunk (a writer that
    drops a byte must fail)."""
    monkeypatch.setenv(convert._IN_CHILD, "1")
    real = convert._cast_chunks
    calls = []

    def flipped(path, start, end, tdtype):
        for piece in real(path, start, end, tdtype):
            calls.append(1)
            if len(calls) == 3:  # the writer's third chunk is wrong; the check's is not
                piece = bytes([piece[0] ^ 1]) + piece[1:]
            yield piece

    monkeypatch.setattr(convert, "_cast_chunks", flipped)
    (tmp_path / "out").mkdir()
    with pytest.raises(convert.EngineError, match="differs from its source"):
        convert._cast_folder(tiny, tmp_path / "out", "bfloat16")
