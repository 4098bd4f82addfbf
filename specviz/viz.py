"""Deprecated: the names of the former ``specviz.viz`` module, now in
specviz.views, specviz.perf.acceptance and specviz.perf.theory; this path warns and goes in specviz 0.5."""

from specviz._legacy import deprecated
from specviz.perf.acceptance import (
    PositionCounts,
    accepted_counts,
    alpha_counts,
    fit_alpha,
    per_position_acceptance,
    wilson_interval,
)
from specviz.perf.theory import expected_tokens_per_call, truncated_geometric_law
from specviz.views.acceptance import (
    SimPoint,
    per_position_acceptance_figure,
    rejection_grid_figure,
    rejection_histogram_figure,
    tokens_per_call_vs_alpha_figure,
    tokens_per_call_vs_gamma_figure,
)
from specviz.views.labels import Tokenizer, token_label
from specviz.views.palette import KIND_COLORS, P_COLOR, Q_COLOR, RESIDUAL_COLOR, THEORY_COLOR
from specviz.views.perf import cost_benefit_figure, metric_bars_figure, rejection_positions_figure
from specviz.views.stats import (
    gof_figure,
    gof_residuals_figure,
    margin_figure,
    power_curve_figure,
    pvalue_uniformity_figure,
    verifier_report_figure,
)
from specviz.views.trace import (
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

__all__ = [
    "KIND_COLORS",
    "P_COLOR",
    "Q_COLOR",
    "RESIDUAL_COLOR",
    "SimPoint",
    "Slot",
    "PositionCounts",
    "THEORY_COLOR",
    "Tokenizer",
    "accept_scatter_figure",
    "accept_test_figure",
    "accepted_counts",
    "alpha_counts",
    "cost_benefit_figure",
    "default_row",
    "expected_tokens_per_call",
    "fit_alpha",
    "gof_figure",
    "gof_residuals_figure",
    "laws_figure",
    "margin_figure",
    "metric_bars_figure",
    "per_position_acceptance",
    "per_position_acceptance_figure",
    "power_curve_figure",
    "pq_figure",
    "pvalue_uniformity_figure",
    "rejection_grid_figure",
    "rejection_histogram_figure",
    "rejection_positions_figure",
    "residual_figure",
    "token_label",
    "token_slots",
    "token_strip_figure",
    "tokens_per_call_vs_alpha_figure",
    "tokens_per_call_vs_gamma_figure",
    "truncated_geometric_law",
    "verifier_report_figure",
    "wilson_interval",
]

deprecated(__name__, "specviz.views, specviz.perf.acceptance and specviz.perf.theory")
