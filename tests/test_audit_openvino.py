"""OpenVINO GenAI audited in-process on SmolLM2-135M (converted once, offline: the cached
safetensors -> f16 GGUF -> IR, :mod:`specviz.audit.engines.convert`).

* prompt lookup (sample-and-match: lossless by construction) must not be flagged;
* the identity-draft probe (draft = target) must show acceptance 1 for a lossless engine; in
  2026.4.1 it does not (sampler.cpp's ``validate_candidate``, issue #4190): this test records
  the finding and fails the day the engine accepts identical drafts;
* a truncated draft (the first 8 layers) runs to the end with its failures counted.

60 samples x 4 tokens, one prompt (with 3 tokens the engine fills no per-request candidate
count: 4 leaves room for a counted draft); the broken-engine controls at these sizes are in
test_audit_engines.py.
"""

from __future__ import annotations

import warnings

import pytest
from _engine_memo import Memo

pytest.importorskip("openvino_genai", reason="the [openvino] extra is not installed")

from specviz.audit import engine_audit  # noqa: E402
from specviz.audit.engines import engine_from_spec  # noqa: E402
from specviz.audit.engines.convert import gguf_converter, openvino_model  # noqa: E402

pytestmark = pytest.mark.slow

PROMPT = ["The cat sat on the mat. The dog sat on the"]  # repeats itself: lookup drafts
SIZE = dict(n_samples=60, max_tokens=4, temperature=1.0, greedy_max_tokens=8, progress=False)


@pytest.fixture(scope="module")
def plain():
    try:
        gguf_converter()
    except Exception as err:  # noqa: BLE001
        pytest.skip(str(err))
    openvino_model("smollm2-135m", progress=False)
    return Memo(engine_from_spec("openvino:smollm2-135m,threads=1", "A"))


def test_prompt_lookup_keeps_the_law(plain, tmp_path):
    b = engine_from_spec("openvino:smollm2-135m,lookup=3,threads=1", "B")
    r = engine_audit(plain, b, PROMPT, out_dir=tmp_path, **SIZE)
    assert r.verdict == "consistent", r.summary()
    assert r.first_token_control and "passed" in r.first_token_line()
    assert r.greedy_verdict == "identical"


def test_identity_draft_is_rejected_by_the_openvino_sampler(plain, tmp_path):
    b = engine_from_spec("openvino:smollm2-135m,draft=target,threads=1", "B")
    r = engine_audit(plain, b, PROMPT, out_dir=tmp_path, identity=True, **SIZE)
    assert r.identity_outcome == "fail", r.summary()  # the finding (see docs/findings.md)
    assert r.outcome == "inconsistent"
    assert (tmp_path / "report.html").is_file()


def test_truncated_draft_runs_with_failures_counted(plain):
    b = engine_from_spec("openvino:smollm2-135m,draft=smollm2-135m@8,threads=1", "B")
    r = engine_audit(plain, b, PROMPT, **SIZE)
    assert r.failures["b"]["requests"] == SIZE["n_samples"]
    assert {row["position"] for row in r.power_rows()} == {1, 2, 3, 4}


def test_a_model_folder_that_does_not_convert_names_the_engine_and_the_cause(tmp_path):
    bad = tmp_path / "bad-model"
    bad.mkdir()
    (bad / "config.json").write_text('{"architectures": ["NoSuchForCausalLM"]}')
    from specviz.audit.engines import EngineError

    with pytest.raises(EngineError, match=r"openvino: converting .*bad-model.* failed"):
        openvino_model(str(bad), progress=False)


def test_int8_weights_stay_int8_in_the_ir_and_f16_ones_do_not():
    # weights=int8: a Q8_0 GGUF -> IR whose weights are int8 constants (what keeps the CPU
    # plugin from holding them as f32); the f16 IR is the negative control
    from specviz.audit.engines.convert import ir_int8_weights

    try:
        gguf_converter()
    except Exception as err:  # noqa: BLE001
        pytest.skip(str(err))
    int8 = openvino_model("smollm2-135m", weights="int8", progress=False)
    f16 = openvino_model("smollm2-135m", progress=False)
    assert int8 != f16
    assert ir_int8_weights(int8 / "openvino_model.xml") > 100
    assert ir_int8_weights(f16 / "openvino_model.xml") == 0
    size = (int8 / "openvino_model.bin").stat().st_size
    assert size < 0.6 * (f16 / "openvino_model.bin").stat().st_size
    e = engine_from_spec("openvino:smollm2-135m,weights=int8,threads=1")
    s = e.sample("The cat sat on the", _sampling(), [1, 2])
    assert len(s) == 2 and all(len(x.tokens) == 2 for x in s)
    e.close()


