"""Every claim verdict the notebooks print, computed here so a notebook cell only calls it.

Topic modules behind one namespace (as scipy.stats does):

* ``_single_run`` -- the single-run lessons of notebooks 00-05 (:class:`ClaimLine`,
  :func:`verdict_summary`, :func:`read_verdict`, claims 1, 6, 7, 8, 9, 10 on one run), with
  ``_single_run_laws`` -- the bug zoo and the law on a real model (notebooks 04-05);
* ``_task_types`` -- claim 2 by task type from a drafter x gamma x category grid (notebook 07);
* ``_rejections`` -- claims 3 and 10 from rejection points, as bootstrap intervals (notebook 03);
* ``_experiments`` -- the experiments of notebooks 06-12 (ratios with intervals over prompts,
  exactness tables, claim 7 split by cause, coverage, the plug-in TV's bias, theory's next
  gamma, claim 11's costs), with ``_load`` -- notebook 09's what-if trend;
* ``_numerics`` -- notebook 06's per-precision lines beside its claim-7 verdict.
"""

from __future__ import annotations

from . import (
    _experiments,
    _load,
    _numerics,
    _rejections,
    _single_run,
    _single_run_laws,
    _task_types,
)
from ._experiments import *  # noqa: F403
from ._load import *  # noqa: F403
from ._numerics import *  # noqa: F403
from ._rejections import *  # noqa: F403
from ._single_run import *  # noqa: F403
from ._single_run_laws import *  # noqa: F403
from ._task_types import *  # noqa: F403

__all__ = [
    *_single_run.__all__,
    *_single_run_laws.__all__,
    *_experiments.__all__,
    *_task_types.__all__,
    *_rejections.__all__,
    *_load.__all__,
    *_numerics.__all__,
]
