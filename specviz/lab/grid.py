"""The drafter x gamma x mode x prompt grid: run it, cache every cell, summarise it.

One *cell* is one generation: a drafter at one gamma, in one mode (greedy or sampled), on one
prompt. Every cell is compared with the plain baseline (:func:`~specviz.autoregressive_generate`)
on the same prompt and mode, measured in the same run, prompt by prompt (the baseline of a
prompt runs right before its speculative cells, so slow drifts of a shared machine hit both).

Cells are cached on disk, one JSON file per cell, named by a hash of everything that
determines the result (model name, drafter label, gamma, mode, sampling parameters, seed,
max_new_tokens, the prompt's token ids, ``tag``). Re-running loads instantly; an interrupted run
resumes where it stopped. The label is the key: change the label or ``tag`` when a drafter's
meaning changes (e.g. retrained weights).

Drafter specs (values of ``drafters``):

* a causal LM (or toy model): a fresh :class:`~specviz.drafters.ModelDrafter` per generation;
* a factory (zero-argument callable): called once per generation -- fresh state every time;
* :func:`session` ``(factory)``: one drafter per (gamma, mode), kept across the prompts in
  order -- for drafters whose *cross-request memory* is the point (:class:`SuffixDrafter`).
  Its cells also hash the prompts before them; a cached cell is replayed into the live
  drafter with ``remember(prompt + output)`` so a resumed run has the same memory as an
  uninterrupted one, and ``end(prompt + output)`` hands it the final tokens of a live run;
* a drafter object: used as is for every cell (its ``start()`` must reset per-generation state).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..core.sampling import SamplingParams
from ..decoding.serial import GenerationResult, autoregressive_generate, speculative_generate
from ..drafting.model import ModelDrafter
from ..views.perf import StepOutcomes

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
]

MODES = ("greedy", "sampled")
DEFAULT_SAMPLING = SamplingParams(True, 0.7, None, 0.9)
CACHE_VERSION = 1
BASELINE = "baseline"


@dataclass(frozen=True)
class Session:
    """One drafter per (gamma, mode) session, shared across the grid's prompts in order."""

    factory: Callable[[], Any]


def session(factory: Callable[[], Any]) -> Session:
    """Mark ``factory`` as a session drafter (see the module docstring)."""
    return Session(factory)


def default_grid_cache() -> Path:
    from ..models import cache_dir

    return cache_dir() / "grid"


# -- prompts ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Prompt:
    id: str
    category: str
    ids: tuple[int, ...]


def _prompts(prompts: Iterable[Any], tokenizer: Any) -> list[_Prompt]:
    from ..prompts import Prompt, render_prompt

    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, (Prompt, str)):
            if tokenizer is None:
                raise ValueError("prompts given as Prompt or str need tokenizer=")
            pid = p.id if isinstance(p, Prompt) else f"p{i:03d}"
            cat = p.category if isinstance(p, Prompt) else "unknown"
            out.append(_Prompt(pid, cat, tuple(render_prompt(tokenizer, p))))
        else:
            ids = p.tolist() if isinstance(p, torch.Tensor) else list(p)
            out.append(_Prompt(f"p{i:03d}", "unknown", tuple(int(t) for t in ids)))
    return out


# -- drafter specs ---------------------------------------------------------------------------


def _is_model(x: Any) -> bool:
    return not hasattr(x, "propose") and (
        hasattr(x, "make_runner") or isinstance(x, torch.nn.Module)
    )


