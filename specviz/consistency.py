"""Deprecated: the names of the former ``specviz.consistency`` module, now in
specviz.checks; this path warns and goes in specviz 0.5."""

from specviz._legacy import deprecated
from specviz.checks.calibration import CheckCalibration, calibrate_check
from specviz.checks.consistency import ConsistencyReport, consistency_check
from specviz.checks.greedy import GreedyReport, greedy_check
from specviz.checks.report import result_row
from specviz.checks.sequences import (
    LogprobNumerics,
    SequenceTests,
    canonical_logprobs,
    sequence_tests,
)

__all__ = [
    "CheckCalibration",
    "ConsistencyReport",
    "GreedyReport",
    "LogprobNumerics",
    "SequenceTests",
    "calibrate_check",
    "canonical_logprobs",
    "consistency_check",
    "greedy_check",
    "result_row",
    "sequence_tests",
]

deprecated(__name__, "specviz.checks")
