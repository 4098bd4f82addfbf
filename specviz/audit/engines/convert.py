"""Models for the in-process engines, made offline from specviz's own model cache.

* **OpenVINO GenAI** reads an IR folder (``openvino_model.xml`` plus the tokenizer IRs). Route:
  the cached safetensors folder of a built-in model -> an f16 GGUF, written by llama.cpp's
  ``convert_hf_to_gguf.py`` vendored in the pinned llama-cpp-python sdist (``make`` extracts it
  into ``<venv>/llama.cpp/convert``; OpenVINO's GGUF reader refuses the shipped Q4/Q5 files) ->
  ``openvino_genai.LLMPipeline(model.gguf, "CPU", enable_save_ov_model=True)``, which writes the
  IR and the tokenizer IRs next to it. That folder works as the target and as ``draft_model``.
  ``weights="int8"`` writes a Q8_0 GGUF instead (``--outtype q8_0``: int8 weights, one f16
  scale per 32): OpenVINO's GGUF reader keeps them int8 in the IR and the CPU plugin keeps
  them compressed, where it holds f16 weights as f32 (the 1.5B Qwen: 6.2 GB of weights as f16
  IR). Int8 weights are a different model from the f16 one, so both arms of an audit must use
  the same ``weights=`` and the report says which.
* **onnxruntime-genai** reads a folder with ``genai_config.json`` and ``model.onnx``: its model
  builder (``python -m onnxruntime_genai.models.builder``, torch + transformers) converts the
  cached safetensors folder directly. Draft-model speculation needs a composite folder whose
  ``genai_config.json`` has a ``model.draft`` block (:func:`onnx_speculative_folder`).

Every converted folder is built under a temporary name, checked -- the engine loads it and its
greedy continuation of a probe prompt must be the transformers model's greedy continuation, up
to near ties (``_NEAR_TIE`` logits, f16 weights) -- hashed into ``specviz.json`` (size and
SHA-256 of every file, re-checked on every use like the model cache) and only then renamed into
``cache_dir()/openvino`` or ``cache_dir()/onnx``. A converter that fails ends in an
:class:`~.base.EngineError` naming the engine, the model and the converter's last words.

* **transformers in bf16/f16** (``hf_folder(name, dtype="bfloat16")``): a copy of the
  safetensors folder with its float32 tensors stored in that dtype, streamed a chunk at a time
  (no model, no map of the float32 file; the peak is one chunk) and checked against the
  source, so that a bf16 load maps a half-size file instead of converting the float32 one at
  load time (10.9 GB peak for the 1.5B Qwen).

Truncated models (``"smollm2-135m@8"``: the first 8 layers and the LM head) are the
audit's cheap, *different* draft: a draft with q != p, for the lossy controls.

Conversions run in child processes (their memory goes when they end; a crash in a converter
cannot take the audit down): every step, and the whole build of a missing cache entry -- the
safetensors folder of a built-in model (dequantized from its GGUF), a truncated draft, the
greedy check that loads the transformers model next to the converted one -- runs in
``python -m specviz.audit.engines.convert`` (:func:`_convert_in_child`), so the audit's own
process never holds those models (on the Qwen pair the first, converting audit peaked at 16 GB
when they ran in it).
"""

from __future__ import annotations

import filecmp
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from ... import models as _models
from .base import EngineError, import_engine

__all__ = [
    "CONVERTER_ENV",
    "INT8_ABOVE_PARAMS",
    "default_weights",
    "gguf_converter",
    "hf_folder",
    "onnx_model",
    "onnx_speculative_folder",
    "openvino_model",
    "parameter_count",
    "parse_model",
]

CONVERTER_ENV = "SPECVIZ_GGUF_CONVERTER"  # path to convert_hf_to_gguf.py (overrides the search)
_IN_CHILD = "SPECVIZ_CONVERT_IN_CHILD"  # set in the conversion child: build here
_ERROR_MARK = "specviz-convert-error: "  # the child's last stdout line when it fails
_PROBE = "The quick brown fox jumps over the lazy dog. The quick brown"
_PROBE_TOKENS = 6
_NEAR_TIE = 0.5  # logits: f16/int weights move near ties, a clear margin may not move
_FORMAT = 1  # bump when the conversion recipe changes (the folder name changes with it)


# ------------------------------------------------------------------------------ model names


def parse_model(name: str) -> tuple[str, int | None]:
    """``"smollm2-135m@8"`` -> ``("smollm2-135m", 8)``: a model and, after ``@``, the number of
    leading layers kept (a truncated draft); a plain name keeps every layer.

    >>> parse_model("smollm2-135m@8"), parse_model("/models/x")
    (('smollm2-135m', 8), ('/models/x', None))
    """
    m = re.fullmatch(r"(.+)@(\d+)", name)
    if m is None:
        return name, None
    layers = int(m.group(2))
    if layers < 1:
        raise ValueError(f"{name!r}: keep at least 1 layer (@N with N >= 1)")
    return m.group(1), layers


