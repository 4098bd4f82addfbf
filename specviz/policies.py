"""The names of the former ``specviz.policies`` module, now split into subpackages; this import
path keeps working (new code imports from the new homes)."""

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