class _Timed:
    """Transparent proxy that adds up the time spent in ``propose``."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.draft_time = 0.0

    def propose(self, context: torch.Tensor, k: int, generator: torch.Generator):
        t0 = time.perf_counter()
        d = self._inner.propose(context, k, generator)
        self.draft_time += time.perf_counter() - t0
        return d

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Sessions:
    """Live session drafters and the documents they still have to be told about."""

    def __init__(self) -> None:
        self.live: dict[tuple, Any] = {}
        self.pending: dict[tuple, list[list[int]]] = {}

    def get(self, key: tuple, factory: Callable[[], Any]) -> Any:
        if key not in self.live:
            self.live[key] = factory()
        d = self.live[key]
        for doc in self.pending.pop(key, []):
            d.remember(doc)
        return d

    def replay(self, key: tuple, doc: list[int]) -> None:
        if key in self.live:
            self.live[key].remember(doc)
        else:
            self.pending.setdefault(key, []).append(doc)


def _make_drafter(spec: Any, key: tuple, sessions: _Sessions) -> Any:
    if isinstance(spec, Session):
        return sessions.get(key, spec.factory)
    if isinstance(spec, type):  # a drafter class is a factory
        return spec()
    if _is_model(spec):
        return ModelDrafter(spec)
    if hasattr(spec, "propose"):
        return spec
    if callable(spec):
        return spec()
    raise TypeError(f"cannot use {type(spec).__name__} as a drafter spec")


# -- cache -----------------------------------------------------------------------------------


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # missing or half-written (interrupted): recompute


def _write(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)  # atomic: a reader sees the old file or the whole new one


# -- metrics ---------------------------------------------------------------------------------


def _cell_metrics(res: GenerationResult, gamma: int, draft_time: float) -> dict[str, Any]:
    """Per-cell numbers from the accepted/drafted counts (no trace needed)."""
    reached, kept = [0] * gamma, [0] * gamma
    accepted_hist, rejection_hist = [0] * (gamma + 1), [0] * gamma
    for n, d in zip(res.accepted_counts, res.drafted_counts, strict=True):
        for i in range(min(d, n + 1)):
            reached[i] += 1
            kept[i] += i < n
        accepted_hist[n] += 1
        if n < d:
            rejection_hist[n] += 1
    drafted, accepted = sum(res.drafted_counts), sum(res.accepted_counts)
    new, calls, total = len(res.new_tokens), res.target_calls, res.total_time
    return {
        "new_tokens": new,
        "target_calls": calls,
        "drafted": drafted,
        "accepted": accepted,
        "acceptance_rate": accepted / drafted if drafted else math.nan,
        "mean_accepted_length": new / calls if calls else math.nan,
        "target_calls_per_token": calls / new if new else math.nan,
        "per_position_acceptance": [
            k / r if r else math.nan for k, r in zip(kept, reached, strict=True)
        ],
        "accepted_hist": accepted_hist,
        "rejection_hist": rejection_hist,
        "empty_drafts": sum(d == 0 for d in res.drafted_counts),
        "draft_time": draft_time,
        "total_time": total,
        "draft_time_share": draft_time / total if total > 0 else math.nan,
        "tokens_per_s": res.tokens_per_second,
    }


def _provenance() -> dict[str, Any]:
    """When a cell was computed and how busy the machine was (timings are only as good as that)."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    return {"computed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_avg_1m": load}


def _cell_seed(seed: int, prompt: _Prompt) -> int:
    return int(_digest([seed, prompt.id, list(prompt.ids)])[:12], 16)


# -- the grid --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Setup:
    target: Any
    model_name: str
    max_new_tokens: int
    sampling: SamplingParams
    eos: Any
    seed: int
    tag: str
    root: Path

    def gen_kwargs(self, mode: str, prompt: _Prompt) -> dict[str, Any]:
        p = self.sampling if mode == "sampled" else SamplingParams()
        return dict(
            max_new_tokens=self.max_new_tokens,
            do_sample=p.do_sample,
            temperature=p.temperature,
            top_k=p.top_k,
            top_p=p.top_p,
            seed=_cell_seed(self.seed, prompt),
            eos_token_id=self.eos,
        )

    def path(self, **key: Any) -> Path:
        base = dict(
            v=CACHE_VERSION,
            model=self.model_name,
            max_new_tokens=self.max_new_tokens,
            seed=self.seed,
            tag=self.tag,
        )
        if key.get("mode") == "sampled":
            base["sampling"] = self.sampling.__dict__
        slug = "".join(c if c.isalnum() or c in "-._" else "_" for c in self.model_name)
        return self.root / slug / f"{_digest(base | key)[:32]}.json"


def _model_name(target: Any) -> str:
    cfg = getattr(target, "config", None)
    return str(getattr(cfg, "name_or_path", None) or getattr(target, "name", type(target).__name__))


