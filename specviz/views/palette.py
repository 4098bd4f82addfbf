"""One colour per meaning, in every figure."""

from __future__ import annotations

__all__ = ["KIND_COLORS", "P_COLOR", "Q_COLOR", "RESIDUAL_COLOR", "THEORY_COLOR"]


#: One colour per fate of a token slot; used by every figure so the legend means the same thing.
KIND_COLORS: dict[str, str] = {
    "accepted": "#2ca02c",  # draft token kept
    "corrected": "#ff7f0e",  # target token sampled from the residual after a rejection
    "bonus": "#1f77b4",  # target token after all drafts were accepted
    "discarded": "#c7c7c7",  # drafted but thrown away (rejected, after a rejection, or cut)
    "target": "#7f7f7f",  # plain autoregressive decoding
}
P_COLOR = "#1f77b4"
Q_COLOR = "#ff7f0e"
RESIDUAL_COLOR = "#9467bd"
THEORY_COLOR = "#d62728"
