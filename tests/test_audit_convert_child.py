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
