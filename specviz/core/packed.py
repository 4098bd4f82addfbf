"""Pre-packed (oneDNN) linear weights: the CPU lever for small-batch decoding.

A decode step multiplies a few activation rows by every weight matrix of the model. PyTorch's
default CPU path (``F.linear`` -> BLAS sgemm) re-reads and re-packs the weights on every call,
and for 2-32 rows it is far from the memory-bandwidth floor. Measured on the project's
2-core EPYC (fp32, 727 MB of Qwen-1.5B-shaped matrices, 2 threads):

=====  ===========  ==================
rows   ``F.linear``  packed (this module)
=====  ===========  ==================
1      32 ms         19 ms
5      63 ms         23 ms
32     112 ms        47 ms
=====  ===========  ==================

so a verify pass on gamma + 1 = 5 tokens costs ~1.2 decode steps instead of ~2: the
memory-bound assumption behind Leviathan et al.'s speedup formula holds again.

:func:`use_packed_weights` reorders every ``nn.Linear`` weight of a CPU model once into
oneDNN's blocked layout and routes the module's forward through
``torch.ops.mkldnn._linear_pointwise``. By default the dense weights stay where they are (tied
embeddings and anything else that reads ``.weight`` keep working), so the packed copy costs
the linear layers' bytes again; ``use_packed_weights(model, False)`` frees it.
``keep_dense=False`` frees the dense copy instead wherever nothing else reads it (a weight tied
to another parameter, such as an output head tied to the embeddings, is kept): the model then
costs what it cost before packing, and every path that would read a freed dense weight (the
stock kernels, training, unpacking) raises instead of computing with it.

The packed kernel sums in a different order than sgemm, so logits differ from the stock path
in the last bits (relative ~1e-6): greedy text can in rare near-ties differ from a run on
stock weights. Speculative and plain decoding on the *same* packed model stay comparable;
the benchmarks assert identical tokens.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from .heap import trim_heap

_PACKED = "_specviz_packed_weight"
_PAUSED = "_specviz_packed_paused"
_DROPPED = "_specviz_dense_dropped"
_SHAPES = "_specviz_packed_shapes"  # (one row packed?, several rows packed?); absent: both
_SOURCE = "_specviz_packed_source"  # (the weight Parameter packed, its version then)
_DTYPES = (torch.float32, torch.bfloat16)


def packing_available() -> bool:
    """True when this PyTorch build has oneDNN (mkldnn) CPU kernels."""
    return bool(torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled)


@functools.cache
def packing_supported(dtype: torch.dtype) -> str:
    """ "" when oneDNN packs ``dtype`` weights on this CPU, else why not: its bf16 reorder
    needs AVX-512 (bw, vl, dq) or AVX-NE-CONVERT, and raises on CPUs without them (AMD
    EPYC Zen 3, say). Tried once per process on a 16 x 16 weight."""
    if not packing_available():
        return "this PyTorch has no oneDNN (mkldnn) CPU backend"
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(16, 16, dtype=dtype), 1)
    except RuntimeError as err:
        return f"oneDNN cannot pack {str(dtype).removeprefix('torch.')} weights on this CPU ({err})"
    return ""


def unsupported_reason(layers: list[nn.Module]) -> str:
    """Why these layers' weights cannot be packed on this CPU ("" when they can): the first
    of their dtypes that :func:`packing_supported` refuses."""
    for dtype in sorted({m.weight.dtype for m in layers}, key=str):
        why = packing_supported(dtype)
        if why:
            return why
    return ""


def _check_supported(layers: list[nn.Module]) -> None:
    why = unsupported_reason(layers)
    if why:
        raise RuntimeError(f"packed weights: {why}; use the stock kernels (packed=False)")


def _packable(module: nn.Module) -> bool:
    return (
        isinstance(module, nn.Linear)
        and module.weight.device.type == "cpu"
        and module.weight.dtype in _DTYPES
    )


def _dense_dropped_error(what: str) -> RuntimeError:
    return RuntimeError(
        f"{what} needs the dense linear weights, which were freed after packing "
        "(load_model(..., packed=True, keep_dense=False) / use_packed_weights(model, "
        "keep_dense=False)); load the model with keep_dense=True for this"
    )


def _packed_forward(module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    d = module.__dict__
    w = module._parameters["weight"]
    shapes = d.get(_SHAPES)
    if (
        d.get(_PAUSED, False)
        or (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))
        # the kernel measured faster for this many rows (1: a decode step; more: a verify
        # pass or a prefill) may be the stock one (specviz.use_fastest_kernels)
        or (shapes is not None and not shapes[x.numel() > x.shape[-1]])
    ):
        # No autograd formula for the packed op: training and stock runs take F.linear.
        if d.get(_DROPPED, False):
            raise _dense_dropped_error("the stock F.linear path (stock_linears or autograd)")
        return nn.functional.linear(x, w, module.bias)
    if x.dtype != w.dtype:
        raise TypeError(
            f"packed linear: input dtype {x.dtype} does not match weight dtype {w.dtype}"
        )
    source, version, _ = d[_SOURCE]
    if (w is not source or w._version != version) and not d.get(_DROPPED, False):
        _pack(module)  # the weight was edited or replaced since it was packed: a fresh snapshot
    return _packed_linear(x.contiguous(), d[_PACKED], module.bias)


def _ensure_packed(m: nn.Module) -> None:
    """Pack ``m`` (and route its forward through the packed kernel), or repack it when its
    weight changed since it was packed."""
    if _PACKED not in m.__dict__:
        _pack(m)
        m.__dict__["forward"] = _packed_forward.__get__(m)
    elif _stale(m):
        _pack(m)


def _pack(m: nn.Module) -> None:
    w = m._parameters["weight"]
    with torch.no_grad():
        # batch-size hint 1: the layout is chosen for decode-sized inputs, any row count works.
        m.__dict__[_PACKED] = torch.ops.mkldnn._reorder_linear_weight(w.detach(), 1)
    m.__dict__[_SOURCE] = (w, w._version, w.data_ptr())


def _stale(m: nn.Module) -> bool:
    """The weight was edited in place, replaced, or given new ``.data`` since it was packed."""
    w = m._parameters["weight"]
    source, version, ptr = m.__dict__[_SOURCE]
    return not m.__dict__.get(_DROPPED, False) and (
        w is not source or w._version != version or w.data_ptr() != ptr
    )


def _packed_linear(
    x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def use_packed_weights(model: nn.Module, enabled: bool = True, *, keep_dense: bool = True) -> int:
    """Pack (``enabled=True``) or unpack every CPU ``nn.Linear`` of ``model``, in place.

    Returns the number of linear layers now packed. The packed copy is a snapshot: a weight
    edited in place (``copy_``, ``load_state_dict``) or replaced by another Parameter is
    noticed at the layer's next call and packed again; after assigning ``weight.data``, call
    this again (it repacks exactly the layers whose weights changed).
    ``keep_dense=False`` frees each packed layer's dense weight unless another parameter or
    buffer of ``model`` shares its storage (tied embeddings); the weight becomes a zero-stride
    placeholder of the same shape and dtype, and paths that need the dense values raise.
    Raises ``ValueError`` for a model with no CPU float32/bfloat16 linear layer (a CUDA model
    has nothing to gain here) and ``RuntimeError`` when PyTorch lacks oneDNN.
    """
    if not enabled:
        dropped = [m for m in model.modules() if m.__dict__.get(_DROPPED, False)]
        if dropped:
            raise _dense_dropped_error("unpacking")
        freed = False
        for module in model.modules():
            if _PACKED in module.__dict__:
                del module.__dict__[_PACKED]
                for key in ("forward", _PAUSED, _SHAPES, _SOURCE):
                    module.__dict__.pop(key, None)
                freed = True
        if freed:
            trim_heap()  # the packed copies' pages back to the OS, not kept by the allocator
        return 0
    if not packing_available():
        raise RuntimeError("packed weights need PyTorch's oneDNN (mkldnn) CPU backend")
    layers = [m for m in model.modules() if _packable(m)]
    if not layers:
        raise ValueError(
            "use_packed_weights: the model has no CPU float32/bfloat16 nn.Linear layer to pack "
            "(packing is a CPU optimisation; on CUDA use specviz.lm.use_static_cache)"
        )
    _check_supported(layers)
    uses = None if keep_dense else _storage_uses(model)
    files = [] if keep_dense else _file_mappings()
    for m in layers:
        _ensure_packed(m)
        if uses is not None:
            _drop_dense(m, uses, files)  # layer by layer: the copies never coexist whole
    return len(layers)


def route_packed(model: nn.Module, *, decode: bool, verify: bool) -> int:
    """Choose, per input shape, between the packed and the stock kernel of every packed layer
    of ``model``: ``decode`` for one activation row (a decode step), ``verify`` for several
    (a verify pass, a prefill, a batch). Both True is plain packing; both False unpacks (the
    packed copies are freed). A mix needs the dense weights (``keep_dense=True``). Returns the
    number of packed layers. Used by :func:`specviz.use_fastest_kernels`."""
    layers = _packed_modules(model)
    if not decode and not verify:
        use_packed_weights(model, False)
        return 0
    if decode != verify and any(m.__dict__.get(_DROPPED, False) for m in layers):
        raise _dense_dropped_error("a per-shape kernel choice (stock kernels for some shapes)")
    for m in layers:
        if decode and verify:
            m.__dict__.pop(_SHAPES, None)
        else:
            m.__dict__[_SHAPES] = (decode, verify)
    return len(layers)


def packed_shapes(model: nn.Module) -> tuple[bool, bool]:
    """(decode packed?, verify packed?) for ``model``'s linear layers: (False, False) when
    nothing is packed."""
    layers = _packed_modules(model)
    if not layers:
        return (False, False)
    shapes = layers[0].__dict__.get(_SHAPES, (True, True))
    return bool(shapes[0]), bool(shapes[1])


def _storage_uses(model: nn.Module) -> dict[int, int]:
    """How many parameters and buffers of ``model`` use each storage (tied weights: > 1)."""
    uses: dict[int, int] = {}
    named = list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers())
    for _, t in named:
        ptr = t.untyped_storage().data_ptr()
        uses[ptr] = uses.get(ptr, 0) + 1
    return uses


def _drop_dense(m: nn.Module, uses: dict[int, int], files: list[tuple[int, int]]) -> None:
    w = m.weight
    if m.__dict__.get(_DROPPED, False):
        return
    if uses.get(w.untyped_storage().data_ptr(), 0) > 1:
        # tied (an output head tied to the embeddings): something else reads these values, so
        # the weight stays; its clean file pages go (an embedding lookup re-reads its rows)
        _release_file_pages(w, files, clean_only=True)
        return
    placeholder = torch.zeros((), dtype=w.dtype, device=w.device).expand(w.shape)
    _release_file_pages(w, files)
    m.weight = nn.Parameter(placeholder, requires_grad=False)
    m.__dict__[_DROPPED] = True
    m.__dict__[_SOURCE] = (m.weight, m.weight._version, m.weight.data_ptr())


def _file_mappings() -> list[tuple[int, int]]:
    """Address ranges of this process mapped from files (Linux; empty elsewhere)."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            lines = f.readlines()
    except OSError:
        return []
    out = []
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/"):
            lo, hi = fields[0].split("-")
            out.append((int(lo, 16), int(hi, 16)))
    return out