def _slug(name: str) -> str:
    """A folder-name-safe, unique name for a built-in name or a path."""
    if name in _models.BUILTIN_MODELS:
        return _models.BUILTIN_MODELS[name].cache_name
    path = Path(name).expanduser().resolve()
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', path.name)[:40]}-{digest}"


def hf_folder(name: str, *, progress: bool = True, dtype: str | None = None) -> Path:
    """The safetensors folder of ``name`` (a built-in name, optionally ``@N``-truncated, or a
    local model folder), built and verified in specviz's cache when needed.

    ``dtype="bfloat16"`` (or ``"float16"``): a copy whose float32 tensors are stored in that
    dtype (:func:`_cast_folder`), cached beside the others, so that a bf16 load maps the
    half-size file instead of converting the float32 one (on the 1.5B Qwen that conversion
    alone peaked at 10.9 GB).
    """
    if dtype not in (None, "float32", "fp32"):
        return _cast_hf_folder(name, str(dtype), progress)
    base, layers = parse_model(name)
    if base in _models.BUILTIN_MODELS:
        folder = _models.cache_dir() / "models" / _models.BUILTIN_MODELS[base].cache_name
        if _state(folder)[0] != "ready" and not os.environ.get(_IN_CHILD):
            _convert_in_child("hf", base, {}, "transformers", progress)
        _models.load_tokenizer(base, source="local", progress=progress)  # builds/verifies it
    else:
        folder = _check_source(base)
    if layers is None:
        return folder
    dest = _models.cache_dir() / "truncated" / f"{_slug(base)}-layers{layers}"
    if _state(dest)[0] != "ready" and not os.environ.get(_IN_CHILD):
        return _convert_in_child("hf", name, {}, "transformers", progress, dest)
    return _cached(dest, lambda tmp: _truncate(base, layers, tmp, progress), progress, "truncate")


_CASTS = {"bfloat16": "BF16", "bf16": "BF16", "float16": "F16", "fp16": "F16"}
_CAST_CHUNK = 1 << 24  # float32 values per read (64 MB): the cast's peak is one chunk


def _cast_hf_folder(name: str, dtype: str, progress: bool) -> Path:
    """The cached ``dtype`` copy of :func:`hf_folder`'s folder (built in the conversion child
    process, like every other cache entry)."""
    if dtype not in _CASTS:
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
    dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(dtype, dtype)
    base, layers = parse_model(name)
    _check_source(base)
    tag = _slug(base) + (f"-layers{layers}" if layers else "")
    dest = _models.cache_dir() / "cast" / f"{tag}-{dtype}-v{_FORMAT}"
    if _state(dest)[0] == "ready":
        return dest
    if not os.environ.get(_IN_CHILD):
        return _convert_in_child("hf", name, {"dtype": dtype}, "transformers", progress, dest)
    src = hf_folder(name, progress=progress)
    return _cached(
        dest, lambda tmp: _cast_folder(src, tmp, dtype), progress, f"{dtype} copy of {name}",
        {"source": str(src), "dtype": dtype},
    )  # fmt: skip


def _read_header(path: Path) -> tuple[int, dict[str, Any]]:
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return 8 + n, json.loads(f.read(n))


def _cast_folder(src: Path, out: Path, dtype: str) -> None:
    """Copy a safetensors model folder with every F32 tensor stored as ``dtype`` (rounded as
    ``torch.Tensor.to(dtype)`` rounds, which is what ``from_pretrained(dtype=...)`` does to
    the float32 file); other tensors and files are copied as they are. The tensors are
    streamed with plain reads, a chunk at a time (no map of the float32 file, no model), and
    the result is checked with safetensors' own reader (names, shapes, dtypes) and against
    the source, chunk by chunk."""
    import torch

    code = _CASTS[dtype]
    tdtype = getattr(torch, dtype)
    skip = {_models._META_NAME, _models._VERIFIED_NAME, ".content-crc32.json"}
    for f in sorted(src.iterdir()):
        if f.name in skip or not f.is_file():
            continue
        if f.suffix == ".safetensors":
            _cast_file(f, out / f.name, code, tdtype)
        elif f.name == "config.json":
            cfg = json.loads(f.read_text())
            for key in ("dtype", "torch_dtype"):
                if key in cfg:
                    cfg[key] = dtype
            (out / f.name).write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        else:
            shutil.copy2(f, out / f.name)
    if not any(out.glob("*.safetensors")):
        raise EngineError(f"transformers: {src} has no .safetensors file to cast to {dtype}")


