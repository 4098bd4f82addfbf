"""Drafters: anything that proposes the next few tokens (:class:`Drafter`), and the gamma
policies that decide how many.

``base`` (the contract), ``model`` (an independent model, early exit), ``lookup`` (prompt
lookup), ``suffix`` (suffix matching), ``heads`` (the EAGLE-style head), ``model_loop`` (the one
loop that runs a draft model for k steps, serial or batched), ``modes`` (how a model draft
misbehaves for the bug zoo), ``policies`` (gamma policies).
"""

from .base import SAMPLINGS, Draft, Drafter, TreeDraft
from .cross_vocab import (
    CROSS_VOCAB_METHODS,
    CROSS_VOCAB_MODES,
    CrossVocabDrafter,
    StringTokenizer,
    Vocabulary,
    vocabulary_of,
)
from .lookup import PromptLookupDrafter
from .model import EarlyExitDrafter, ModelDrafter, as_drafter, early_exit_model
from .modes import DRAFT_MODES, shifted_ids
from .trees import TreeDrafter

__all__ = [
    "CROSS_VOCAB_METHODS",
    "CROSS_VOCAB_MODES",
    "CrossVocabDrafter",
    "StringTokenizer",
    "Vocabulary",
    "vocabulary_of",
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