def run_grid(
    target: Any,
    drafters: Mapping[str, Any],
    prompts: Iterable[Any],
    *,
    gammas: Sequence[int] = (4,),
    modes: Sequence[str] = MODES,
    max_new_tokens: int = 64,
    tokenizer: Any = None,
    sampling: SamplingParams = DEFAULT_SAMPLING,
    seed: int = 0,
    eos_token_id: int | Sequence[int] | None = None,
    cache_dir: str | Path | None = None,
    model_name: str | None = None,
    tag: str = "",
    progress: bool = True,
    include_baseline: bool = False,
):
    """Run (or load) every cell; return a tidy DataFrame, one row per
    (drafter, gamma, mode, prompt). See the module docstring for drafter specs and caching.

    ``df.attrs`` holds ``computed`` and ``cached`` cell counts (baseline cells included).
    """
    import pandas as pd

    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ValueError(f"unknown modes {bad}; choose from {MODES}")
    if not sampling.do_sample:
        raise ValueError("sampling= must have do_sample=True (it defines the 'sampled' mode)")
    plist = _prompts(prompts, tokenizer)
    if eos_token_id is None and tokenizer is not None:
        eos_token_id = tokenizer.eos_token_id
    setup = _Setup(
        target,
        model_name or _model_name(target),
        max_new_tokens,
        sampling,
        eos_token_id,
        seed,
        tag,
        Path(cache_dir) if cache_dir is not None else default_grid_cache(),
    )
    run = _GridRun(setup)
    total = len(modes) * len(plist) * (1 + len(drafters) * len(gammas))
    bar = _progress(total, progress)
    rows = []
    for mode in modes:
        for i, prompt in enumerate(plist):
            base = run.baseline(mode, prompt)
            bar.update(1)
            if include_baseline:
                rows.append({k: v for k, v in base.items() if k != "tokens"})
            for label, spec in drafters.items():
                for gamma in gammas:
                    cell = _Cell(label, spec, gamma, mode, prompt, _history(spec, plist[:i]))
                    rows.append(run.speculative(cell, base))
                    bar.update(1)
                    bar.set_postfix(run.counts, refresh=False)
    bar.close()
    df = pd.DataFrame(rows)
    df.attrs.update(run.counts)
    return df


def _history(spec: Any, before: Sequence[_Prompt]) -> str:
    """What a session drafter has seen before this prompt ('' for per-generation drafters)."""
    return _digest([list(p.ids) for p in before]) if isinstance(spec, Session) else ""


def _progress(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="grid", unit="cell", disable=not enabled)


@dataclass(frozen=True)
class _Cell:
    label: str
    spec: Any
    gamma: int
    mode: str
    prompt: _Prompt
    history: str  # digest of the prompts a session drafter saw before ('' otherwise)

    @property
    def session_key(self) -> tuple[str, int, str]:
        return (self.label, self.gamma, self.mode)

    def meta(self, model_name: str) -> dict[str, Any]:
        return {
            "model": model_name,
            "drafter": self.label,
            "gamma": self.gamma,
            "mode": self.mode,
            "prompt_id": self.prompt.id,
            "category": self.prompt.category,
            "prompt_tokens": len(self.prompt.ids),
        }


class _GridRun:
    """Runs or loads cells; owns the session drafters and the computed/cached counters."""

    def __init__(self, setup: _Setup) -> None:
        self.setup = setup
        self.sessions = _Sessions()
        self.counts = {"computed": 0, "cached": 0}
        self._warm = False

    def _warm_up(self, prompt: _Prompt) -> None:
        """One short untimed generation so the first timed cell doesn't pay for lazy init."""
        if not self._warm:
            autoregressive_generate(self.setup.target, list(prompt.ids), max_new_tokens=4)
            self._warm = True

    def _load(self, path: Path) -> dict | None:
        rec = _read(path)
        self.counts["cached" if rec is not None else "computed"] += 1
        return rec

    def baseline(self, mode: str, prompt: _Prompt) -> dict[str, Any]:
        s = self.setup
        path = s.path(drafter=BASELINE, mode=mode, prompt=_digest(list(prompt.ids)))
        rec = self._load(path)
        if rec is not None:
            return rec | {"cached": True}
        self._warm_up(prompt)
        res = autoregressive_generate(s.target, list(prompt.ids), **s.gen_kwargs(mode, prompt))
        cell = _Cell(BASELINE, None, 0, mode, prompt, "")
        rec = cell.meta(s.model_name) | _cell_metrics(res, 0, 0.0)
        rec |= {"seed": res.seed, "tokens": res.new_tokens, "drafter_name": BASELINE}
        rec |= _provenance()
        _write(path, rec)
        return rec | {"cached": False}

    def speculative(self, cell: _Cell, base: dict[str, Any]) -> dict[str, Any]:
        s, ids = self.setup, list(cell.prompt.ids)
        # drafters with trained weights name them (``cache_tag``): new weights, new cells
        tag = getattr(cell.spec, "cache_tag", None)
        path = s.path(
            drafter=cell.label,
            gamma=cell.gamma,
            mode=cell.mode,
            prompt=_digest(ids),
            history=cell.history,
            **({"weights": tag} if tag else {}),
        )
        rec = self._load(path)
        if rec is not None:
            if isinstance(cell.spec, Session):  # the live session must see it too
                self.sessions.replay(cell.session_key, ids + list(rec["tokens"]))
            return _compare(rec, base) | {"cached": True}
        self._warm_up(cell.prompt)
        drafter = _Timed(_make_drafter(cell.spec, cell.session_key, self.sessions))
        res = speculative_generate(
            s.target,
            drafter,
            ids,
            gamma=cell.gamma,
            trace=False,
            **s.gen_kwargs(cell.mode, cell.prompt),
        )
        rec = cell.meta(s.model_name) | _cell_metrics(res, cell.gamma, drafter.draft_time)
        name = getattr(drafter, "name", type(drafter._inner).__name__)
        rec |= {"seed": res.seed, "tokens": res.new_tokens, "drafter_name": name}
        rec |= _provenance()
        _write(path, rec)
        return _compare(rec, base) | {"cached": False}


