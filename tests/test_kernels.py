"""Kernels chosen by measurement (issue 30): the report says what was timed and chosen, the
choice is applied per shape, it is cached once per host (atomic, checked, re-timed when the
host changes or the file is damaged), and every fallback leaves a working model."""

from __future__ import annotations

import json
import os
import warnings

import pytest
import torch

import specviz as sv
import specviz.core.kernel_cache as kc
import specviz.core.kernels as K
import specviz.core.packed as packed_mod
from specviz.core.packed import packed_layers, packed_shapes, route_packed, use_packed_weights
from specviz.fixtures.llamas import tiny_llama
from specviz.perf import kernel_report

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not packed_mod.packing_available(), reason="no oneDNN in this torch"),
]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(kc, "cache_dir", lambda: tmp_path)
    return tmp_path / "kernels"


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _model(seed: int = 0):
    return tiny_llama(11, seed=seed, hidden_size=64, num_layers=2)


def _fake_measure(monkeypatch, *, decode: float, verify: float, calls: list | None = None):
    """``_measure`` replaced by fixed timings: stock takes 1 s per call, packed ``1/ratio`` s
    (decode and verify ratios given), 3 rounds, 1 thread; the choice is then known."""

    def fake(model, name, host, gamma, context, counts, rounds, budget_s, progress, keep_dense):
        if calls is not None:
            calls.append(name)
        timings = []
        for t in counts:
            for shape, ratio in (("decode", decode), ("verify", verify)):
                n = 1 if shape == "decode" else gamma + 1
                timings.append(K.KernelTiming("stock", t, shape, n, (1.0, 1.1, 0.9)))
                timings.append(K.KernelTiming("packed", t, shape, n, (1 / ratio,) * 3))
        measured = K.KernelReport(name, host, "stock", "stock", max(counts), gamma, context,
                                  "measured", "", timings=tuple(timings), measured_at="now",
                                  load_average=0.0, cpus=2)  # fmt: skip
        return K._choose(measured, counts, source="measured")

    monkeypatch.setattr(K, "_measure", fake)


def test_report_says_what_was_measured_and_the_choice_is_applied(cache, threads):
    model = _model()
    torch.set_num_threads(1)  # one thread count: the kernels alone decide
    r = sv.use_fastest_kernels(model, rounds=3, gamma=3, context=16)
    assert r.source == "measured" and r.threads == 1 and r.gamma == 3
    assert {(t.kernels, t.shape) for t in r.timings} == {
        (k, s) for k in ("stock", "packed") for s in ("decode", "verify")
    }
    assert all(len(t.seconds) == 3 and t.median > 0 for t in r.timings)
    assert {t.tokens for t in r.timings if t.shape == "verify"} == {4}  # gamma + 1
    assert set(r.ratios) == {"decode", "verify"} and r.reason
    assert packed_shapes(model) == (r.decode == "packed", r.verify == "packed")
    assert kernel_report(model) is r and kernel_report() is r
    assert "decode step" in r.summary() and "measured" in r.summary()
    assert r.cache_path is not None and (cache / r.cache_path.split("/")[-1]).exists()


@pytest.mark.parametrize("decode,verify", [(True, False), (False, True), (True, True)])
def test_the_faster_kernel_runs_for_each_shape(cache, monkeypatch, decode, verify):
    _fake_measure(monkeypatch, decode=2.0 if decode else 0.5, verify=2.0 if verify else 0.9)
    model = _model()
    r = sv.use_fastest_kernels(model, threads=False)
    assert (r.decode, r.verify) == (
        "packed" if decode else "stock",
        "packed" if verify else "stock",
    )
    calls = []
    real = packed_mod._packed_linear
    monkeypatch.setattr(packed_mod, "_packed_linear", lambda *a: calls.append(1) or real(*a))
    layers = packed_layers(model)
    with torch.no_grad():
        model(torch.tensor([[1]]))  # one row: a decode step
        assert len(calls) == (layers if decode else 0)
        calls.clear()
        model(torch.tensor([[1, 2, 3, 4, 5]]))  # five rows: a verify pass
        assert len(calls) == (layers if verify else 0)


def test_a_tie_keeps_the_stock_kernels_and_frees_the_packed_copy(cache, monkeypatch):
    _fake_measure(monkeypatch, decode=1.03, verify=0.97)  # inside the 5% margin
    model = _model()
    r = sv.use_fastest_kernels(model, threads=False)
    assert (r.decode, r.verify) == ("stock", "stock")
    assert packed_layers(model) == 0  # the loser's copy is gone
    assert "margin" in r.reason and "slower here" in r.reason


