"""No registry is filled by an import side effect (issue 29): the verifier registry
(``specviz.verification.base``) lists every rule module's members itself, and ``load_pair``
finds the cross-vocabulary drafter by name when called instead of a table another module
writes into on import."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "specviz"
REGISTRIES = {"VERIFIERS", "PREFIXES", "_CROSS_VOCAB_DRAFTERS"}


def _writes(source: str) -> list[str]:
    """Registry names assigned into (``REG[k] = v``, ``REG.update(...)``, ``REG.setdefault``)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            target = node.value
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name in REGISTRIES:
                out.append(name)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in {"update", "setdefault"}
            and getattr(node.func.value, "id", getattr(node.func.value, "attr", "")) in REGISTRIES
        ):
            out.append(node.func.value.id if hasattr(node.func.value, "id") else "?")
    return out


def test_no_module_writes_into_a_registry():
    writers = {
        str(p.relative_to(ROOT)): _writes(p.read_text(encoding="utf-8")) for p in ROOT.rglob("*.py")
    }
    assert {k: v for k, v in writers.items() if v} == {}


def test_the_scan_sees_a_write():
    assert _writes("VERIFIERS['x'] = 1\nmodels._CROSS_VOCAB_DRAFTERS['y'] = 2") == [
        "VERIFIERS",
        "_CROSS_VOCAB_DRAFTERS",
    ]
    assert _writes("PREFIXES.update(a=1)") == ["PREFIXES"]


def test_the_registry_is_whole_when_its_module_is_imported_alone():
    code = "import specviz.verification.base as b\nprint(len(b.VERIFIERS), len(b.PREFIXES))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["16", "15"]


def test_load_pair_names_the_cross_vocab_methods_before_loading_anything():
    from specviz.models import load_pair

    with pytest.raises(ValueError, match=r"\('intersection', 'string'\)"):
        load_pair("no-such-target", "no-such-draft", cross_vocab="by-id")
