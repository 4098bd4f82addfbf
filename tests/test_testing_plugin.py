"""The pytest plugin (entry point ``pytest11: specviz``): one line per sampler, a marker for
defaults, command-line options, and a failure that prints the kit's report."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

pytest_plugins = ["pytester"]

TESTS = """
import pytest
from specviz.testing.reference import flashinfer_chain_speculative_sampling, flashinfer_trace_reference

def test_correct(lossless):
    report = lossless(flashinfer_chain_speculative_sampling, signature="flashinfer", families=["random"])
    assert report.passed and report.n_per_case == 300

@pytest.mark.lossless(signature="flashinfer", families=["random"])
def test_broken(lossless):
    lossless(flashinfer_trace_reference)
"""


def _plugin_args() -> list[str]:
    """Load the plugin by module unless the installed entry point already does."""
    installed = any(
        ep.value == "specviz.testing.pytest_plugin" for ep in entry_points(group="pytest11")
    )
    return [] if installed else ["-p", "specviz.testing.pytest_plugin"]


def test_the_fixture_passes_a_correct_sampler_and_fails_a_broken_one(pytester: pytest.Pytester):
    pytester.makepyfile(test_samplers=TESTS)
    result = pytester.runpytest_subprocess(*_plugin_args(), "--specviz-runs=300", "-p", "no:cacheprovider")  # fmt: skip
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "flashinfer_trace_reference ('flashinfer' signature): FAIL" in out
    assert "shrunk counterexample (V = " in out and "check_case(my_sampler" in out


def test_the_options_are_listed(pytester: pytest.Pytester):
    result = pytester.runpytest_subprocess(*_plugin_args(), "--help")
    out = result.stdout.str()
    for opt in ("--specviz-runs", "--specviz-alpha", "--specviz-seed"):
        assert opt in out


def test_the_entry_point_is_declared():
    from pathlib import Path

    import tomllib

    meta = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["pytest11"]["specviz"] == "specviz.testing.pytest_plugin"
