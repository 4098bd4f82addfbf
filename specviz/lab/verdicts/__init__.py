"""Every claim verdict the notebooks print, computed here so a notebook cell only calls it.

Two topic modules behind one namespace (as scipy.stats does):

* ``_single_run`` -- the single-run lessons of notebooks 00-05 (:class:`ClaimLine`,
  :func:`verdict_summary`, :func:`read_verdict`, claims 1, 6, 7, 8, 9, 10 on one run);
* ``_experiments`` -- the experiments of notebooks 06-12 (ratios with intervals over prompts,
  exactness tables, claim 7 split by cause, coverage, the plug-in TV's bias, theory's next
  gamma, claim 11's costs).
"""

from __future__ import annotations

from . import _experiments, _single_run
from ._experiments import *  # noqa: F403
from ._single_run import *  # noqa: F403

__all__ = [*_single_run.__all__, *_experiments.__all__]
