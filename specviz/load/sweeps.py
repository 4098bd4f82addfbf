"""Load and batch-size sweeps, and the crossover where speculation stops paying."""

from __future__ import annotations

import math
import statistics
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .engines import BatchEngine, ServedBatch, make_engine
from .records import LoadResult, _side_by_side
from .serve import _bar, serve
from .workload import LOWER_IS_BETTER, _as_load_prompts, _check_int, at_level, at_levels

__all__ = [
    "Crossover",
    "find_crossover",
    "batch_crossover",
    "plain_fell",
    "PLAIN_FALL_TOLERANCE",
    "LoadSweep",
    "load_sweep",
    "batch_sweep",
    "served_alone",
    "accounting_line",
]


# -- sweeps and the crossover -------------------------------------------------------------------


#: plain decoding's throughput may not fall by more than this from one load level (or batch
#: size) to the next: batching more rows never makes a plain step serve fewer tokens per
#: second, so a larger fall is a plain run slowed by the machine (timing noise), and a
#: speed-up at that level is made by it, not by speculation.
PLAIN_FALL_TOLERANCE = 0.05


def plain_fell(
    levels: Sequence[float],
    plain: Sequence[float],
    *,
    unit: str = "",
    tolerance: float = PLAIN_FALL_TOLERANCE,
) -> tuple[tuple[float, str], ...]:
    """The levels at which plain decoding's throughput fell by more than ``tolerance`` from
    the previous (lower) level, each with a sentence saying so -- timing noise, since more
    rows per call never serve fewer tokens per second plainly.

    >>> plain_fell([1, 2, 4], [11.5, 9.8, 14.0], unit="concurrent clients")[0][1][:58]
    'plain throughput fell from 11.5 to 9.8 tok/s between 1 and'
    """
    pairs = sorted(
        (float(x), float(p)) for x, p in zip(levels, plain, strict=True) if not math.isnan(p)
    )
    out = []
    for (x0, p0), (x1, p1) in zip(pairs, pairs[1:], strict=False):
        if p1 < p0 * (1.0 - tolerance):
            out.append(
                (
                    x1,
                    f"plain throughput fell from {p0:.1f} to {p1:.1f} tok/s between {x0:g} and "
                    f"{x1:g}{' ' + unit if unit else ''} (more rows never serve fewer tokens/s "
                    "plainly: a slowed plain run, timing noise)",
                )
            )
    return tuple(out)


#: the readings of :meth:`Crossover.calls`, in the order sentences name them
_CALLS = ("paid", "lost", "tie", "noise")


