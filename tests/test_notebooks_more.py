"""The second half of the notebook runs of tests/test_notebooks.py (``RUN_IN_MORE``), in a file
of their own so that make test's two workers (whole files each, ``--dist loadfile``) share the
notebooks. Same execution, same checks: ``run_and_check_notebook``."""

from __future__ import annotations

import pytest
from test_notebooks import NOTEBOOKS, RUN_IN_MORE, run_and_check_notebook


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "path", [p for p in NOTEBOOKS if p.name in RUN_IN_MORE], ids=lambda p: p.name
)
def test_notebook_executes(path, monkeypatch, tmp_path):
    run_and_check_notebook(path, monkeypatch, tmp_path)