def _release_file_pages(
    w: torch.Tensor, files: list[tuple[int, int]], *, clean_only: bool = False
) -> bool:
    """Drop the resident pages of a weight that lives in a memory-mapped file; True if done.

    transformers loads safetensors weights as views of one private mapping of the file, which
    stays mapped while any weight of the file lives: freeing a packed layer's dense tensor
    leaves its pages resident (read while packing), so a packed model would cost its size twice
    in RSS. ``madvise(MADV_DONTNEED)`` on the whole pages inside the weight returns them; a
    later read re-reads the file (from the page cache). ``clean_only=True`` is for a weight that
    stays in use (tied embeddings, the dense copy while packed kernels are timed): its pages are
    dropped only if none was written since the file was mapped (``/proc/self/pagemap``), since
    dropping a written page of a private mapping would bring back the file's values. Anonymous
    memory is left to the allocator.
    """
    if not files or w.device.type != "cpu" or not w.is_contiguous():
        return False
    start, nbytes = w.data_ptr(), w.numel() * w.element_size()
    if not any(lo <= start and start + nbytes <= hi for lo, hi in files):
        return False
    import ctypes
    import mmap

    page = mmap.PAGESIZE
    lo, hi = -(-start // page) * page, (start + nbytes) // page * page
    if hi <= lo or (clean_only and not _clean_pages(lo, hi)):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), mmap.MADV_DONTNEED) == 0


