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
