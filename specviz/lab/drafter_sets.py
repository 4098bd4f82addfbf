"""The drafters the notebooks compare (notebook 07): the grid's drafter set by name, the cells pooled over prompts, and the drafters of one model at two precisions."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..drafting.lookup import PromptLookupDrafter
from ..drafting.model import EarlyExitDrafter
from ..views.perf import StepOutcomes


def grid_drafters(model: Any, names: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Drafter specs for :func:`specviz.analysis.run_grid` from short names, and the names
    that could not be built with the reason (e.g. no trained head weights).

    ``prompt_lookup`` (n-gram copy from the context), ``suffix`` (a suffix trie over the
    session's earlier prompts and outputs, one per (gamma, mode) session), ``early_exit:L``
    (the target's first L layers), ``eagle_head`` (the trained EAGLE-style head shipped in
    ``data/heads/``, when its weights exist).
    """
    from ..drafting.heads import HeadDrafter
    from ..drafting.suffix import SuffixDrafter
    from .analysis import session

    specs: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for name in names:
        if name == "prompt_lookup":
            specs[name] = PromptLookupDrafter
        elif name == "suffix":
            specs[name] = session(SuffixDrafter)
        elif name.startswith("early_exit:"):
            layers = int(name.split(":", 1)[1])
            specs[name] = functools.partial(EarlyExitDrafter, model, layers)
        elif name == "eagle_head":
            factory = functools.partial(HeadDrafter.from_pretrained, model)
            try:
                # fail here (no weights, wrong model), not in the middle of the grid
                factory.cache_tag = factory().cache_tag  # grid cells keyed to the weights
            except (
                OSError,
                ValueError,
                AttributeError,
                TypeError,
            ) as e:  # no weights / no HF model
                skipped[name] = f"{type(e).__name__}: {e}"
                continue
            specs[name] = factory
        else:
            raise ValueError(
                f"unknown drafter {name!r}; use prompt_lookup, suffix, early_exit:<L>, eagle_head"
            )
    return specs, skipped


def pooled_cells(df: Any, by: Sequence[str] = ("drafter", "category", "gamma", "mode")) -> Any:
    """Per group of the grid (default drafter x category x gamma x mode, plus category
    ``all``): the summed accepted-count and rejection-position histograms, empty drafts, and
    the per-position acceptance averaged over prompts. The counts :func:`specviz.analysis.summarize`
    does not keep, for the rejection figures.

    ``outcomes`` (a :class:`~specviz.views.perf.StepOutcomes`) says how every step ended --
    first rejection at position 1..gamma, full draft kept (``all_accepted``), a draft cut
    short and kept (``cut_short``), nothing drafted -- and adds up to ``steps``."""
    import pandas as pd

    by = list(by)
    data = pd.concat([df, df.assign(category="all")], ignore_index=True) if "category" in by else df
    rows = []
    for key, g in data.groupby(by, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        width = max(len(h) for h in g["accepted_hist"])
        acc = np.zeros(width, dtype=int)
        rej = np.zeros(max(1, width - 1), dtype=int)
        for h in g["accepted_hist"]:
            acc[: len(h)] += np.asarray(h, dtype=int)
        for h in g["rejection_hist"]:
            rej[: len(h)] += np.asarray(h, dtype=int)
        ppa = np.array([list(x) for x in g["per_position_acceptance"]], dtype=float)
        with warnings.catch_warnings():  # a position no prompt reached: NaN, not a warning
            warnings.simplefilter("ignore", RuntimeWarning)
            mean_ppa = np.nanmean(ppa, axis=0) if ppa.size else np.zeros(0)
        empty = int(g["empty_drafts"].sum())
        outcomes = StepOutcomes.from_histograms(acc, rej, empty)
        rows.append(
            dict(
                zip(by, key, strict=True),
                accepted_hist=acc,
                rejection_hist=rej,
                empty_drafts=empty,
                all_accepted=outcomes.all_accepted,
                cut_short=outcomes.cut_short,
                steps=int(g["target_calls"].sum()),
                per_position_acceptance=mean_ppa,
                outcomes=outcomes,
            )
        )
    return pd.DataFrame(rows)


def precision_drafters(
    names: Sequence[str], targets: dict[str, Any], **load_kw: Any
) -> dict[str, Callable[[Any], Any]]:
    """Drafter factories for :func:`precision_greedy`, each called with the target it drafts
    for: ``prompt_lookup``, ``early_exit:L`` (that target's first L layers, so in its dtype),
    or a draft model name, loaded once per target dtype (``targets``: dtype label -> model)
    and matched to the target by its dtype."""
    from ..models import load_model

    out: dict[str, Callable[[Any], Any]] = {}
    for name in names:
        if name == "prompt_lookup":
            out[name] = lambda m: PromptLookupDrafter()
        elif name.startswith("early_exit:"):
            layers = int(name.split(":", 1)[1])
            out[name] = functools.partial(_early_exit, layers=layers)
        else:
            by_dtype = {
                m.dtype: load_model(name, dtype=m.dtype, progress=False, **load_kw)
                for m in targets.values()
            }
            out[name] = functools.partial(_model_draft, by_dtype=by_dtype)
    return out


def _early_exit(model: Any, *, layers: int) -> EarlyExitDrafter:
    return EarlyExitDrafter(model, layers)


def _model_draft(model: Any, *, by_dtype: dict[Any, Any]) -> Any:
    from ..drafting.model import ModelDrafter

    return ModelDrafter(by_dtype[model.dtype])
