"""How a report (data, in a layer below :mod:`specviz.views`) keeps its drawing methods.

``ConsistencyReport.figures()``, ``SequentialReport.figures()``, ``AuditReport.figures()`` and
``AuditReport.to_html()`` are public (the README and docs show them), but the figures are
views, which sit *above* the checks and the audits in the import contract: a report is data,
and the layers above it (lab, cli, the audit's runs) draw it by calling :mod:`specviz.views`
directly. These methods stay as conveniences that look their view function up by name when
called -- never at import -- so the report modules import nothing of views and the contract
(``lint-imports``) holds for them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["view"]


def view(path: str) -> Callable[..., Any]:
    """The function ``specviz.views.<path>`` (``"reports.audit_html"``), looked up now.

    >>> view("reports.first_token_names")([3])
    ['#3']
    """
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(f"specviz.views.{module}"), name)
