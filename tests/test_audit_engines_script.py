"""scripts/audit_engines.py's committed audits, without loading a model: every spec parses,
every planned audit's committed plan matches the cut it samples with, and a plan computed
with another top-k is refused before any model loads. Seconds."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from specviz.audit.engines import _parse, is_engine_spec

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("audit_engines", ROOT / "scripts/audit_engines.py")
script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script)


@pytest.mark.parametrize("name", sorted(script.AUDITS))
def test_every_committed_audit_names_two_engine_specs(name):
    spec = script.AUDITS[name]
    for arm in ("a", "b"):
        assert is_engine_spec(spec[arm]), (name, arm)
        _parse(spec[arm])  # raises on a malformed spec


@pytest.mark.parametrize("name", sorted(n for n, s in script.AUDITS.items() if s.get("plan")))
def test_planned_audits_have_a_plan_made_with_their_top_k(name):
    plan = ROOT / "reports/audit" / name / script.AUDITS[name]["plan"]
    assert plan.is_file(), f"{name}: no committed plan (scripts/draft_tv05_prompt.py)"
    data = json.loads(plan.read_text())
    assert data["sampling"].get("top_k") == script.AUDITS[name].get("top_k")
    assert data["n_per_arm"] >= 100 and data["prompt"]


def test_a_plan_with_another_top_k_is_refused(tmp_path):
    name = "ort-qwen-draft-tv05"
    src = json.loads((ROOT / "reports/audit" / name / "prompt_choice.json").read_text())
    src["sampling"]["top_k"] = None  # the plan of the no-cut transformers audit
    (tmp_path / name).mkdir()
    (tmp_path / name / "prompt_choice.json").write_text(json.dumps(src))
    args = script.build_parser().parse_args([name, "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="top_k=None.*top_k=50"):
        script.run(name, args)