def _sampling():
    from specviz.audit.engines import Sampling

    return Sampling(max_tokens=2, temperature=1.0)


def test_bad_weights_and_mismatched_arms_are_refused_before_loading(tmp_path):
    from specviz.audit.engines.base import check_same_numerics

    with pytest.raises(ValueError, match=r"openvino: weights must be one of f16, int8"):
        engine_from_spec("openvino:smollm2-135m,weights=int4")
    with pytest.raises(ValueError, match=r"openvino: the two arms differ in weights"):
        check_same_numerics(
            engine_from_spec("openvino:smollm2-135m,weights=int8"),
            engine_from_spec("openvino:smollm2-135m,draft=target"),
        )
    # weights=f16 is the default route of a model this size, named: no mismatch, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        small_f16 = engine_from_spec("openvino:smollm2-135m,weights=f16")
    check_same_numerics(
        small_f16,
        engine_from_spec("openvino:smollm2-135m,draft=target"),
    )
    ir = tmp_path / "ir"
    ir.mkdir()
    (ir / "openvino_model.xml").write_text("<net/>")
    with pytest.raises(ValueError, match=r"weights=int8 applies to models the audit converts"):
        engine_from_spec(f"openvino:{ir},weights=int8")


def _safetensors_header(path, shape):
    import json

    head = json.dumps({"w": {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}}).encode()
    path.write_bytes(len(head).to_bytes(8, "little") + head)  # the header alone is read


def test_int8_is_the_default_above_a_billion_parameters_and_the_spec_says_so(tmp_path):
    # issue 24's 10 GB bar: the CPU plugin holds an f16 IR's weights as f32 (the 1.5B Qwen
    # with its 0.5B draft peaked at 12.6-16 GB), so as optimum-intel's exporter does, models
    # above 1B parameters convert to int8 unless weights= says otherwise
    from specviz.audit.engines.base import check_same_numerics

    pair = "openvino:qwen2.5-coder-1.5b,draft=qwen2.5-coder-0.5b,threads=2"
    big = engine_from_spec(pair)
    assert big.weights == "int8"
    assert big.spec == "qwen2.5-coder-1.5b,draft=qwen2.5-coder-0.5b,threads=2,weights=int8"
    assert engine_from_spec(pair + ",weights=int8").spec == big.spec  # the same raw-file key
    # the two arms of a default audit agree; an f16 arm against a default one is refused
    check_same_numerics(engine_from_spec("openvino:qwen2.5-coder-1.5b,batch=32"), big)
    with pytest.warns(UserWarning, match=r"weights=f16 for qwen2.5-coder-1.5b.*holds f16"):
        f16 = engine_from_spec("openvino:qwen2.5-coder-1.5b,threads=2,batch=32,weights=f16")
    with pytest.raises(ValueError, match=r"the two arms differ in weights \(f16 vs int8\)"):
        check_same_numerics(f16, big)
    # f16 named: a spec without weights=, the key every f16 raw file was written with
    assert (f16.weights, f16.spec) == ("f16", "qwen2.5-coder-1.5b,batch=32,threads=2")
    small = engine_from_spec("openvino:qwen2.5-coder-0.5b,draft=target")
    assert (small.weights, small.spec) == ("f16", "qwen2.5-coder-0.5b,draft=target")
    # a local folder: counted from its safetensors headers, no tensor read
    for shape, want in (([50_000, 25_000], "int8"), ([1000, 1000], "f16")):
        folder = tmp_path / f"m{shape[0]}"
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        _safetensors_header(folder / "model.safetensors", shape)
        assert engine_from_spec(f"openvino:{folder}").weights == want
    # an IR folder is used as it is: no weights to choose
    ir = tmp_path / "ir"
    ir.mkdir()
    (ir / "openvino_model.xml").write_text("<net/>")
    assert engine_from_spec(f"openvino:{ir}").weights is None


def test_the_registry_counts_match_the_cached_safetensors():
    # the built-in counts that pick the default weights are the cached files' own
    from specviz import models
    from specviz.audit.engines.convert import parameter_count

    checked = 0
    for name, spec in models.BUILTIN_MODELS.items():
        folder = models.cache_dir() / "models" / spec.cache_name
        if list(folder.glob("*.safetensors")):
            assert parameter_count(str(folder)) == spec.params, name
            checked += 1
    if not checked:
        pytest.skip("no built-in model in the cache yet")
