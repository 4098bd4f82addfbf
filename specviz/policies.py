"""Deprecated: the names of the former ``specviz.policies`` module, now in
specviz.drafting.policies and specviz.lab.policy_lab; this path warns and goes in specviz 0.5."""

from specviz._legacy import deprecated
from specviz.drafting.policies import (
    AcceptanceEMA,
    BatchFallback,
    ConfidenceStop,
    ConfidenceStopDrafter,
    ConstantGamma,
    GammaPolicy,
    HeuristicGamma,
    as_policy,
)
from specviz.lab.policy_lab import (
    ReplayCost,
    ReplayResult,
    TokenRecord,
    compare_policies,
    record_from_trace,
    record_teacher_forced,
    replay,
    run_live,
)

__all__ = [
    "AcceptanceEMA",
    "BatchFallback",
    "ConfidenceStop",
    "ConfidenceStopDrafter",
    "ConstantGamma",
    "GammaPolicy",
    "HeuristicGamma",
    "ReplayCost",
    "ReplayResult",
    "TokenRecord",
    "as_policy",
    "compare_policies",
    "record_from_trace",
    "record_teacher_forced",
    "replay",
    "run_live",
]

deprecated(__name__, "specviz.drafting.policies and specviz.lab.policy_lab")