@dataclass(frozen=True)
class Crossover:
    """Where speculation stops paying for one metric, found on measured points.

    ``status``: ``"crosses"`` (``level`` is interpolated where the speed-up falls through
    1), ``"never_pays"`` (speed-up < 1 at every tested level), ``"always_pays"`` (>= 1 at
    every tested level: the crossover, if any, is beyond the range), or ``"pays_above"``
    (speed-up rises through 1: speculation loses at low load, wins at high load). ``status``
    and ``level`` read the curve against 1 alone; the words of :meth:`describe` and
    :attr:`clear` also read it against ``noise``.

    ``noise`` is the run's noise floor (how far repeats of one configuration lay apart; 0:
    not measured): speculation *paid* at a level only with a speed-up of at least
    ``1 + noise`` and *lost* only below ``1 - noise``. ``suspect`` lists ``(level, why)``
    for levels whose speed-up is timing noise whatever its size (plain throughput fell with
    load, or a speed-up above what a call can commit); they decide nothing.
    """

    metric: str
    scenario: str
    status: str
    level: float | None
    levels: tuple[float, ...]
    speedups: tuple[float, ...]  # > 1: speculation better on this metric
    sign_changes: int  # > 1 means the measured curve is noisy around 1
    noise: float = 0.0
    suspect: tuple[tuple[float, str], ...] = ()

    def _unit(self) -> str:
        if self.scenario == "rate":
            return "requests/s"
        return "rows per batch" if self.scenario == "batch" else "concurrent clients"

    def calls(self) -> tuple[str, ...]:
        """Per level: ``"paid"`` (>= 1 + noise), ``"lost"`` (< 1 - noise), ``"tie"``
        (within the floor) or ``"noise"`` (a suspect level)."""
        bad = {lv for lv, _ in self.suspect}
        n = self.noise if math.isfinite(self.noise) else 0.0
        out = []
        for lv, s in zip(self.levels, self.speedups, strict=True):
            if lv in bad:
                out.append("noise")
            elif s >= 1.0 + n:
                out.append("paid")
            elif s < 1.0 - n:
                out.append("lost")
            else:
                out.append("tie")
        return tuple(out)

    @property
    def clear(self) -> bool:
        """Whether ``level`` (a crossing through 1) is a measurement: the two levels it lies
        between are beyond the noise floor on opposite sides (paid, then lost -- or the
        reverse for ``"pays_above"``) and neither is suspect. A crossing interpolated between
        two levels inside the floor is where the noise crossed 1, not speculation."""
        if self.level is None:
            return False
        c = self.calls()
        for i in range(len(self.levels) - 1):
            if self.levels[i] <= self.level <= self.levels[i + 1]:
                want = ("paid", "lost") if self.status == "crosses" else ("lost", "paid")
                return (c[i], c[i + 1]) == want
        return False

    def describe(self) -> str:
        unit = self._unit()
        lo, hi = min(self.levels), max(self.levels)
        best = max(self.speedups)
        n = self.noise if math.isfinite(self.noise) else 0.0
        if n <= 0 and not self.suspect:  # nothing to read the curve against but 1
            if self.status == "crosses":
                s = f"speculation stops paying on {self.metric} at about {self.level:.3g} {unit}"
            elif self.status == "never_pays":
                s = (
                    f"speculation never paid on {self.metric} between {lo:g} and {at_level(hi, unit)} "
                    f"(best speed-up {best:.2f}x)"
                )
            elif self.status == "always_pays":
                s = f"speculation paid on {self.metric} at every level from {lo:g} to {at_level(hi, unit)}"
            else:
                s = f"speculation starts paying on {self.metric} above about {self.level:.3g} {unit}"
            if self.sign_changes > 1:
                s += f" ({self.sign_changes} crossings: noisy near 1x)"
            return s
        return self._describe_noisy(unit, n)

    def levels_by_call(self) -> dict[str, list[str]]:
        """Per reading of :meth:`calls` (``"paid"``, ``"lost"``, ``"tie"``, ``"noise"``), the
        levels that read so, formatted (``"2"``, ``"0.5"``)."""
        calls = self.calls()
        return {
            c: [f"{lv:g}" for lv, k in zip(self.levels, calls, strict=True) if k == c]
            for c in _CALLS
        }

    def call_parts(self, words: Mapping[str, str], unit: str | None = None) -> list[str]:
        """``"<words[reading]> 1, 2"`` for every reading some level got, in the order paid,
        lost, tie, noise: the pieces of a sentence that says where speculation paid. With
        ``unit`` the last piece ends in it, in the singular after one level of 1
        (``"... at 1 concurrent client"``)."""
        at = self.levels_by_call()
        groups = [c for c in _CALLS if at[c]]
        return [
            f"{words[c]} "
            + (at_levels(at[c], unit) if unit and c == groups[-1] else ", ".join(at[c]))
            for c in groups
        ]

    def _describe_noisy(self, unit: str, n: float) -> str:
        calls = self.calls()
        floor = f"noise floor +/-{n:.0%}"
        at = self.levels_by_call()
        nums = ", ".join(f"{s:.2f}x" for s in self.speedups)
        tail = f" ({nums} at {at_levels(self.levels, unit)}; {floor})"
        if self.level is not None and self.clear:
            what = "stops" if self.status == "crosses" else "starts"
            head = f"speculation {what} paying on {self.metric} at about {self.level:.3g} {unit}"
        elif all(c == "paid" for c in calls):
            head = (
                f"speculation paid on {self.metric} beyond the noise at every level from "
                f"{min(self.levels):g} to {max(self.levels):g} {unit}"
            )
        elif all(c == "lost" for c in calls):
            head = f"speculation lost on {self.metric} beyond the noise at every tested level"
        else:
            words = {
                "paid": "paid beyond the noise at",
                "lost": "lost beyond it at",
                "tie": "within the noise floor at",
                "noise": "timing noise at",
            }
            head = f"speculation on {self.metric}: " + "; ".join(self.call_parts(words, unit))
            if not at["paid"] and not at["lost"]:
                head += ", so no crossover was measured"
        s = head + tail
        if self.suspect:
            s += "; " + "; ".join(why for _, why in self.suspect)
        return s


