"""Deprecated: the names of the former ``specviz.widgets`` module, now in
specviz.lab; this path warns and goes in specviz 0.5."""

from specviz._legacy import deprecated
from specviz.effects.zoo import first_token_law
from specviz.fixtures.memo import MemoLM, memo_pair
from specviz.lab.experiments import (
    NotebookModels,
    PromptRun,
    SeedComparison,
    ToySimulation,
    acceptance_at,
    calibration_on_toy,
    continuation_table,
    grid_drafters,
    load_models,
    logit_margins,
    pooled_cells,
    power_curves,
    precision_drafters,
    precision_greedy,
    run_prompts,
    same_seed_runs,
    sample_continuations,
    samples_for_power,
    samples_to_detect,
    simulate_toy,
    toy_alpha,
)
from specviz.lab.explorers import GridExplorer, PromptPlayground, ToyExplorer
from specviz.views.explorers import (
    FigureSelector,
    TraceExplorer,
    borderline_tests,
    most_borderline,
    sync_figure,
)
from specviz.views.trace import acceptance_interval, acceptance_text

__all__ = [
    "FigureSelector",
    "GridExplorer",
    "MemoLM",
    "NotebookModels",
    "PromptPlayground",
    "PromptRun",
    "SeedComparison",
    "ToyExplorer",
    "ToySimulation",
    "TraceExplorer",
    "acceptance_interval",
    "acceptance_text",
    "acceptance_at",
    "borderline_tests",
    "calibration_on_toy",
    "continuation_table",
    "first_token_law",
    "grid_drafters",
    "load_models",
    "logit_margins",
    "memo_pair",
    "most_borderline",
    "pooled_cells",
    "power_curves",
    "precision_drafters",
    "precision_greedy",
    "run_prompts",
    "same_seed_runs",
    "sample_continuations",
    "samples_for_power",
    "samples_to_detect",
    "simulate_toy",
    "sync_figure",
    "toy_alpha",
]

deprecated(__name__, "specviz.lab")
