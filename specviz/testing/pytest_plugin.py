"""pytest plugin of the conformance kit (entry point ``pytest11: specviz``): one line per sampler.

::

    def test_my_sampler_is_lossless(lossless):
        lossless(my_rejection_sample, signature="vllm")

    @pytest.mark.lossless(signature="flashinfer", n=4000)
    def test_with_a_marker(lossless):
        lossless(my_chain_kernel)  # the marker's options are the defaults

The ``lossless`` fixture runs :func:`specviz.testing.check_sampler` and fails the test with the
kit's report -- verdict, worst case, shrunk counterexample as pasteable code -- or returns the
report. Command-line options set the defaults for a whole run: ``--specviz-runs`` (runs per
exact case), ``--specviz-alpha`` (family-wise false-alarm rate), ``--specviz-seed``. Nothing
heavy is imported until a test uses the fixture.
"""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["lossless", "pytest_addoption", "pytest_configure"]


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("specviz", "specviz conformance kit (specviz.testing)")
    group.addoption(
        "--specviz-runs", type=int, default=None, help="runs per exact (p, q) case (default 2000)"
    )
    group.addoption(
        "--specviz-alpha",
        type=float,
        default=None,
        help="family-wise false-alarm rate (default 0.01)",
    )
    group.addoption(
        "--specviz-seed", type=int, default=None, help="seed of the kit's draws (default 0)"
    )


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers",
        "lossless(signature=..., **options): defaults of the `lossless` fixture "
        "(specviz.testing.check_sampler options)",
    )


@pytest.fixture
def lossless(request: Any):
    """``lossless(fn, signature="specviz", **options) -> ConformanceReport``: fails the test
    (with the report) unless ``fn`` emits the target's law on every exact case."""
    from specviz.testing import check_sampler

    defaults: dict[str, Any] = {}
    for opt, key in (
        ("--specviz-runs", "n"),
        ("--specviz-alpha", "alpha"),
        ("--specviz-seed", "seed"),
    ):
        value = request.config.getoption(opt)
        if value is not None:
            defaults[key] = value
    marker = request.node.get_closest_marker("lossless")
    if marker is not None:
        if marker.args:
            raise TypeError(
                "@pytest.mark.lossless takes keyword options only (signature=..., n=...)"
            )
        defaults.update(marker.kwargs)

    def check(fn: Any, signature: str | None = None, **options: Any):
        kw = {**defaults, **options}
        sig = signature if signature is not None else kw.pop("signature", "specviz")
        kw.pop("signature", None)
        report = check_sampler(fn, sig, **kw)
        if not report.passed:
            pytest.fail(report.summary(), pytrace=False)
        return report

    return check
