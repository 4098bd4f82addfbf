"""Shared fixtures: the built-in SmolLM2-135M model and a memoising wrapper for law tests."""

from __future__ import annotations

import os

import pytest
import torch

from specviz.fixtures.memo import MemoLM

# The suite runs on the stock kernels unless told otherwise: a kernel choice timed on a busy
# CI machine would make tests host-dependent. tests/test_kernels.py tests the measured choice.
os.environ.setdefault("SPECVIZ_KERNELS", "stock")

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One worker per core (make test): a second intra-op thread per worker would only compete.
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer) for SmolLM2-135M-Instruct, fp32 CPU, from the built-in GGUF."""
    from specviz.models import load_model, load_tokenizer

    return load_model("smollm2-135m", progress=False), load_tokenizer("smollm2-135m")


@pytest.fixture(scope="session")
def memo_pair(smollm2):
    """(target, draft) memoised: SmolLM2 and a noisy copy of it (untrained early exits of
    SmolLM2 agree with it almost nowhere, beta ~ 0, which would leave the accept path idle)."""
    target = MemoLM(smollm2[0])
    return target, target.noisy_copy(1.0)


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op torch thread for a module: on a shared 2-core machine two competing torch
    threads made forward passes up to ~10x slower. Use with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# -- make test's schedule: the longest files first ----------------------------------------------
#
# `pytest -n 2 --dist loadfile` hands whole files to the workers, by default in order of their
# number of tests. Few-test files that run for minutes (a notebook per test, a server or an
# engine per module) then start last, and one worker finishes minutes after the other one went
# idle. Starting the longest files first (longest-processing-time-first) leaves only the short
# ones for the end. Order only: every test still runs, on one worker, in its file's order.
# Measured per-file times (CPU; wall on a loaded 2-core machine): changes/ttime.md. A file
# missing here keeps xdist's default place; tests/test_schedule.py checks the names exist.
SLOW_FILES_FIRST = (
    "tests/test_notebooks.py",
    "tests/test_notebooks_more.py",
    "tests/test_trees.py",
    "tests/test_heads.py",
    "tests/test_audit_openvino.py",
    "tests/test_browser.py",
    "tests/test_audit_llama_server.py",
    "tests/test_demo.py",
    "tests/test_audit_onnx.py",
    "tests/test_audit_engines.py",
    "tests/test_calibration_real.py",
    "tests/test_engine_models.py",
)


def slow_files_first(queue) -> None:
    """Move the files of :data:`SLOW_FILES_FIRST` that ``queue`` (xdist's ordered work queue,
    file -> tests) holds to its front, in that order; the others keep their order."""
    for scope in reversed(SLOW_FILES_FIRST):
        if scope in queue:
            queue.move_to_end(scope, last=False)


@pytest.hookimpl(optionalhook=True)  # pytest -p no:xdist still runs
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with :data:`SLOW_FILES_FIRST` at the front of the queue."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SlowFilesFirst(LoadFileScheduling):
        def _assign_work_unit(self, node):
            # the first assignment: xdist has just built the whole queue
            if not getattr(self, "_slow_first_done", False):
                slow_files_first(self.workqueue)
                self._slow_first_done = True
            super()._assign_work_unit(node)

    return SlowFilesFirst(config, log)
