"""Freed memory kept for reuse inside big batched runs (issue 30, "faster verdicts"): the
same large tensors allocated step after step stop faulting their pages in again."""

from __future__ import annotations

import resource

import pytest

from specviz.core import heap

_ROUNDS = """
import resource, sys, torch
from specviz.core import heap
keep = sys.argv[1] == "1"
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
with heap.reuse_freed_memory(keep):
    for _ in range(24):
        x = torch.empty(16 << 20)  # 64 MiB of float32
        x.fill_(1.0)
        del x
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, heap._depth)
"""


def _faults(keep: bool) -> int:
    """Minor page faults of 24 allocate-fill-free rounds of a 64 MiB tensor, in a fresh
    process: the allocator's thresholds are process-wide, and a test worker has run other
    tests' batched decoding (in the CI suite the control once faulted only 2 of 24 blocks)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _ROUNDS, "1" if keep else "0"],
                         capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    faults, depth = out.stdout.split()
    assert depth == "0"
    return int(faults)


def _thp_always() -> bool:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[always]" in f.read()
    except OSError:
        return False


@pytest.mark.skipif(heap._LIBC is None, reason="glibc's mallopt only")
@pytest.mark.skipif(_thp_always(), reason="huge pages always on: faults no longer count pages")
def test_kept_blocks_are_not_faulted_in_again():
    pages = (64 << 20) // resource.getpagesize()
    plain = _faults(False)  # the negative control: every round faults the block in again
    kept = _faults(True)
    assert plain > 12 * pages  # ~24 blocks faulted in
    # kept: the block is faulted in once, and glibc re-faults some rounds' (measured 1-5 blocks'
    # worth of 24); what matters is a several-fold cut
    assert kept < plain / 3, (kept, plain)


def test_nested_and_disabled_uses_leave_the_settings_to_the_outermost(monkeypatch):
    calls: list[tuple[str, int, int]] = []

    class FakeLibc:
        def mallopt(self, param, value):
            calls.append(("mallopt", param, value))
            return 1

        def malloc_trim(self, pad):
            calls.append(("trim", pad, 0))
            return 1

    monkeypatch.setattr(heap, "_LIBC", FakeLibc())
    with heap.reuse_freed_memory(False):
        pass
    assert calls == []
    with heap.reuse_freed_memory(), heap.reuse_freed_memory():
        assert len(calls) == 3  # set once, by the outer block
    assert [c[0] for c in calls] == ["mallopt"] * 6 + ["trim"]
    assert heap._depth == 0
