"""What the notebooks run: experiment helpers, interactive explorers that run experiments,
drafter x gamma x category grids, the deployment checklist, the policy lab and the demo.

This package is also the notebooks' facade: the experiment helpers and explorers a notebook
calls are importable from here (``from specviz.lab import TraceExplorer, load_models``), with
figures from :mod:`specviz.views` and claim verdicts from :mod:`specviz.lab.verdicts`. The names
load on first use, so ``specviz demo`` does not pay for ipywidgets and plotly.

>>> from specviz.lab import simulate_toy
>>> from specviz.lab.experiments import simulate_toy as at_home
>>> simulate_toy is at_home
True
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module it lives in (the names the former ``specviz.widgets`` re-exported)
_HOMES = {
    **dict.fromkeys(["MemoLM", "memo_pair"], "specviz.fixtures.memo"),
    **dict.fromkeys(
        [
            "NotebookModels",
            "PromptRun",
            "SeedComparison",
            "ToySimulation",
            "acceptance_at",
            "PlainComparison",
            "calibration_on_toy",
            "compare_with_plain",
            "continuation_table",
            "load_models",
            "power_curves",
            "run_prompts",
            "run_timings",
            "same_seed_runs",
            "sample_continuations",
            "samples_for_power",
            "samples_to_detect",
            "simulate_toy",
            "toy_alpha",
        ],
        "specviz.lab.experiments",
    ),
    **dict.fromkeys(
        ["grid_drafters", "pooled_cells", "precision_drafters"], "specviz.lab.drafter_sets"
    ),
    **dict.fromkeys(
        ["logit_margins", "precision_greedy", "verify_decode_gaps"], "specviz.lab.numerics"
    ),
    **dict.fromkeys(["GridExplorer", "ToyExplorer"], "specviz.lab.explorers"),
    "PromptPlayground": "specviz.lab.playground",
    "first_token_law": "specviz.effects.zoo",
    **dict.fromkeys(
        ["FigureSelector", "TraceExplorer", "borderline_tests", "most_borderline", "sync_figure"],
        "specviz.views.explorers",
    ),
    **dict.fromkeys(["acceptance_interval", "acceptance_text"], "specviz.views.trace"),
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
