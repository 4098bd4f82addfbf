"""make test's file order (tests/conftest.py): the longest files start first on the two workers,
so no few-test file that runs for minutes is handed out last. Order only, nothing skipped."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from conftest import SLOW_FILES_FIRST, pytest_xdist_make_scheduler, slow_files_first

ROOT = Path(__file__).resolve().parent.parent


def test_every_listed_file_exists_once():
    assert len(set(SLOW_FILES_FIRST)) == len(SLOW_FILES_FIRST)
    missing = [f for f in SLOW_FILES_FIRST if not (ROOT / f).is_file()]
    assert not missing, f"renamed or removed, update SLOW_FILES_FIRST: {missing}"


def test_listed_files_move_to_the_front_in_order_and_nothing_is_lost():
    queue = OrderedDict(
        (f, {f"{f}::t": False})
        for f in ["tests/test_a.py", SLOW_FILES_FIRST[2], "tests/test_b.py", SLOW_FILES_FIRST[0]]
    )
    before = dict(queue)
    slow_files_first(queue)
    assert list(queue) == [SLOW_FILES_FIRST[0], SLOW_FILES_FIRST[2], "tests/test_a.py",
                           "tests/test_b.py"]  # fmt: skip
    assert dict(queue) == before


class _Config:
    def __init__(self, dist):
        self.dist = dist

    def getoption(self, name, default=None):
        return self.dist if name == "dist" else default


def test_only_loadfile_gets_the_reordering_scheduler():
    assert pytest_xdist_make_scheduler(_Config("load"), None) is None
    assert pytest_xdist_make_scheduler(_Config("no"), None) is None
