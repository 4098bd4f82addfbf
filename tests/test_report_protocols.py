"""Views read reports through protocols (issue 29): every member a drawing reads is declared in
``specviz.views.reports.ComparisonReport`` / ``AuditPage``, and the report classes provide each
one, so the drawings need no ``getattr(report, name, default)``. The report modules keep their
drawing methods by looking the view up by name (``specviz.core.drawing.view``), never by
importing views."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from specviz.audit.report import AuditReport
from specviz.checks.consistency import ConsistencyReport
from specviz.core.drawing import view
from specviz.views import reports
from specviz.views.reports import AuditPage, ComparisonReport

ROOT = Path(__file__).resolve().parents[1] / "specviz"


def _members(protocol: type) -> set[str]:
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass is object or klass.__name__ == "Protocol" or klass.__name__ == "Generic":
            continue
        names |= set(getattr(klass, "__annotations__", {}))
        names |= {n for n, v in vars(klass).items() if not n.startswith("_") and callable(v)}
        names |= {n for n, v in vars(klass).items() if isinstance(v, property)}
    return names


def _missing(cls: type, protocol: type) -> list[str]:
    fields = {f.name for f in dataclasses.fields(cls)}
    return sorted(n for n in _members(protocol) if n not in fields and not hasattr(cls, n))


@pytest.mark.parametrize(
    ("cls", "protocol"),
    [
        (ConsistencyReport, ComparisonReport),
        (AuditReport, ComparisonReport),
        (AuditReport, AuditPage),
    ],
)
def test_each_report_provides_what_its_views_read(cls, protocol):
    assert _missing(cls, protocol) == []


def test_the_check_sees_a_missing_member():
    @dataclasses.dataclass
    class Partial:
        verdict: str
        n_samples: int

    assert "min_detectable_tv" in _missing(Partial, ComparisonReport)
    assert "outcome" in _missing(Partial, ComparisonReport)


def test_the_drawings_read_no_member_by_default():
    tree = ast.parse(inspect.getsource(reports))
    probes = [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id in {"getattr", "hasattr"}
    ]
    assert probes == []


@pytest.mark.parametrize(
    "module", ["checks/consistency.py", "checks/sequential.py", "audit/report.py"]
)
def test_report_modules_import_no_view(module):
    tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in imported if "views" in m]


def test_a_report_method_finds_its_view_by_name():
    assert view("reports.audit_html") is reports.audit_html
    assert view("stats.sequential_figures").__name__ == "sequential_figures"
    with pytest.raises(AttributeError):
        view("reports.no_such_drawing")