def _compare(rec: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """Add the baseline's numbers, the speedup and (greedy) the identity flag."""
    out = {k: v for k, v in rec.items() if k != "tokens"}
    out["baseline_new_tokens"] = base["new_tokens"]
    out["baseline_time"] = base["total_time"]
    out["baseline_tokens_per_s"] = base["tokens_per_s"]
    b = base["tokens_per_s"]
    out["speedup"] = rec["tokens_per_s"] / b if b and b > 0 else math.nan
    out["greedy_identical"] = rec["tokens"] == base["tokens"] if rec["mode"] == "greedy" else None
    return out


# -- summaries -------------------------------------------------------------------------------


def summarize(
    df: Any,
    by: Sequence[str] = ("drafter", "category", "gamma", "mode"),
    *,
    overall: bool = True,
):
    """Pool the grid per group (default drafter x category x gamma x mode).

    Ratios are pooled, not averaged: mean accepted length = sum(new tokens) / sum(target
    calls), acceptance = sum(accepted) / sum(drafted), speedup = (sum tokens / sum time) over
    the same for the baseline; ``speedup_geomean`` is the geometric mean of per-prompt
    speedups. With ``overall`` and ``category`` in ``by`` an ``all`` category is added.
    """
    import pandas as pd

    by = list(by)
    frames = [df]
    if overall and "category" in by:
        frames.append(df.assign(category="all"))
    data = pd.concat(frames, ignore_index=True)

    def pool(g: Any) -> pd.Series:
        tps = g["new_tokens"].sum() / g["total_time"].sum()
        base = g["baseline_new_tokens"].sum() / g["baseline_time"].sum()
        ident = g["greedy_identical"].dropna()
        return pd.Series(
            {
                "prompts": len(g),
                "new_tokens": int(g["new_tokens"].sum()),
                "mean_accepted_length": g["new_tokens"].sum() / g["target_calls"].sum(),
                "acceptance_rate": g["accepted"].sum() / max(1, g["drafted"].sum()),
                "target_calls_per_token": g["target_calls"].sum() / g["new_tokens"].sum(),
                "draft_time_share": g["draft_time"].sum() / g["total_time"].sum(),
                "tokens_per_s": tps,
                "baseline_tokens_per_s": base,
                "speedup": tps / base,
                "speedup_geomean": float(np.exp(np.log(g["speedup"]).mean())),
                "greedy_identical": float(ident.astype(float).mean()) if len(ident) else np.nan,
            }
        )

    cols = [c for c in data.columns if c not in by]
    return data.groupby(by, sort=False)[cols].apply(pool).reset_index()


# -- how steps ended -------------------------------------------------------------------------


def cell_outcomes(cell: Any) -> StepOutcomes:
    """How the steps of a grid cell (a row of :func:`run_grid`, or of
    :func:`specviz.widgets.pooled_cells`) ended: first rejection at position 1..gamma, full
    draft kept, draft cut short and kept, nothing drafted -- adding up to its target calls."""
    get = cell.get if hasattr(cell, "get") else lambda k, d=None: getattr(cell, k, d)
    return StepOutcomes.from_histograms(
        get("accepted_hist"), get("rejection_hist"), int(get("empty_drafts", 0) or 0)
    )
