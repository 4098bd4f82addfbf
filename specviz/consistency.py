"""The names of the former ``specviz.consistency`` module, now split into subpackages; this import
path keeps working (new code imports from the new homes)."""

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