def _clean_pages(lo: int, hi: int) -> bool:
    """No page of ``[lo, hi)`` (page-aligned, in a file mapping) has been written: each is
    either not resident or a page of the file (``/proc/self/pagemap``: bit 63 present, bit 61
    file page; a written page of a private mapping is an anonymous copy). False if unknown."""
    import mmap

    page = mmap.PAGESIZE
    try:
        with open("/proc/self/pagemap", "rb") as f:
            f.seek(lo // page * 8)
            data = f.read((hi - lo) // page * 8)
    except OSError:
        return False
    if len(data) != (hi - lo) // page * 8:
        return False
    entries = torch.frombuffer(bytearray(data), dtype=torch.int64)
    written = (entries < 0) & (((entries >> 61) & 1) == 0)  # present, not a file page
    return not bool(written.any())


def file_backed_share(model: nn.Module) -> float:
    """The share of ``model``'s packable linear-weight bytes that lie in a file mapping (a
    safetensors file loaded by transformers), so their resident pages can be dropped and read
    again from the file: 0 for a model built in memory or converted on load."""
    files = _file_mappings()
    total = mapped = 0
    for m in model.modules():
        if _packable(m) and not m.__dict__.get(_DROPPED, False):
            w = m.weight
            n = w.numel() * w.element_size()
            total += n
            s = w.data_ptr()
            if w.is_contiguous() and any(lo <= s and s + n <= hi for lo, hi in files):
                mapped += n
    return mapped / total if total else 0.0


def touch_dense(model: nn.Module) -> None:
    """Read one value per page of every packable layer's dense weight, so pages dropped by
    :func:`pack_lean` are mapped again before the stock kernels are timed (a timed call would
    otherwise pay the page faults)."""
    import mmap

    with torch.no_grad():
        for m in model.modules():
            if _packable(m) and not m.__dict__.get(_DROPPED, False):
                w = m.weight.detach()
                if w.is_contiguous() and w.numel():
                    w.reshape(-1)[:: max(1, mmap.PAGESIZE // w.element_size())].sum()


def pack_lean(model: nn.Module) -> int:
    """Pack ``model`` (as :func:`use_packed_weights`) layer by layer, dropping each packed
    layer's resident dense pages right after packing it wherever they are clean pages of a file
    mapping: the dense weights stay usable (the stock kernels read them again from the file,
    through the page cache) but never resident at once with the packed copies. Used while
    :func:`specviz.use_fastest_kernels` times both kernels of a model loaded with
    ``keep_dense=False``. Returns the number of layers packed."""
    if not packing_available():
        raise RuntimeError("packed weights need PyTorch's oneDNN (mkldnn) CPU backend")
    files = _file_mappings()
    layers = [m for m in model.modules() if _packable(m)]
    _check_supported(layers)
    for m in layers:
        _ensure_packed(m)
        if not m.__dict__.get(_DROPPED, False):
            _release_file_pages(m.weight, files, clean_only=True)
    return len(layers)


def dense_dropped(model: nn.Module) -> int:
    """How many linear layers of ``model`` have had their dense weights freed after packing."""
    return sum(bool(m.__dict__.get(_DROPPED, False)) for m in model.modules())


def packed_layers(model: nn.Module) -> int:
    """How many linear layers of ``model`` currently run on packed weights."""
    return len(_packed_modules(model))


def _packed_modules(*models: Any) -> list[nn.Module]:
    """The packed linear layers of ``models``, each once (an early-exit view shares its
    target's layers)."""
    seen: dict[int, nn.Module] = {}
    for model in models:
        if isinstance(model, nn.Module):
            for m in model.modules():
                if _PACKED in m.__dict__:
                    seen.setdefault(id(m), m)
    return list(seen.values())


def packed_bytes(*models: Any) -> int:
    """Bytes held by the packed weight copies of ``models`` (0 when nothing is packed)."""
    return sum(
        m.__dict__[_PACKED].numel() * m.__dict__[_PACKED].element_size()
        for m in _packed_modules(*models)
    )


@contextlib.contextmanager
def stock_linears(*models: Any) -> Iterator[None]:
    """Run the block on the stock ``F.linear`` path, keeping the packed copies (benchmarks
    compare transformers on stock kernels with specviz on packed ones, same model objects)."""
    layers = _packed_modules(*models)
    if any(m.__dict__.get(_DROPPED, False) for m in layers):
        raise _dense_dropped_error("stock_linears")
    for m in layers:
        m.__dict__[_PAUSED] = True
    try:
        yield
    finally:
        for m in layers:
            m.__dict__.pop(_PAUSED, None)
