"""The flat layout's import paths (``specviz/<old>.py``) are deprecated on purpose (issue 29):
each still imports and hands out the very objects of its new home, but warns with a
:class:`DeprecationWarning` that names the new home and the release that removes it; and
nothing in the package, the tests or the notebooks imports them any more (an AST count)."""

from __future__ import annotations

import ast
import importlib
import json
import re
import sys
import warnings
from pathlib import Path

import pytest

from specviz._legacy import REMOVAL

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "specviz"
LEGACY = sorted(p.stem for p in PKG.glob("*.py") if "from specviz._legacy import" in p.read_text())


def _homes(name: str) -> dict[str, str]:
    """{public name: the module it now lives in} read from the shim's source."""
    tree = ast.parse((PKG / f"{name}.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "alias":
            return {"*": node.args[1].value}
    return {
        a.name: node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module != "specviz._legacy"
        for a in node.names
    }


def _fresh_import(module: str):
    """Import ``module`` as a first import in this process would (its warning fires again)."""
    sys.modules.pop(module, None)
    return importlib.import_module(module)


def test_the_shims_are_the_ones_the_contract_forbids():
    text = (ROOT / "pyproject.toml").read_text()
    contract = text[text.index("legacy flat-layout paths") :]
    listed = contract[contract.index("forbidden_modules") :]
    listed = listed[: listed.index("]")]
    assert LEGACY == sorted(re.findall(r'"specviz\.(\w+)"', listed))
    assert len(LEGACY) == 29


@pytest.mark.parametrize("name", LEGACY)
def test_a_legacy_path_imports_warns_and_reexports_the_same_objects(name):
    module = f"specviz.{name}"
    homes = _homes(name)
    with pytest.warns(DeprecationWarning) as caught:
        mod = _fresh_import(module)
    (warning,) = [w for w in caught if module in str(w.message)]
    text = str(warning.message)
    assert f"will be removed in specviz {REMOVAL}" in text
    assert warning.filename == __file__  # points at the importing line, not at importlib
    if "*" in homes:  # moved whole: the path *is* the new module
        assert homes["*"] in text
        assert mod is importlib.import_module(homes["*"])
        return
    assert homes
    for public, home in homes.items():
        assert getattr(mod, public) is getattr(importlib.import_module(home), public), public
    assert set(mod.__all__) == set(homes)


def test_the_warning_names_where_each_name_went():
    with pytest.warns(DeprecationWarning, match=r"specviz\.drafting .*instead"):
        _fresh_import("specviz.drafters")
    with pytest.warns(DeprecationWarning, match=r"import from specviz\.lab instead"):
        _fresh_import("specviz.widgets")


def test_the_new_homes_import_without_a_deprecation_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        _fresh_import("specviz.lab")
        for module in ["specviz", "specviz.views", "specviz.lab.verdicts", "specviz.lab.analysis"]:
            importlib.import_module(module)


def test_the_notebook_facade_hands_out_what_widgets_did():
    from specviz import lab

    with pytest.warns(DeprecationWarning):
        widgets = _fresh_import("specviz.widgets")
    # every name the old module had is still handed out, by specviz.lab; names new in lab
    # (e.g. compare_with_plain) need no deprecated path
    assert set(widgets.__all__) <= set(lab.__all__)
    assert len(widgets.__all__) >= 30
    for name in widgets.__all__:
        assert getattr(lab, name) is getattr(widgets, name), name
    with pytest.raises(AttributeError, match="no attribute 'NoSuchExplorer'"):
        lab.NoSuchExplorer  # noqa: B018


def _legacy_imports(path: Path, source: str) -> list[str]:
    found = []
    package = list(path.relative_to(ROOT).with_suffix("").parts)
    package = package if path.name == "__init__.py" else package[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + [base] * bool(base))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        hits = [
            n for n in names if n.count(".") == 1 and n.startswith("specviz.") and n[8:] in LEGACY
        ]
        found += [f"{path.relative_to(ROOT)}:{node.lineno}: {hits[0]}"] if hits else []
    return found


def _sources():
    shims = {PKG / f"{n}.py" for n in LEGACY}
    for folder in ("specviz", "tests", "notebooks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path not in shims:
                yield path, path.read_text()
        for path in sorted((ROOT / folder).rglob("*.ipynb")):
            if ".ipynb_checkpoints" in path.parts:
                continue
            cells = json.loads(path.read_text())["cells"]
            code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
            lines = [
                ln for c in code for ln in c.splitlines() if not ln.lstrip().startswith(("%", "!"))
            ]
            yield path, "\n".join(lines)


def test_nothing_imports_a_legacy_path():
    found = [hit for path, source in _sources() for hit in _legacy_imports(path, source)]
    assert found == []


def test_the_count_notices_a_legacy_import():
    """Negative control: the scan finds each spelling of a legacy import."""
    path = ROOT / "tests" / "x.py"
    source = "from specviz import viz\nimport specviz.engine\nfrom specviz.toy import ToyLM\n"
    source += "from specviz.lab import analysis\nfrom specviz import views\n"
    assert len(_legacy_imports(path, source)) == 3
    inside = PKG / "lab" / "x.py"
    assert len(_legacy_imports(inside, "from .. import metrics\nfrom . import analysis\n")) == 1
