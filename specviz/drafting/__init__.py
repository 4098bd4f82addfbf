"""Drafters: anything that proposes the next few tokens (:class:`Drafter`), and the gamma
policies that decide how many.

``base`` (the contract), ``model`` (an independent model, early exit), ``lookup`` (prompt
lookup), ``suffix`` (suffix matching), ``heads`` (the EAGLE-style head), ``modes`` (how a model
draft misbehaves for the bug zoo), ``policies`` (gamma policies).
"""

from .base import SAMPLINGS, Draft, Drafter, TreeDraft
from .lookup import PromptLookupDrafter
from .model import EarlyExitDrafter, ModelDrafter, as_drafter, early_exit_model
from .modes import DRAFT_MODES, shifted_ids
from .trees import TreeDrafter

__all__ = [
    "DRAFT_MODES",
    "SAMPLINGS",
    "TreeDraft",
    "TreeDrafter",
    "Draft",
    "Drafter",
    "EarlyExitDrafter",
    "ModelDrafter",
    "PromptLookupDrafter",
    "as_drafter",
    "early_exit_model",
    "shifted_ids",
]
