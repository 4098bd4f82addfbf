"""Both arms of an engine audit compute at the same precision: a precision that differs
between the arms would be measured as if it were the speculation's doing. Refused before
any model loads (nothing here imports an engine)."""

from __future__ import annotations

import pytest

from specviz.audit import engine_audit
from specviz.audit.engines import engine_from_spec


@pytest.mark.parametrize(
    ("a", "b", "key"),
    [
        ("openvino:smollm2-135m", "openvino:smollm2-135m,draft=target,precision=bf16", "precision"),
        ("ort:smollm2-135m,precision=int4", "ort:smollm2-135m,draft=target", "precision"),
        ("hf:smollm2-135m,dtype=bfloat16", "hf:smollm2-135m,draft=target", "dtype"),
    ],
)
def test_arms_at_different_precisions_are_refused_before_loading(a, b, key, tmp_path):
    with pytest.raises(ValueError, match=f"the two arms differ in {key}"):
        engine_audit(a, b, ["x"], out_dir=tmp_path, n_samples=10)
    assert not (tmp_path / "raw.jsonl").exists()


def test_openvino_precision_is_checked_and_kept_in_the_spec():
    e = engine_from_spec("openvino:smollm2-135m,draft=target,precision=bf16")
    assert e.precision == "bf16" and "precision=bf16" in e.spec
    with pytest.raises(ValueError, match="precision must be one of bf16, f16, f32"):
        engine_from_spec("openvino:smollm2-135m,precision=int4")
