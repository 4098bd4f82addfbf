"""Figures: plain data in, plotly figure out (nothing runs a model, nothing displays).

One module per subject -- ``trace`` (one generation), ``position`` (one drafted position:
p vs q, the accept test, the residual), ``acceptance``, ``stats`` (checks), ``perf``,
``speedup`` (the gamma trade-off predicted and measured), ``gamma`` (its costs and decisions),
``load``, ``reports`` (consistency and audit reports, read through the protocols
``ComparisonReport`` and ``AuditPage``) -- one palette (``palette``) and one way to turn ids
into text (``labels``). ``explorers`` copies figures into ipywidgets
explorers of given data.
"""

from .acceptance import (
    SimPoint,
    per_position_acceptance_figure,
    rejection_grid_figure,
    rejection_histogram_figure,
    tokens_per_call_vs_alpha_figure,
    tokens_per_call_vs_gamma_figure,
)
from .gamma import category_speedup_figure, policy_speedup_figure, verify_cost_figure
from .labels import Tokenizer, token_label
from .load import batch_sweep_figure, load_sweep_figure, speedup_figure, timeline_figure
from .palette import KIND_COLORS, P_COLOR, Q_COLOR, RESIDUAL_COLOR, THEORY_COLOR
from .perf import cost_benefit_figure, metric_bars_figure, rejection_positions_figure
from .stats import (
    gof_figure,
    margin_figure,
    power_curve_figure,
    pvalue_uniformity_figure,
    sequential_figure,
    verifier_report_figure,
)
from .trace import (
    Slot,
    accept_scatter_figure,
    accept_test_figure,
    default_row,
    laws_figure,
    pq_figure,
    residual_figure,
    token_slots,
    token_strip_figure,
)
from .trees import STATUS_COLORS, recursive_residual_figure, tree_figure

__all__ = [
    "STATUS_COLORS",
    "recursive_residual_figure",
    "tree_figure",
    "KIND_COLORS",
    "P_COLOR",
    "Q_COLOR",
    "RESIDUAL_COLOR",
    "SimPoint",
    "Slot",
    "THEORY_COLOR",
    "Tokenizer",
    "accept_scatter_figure",
    "accept_test_figure",
    "batch_sweep_figure",
    "category_speedup_figure",
    "cost_benefit_figure",
    "default_row",
    "gof_figure",
    "laws_figure",
    "load_sweep_figure",
    "margin_figure",
    "metric_bars_figure",
    "per_position_acceptance_figure",
    "power_curve_figure",
    "policy_speedup_figure",
    "pq_figure",
    "pvalue_uniformity_figure",
    "rejection_grid_figure",
    "rejection_histogram_figure",
    "rejection_positions_figure",
    "residual_figure",
    "sequential_figure",
    "speedup_figure",
    "timeline_figure",
    "token_label",
    "token_slots",
    "token_strip_figure",
    "tokens_per_call_vs_alpha_figure",
    "tokens_per_call_vs_gamma_figure",
    "verifier_report_figure",
    "verify_cost_figure",
]