def find_crossover(
    levels: Sequence[float],
    speedups: Sequence[float],
    *,
    metric: str = "",
    scenario: str = "",
    noise: float = 0.0,
    suspect: Sequence[tuple[float, str]] = (),
) -> Crossover:
    """The load where the speed-up first falls through 1, interpolated (linearly in
    log(level) when all levels are positive, the natural axis of a rate sweep). ``noise``
    and ``suspect`` are kept on the :class:`Crossover` for its wording (:meth:`describe`,
    :attr:`~Crossover.clear`).

    >>> find_crossover([1, 2, 4, 8], [1.5, 1.2, 0.9, 0.7], metric="throughput_tok_s").level
    3.17...
    """
    if len(levels) != len(speedups) or not levels:
        raise ValueError("levels and speedups must be non-empty and of equal length")
    pairs = sorted(
        (float(x), float(s)) for x, s in zip(levels, speedups, strict=True) if not math.isnan(s)
    )
    if not pairs:
        raise ValueError("every speed-up is NaN: nothing to compare")
    xs, ss = [p[0] for p in pairs], [p[1] for p in pairs]
    above = [s >= 1.0 for s in ss]
    changes = sum(a != b for a, b in zip(above, above[1:], strict=False))
    logx = all(x > 0 for x in xs)

    def cross(i: int) -> float:  # between xs[i] and xs[i+1]
        x0, x1 = (math.log(xs[i]), math.log(xs[i + 1])) if logx else (xs[i], xs[i + 1])
        f = (ss[i] - 1.0) / (ss[i] - ss[i + 1]) if ss[i] != ss[i + 1] else 0.5
        x = x0 + f * (x1 - x0)
        return math.exp(x) if logx else x

    down = next((i for i in range(len(xs) - 1) if above[i] and not above[i + 1]), None)
    if down is not None:
        status, level = "crosses", cross(down)
    elif all(above):
        status, level = "always_pays", None
    elif not any(above):
        status, level = "never_pays", None
    else:
        up = next(i for i in range(len(xs) - 1) if not above[i] and above[i + 1])
        status, level = "pays_above", cross(up)
    noise = float(noise) if noise == noise and math.isfinite(noise) else 0.0
    return Crossover(
        metric, scenario, status, level, tuple(xs), tuple(ss), changes, noise, tuple(suspect)
    )


