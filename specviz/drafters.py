"""Deprecated: the names of the former ``specviz.drafters`` module, now in
specviz.drafting; this path warns and goes in specviz 0.5."""

from specviz._legacy import deprecated
from specviz.drafting.base import Draft, Drafter
from specviz.drafting.lookup import PromptLookupDrafter
from specviz.drafting.model import EarlyExitDrafter, ModelDrafter, as_drafter, early_exit_model
from specviz.drafting.modes import DRAFT_MODES, shifted_ids

__all__ = [
    "DRAFT_MODES",
    "Draft",
    "Drafter",
    "EarlyExitDrafter",
    "ModelDrafter",
    "PromptLookupDrafter",
    "as_drafter",
    "early_exit_model",
    "shifted_ids",
]

deprecated(__name__, "specviz.drafting")