def test_the_cache_is_reused_then_retimed_when_the_host_changes(cache, monkeypatch):
    calls: list[str] = []
    _fake_measure(monkeypatch, decode=2.0, verify=2.0, calls=calls)
    first = sv.use_fastest_kernels(_model(), threads=False)
    files = list(cache.iterdir())
    assert len(files) == 1 and not files[0].name.startswith(".")  # no temporary left behind
    again = sv.use_fastest_kernels(_model(), threads=False)
    assert len(calls) == 1 and again.source == "cache" and again.decode == first.decode
    other = {**kc.host_fingerprint(), "boot": "another boot"}
    monkeypatch.setattr(kc, "host_fingerprint", lambda: other)
    sv.use_fastest_kernels(_model(), threads=False)
    assert len(calls) == 2  # another host: timed again, and cached for it
    sv.use_fastest_kernels(_model(), threads=False)
    assert len(calls) == 2
    sv.use_fastest_kernels(_model(), threads=False, remeasure=True)
    assert len(calls) == 3
    other_model = _model(seed=1)
    other_model.config.hidden_act = "gelu"  # another config: another cache entry
    sv.use_fastest_kernels(other_model, threads=False)
    assert len(calls) == 4 and len(list(cache.iterdir())) == 2


@pytest.mark.parametrize("damage", ["truncate", "edit", "garbage"])
def test_a_damaged_cache_is_reported_and_retimed(cache, monkeypatch, damage):
    calls: list[str] = []
    _fake_measure(monkeypatch, decode=2.0, verify=2.0, calls=calls)
    sv.use_fastest_kernels(_model(), threads=False)
    (path,) = cache.iterdir()
    text = path.read_text()
    if damage == "truncate":
        path.write_text(text[: len(text) // 2])
    elif damage == "edit":  # a plausible edit without the checksum: refused
        data = json.loads(text)
        data["report"]["decode"] = "stock"
        path.write_text(json.dumps(data))
    else:
        path.write_bytes(b"\xff\xfe not json")
    with pytest.warns(UserWarning, match="kernel cache"):
        r = sv.use_fastest_kernels(_model(), threads=False)
    assert len(calls) == 2 and r.source == "measured" and r.decode == "packed"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rewritten whole: read back without a warning
        assert sv.use_fastest_kernels(_model(), threads=False).source == "cache"


def test_a_busy_measurement_is_retimed_once_the_machine_is_quiet(cache, monkeypatch):
    calls: list[str] = []
    _fake_measure(monkeypatch, decode=2.0, verify=2.0, calls=calls)
    real_choose = K._choose
    monkeypatch.setattr(
        K, "_choose", lambda m, c, source: real_choose(K._replace(m, load_average=9.0), c,
                                                       source=source),
    )  # fmt: skip
    monkeypatch.setattr(kc, "busy_now", lambda: True)
    r = sv.use_fastest_kernels(_model(), threads=False)
    assert r.busy and "busy" in r.summary()
    sv.use_fastest_kernels(_model(), threads=False)
    assert len(calls) == 1  # still busy: the busy timing is the best there is
    monkeypatch.setattr(kc, "busy_now", lambda: False)
    sv.use_fastest_kernels(_model(), threads=False)
    assert len(calls) == 2


def test_threads_chosen_among_allowed_counts_and_applied(cache, monkeypatch, threads):
    timings = []
    for t, sec in ((1, 1.0), (2, 3.0)):  # one thread 3x faster (a busy 2-core machine)
        for shape in ("decode", "verify"):
            for k in ("stock", "packed"):
                timings.append(K.KernelTiming(k, t, shape, 1, (sec, sec, sec)))
    measured = K.KernelReport("m", "h", "stock", "stock", 2, 4, 16, "measured", "",
                              timings=tuple(timings), measure_seconds=1.0)  # fmt: skip
    r = K._choose(measured, (1, 2), source="measured")
    assert r.threads == 1 and r.thread_ratio == pytest.approx(1 / 3) and "threads: 1" in r.reason
    assert K._choose(measured, (2,), source="cache").threads == 2  # a cap of 2 threads only
    timings[0] = K.KernelTiming("stock", 1, "decode", 1, (2.9, 2.9, 2.9))
    assert K._thread_counts(True, 4) == (1, 2, 4) and K._thread_counts(True, 1) == (1,)
    assert K._thread_counts(False, 3) == (3,) and K._thread_counts(2, 8) == (2,)
    with pytest.raises(ValueError, match="threads"):
        K._thread_counts("many", 2)
    _fake_measure(monkeypatch, decode=2.0, verify=2.0)
    torch.set_num_threads(2)
    r = sv.use_fastest_kernels(_model(), threads=True)
    assert r.threads == torch.get_num_threads()


def test_keep_dense_false_holds_one_kernel_for_both_shapes(cache, monkeypatch):
    _fake_measure(monkeypatch, decode=3.0, verify=0.9)  # packed wins decode by far
    model = _model()
    r = sv.use_fastest_kernels(model, threads=False, keep_dense=False)
    assert r.decode == r.verify == "packed" and "one copy" in r.reason
    assert packed_mod.dense_dropped(model) > 0
    _fake_measure(monkeypatch, decode=1.2, verify=0.5)  # stock wins overall
    model = _model()
    r = sv.use_fastest_kernels(model, threads=False, keep_dense=False, cache=False)
    assert r.decode == r.verify == "stock" and packed_layers(model) == 0


def test_forced_modes_and_models_it_cannot_help(cache, monkeypatch):
    model = _model()
    r = sv.use_fastest_kernels(model, mode="packed")
    assert r.source == "forced" and packed_shapes(model) == (True, True) and not r.timings
    r = sv.use_fastest_kernels(model, mode="stock")
    assert r.source == "forced" and packed_layers(model) == 0
    toy, _ = sv.toy_pair()
    r = sv.use_fastest_kernels(toy)
    assert r.source == "unavailable" and "not a transformers model" in r.reason
    assert not cache.exists()  # nothing timed, nothing cached
    half = _model().to(torch.float16)
    assert sv.use_fastest_kernels(half).source == "unavailable"
    with pytest.raises(ValueError, match="mode"):
        sv.use_fastest_kernels(model, mode="quick")
    with pytest.raises(ValueError, match="gamma"):
        sv.use_fastest_kernels(model, gamma=0)
    monkeypatch.setenv("SPECVIZ_KERNELS", "turbo")
    with pytest.raises(ValueError, match="SPECVIZ_KERNELS"):
        K.default_kernel_mode()
    monkeypatch.setenv("SPECVIZ_KERNELS", "Packed")
    assert K.default_kernel_mode() == "packed"


def test_mixed_kernels_need_the_dense_weights():
    model = _model()
    use_packed_weights(model, keep_dense=False)
    with pytest.raises(RuntimeError, match="dense"):
        route_packed(model, decode=True, verify=False)
    with pytest.raises(RuntimeError, match="dense"):
        sv.use_fastest_kernels(model, cache=False)


def test_an_edited_weight_is_repacked_before_use():
    model = _model()
    x = torch.tensor([[1, 2, 3]])
    use_packed_weights(model)
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(0.5)  # in place: load_state_dict alike
        got = model(x).logits
        with sv.stock_linears(model):
            ref = model(x).logits
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        layer = model.model.layers[1].self_attn.q_proj
        layer.weight = torch.nn.Parameter(torch.zeros_like(layer.weight), requires_grad=False)
        got = model(x).logits
        with sv.stock_linears(model):
            ref = model(x).logits
        layer.weight.data = torch.ones_like(layer.weight)  # .data: noticed by packing again
        use_packed_weights(model)
        again = model(x).logits
        with sv.stock_linears(model):
            ref_again = model(x).logits
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(again, ref_again, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(ref, ref_again)  # control: the edits changed the outputs


def test_greedy_tokens_identical_on_every_kernel_choice(smollm2, monkeypatch):
    """SmolLM2 greedy: plain and speculative decoding on each per-shape choice give the
    tokens of the stock kernels (in these prompts no near-tie flips)."""
    from specviz.prompts import load_prompts, render_prompt

    model, tok = smollm2
    ids = render_prompt(tok, load_prompts(categories="extraction", per_category=1)[0])
    kw = dict(max_new_tokens=12, eos_token_id=tok.eos_token_id)
    ref = sv.autoregressive_generate(model, ids, **kw).new_tokens
    use_packed_weights(model)
    try:
        for decode, verify in ((True, False), (False, True), (True, True)):
            route_packed(model, decode=decode, verify=verify)
            plain = sv.autoregressive_generate(model, ids, **kw).new_tokens
            spec = sv.speculative_generate(model, sv.PromptLookupDrafter(), ids, **kw)
            assert plain == ref and spec.new_tokens == ref, (decode, verify)
    finally:
        use_packed_weights(model, False)
    assert packed_layers(model) == 0


def test_load_model_applies_the_measured_choice_by_default(cache, monkeypatch):
    from specviz.models import load_model

    _fake_measure(monkeypatch, decode=2.0, verify=0.5)
    monkeypatch.setenv("SPECVIZ_KERNELS", "fastest")
    model = load_model("smollm2-135m", progress=False, threads=False)
    r = kernel_report(model)
    assert r is not None and r.source == "measured" and packed_shapes(model) == (True, False)
    assert load_model("smollm2-135m", progress=False, threads=False, packed=False) is not None
    assert kernel_report().source == "forced"  # the opt-out is recorded, nothing timed
    monkeypatch.setenv("SPECVIZ_KERNELS", "stock")
    stock = load_model("smollm2-135m", progress=False)
    assert packed_layers(stock) == 0 and kernel_report(stock).source == "forced"
    assert "SPECVIZ_KERNELS" in kernel_report(stock).reason


def _resident_pages(w: torch.Tensor) -> int:
    """Resident pages among the whole pages inside ``w`` (``/proc/self/pagemap`` bit 63)."""
    import mmap

    page = mmap.PAGESIZE
    start, nbytes = w.data_ptr(), w.numel() * w.element_size()
    lo, hi = -(-start // page) * page, (start + nbytes) // page * page
    if hi <= lo:
        return 0
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(lo // page * 8)
        entries = torch.frombuffer(bytearray(f.read((hi - lo) // page * 8)), dtype=torch.int64)
    return int((entries < 0).sum())


def _mapped_model(tmp_path):
    """A tiny llama saved and loaded back by transformers: its weights map the file."""
    from transformers import AutoModelForCausalLM

    tiny_llama(11, hidden_size=256, num_layers=2).save_pretrained(tmp_path)
    return AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()


@pytest.mark.skipif(not os.path.exists("/proc/self/pagemap"), reason="needs Linux pagemap")
@pytest.mark.parametrize("keep_dense", [False, True])
def test_measuring_keep_dense_false_never_holds_both_copies(cache, tmp_path, keep_dense):
    """Issue 30 (make demo peaked at 12.2 GiB while the 1.5B target's kernels were timed with
    its dense and packed copies both resident): with keep_dense=False and weights mapped from
    a file, no packed layer runs while its dense pages are resident, both kernels are still
    timed, and the model computes what it did. keep_dense=True (negative control: the detector
    fires) keeps both copies by design."""
    model = _mapped_model(tmp_path)
    assert packed_mod.file_backed_share(model) == 1.0
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        ref = model(ids).logits
    seen = {"packed": 0, "stock": 0, "both": 0}

    def hook(m, args):
        if packed_mod._PACKED in m.__dict__ and not m.__dict__.get(packed_mod._PAUSED):
            seen["packed"] += 1
            seen["both"] += _resident_pages(m.weight) > 0
        else:
            seen["stock"] += 1

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]  # none tied
    handles = [m.register_forward_pre_hook(hook) for m in linears]
    report = K.use_fastest_kernels(model, keep_dense=keep_dense, threads=False, rounds=2)
    for h in handles:
        h.remove()
    assert {t.kernels for t in report.timings} == {"packed", "stock"}
    assert seen["packed"] and seen["stock"]
    if keep_dense:
        assert seen["both"] > 0  # the detector sees two resident copies when they are kept
    else:
        assert seen["both"] == 0
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, ref, rtol=1e-4, atol=1e-5)


def test_a_cpu_that_cannot_pack_bf16_gets_stock_kernels_and_a_clear_error(cache, monkeypatch):
    # oneDNN's bf16 reorder needs AVX-512 (bw/vl/dq) or AVX-NE-CONVERT: on a CPU without them
    # (an AMD EPYC Zen 3 here) loading a bf16 model raised from inside the kernel timing
    real = torch.ops.mkldnn._reorder_linear_weight

    class Ops:
        @staticmethod
        def _reorder_linear_weight(w, batch):
            if w.dtype == torch.bfloat16:
                raise RuntimeError("bf16 path needs the cpu support avx512bw")
            return real(w, batch)

    monkeypatch.setattr(torch.ops, "mkldnn", Ops)
    packed_mod.packing_supported.cache_clear()
    try:
        assert packed_mod.packing_supported(torch.float32) == ""
        assert "cannot pack bfloat16 weights on this CPU" in packed_mod.packing_supported(
            torch.bfloat16
        )
        model = _model().to(torch.bfloat16)
        r = sv.use_fastest_kernels(model)
        assert r.source == "unavailable" and (r.decode, r.verify) == ("stock", "stock")
        assert "cannot pack bfloat16" in r.reason and packed_layers(model) == 0
        assert not cache.exists()  # nothing timed
        assert model(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, 11)  # still works
        with pytest.raises(RuntimeError, match=r"cannot pack bfloat16 .*packed=False"):
            use_packed_weights(model)
        assert packed_layers(model) == 0  # refused before packing any layer
        # float32 on the same CPU: still measured and packed as before
        assert sv.use_fastest_kernels(_model(), mode="packed").source == "forced"
    finally:
        packed_mod.packing_supported.cache_clear()