@dataclass(frozen=True)
class LoadSweep:
    """A sweep over load levels, both modes: ``table`` has one row per (engine, level) --
    with several repeats, the median of each metric over them -- and ``runs`` one row per
    (engine, level, repeat)."""

    table: Any = field(repr=False)  # pandas.DataFrame of LoadResult.summary() rows
    results: tuple[LoadResult, ...] = field(repr=False)
    scenario: str
    runs: Any = field(default=None, repr=False)  # every repeat's summary row
    repeats: int = 1

    def noise(self, metric: str = "throughput_tok_s") -> Any:
        """Per (engine, level): how far the repeats of one configuration lie apart,
        ``(max - min) / median`` of ``metric`` (NaN with a single repeat). Identical
        configurations measured twice differ only by the machine's noise."""
        runs = self.runs if self.runs is not None else self.table.assign(repeat=0)
        g = runs.groupby(["engine", "level"])[metric]
        spread = (g.max() - g.min()) / g.median()
        return spread.where(g.count() > 1).rename("relative_range").reset_index()

    def noise_floor(self, metric: str = "throughput_tok_s") -> float:
        """The largest relative range between repeats of one engine at one level (NaN with a
        single repeat): a speed-up closer to 1 than this is not told apart from noise."""
        r = self.noise(metric)["relative_range"].dropna()
        return float(r.max()) if len(r) else math.nan

    def _pick(self, mode: str, engine: str | None) -> Any:
        rows = self.table[self.table["mode"] == mode]
        names = list(dict.fromkeys(rows["engine"]))
        if engine is not None and mode == "speculative":
            if engine not in names:
                raise ValueError(f"no speculative engine {engine!r}; the sweep has {names}")
            return rows[rows["engine"] == engine]
        if not names:
            raise ValueError(f"the sweep has no {mode} runs; the speed-up needs both modes")
        if len(names) > 1:
            raise ValueError(f"the sweep has several {mode} engines {names}; pass engine=...")
        return rows

    def speedups(self, metric: str, *, engine: str | None = None) -> Any:
        """Per level: plain and speculative values of ``metric`` and the speed-up (> 1 means
        speculation is better: higher throughput, or lower latency). ``engine`` names the
        speculative engine when the sweep ran several."""
        if metric not in self.table.columns:
            raise ValueError(f"unknown metric {metric!r}; choose from {list(self.table.columns)}")
        plain = self._pick("plain", None).set_index("level")[metric]
        spec = self._pick("speculative", engine).set_index("level")[metric]
        wide = _side_by_side({"plain": plain, "speculative": spec}).dropna()
        if metric in LOWER_IS_BETTER:
            wide["speedup"] = wide["plain"] / wide["speculative"]
        else:
            wide["speedup"] = wide["speculative"] / wide["plain"]
        return wide.sort_index().rename_axis("level").reset_index()

    def suspect_levels(self, *, engine: str | None = None) -> tuple[tuple[float, str], ...]:
        """``(level, why)`` for each level whose speed-ups are timing noise: plain decoding's
        throughput fell with load there (:func:`plain_fell`: more clients make larger batches,
        and a larger batch never serves fewer tokens per second plainly). ``engine`` is
        accepted for symmetry with :meth:`crossover`; the check reads the plain engine."""
        del engine
        unit = "requests/s" if self.scenario == "rate" else "concurrent clients"
        plain = self._pick("plain", None).set_index("level").sort_index()
        return plain_fell(plain.index.tolist(), plain["throughput_tok_s"].tolist(), unit=unit)

    def crossover(
        self,
        metric: str = "throughput_tok_s",
        *,
        engine: str | None = None,
        noise: float | None = None,
    ) -> Crossover:
        """Where speculation stops paying on ``metric``, read against ``noise`` (default:
        this sweep's :meth:`noise_floor` of ``metric``; 0 with one repeat) and with the
        :meth:`suspect_levels` marked, so that a gain inside the floor is not worded as
        "paid" and a crossing between two levels inside it is not a crossover."""
        sp = self.speedups(metric, engine=engine)
        if noise is None:
            noise = self.noise_floor(metric)
        return find_crossover(
            sp["level"].tolist(),
            sp["speedup"].tolist(),
            metric=metric,
            scenario=self.scenario,
            noise=noise if math.isfinite(noise) else 0.0,
            suspect=self.suspect_levels(engine=engine),
        )


def batch_crossover(bs: Any, *, noise: float | None = None, col: str = "speedup") -> Crossover:
    """Claim 4's curve over a :func:`batch_sweep`: the speculative rows' ``col`` against the
    batch size, read against ``noise`` (default: the sweep's largest ``relative_range``, how
    far repeats of one configuration lay apart), with the batch sizes where plain throughput
    fell with the batch (:func:`plain_fell`) or the speed-up exceeded its tokens per target
    call marked as timing noise (``suspect``)."""
    from ..perf.theory import above_call_bound

    if noise is None:  # a table without repeats (or without the column) has no floor
        r = bs["relative_range"].dropna() if "relative_range" in bs else ()
        noise = float(r.max()) if len(r) else 0.0
    sp = bs[bs["mode"] == "speculative"].groupby("batch_size").min().sort_index()
    bad = []
    if "tokens_per_s" in bs:
        plain = bs[bs["mode"] == "plain"].groupby("batch_size")["tokens_per_s"].min().sort_index()
        bad = list(plain_fell(plain.index.tolist(), plain.tolist(), unit="rows per batch"))
    for b, r in sp.iterrows():
        tpc = float(r["tokens_per_target_call"]) if "tokens_per_target_call" in r else math.nan
        if above_call_bound(float(r[col]), tpc):
            if b not in {x for x, _ in bad}:
                bad.append(
                    (
                        float(b),
                        f"a speed-up of {r[col]:.2f}x at batch {b:g} is above its "
                        f"{r['tokens_per_target_call']:.2f} tokens per target call "
                        "(impossible: timing noise)",
                    )
                )
    return find_crossover(
        sp.index.tolist(),
        sp[col].tolist(),
        metric="tokens_per_s",
        scenario="batch",
        noise=noise,
        suspect=sorted(bad),
    )


