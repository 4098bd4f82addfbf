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
    # weights=f16 is the default route, named: no mismatch
    check_same_numerics(
        engine_from_spec("openvino:smollm2-135m,weights=f16"),
        engine_from_spec("openvino:smollm2-135m,draft=target"),
    )
    ir = tmp_path / "ir"
    ir.mkdir()
    (ir / "openvino_model.xml").write_text("<net/>")
    with pytest.raises(ValueError, match=r"weights=int8 applies to models the audit converts"):
        engine_from_spec(f"openvino:{ir},weights=int8")
