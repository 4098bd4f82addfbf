"""The drafter x gamma x mode x prompt grid (:mod:`specviz.lab.grid`) and the claim verdicts
drawn from it (claim 2 by task type, claims 3 and 10 from rejection points: in
:mod:`specviz.lab.verdicts`, with every other claim verdict), under the one name notebooks and
scripts import them by. Every name this module had before the cut is still here."""

from __future__ import annotations

from . import grid as _grid
from .grid import (
    DEFAULT_SAMPLING,
    MODES,
    Session,
    StepOutcomes,
    cell_outcomes,
    default_grid_cache,
    run_grid,
    session,
    summarize,
)
from .verdicts import _rejections, _task_types
from .verdicts._rejections import (
    AcceptedCounts,
    IntervalVerdict,
    SpeedRatio,
    diminishing_returns,
    first_rejection_excess,
    first_rejection_share,
    gamma_profile,
    gamma_speed_ratio,
    per_group_verdicts,
    prompt_speeds,
)
from .verdicts._task_types import (
    FORMATTED_CATEGORIES,
    OPEN_CATEGORIES,
    TaskTypeEffect,
    task_type_effect,
    task_type_effects,
)

__all__ = [
    "MODES",
    "DEFAULT_SAMPLING",
    "Session",
    "session",
    "run_grid",
    "summarize",
    "default_grid_cache",
    "StepOutcomes",
    "cell_outcomes",
    "FORMATTED_CATEGORIES",
    "OPEN_CATEGORIES",
    "TaskTypeEffect",
    "task_type_effect",
    "task_type_effects",
    "AcceptedCounts",
    "IntervalVerdict",
    "diminishing_returns",
    "first_rejection_excess",
    "first_rejection_share",
    "SpeedRatio",
    "gamma_profile",
    "gamma_speed_ratio",
    "per_group_verdicts",
    "prompt_speeds",
]

# the other names of the former single module (constants, private helpers), reachable as before
for _part in (_grid, _task_types, _rejections):
    for _name, _value in vars(_part).items():
        if not _name.startswith("__"):
            globals().setdefault(_name, _value)
del _part, _name, _value