def load_sweep(
    target: Any,
    draft: Any,
    prompts: Sequence[Any],
    *,
    rates: Sequence[float] | None = None,
    concurrencies: Sequence[int] | None = None,
    n_requests: int,
    max_batch: int,
    max_new_tokens: int,
    gamma: Any = 4,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    eos_token_id: int | Sequence[int] | None = None,
    verifier: str = "lossless",
    engines: Sequence[BatchEngine] | None = None,
    reuse_service: bool = True,
    warmup: bool = True,
    progress: bool = True,
    repeats: int = 1,
) -> LoadSweep:
    """Serve the same workload at every load level with speculation off and on.

    ``prompts``: :class:`LoadPrompt` or token-id lists. Exactly one of ``rates`` (open loop)
    or ``concurrencies`` (closed loop). ``engines`` replaces the two default engines (plain
    and speculative, built with :func:`make_engine` from the sampling arguments). Each engine
    is warmed up once on one prompt first (not recorded), and identical batches are measured
    once per repeat and reused (``reuse_service``; at saturation every level forms the same
    batches), also across engines that run the same configuration for a batch (a fallback
    policy below its threshold runs its constant gamma).

    The engines are interleaved: level by level, each repeat runs every engine, in an order
    rotated between repeats, so a slow drift of a shared machine hits every engine alike.
    With ``repeats >= 2`` every level is measured that many times afresh; ``table`` keeps the
    median of each metric and :meth:`LoadSweep.noise_floor` says how far repeats of one
    configuration lay apart -- the noise a verdict must clear.

    >>> from specviz.load import fixed_engine, load_sweep
    >>> fast_alone = fixed_engine(tokens=8, step_time=0.05, per_row_time=0.04,
    ...                           name="spec", speculative=True)
    >>> plain = fixed_engine(tokens=8, step_time=0.1, per_row_time=0.01, name="plain")
    >>> sw = load_sweep(None, None, [[1, 2]], concurrencies=[1, 2, 4, 8], n_requests=8,
    ...                 max_batch=8, max_new_tokens=8, engines=[plain, fast_alone],
    ...                 progress=False)
    >>> sw.crossover("throughput_tok_s").status
    'crosses'
    """
    if (rates is None) == (concurrencies is None):
        raise ValueError("give exactly one of rates (open loop) or concurrencies (closed loop)")
    levels = list(rates if rates is not None else concurrencies)  # type: ignore[arg-type]
    if not levels:
        raise ValueError("the sweep needs at least one load level")
    scenario = "rate" if rates is not None else "concurrency"
    lp = _as_load_prompts(prompts)
    if engines is None:
        engines = _plain_and_speculative(
            target,
            draft,
            verifier,
            max_new_tokens=max_new_tokens,
            gamma=gamma,
            do_sample=do_sample,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            eos_token_id=eos_token_id,
        )
    names = [e.name for e in engines]
    if len(set(names)) != len(names):
        raise ValueError(f"engine names must be distinct, got {names}")
    repeats = _check_int("repeats", repeats, 1)
    # one cache per repeat: a repeat measures afresh, and within it identical batches reuse
    caches: list[dict[Any, ServedBatch] | None] = [
        {} if reuse_service else None for _ in range(repeats)
    ]
    results = []
    if warmup:
        for eng in engines:
            eng([lp[0].input_ids])
    total = len(levels) * len(engines) * repeats
    with _bar(progress, total=total, desc="load sweep", unit="run") as bar:
        for level in levels:
            kw2: dict[str, Any] = {"rate": level} if scenario == "rate" else {"concurrency": level}
            for rep in range(repeats):
                shift = rep % len(engines)
                for eng in [*engines[shift:], *engines[:shift]]:
                    res = serve(
                        eng,
                        lp,
                        n_requests=n_requests,
                        max_batch=max_batch,
                        seed=seed,
                        service_cache=caches[rep],
                        progress=progress,
                        **kw2,
                    )
                    results.append(replace(res, repeat=rep))
                    bar.update(1)
    return _sweep(results, names, scenario, repeats)


def accounting_line(*sweeps: LoadSweep) -> str:
    """One line that states the load accounting's two checks over every run (every engine,
    level and repeat) of ``sweeps``: the busiest server's utilisation (must be <= 100%) and
    the smallest TTFT minus queueing minus its batch's measured prefill (must be >= 0)."""
    acc = [r.accounting() for sw in sweeps for r in sw.results]
    util = max(a["utilization"] for a in acc)
    margin = min(a["ttft_margin"] for a in acc)
    ok = util <= 1.0 + 1e-9 and margin >= 0.0
    return (
        f"Accounting ({len(acc)} runs): server busy at most {util:.1%} of its span; every TTFT >= "
        f"queueing + its batch's measured prefill (smallest margin {margin:.3f} s: the first step)"
        + ("" if ok else " -- FAILED: a token time leaves the prefill out")
    )


