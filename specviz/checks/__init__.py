"""The one-call checks: does a speculative decoder keep the target's law
(:func:`consistency_check`), does greedy decoding match (:func:`greedy_check`), and is the check
itself calibrated on your pair (:func:`calibrate_check`)."""

from .calibration import CheckCalibration, calibrate_check
from .consistency import ConsistencyReport, consistency_check
from .greedy import GreedyReport, greedy_check
from .sequences import LogprobNumerics, SequenceTests, canonical_logprobs, sequence_tests

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
    "sequence_tests",
]