def _cast_chunks(path: Path, start: int, end: int, tdtype: Any):
    """The float32 values of bytes [start, end) of ``path`` cast to ``tdtype``, as bytes, a
    chunk at a time."""
    import numpy as np
    import torch

    with open(path, "rb") as f:
        f.seek(start)
        left = (end - start) // 4
        while left:
            k = min(left, _CAST_CHUNK)
            buf = np.frombuffer(f.read(4 * k), dtype="<f4")
            if buf.size != k:
                raise EngineError(f"transformers: {path} ends inside a tensor")
            yield torch.from_numpy(buf.copy()).to(tdtype).view(torch.int16).numpy().tobytes()
            left -= k


def _cast_file(src: Path, dst: Path, code: str, tdtype: Any) -> None:
    from safetensors import safe_open

    base, header = _read_header(src)
    names = sorted((k for k in header if k != "__metadata__"),
                   key=lambda k: header[k]["data_offsets"][0])  # fmt: skip
    new: dict[str, Any] = {}
    if "__metadata__" in header:
        new["__metadata__"] = header["__metadata__"]
    offset = 0
    for k in names:
        e = header[k]
        b, t = e["data_offsets"]
        size = (t - b) // 2 if e["dtype"] == "F32" else t - b
        new[k] = {**e, "dtype": code if e["dtype"] == "F32" else e["dtype"],
                  "data_offsets": [offset, offset + size]}  # fmt: skip
        offset += size
    blob = json.dumps(new, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(dst, "wb") as f:
        f.write(len(blob).to_bytes(8, "little") + blob)
        with open(src, "rb") as g:
            for k in names:
                b, t = header[k]["data_offsets"]
                if header[k]["dtype"] == "F32":
                    for piece in _cast_chunks(src, base + b, base + t, tdtype):
                        f.write(piece)
                else:
                    g.seek(base + b)
                    f.write(g.read(t - b))
    # check: safetensors reads it (header only: no data page is touched), and every tensor
    # is the source's, cast
    with safe_open(str(dst), framework="pt") as r:
        got = {k: (r.get_slice(k).get_dtype(), r.get_slice(k).get_shape()) for k in r.keys()}
    want = {k: (new[k]["dtype"], list(new[k]["shape"])) for k in names}
    if got != want:
        raise EngineError(f"transformers: the {code} copy {dst} does not read back as written")
    obase, _ = _read_header(dst)
    for k in names:
        b, t = header[k]["data_offsets"]
        ob, ot = new[k]["data_offsets"]
        if header[k]["dtype"] != "F32":
            continue
        with open(dst, "rb") as h:
            h.seek(obase + ob)
            for piece in _cast_chunks(src, base + b, base + t, tdtype):
                if h.read(len(piece)) != piece:
                    raise EngineError(f"transformers: {dst}: tensor {k} differs from its source")
            if h.tell() != obase + ot:
                raise EngineError(f"transformers: {dst}: tensor {k} has the wrong length")


def _check_source(base: str) -> Path:
    """A built-in model's name, or a local folder with a ``config.json`` (else a clear error,
    before any child process or model runs)."""
    if base in _models.BUILTIN_MODELS:
        return _models.cache_dir() / "models" / _models.BUILTIN_MODELS[base].cache_name
    folder = Path(base).expanduser()
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(
            f"{base!r} is neither a built-in model ({', '.join(_models.BUILTIN_MODELS)}) "
            "nor a folder with a config.json"
        )
    return folder


def _truncate(base: str, layers: int, out: Path, progress: bool) -> None:
    model = _models.load_model(base, progress=progress)
    blocks = model.model.layers
    if layers >= len(blocks):
        raise ValueError(f"{base} has {len(blocks)} layers; @{layers} keeps all of them")
    model.model.layers = blocks[:layers]
    model.config.num_hidden_layers = layers
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = model.config.layer_types[:layers]
    model.save_pretrained(out)
    _models.load_tokenizer(base, progress=progress).save_pretrained(out)


# ------------------------------------------------------------------------------ the cache


def _manifest(folder: Path, meta: dict[str, Any]) -> None:
    """``specviz.json`` (size + SHA-256 of every file, the model cache's format) and
    ``.verified.json`` (what :func:`_state` checks on every use)."""
    files, records = {}, {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel in (_models._META_NAME, _models._VERIFIED_NAME):
            continue
        _models._fsync_file(path)
        st = path.stat()
        digest = _models._sha256_file(path)
        files[rel] = {"size": st.st_size, "sha256": digest}
        records[rel] = _models._verified_record(st, digest)
    meta = {**meta, "cache_format": _models._CACHE_FORMAT, "files": files}
    (folder / _models._META_NAME).write_text(json.dumps(meta, indent=2, sort_keys=True))
    _models._write_verified(folder, records)
    _models._fsync_dir(folder)


def _state(folder: Path) -> tuple[str, str]:
    """("missing" | "ready" | "damaged", why): every file of the manifest present with its
    size, and re-hashed when its (size, mtime) changed since it was last verified."""
    if not folder.exists():
        return "missing", ""
    try:
        files = json.loads((folder / _models._META_NAME).read_text())["files"]
        table = {name: (int(e["size"]), str(e["sha256"])) for name, e in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        return "damaged", f"{_models._META_NAME}: {type(err).__name__}: {err}"
    verified = _models._read_verified(folder)
    records, stale = {}, False
    for name, (size, digest) in table.items():
        path = folder / name
        if ".." in Path(name).parts or not path.is_file():
            return "damaged", f"{name}: missing"
        st = path.stat()
        if st.st_size != size:
            return "damaged", f"{name}: size {st.st_size} != {size}"
        records[name] = _models._verified_record(st, digest)
        if verified.get(name) != records[name]:
            if _models._sha256_file(path) != digest:
                return "damaged", f"{name}: SHA-256 differs from the recorded one"
            stale = True
    if stale:
        try:
            _models._write_verified(folder, records)
        except OSError:
            pass
    return "ready", ""


def _cached(dest: Path, build: Any, progress: bool, what: str, meta: dict | None = None) -> Path:
    """``dest`` when it is complete and intact; else ``build(tmp)`` in a temporary sibling,
    the manifest, and an atomic rename. A damaged entry is moved away and rebuilt."""
    status, reason = _state(dest)
    if status == "ready":
        return dest
    if status == "damaged":
        _models._warn(f"cache entry {dest} is damaged ({reason}); rebuilding", progress)
        _models._discard(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        _models._say(f"{what}: building {dest.name} (one-time)", progress)
        build(tmp)
        _manifest(tmp, {"format": _FORMAT, "what": what, **(meta or {})})
        _models._make_shareable(tmp)
        try:
            os.rename(tmp, dest)
        except OSError:  # another process published it meanwhile: keep theirs
            if _state(dest)[0] != "ready":
                raise
        _models._fsync_dir(dest.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _run(cmd: list[str], engine: str, what: str, timeout: float = 3600) -> str:
    """Run a conversion step in a child process; its failure is an EngineError with the
    step's last lines."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
    except subprocess.TimeoutExpired as err:
        raise EngineError(f"{engine}: {what} did not finish in {timeout:.0f} s") from err
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise EngineError(
            f"{engine}: {what} failed (exit status {proc.returncode}); its last lines:\n{tail}"
        )
    return proc.stdout


def _convert_in_child(
    kind: str, name: str, kw: dict[str, Any], engine: str, progress: bool, dest: Path | None = None
) -> Path:
    """Build ``kind``'s cache entry for ``name`` (``hf``: :func:`hf_folder`, ``openvino``:
    :func:`openvino_model`, ``onnx``: :func:`onnx_model` with ``kw``) in a child process and
    return ``dest`` once the child published it intact. The child's failure is raised here
    with its own message (an :class:`~.base.EngineError` naming the engine and the cause)."""
    import specviz

    root = str(Path(specviz.__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, _IN_CHILD: "1", "PYTHONPATH": path}
    cmd = [sys.executable, "-m", __name__, kind, name, json.dumps(kw)]
    proc = subprocess.run(
        cmd,
        stdout=subprocess.PIPE,
        stderr=None if progress else subprocess.PIPE,
        text=True,
        env=env,
        check=False,
    )
    lines = (proc.stdout or "").strip().splitlines()
    if proc.returncode != 0:
        if lines and lines[-1].startswith(_ERROR_MARK):
            err = json.loads(lines[-1][len(_ERROR_MARK) :])
            cls = {"FileNotFoundError": FileNotFoundError, "ValueError": ValueError}.get(
                err["type"], EngineError
            )
            if cls is EngineError and not err["type"].startswith("Engine"):
                raise EngineError(
                    f"{engine}: converting {name} failed: {err['type']}: {err['message']}"
                )
            raise cls(err["message"])
        tail = "\n".join((proc.stderr or "").strip().splitlines()[-8:])
        raise EngineError(
            f"{engine}: converting {name} failed in its child process (exit status "
            f"{proc.returncode}){'; its last lines:' + chr(10) + tail if tail else ''}"
        )
    if dest is None:
        return Path(lines[-1]) if lines else Path()
    status, why = _state(dest)
    if status != "ready":
        raise EngineError(f"{engine}: converting {name} left {dest} {status} ({why})")
    return dest


def _child_main(argv: list[str]) -> int:
    """``python -m specviz.audit.engines.convert KIND NAME KWARGS_JSON``: one conversion; the
    last stdout line is the folder, or :data:`_ERROR_MARK` and the error as JSON."""
    kind, name, kw = argv[0], argv[1], json.loads(argv[2]) if len(argv) > 2 else {}
    build = {"hf": hf_folder, "openvino": openvino_model, "onnx": onnx_model}[kind]
    try:
        folder = build(name, progress=False, **kw)
    except Exception as err:  # noqa: BLE001 - reported to the parent, which raises it
        print(_ERROR_MARK + json.dumps({"type": type(err).__name__, "message": str(err)}))
        return 2
    print(folder)
    return 0


# ------------------------------------------------------------------------------ checks


def _probe_ids(hf: Path) -> list[int]:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(hf), local_files_only=True)(_PROBE)["input_ids"]


def _check_greedy(
    engine: str, hf: Path, prompt: list[int], got: list[int], near_tie: float = _NEAR_TIE
) -> None:
    """The engine's greedy tokens must be the transformers model's argmax at every position,
    or within ``near_tie`` logits of it."""
    import torch

    if len(got) < 1:
        raise EngineError(f"{engine}: the converted model generated no token for the probe")
    model = _models.load_model(str(hf), progress=False, packed=False)  # one pass: stock kernels
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + got])).logits[0, len(prompt) - 1 : -1]
    del model
    for i, tok in enumerate(got):
        row = logits[i]
        gap = float(row.max() - row[tok])
        if gap > near_tie:
            raise EngineError(
                f"{engine}: the converted model does not compute the original's logits: at "
                f"probe position {i} it chose token {tok}, {gap:.2f} logits below the "
                f"transformers model's argmax {int(row.argmax())} (tokens {got})"
            )


# ------------------------------------------------------------------------------ OpenVINO


def gguf_converter() -> Path:
    """llama.cpp's ``convert_hf_to_gguf.py``: ``$SPECVIZ_GGUF_CONVERTER``, else the copy
    ``make`` extracts from the llama-cpp-python sdist into ``<venv>/llama.cpp/convert``."""
    env = os.environ.get(CONVERTER_ENV)
    path = (
        Path(env) if env else Path(sys.prefix) / "llama.cpp" / "convert" / "convert_hf_to_gguf.py"
    )
    if not path.is_file():
        raise EngineError(
            f"openvino: the GGUF converter {path} is missing: run `make "
            f".venv/.installed-gguf-converter` (it extracts convert_hf_to_gguf.py from the "
            f"llama-cpp-python 0.3.36 sdist) or point ${CONVERTER_ENV} at one"
        )
    return path


_OV_SAVE = textwrap.dedent(
    """
    import sys, openvino_genai as g
    g.LLMPipeline(sys.argv[1], "CPU", enable_save_ov_model=True)
    """
)
_OV_PROBE = textwrap.dedent(
    """
    import json, sys, numpy as np, openvino as ov, openvino_genai as g
    pipe = g.LLMPipeline(sys.argv[1], "CPU")
    ids = ov.Tensor(np.array([json.loads(sys.argv[2])], dtype=np.int64))
    cfg = g.GenerationConfig(max_new_tokens=int(sys.argv[3]), do_sample=False)
    cfg.ignore_eos = True
    print(json.dumps([int(t) for t in pipe.generate(ids, cfg).tokens[0]]))
    """
)


# weights= -> (GGUF --outtype, also the cache folder's tag; the greedy check's near-tie margin
# in logits): int8
# weights move logits a little more than f16 ones
OV_WEIGHTS = {"f16": ("f16", _NEAR_TIE), "int8": ("q8_0", 1.0)}
# The default weights of a converted model: int8 above a billion parameters, as optimum-intel's
# OpenVINO exporter does for decoders since 1.12 (huggingface/optimum-intel#444). On this CPU
# plugin an f16 IR's weights are held as f32 next to the mapped f16 file: the 1.5B Qwen with
# its 0.5B draft peaked at 12.6-16 GB on f16 weights, 5.3 GB on int8 ones.
INT8_ABOVE_PARAMS = 1_000_000_000


def parameter_count(name: str) -> int | None:
    """Elements in a model's safetensors: the registry's count for a built-in model (a
    truncated ``name@N`` counts as the whole model: an upper bound), the tensors' shapes in a
    local folder's ``*.safetensors`` headers (no tensor is read), None when neither is known
    (an IR folder, a folder of other files).

    >>> parameter_count("smollm2-135m"), parameter_count("qwen2.5-coder-1.5b@4")
    (134515008, 1777088000)
    """
    base = parse_model(name)[0]
    if base in _models.BUILTIN_MODELS:
        return _models.BUILTIN_MODELS[base].params
    files = sorted(Path(base).expanduser().glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for f in files:
        try:
            header = _read_header(f)[1]
        except (OSError, ValueError) as err:
            raise EngineError(f"openvino: {f} is not a readable safetensors file: {err}") from err
        total += sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")
    return total


def default_weights(name: str) -> str:
    """``"int8"`` for a model of more than :data:`INT8_ABOVE_PARAMS` parameters, else
    ``"f16"`` -- the weights OpenVINO engines convert a model to when ``weights=`` is not given.

    >>> default_weights("qwen2.5-coder-1.5b"), default_weights("qwen2.5-coder-0.5b")
    ('int8', 'f16')
    """
    n = parameter_count(name)
    return "int8" if n is not None and n > INT8_ABOVE_PARAMS else "f16"


def ir_int8_weights(xml: Path) -> int:
    """The number of 8-bit integer (``u8`` / ``i8``) constants in an OpenVINO IR: the
    compressed weights of an int8 model (an f16 IR has none)."""
    text = xml.read_text(encoding="utf-8", errors="replace")
    return len(re.findall(r'<layer [^>]*type="Const"[^>]*>\s*<data [^>]*element_type="[ui]8"',
                          text))  # fmt: skip


def openvino_model(name: str, *, weights: str = "f16", progress: bool = True) -> Path:
    """An OpenVINO IR folder for ``name`` -- a built-in model (``@N`` for a truncated one) or a
    local safetensors folder -- converted once and cached. Usable as ``LLMPipeline``'s model
    and as ``draft_model``. ``weights``: ``"f16"`` (an f16 GGUF; the CPU plugin holds the
    weights as f32) or ``"int8"`` (a Q8_0 GGUF: int8 weights, kept compressed)."""
    if weights not in OV_WEIGHTS:
        raise ValueError(
            f"openvino: weights must be one of {', '.join(OV_WEIGHTS)}, got {weights!r}"
        )
    outtype, near_tie = OV_WEIGHTS[weights]
    import_engine("openvino_genai", "openvino", "openvino")
    base, layers = parse_model(name)
    tag = _slug(base) + (f"-layers{layers}" if layers else "")
    dest = _models.cache_dir() / "openvino" / f"{tag}-{outtype}-v{_FORMAT}"
    if _state(dest)[0] == "ready":
        return dest
    _check_source(base)
    if not os.environ.get(_IN_CHILD):
        # The safetensors folder first, in a child of its own: made inside the conversion
        # child, its memory stayed with that process while the converter ran (1.8 GB of
        # the 11.1 GB summed peak of onnxruntime-genai's int4 conversion of the 1.5B Qwen).
        hf_folder(name, progress=progress)
        kw = {} if weights == "f16" else {"weights": weights}
        return _convert_in_child("openvino", name, kw, "openvino", progress, dest)
    hf = hf_folder(name, progress=progress)

    def build(tmp: Path) -> None:
        gguf = tmp / "model.gguf"
        _run(
            [sys.executable, str(gguf_converter()), str(hf), "--outtype", outtype,
             "--outfile", str(gguf)],
            "openvino", f"converting {name} to a {outtype} GGUF (convert_hf_to_gguf.py)",
        )  # fmt: skip
        _run(
            [sys.executable, "-c", _OV_SAVE, str(gguf)],
            "openvino", f"converting the GGUF of {name} to OpenVINO IR",
        )  # fmt: skip
        gguf.unlink()
        for need in ("openvino_model.xml", "openvino_tokenizer.xml", "openvino_detokenizer.xml"):
            if not (tmp / need).is_file():
                raise EngineError(f"openvino: converting {name} wrote no {need}")
        if weights == "int8" and not ir_int8_weights(tmp / "openvino_model.xml"):
            raise EngineError(
                f"openvino: the IR of {name} from a Q8_0 GGUF has no int8 weight constants "
                f"(the GGUF reader decompressed them): it would hold them as f32"
            )
        prompt = _probe_ids(hf)
        out = _run(
            [sys.executable, "-c", _OV_PROBE, str(tmp), json.dumps(prompt), str(_PROBE_TOKENS)],
            "openvino", f"loading the converted {name}",
        )  # fmt: skip
        got = json.loads(out.strip().splitlines()[-1])
        _check_greedy("openvino", hf, prompt, got, near_tie=near_tie)

    return _cached(
        dest, build, progress, f"openvino IR of {name}",
        {"source": str(hf), "weights": weights, "gguf_outtype": outtype},
    )  # fmt: skip


# ------------------------------------------------------------------------------ onnxruntime-genai

_ORT_PROBE = textwrap.dedent(
    """
    import json, sys, onnxruntime_genai as og
    model = og.Model(sys.argv[1])
    ids = json.loads(sys.argv[2])
    p = og.GeneratorParams(model)
    p.set_search_options(max_length=len(ids) + int(sys.argv[3]), do_sample=False)
    g = og.Generator(model, p)
    g.append_tokens(ids)
    while not g.is_done():
        g.generate_next_token()
    print(json.dumps([int(t) for t in g.get_sequence(0)[len(ids):]]))
    """
)

# The builder's own int4/int8 step (onnxruntime's MatMulNBitsQuantizer with the settings its
# CPU builds use: blocks of 32, symmetric, accuracy level 4, MatMul weights only), run apart
# on its fp32 model with each weight read from the external data file when it is quantized.
# The builder itself quantizes a copy of the whole float32 graph while the transformers model
# is still loaded (13.8 GB on the 1.5B Qwen); this way the peak is the fp32 build's (9.3 GB,
# benchmarks/ort_quantize_memory.py) and the result is the same bytes
# (tests/test_audit_onnx_quantize.py).
_ORT_QUANTIZE = textwrap.dedent(
    """
    import os, sys, onnx
    from onnx.external_data_helper import load_external_data_for_model
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    src, dst = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    bits, block = int(sys.argv[3]), int(sys.argv[4])
    model = onnx.load(os.path.join(src, "model.onnx"), load_external_data=False)
    here = os.getcwd()
    os.chdir(src)  # the quantizer opens each weight's external file relative to this folder
    q = MatMulNBitsQuantizer(
        model=model, bits=bits, block_size=block, is_symmetric=True, accuracy_level=4,
        nodes_to_exclude=[], quant_format=QuantFormat.QOperator,
        op_types_to_quantize=("MatMul",), algo_config=None,
    )
    q.process()
    out = q.model.model
    weights = {t.name for t in out.graph.initializer}
    left = [n.name for n in out.graph.node if n.op_type == "MatMul" and n.input[1] in weights]
    if left:
        sys.exit(f"MatMul weights left unquantized: {left[:3]}")
    load_external_data_for_model(out, src)  # the weights kept as they were (embeddings, norms)
    os.chdir(here)
    onnx.save_model(
        out, os.path.join(dst, "model.onnx"), save_as_external_data=True,
        all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=0,
    )
    """
)
_ORT_BITS = {"int4": 4, "int8": 8}
_ORT_BLOCK = 32  # the builder's default block size
_ORT_MODEL_FILES = ("model.onnx", "model.onnx.data")


def onnx_model(name: str, *, precision: str = "fp32", progress: bool = True) -> Path:
    """An onnxruntime-genai folder for ``name`` (CPU execution provider, ``precision`` one of
    fp32 / int4 / int8), made by its model builder once and cached. int4 / int8 of a model
    with an LM head of its own: the builder's fp32 model with its MatMul weights then
    quantized as the builder quantizes them, in a process of its own (the same bytes at a
    lower peak of memory: :func:`_ort_build_quantized`)."""
    if precision not in ("fp32", "int4", "int8"):
        raise ValueError(f"precision must be fp32, int4 or int8 on CPU, got {precision!r}")
    import_engine("onnxruntime_genai", "onnxruntime-genai", "onnxruntime")
    base, layers = parse_model(name)
    tag = _slug(base) + (f"-layers{layers}" if layers else "")
    dest = _models.cache_dir() / "onnx" / f"{tag}-{precision}-v{_FORMAT}"
    if _state(dest)[0] == "ready":
        return dest
    _check_source(base)
    if not os.environ.get(_IN_CHILD):
        hf_folder(name, progress=progress)  # in a child of its own (see openvino_model)
        kw = {"precision": precision}
        return _convert_in_child("onnx", name, kw, "onnxruntime-genai", progress, dest)
    hf = hf_folder(name, progress=progress)

    def build(tmp: Path) -> None:
        if precision == "fp32":
            _ort_build(hf, tmp, name)
        else:
            _ort_build_quantized(hf, tmp, precision, name)
        prompt = _probe_ids(hf)
        out = _run(
            [sys.executable, "-c", _ORT_PROBE, str(tmp), json.dumps(prompt), str(_PROBE_TOKENS)],
            "onnxruntime-genai", f"loading the converted {name}",
        )  # fmt: skip
        if precision == "fp32":  # quantized weights are a different model: only loaded
            _check_greedy("onnxruntime-genai", hf, prompt, json.loads(out.strip().splitlines()[-1]))

    return _cached(dest, build, progress, f"onnxruntime-genai {precision} model of {name}")


def _ort_build(hf: Path, out: Path, name: str, precision: str = "fp32") -> None:
    """onnxruntime-genai's model builder: ``hf``'s ONNX model for the CPU in ``out``."""
    with tempfile.TemporaryDirectory(prefix="specviz-ort-") as scratch:
        _run(
            [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf),
             "-o", str(out), "-p", precision, "-e", "cpu", "-c", scratch],
            "onnxruntime-genai", f"building the ONNX model of {name} (model builder)",
        )  # fmt: skip
    for need in ("genai_config.json", *_ORT_MODEL_FILES):
        if not (out / need).is_file():
            raise EngineError(f"onnxruntime-genai: the builder wrote no {need} for {name}")


def _ort_build_quantized(hf: Path, out: Path, precision: str, name: str) -> None:
    """The builder's ``precision`` (int4 / int8) model of ``hf`` in ``out``: its fp32 build
    quantized apart (:data:`_ORT_QUANTIZE`), or, for a model that ties its embedding to its
    LM head, the builder's own quantization, which shares the quantized LM head with the
    embedding (a ``GatherBlockQuantized`` the step apart does not make)."""
    import transformers

    if getattr(transformers.AutoConfig.from_pretrained(hf), "tie_word_embeddings", False):
        _ort_build(hf, out, name, precision)
        return
    fp32 = out / "fp32-build"
    _ort_build(hf, fp32, name)
    _ort_quantize(fp32, out, precision, name)
    shutil.rmtree(fp32)


def _ort_quantize(src: Path, dst: Path, precision: str, name: str, block: int = _ORT_BLOCK) -> None:
    """``src``'s fp32 model with its MatMul weights quantized to ``precision`` (int4 / int8)
    in ``dst``, beside copies of ``src``'s other files (config, tokenizer)."""
    dst.mkdir(parents=True, exist_ok=True)
    _run(
        [sys.executable, "-c", _ORT_QUANTIZE, str(src), str(dst), str(_ORT_BITS[precision]),
         str(block)],
        "onnxruntime-genai", f"quantizing the ONNX model of {name} to {precision}",
    )  # fmt: skip
    for f in src.iterdir():
        if f.name not in _ORT_MODEL_FILES and f.is_file():
            shutil.copy2(f, dst / f.name)


def ort_model_differences(a: Path, b: Path) -> list[str]:
    """What differs between two onnxruntime-genai folders: ``nodes``, ``initializers`` (names,
    types, shapes, places in the data file), ``opsets``, ``graph inputs/outputs``, ``weight
    bytes``, and the names of other files of ``b`` that ``a`` lacks or holds otherwise."""
    import onnx

    ma = onnx.load(str(a / "model.onnx"), load_external_data=False)
    mb = onnx.load(str(b / "model.onnx"), load_external_data=False)

    def nodes(m):
        return [
            (n.op_type, n.domain, list(n.input), list(n.output),
             sorted((x.name, str(onnx.helper.get_attribute_value(x))) for x in n.attribute))
            for n in m.graph.node
        ]  # fmt: skip

    def weights(m):
        return sorted(
            (t.name, t.data_type, list(t.dims),
             [(e.key, e.value) for e in t.external_data if e.key != "location"])
            for t in m.graph.initializer
        )  # fmt: skip

    out = []
    if nodes(ma) != nodes(mb):
        out.append("nodes")
    if weights(ma) != weights(mb):
        out.append("initializers")
    if [(o.domain, o.version) for o in ma.opset_import] != [
        (o.domain, o.version) for o in mb.opset_import
    ]:
        out.append("opsets")
    if list(ma.graph.input) != list(mb.graph.input) or list(ma.graph.output) != list(
        mb.graph.output
    ):
        out.append("graph inputs/outputs")
    if not filecmp.cmp(a / "model.onnx.data", b / "model.onnx.data", shallow=False):
        out.append("weight bytes")  # compared a block at a time: GBs on a real model
    for f in sorted(p.name for p in b.iterdir() if not p.name.startswith("model.onnx")):
        if not (a / f).is_file() or not filecmp.cmp(a / f, b / f, shallow=False):
            out.append(f)
    return out


def onnx_speculative_folder(target: Path, draft: Path, *, max_draft_tokens: int = 3) -> Path:
    """A composite onnxruntime-genai folder: the target's ``genai_config.json`` with the
    draft's decoder as ``model.draft`` (``target/`` and ``draft/`` link to the two folders:
    the runtime refuses ``..`` in paths) and ``speculative.max_draft_tokens``."""
    tcfg = json.loads((target / "genai_config.json").read_text())
    dcfg = json.loads((draft / "genai_config.json").read_text())
    if tcfg["model"].get("vocab_size") != dcfg["model"].get("vocab_size"):
        raise EngineError(
            f"onnxruntime-genai: target and draft have different vocabularies "
            f"({tcfg['model'].get('vocab_size')} vs {dcfg['model'].get('vocab_size')})"
        )
    key = hashlib.sha256(f"{target.resolve()}|{draft.resolve()}|{max_draft_tokens}".encode())
    dest = _models.cache_dir() / "onnx" / f"spec-{key.hexdigest()[:16]}"
    if (dest / "genai_config.json").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        (tmp / "target").symlink_to(target.resolve(), target_is_directory=True)
        (tmp / "draft").symlink_to(draft.resolve(), target_is_directory=True)
        tcfg["model"]["decoder"]["filename"] = "target/" + tcfg["model"]["decoder"]["filename"]
        block = dict(dcfg["model"]["decoder"])
        block["filename"] = "draft/" + block["filename"]
        tcfg["model"]["draft"] = block
        tcfg["speculative"] = {"max_draft_tokens": int(max_draft_tokens)}
        for f in target.iterdir():
            if f.name.startswith("tokenizer") or f.name.endswith(".jinja"):
                shutil.copy2(f, tmp / f.name)
        (tmp / "genai_config.json").write_text(json.dumps(tcfg, indent=1))
        tmp.chmod(0o755)
        try:
            os.rename(tmp, dest)
        except OSError:  # another process made it meanwhile
            if not (dest / "genai_config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


if __name__ == "__main__":
    raise SystemExit(_child_main(sys.argv[1:]))