def _sweep(results: list[LoadResult], names: list[str], scenario: str, repeats: int) -> LoadSweep:
    """The table: one row per (engine, level) in the engines' order, the median of every
    numeric metric over the repeats."""
    import pandas as pd

    order = {n: i for i, n in enumerate(names)}
    results.sort(key=lambda r: (order[r.engine], r.level, r.repeat))
    runs = pd.DataFrame([{**r.summary(), "repeat": r.repeat} for r in results])
    keys = ["engine", "mode", "scenario", "level"]
    num = [c for c in runs.columns if c not in keys and c != "repeat"]
    table = runs.groupby(keys, sort=False)[num].median().reset_index()
    table["repeats"] = repeats
    return LoadSweep(table, tuple(results), scenario, runs, repeats)


def _plain_and_speculative(target: Any, draft: Any, verifier: str, **kw: Any) -> list:
    """The two engines every sweep compares: speculation off, then on."""
    return [
        make_engine(target, None, speculative=False, **kw),
        make_engine(target, draft, speculative=True, verifier=verifier, **kw),
    ]


# -- batch-size sweep ----------------------------------------------------------------------------


def batch_sweep(
    target: Any,
    draft: Any,
    prompts: Sequence[Any],
    *,
    batch_sizes: Sequence[int],
    max_new_tokens: int,
    gamma: Any = 4,
    repeats: int = 1,
    do_sample: bool = False,
    temperature: float = 1.0,
    seed: int = 0,
    eos_token_id: int | Sequence[int] | None = None,
    verifier: str = "lossless",
    engines: Sequence[BatchEngine] | None = None,
    progress: bool = True,
    clock: Callable[[], float] = time.perf_counter,
) -> Any:
    """Tokens/s of plain vs speculative batched decoding at each batch size (rows take the
    prompts in order, cycled). Modes alternate within each repeat to cancel drift; the
    median repeat is kept (the lower of the middle two with an even count), and every column
    of a row comes from that one repeat, so its parts add up to its time. Returns a DataFrame:
    one row per (batch_size, mode) with ``tokens_per_s`` and ``speedup`` (speculative / plain tokens/s, same batch size, prompt
    prefill included), ``prefill_s`` (the prompts' prefill, target and draft) and
    ``first_token_s`` (prefill + the first step), and ``decode_tokens_per_s`` /
    ``decode_speedup``: every generated token over the time after the measured prefill
    (``service_time - prefill_s``), i.e. the decoding phase
    without the prefill. (Not "tokens after the first over the time after the first token": a
    model draft's first call commits up to ``gamma + 1`` tokens *at* the first token's time, so
    that count credited the decoding phase with tokens made before it began -- 5.06x at gamma
    4, above the ``gamma + 1`` a call can commit.) Since every speculative call costs at least
    one plain decode step, ``decode_speedup`` cannot honestly exceed ``tokens_per_target_call``.
    ``tokens_per_target_call`` counts calls per row.
    ``draft_seconds`` / ``verify_seconds`` split the decoding steps' time into drafting and
    the target's verify call (claim 1: each speculative call is dearer).

    ``relative_range`` is ``(max - min) / median`` of an engine's repeated times at one
    batch size (NaN with one repeat): the noise a speed-up must clear.

    ``kv_tokens`` counts prompt + generated tokens of all rows (logical KV tokens; the
    physical cache also holds padding and rejected-draft holes). ``same_tokens_as_plain``
    says whether an engine generated exactly the plain engine's tokens (expected under
    greedy decoding with a lossless verifier, up to floating-point near ties).
    """
    import pandas as pd

    lp = _as_load_prompts(prompts)
    sizes = [_check_int("batch size", b, 1) for b in batch_sizes]
    if not sizes:
        raise ValueError("batch_sizes is empty")
    repeats = _check_int("repeats", repeats, 1)
    if max(sizes) > len({p.input_ids for p in lp}):
        warnings.warn(
            f"batch size {max(sizes)} exceeds the {len({p.input_ids for p in lp})} distinct "
            "prompts: rows repeat prompts, and identical rows can share work in the batched "
            "engine (flattering it); pass at least as many prompts (see mixed_prompts)",
            stacklevel=2,
        )
    if engines is None:
        engines = _plain_and_speculative(
            target,
            draft,
            verifier,
            max_new_tokens=max_new_tokens,
            gamma=gamma,
            do_sample=do_sample,
            temperature=temperature,
            seed=seed,
            eos_token_id=eos_token_id,
        )
    for eng in engines:  # warm-up, not recorded
        eng([lp[0].input_ids])
    rows = []
    with _bar(progress, total=len(sizes) * repeats * len(engines), desc="batch sweep") as bar:
        for b in sizes:
            ids = tuple(lp[i % len(lp)].input_ids for i in range(b))
            walls: dict[str, list[float]] = {e.name: [] for e in engines}
            served_by: dict[str, list[ServedBatch]] = {e.name: [] for e in engines}
            for _ in range(repeats):
                for eng in engines:
                    t0 = clock()
                    served = eng(ids)
                    walls[eng.name].append(clock() - t0)
                    served_by[eng.name].append(served)
                    bar.update(1)
            # one repeat stands for each engine: the median one (the lower middle with an even
            # count), and every column comes from it, so the parts add up to its time (a median
            # time beside the last repeat's parts did not)
            pick = {n: walls[n].index(statistics.median_low(w)) for n, w in walls.items()}
            chosen = {n: served_by[n][pick[n]] for n in walls}
            ref = next((chosen[e.name] for e in engines if not e.speculative), None)
            for eng in engines:
                s = chosen[eng.name]
                tokens = sum(len(t) for t in s.new_tokens)
                secs = walls[eng.name][pick[eng.name]]
                decode_s = s.service_time - s.prefill_seconds
                decode_tokens = tokens  # all of them are made after the prefill
                w = walls[eng.name]
                rows.append(
                    dict(
                        batch_size=b,
                        engine=eng.name,
                        mode="speculative" if eng.speculative else "plain",
                        tokens=tokens,
                        seconds=secs,
                        # repeats of this very configuration: how far apart (noise)
                        relative_range=(
                            (max(w) - min(w)) / statistics.median(w) if len(w) > 1 else math.nan
                        ),
                        tokens_per_s=tokens / secs if secs > 0 else math.nan,
                        prefill_s=s.prefill_seconds,
                        first_token_s=s.prefill_time,
                        decode_seconds=decode_s,
                        decode_tokens_per_s=decode_tokens / decode_s if decode_s > 0 else math.nan,
                        target_calls=s.target_calls,
                        draft_seconds=s.draft_time,
                        verify_seconds=s.verify_time,
                        tokens_per_target_call=tokens / s.row_calls if s.row_calls else math.nan,
                        acceptance_rate=s.accepted / s.drafted if s.drafted else math.nan,
                        kv_tokens=sum(len(p) for p in ids) + tokens,
                        same_tokens_as_plain=(
                            s.new_tokens == ref.new_tokens if ref is not None else None
                        ),
                        repeats=repeats,
                    )
                )
    df = pd.DataFrame(rows)
    for col, out in (("tokens_per_s", "speedup"), ("decode_tokens_per_s", "decode_speedup")):
        plain = df[df["mode"] == "plain"].set_index("batch_size")[col]
        df[out] = [getattr(r, col) / plain.get(r.batch_size, math.nan) for r in df.itertuples()]
    return df


def served_alone(engines: Sequence[BatchEngine], prompts: Sequence[Any]) -> Any:
    """Every prompt served alone (a batch of one) by every engine, engines interleaved per
    prompt: one row per (engine, prompt) with ``tokens``, ``seconds`` (the service time,
    prefill included), ``accepted``, ``drafted`` and ``target_calls`` -- a batch-1
    comparison on a chosen set of prompts (e.g. a trained drafter's held-out prompts next to
    the prompts it was trained on), with one value per prompt for an interval over them."""
    import pandas as pd

    lp = _as_load_prompts(prompts)
    rows = []
    for p in lp:
        for eng in engines:
            s = eng([p.input_ids])
            rows.append(
                dict(
                    engine=eng.name,
                    mode="speculative" if eng.speculative else "plain",
                    prompt_id=p.prompt_id,
                    category=p.category,
                    tokens=len(s.new_tokens[0]),
                    seconds=s.service_time,
                    accepted=s.accepted,
                    drafted=s.drafted,
                    target_calls=s.row_calls,
                )
            )
    return pd.DataFrame(rows)
