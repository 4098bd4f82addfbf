"""Counts and 95% intervals on every acceptance rate (issue 15): each figure that plots an
acceptance rate draws the Wilson interval of the counts behind it (checked against
statsmodels, computed here independently), says "k of n" in its hover, and draws no point --
never a 0% -- where nothing was reached. Small toys only."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.proportion import proportion_confint

import specviz as sv
from specviz.lab.analysis import run_grid, summarize
from specviz.perf.acceptance import (
    PositionCounts,
    alpha_counts,
    per_position_acceptance,
    wilson_interval,
)
from specviz.views import acceptance as acc_views
from specviz.views import perf as perf_views
from specviz.views.palette import PALETTE, SERIES

pytestmark = pytest.mark.usefixtures("one_thread")


def _wilson(k: int, n: int) -> tuple[float, float]:
    lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    return float(lo), float(hi)


def _distinct_hue(col: str) -> bool:
    """Several series (drafters, categories) take distinct palette hues (issue 27), never
    shades of the "accepted" green a reader cannot tell apart."""
    return col in SERIES and not _shade_of(col, "accepted")


def _shade_of(col: str, meaning: str) -> bool:
    """``col`` is the palette colour of ``meaning`` mixed with white (a series shade)."""
    base = [int(PALETTE[meaning][i : i + 2], 16) for i in (1, 3, 5)]
    rgb = [int(col[i : i + 2], 16) for i in (1, 3, 5)]
    ts = {round((c - b) / (255 - b), 2) for c, b in zip(rgb, base, strict=True) if b < 255}
    return len(ts) <= 2 and max(ts) - min(ts) <= 0.01 and all(0 <= t < 1 for t in ts)


def _error_ends(t) -> tuple[list, list]:
    """(lower, upper) ends of a trace's vertical error bars (None where there is no point)."""
    ys, up, down = list(t.y), list(t.error_y.array), list(t.error_y.arrayminus)
    lo = [None if y is None else y - d for y, d in zip(ys, down, strict=True)]
    hi = [None if y is None else y + u for y, u in zip(ys, up, strict=True)]
    return lo, hi


@pytest.fixture(scope="module")
def traces() -> list[sv.Trace]:
    target, draft = sv.toy_pair(5, 2, noise=1.0, seed=0)
    out = []
    for seed in (3, 4):
        r = sv.speculative_generate(
            target, draft, [0], gamma=4, max_new_tokens=40, do_sample=True, seed=seed
        )
        assert r.trace is not None
        out.append(r.trace)
    return out


def _counts_by_hand(trace: sv.Trace, gamma: int) -> tuple[list[int], list[int]]:
    """kept / reached per position 1..gamma, straight from the steps."""
    kept, reached = [0] * gamma, [0] * gamma
    for s in trace.steps:
        tested = s.drafted if s.accepted == s.drafted else s.accepted + 1
        for i in range(tested):
            reached[i] += 1
            kept[i] += int(i < s.accepted)
    return kept, reached


# -- the Wilson interval itself --------------------------------------------------------------


@pytest.mark.parametrize("k,n", [(0, 1), (0, 7), (3, 10), (10, 10), (57, 91), (1, 1000)])
def test_wilson_interval_is_statsmodels(k, n):
    assert wilson_interval(k, n) == pytest.approx(_wilson(k, n), abs=1e-12)


def test_wilson_interval_has_no_value_without_trials():
    lo, hi = wilson_interval([0, 2], [0, 4])
    assert math.isnan(lo[0]) and math.isnan(hi[0])
    assert (lo[1], hi[1]) == pytest.approx(_wilson(2, 4))
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


# -- P(accept | reached) per position --------------------------------------------------------


def test_per_position_error_bars_are_the_wilson_interval(traces):
    fig = acc_views.per_position_acceptance_figure({"a": traces[0], "b": traces[1]})
    for label, tr in zip("ab", traces, strict=True):
        line = next(t for t in fig.data if t.name == label)
        kept, reached = _counts_by_hand(tr, len(line.x))
        assert any(n > 0 for n in reached)
        lo, hi = _error_ends(line)
        for i, (k, n) in enumerate(zip(kept, reached, strict=True)):
            if n == 0:
                assert line.y[i] is None
                continue
            assert line.y[i] == pytest.approx(k / n)
            assert (lo[i], hi[i]) == pytest.approx(_wilson(k, n), abs=1e-9)
            assert f"{k} of {n} steps" in line.text[i] and "95% Wilson" in line.text[i]
        assert line.error_y.visible
        assert line.error_y.color == line.line.color == line.marker.color  # one series colour
        assert _distinct_hue(line.line.color)
    # issue 27: several series (categories) get distinct hues, none a shade of "accepted"
    assert len({t.line.color for t in fig.data if t.name in ("a", "b")}) == 2
    one = acc_views.per_position_acceptance_figure({"a": traces[0]})
    assert _shade_of(one.data[0].line.color, "accepted")  # a single rate stays green
    assert "Wilson" in fig.layout.title.text


def test_per_position_counts_from_a_trace_match_the_rates(traces):
    c = PositionCounts.from_trace(traces[0])
    rate, reached = per_position_acceptance(traces[0])
    assert list(c.reached) == reached.tolist() == _counts_by_hand(traces[0], c.gamma)[1]
    assert list(c.kept) == _counts_by_hand(traces[0], c.gamma)[0]
    assert c.rate.tolist() == pytest.approx(rate.tolist(), nan_ok=True)
    assert c.rate.tolist() == pytest.approx(
        list(traces[0].summary().per_position_acceptance), nan_ok=True
    )
    pooled = PositionCounts.from_trace(traces)
    assert pooled == PositionCounts.from_trace(traces[0]) + PositionCounts.from_trace(traces[1])


def test_an_unreached_position_has_no_point():
    # gamma 3; steps accepted 0, 0, 1 drafts (rejected right after each): position 3 never tested
    cell = {"accepted_hist": [2, 1, 0, 0], "rejection_hist": [2, 1, 0]}
    fig = acc_views.per_position_acceptance_figure({"cell": cell})
    line = next(t for t in fig.data if t.name == "cell")
    assert list(line.y) == [pytest.approx(1 / 3), 0.0, None]  # a measured 0 stays, no fake one
    assert line.error_y.array[2] is None and line.error_y.arrayminus[2] is None
    assert "never reached" in line.text[2] and "0 of 1 steps" in line.text[1]
    lo, hi = _error_ends(line)
    assert (lo[1], hi[1]) == pytest.approx(_wilson(0, 1))
    mark = next(t for t in fig.data if t.name.startswith("never reached"))
    assert list(mark.x) == [3] and all(y < 0 for y in mark.y)  # below the axis, not at 0%
    assert "never reached by cell" in mark.text[0]
    assert mark.marker.color == PALETTE["unvisited"]


def test_bare_rates_get_no_interval_and_say_so():
    fig = acc_views.per_position_acceptance_figure({"x": [0.5, float("nan")]})
    line = fig.data[0]
    assert list(line.y) == [0.5, None] and not line.error_y.visible
    assert "counts not given" in line.text[0] and "never reached" in line.text[1]


def test_grid_cells_give_the_counts_of_their_rates(tmp_path):
    target, draft = sv.toy_pair(5, 2, noise=1.0, seed=0)
    grid = run_grid(
        target,
        {"model": draft},
        [[0, 1, 2], [4, 4, 0]],
        gammas=(3,),
        modes=("sampled",),
        max_new_tokens=12,
        cache_dir=tmp_path,
        progress=False,
    )
    rows = list(grid.itertuples())
    fig = acc_views.per_position_acceptance_figure({str(r.prompt_id): r for r in rows})
    for r in rows:
        c = PositionCounts.from_histograms(r.accepted_hist, r.rejection_hist)
        assert c.rate.tolist() == pytest.approx(list(r.per_position_acceptance), nan_ok=True)
        line = next(t for t in fig.data if t.name == str(r.prompt_id))
        lo, hi = _error_ends(line)
        for i, (k, n) in enumerate(zip(c.kept, c.reached, strict=True)):
            if n:
                assert (lo[i], hi[i]) == pytest.approx(_wilson(k, n), abs=1e-9)
                assert f"{k} of {n}" in line.text[i]

    # the acceptance-rate bars of the summary, counts pooled from the same cells
    s = summarize(grid)
    view = s[(s.gamma == 3) & (s["mode"] == "sampled")]
    fig = perf_views.metric_bars_figure(view, "acceptance_rate", cells=grid)
    bars = fig.data[0]
    for i, cat in enumerate(bars.x):
        sub = grid if cat == "all" else grid[grid.category == cat]
        k, n = int(sub.accepted.sum()), int(sub.drafted.sum())
        assert bars.y[i] == pytest.approx(k / n)
        lo, hi = _error_ends(bars)
        assert (lo[i], hi[i]) == pytest.approx(_wilson(k, n), abs=1e-9)
        assert f"{k} of {n} accepted" in bars.hovertext[i]


# -- acceptance-rate bars ------------------------------------------------------------------


def _summary() -> pd.DataFrame:
    return pd.DataFrame(
        dict(
            drafter=["a", "a", "a", "b", "b", "b"],
            category=["x", "y", "all", "x", "y", "all"],
            acceptance_rate=[0.6, 0.0, 0.6, 0.25, 0.5, 0.4],  # summarize: 0 / max(1, 0) = 0
            accepted=[30, 0, 30, 5, 15, 20],
            drafted=[50, 0, 50, 20, 30, 50],
        )
    )


def test_acceptance_bars_draw_the_wilson_interval_of_their_counts():
    s = _summary()
    fig = perf_views.metric_bars_figure(s, "acceptance_rate")
    for name in ("a", "b"):
        bars = next(t for t in fig.data if t.name == name)
        rows = s[s.drafter == name]
        lo, hi = _error_ends(bars)
        for i, (k, n) in enumerate(zip(rows.accepted, rows.drafted, strict=True)):
            if n == 0:
                continue
            assert (lo[i], hi[i]) == pytest.approx(_wilson(int(k), int(n)), abs=1e-9)
            assert f"{k} of {n} accepted" in bars.hovertext[i]
            assert list(bars.customdata[i][:2]) == [k, n]
        assert bars.error_y.visible and bars.error_y.color == bars.marker.color
        assert _distinct_hue(bars.marker.color)
    assert "Wilson" in fig.layout.title.text


def test_acceptance_bars_never_reached_is_no_bar():
    fig = perf_views.metric_bars_figure(_summary(), "acceptance_rate")
    a = next(t for t in fig.data if t.name == "a")
    assert a.y[1] is None  # nothing drafted: no bar, not the summary's 0
    assert "never reached" in a.hovertext[1]
    mark = next(t for t in fig.data if t.name.startswith("never reached"))
    assert list(mark.x) == ["y"] and all(y < 0 for y in mark.y)
    assert "a, y: never reached" in mark.hovertext[0]


def test_acceptance_bars_pool_counts_from_the_cells():
    cells = pd.DataFrame(
        dict(
            drafter=["a", "a", "a", "b"],
            category=["x", "x", "y", "x"],
            gamma=[4, 4, 4, 4],
            mode=["greedy"] * 4,
            accepted=[3, 4, 2, 1],
            drafted=[8, 8, 4, 4],
        )
    )
    other_gamma = cells.assign(gamma=2, accepted=0)
    summary = pd.DataFrame(
        dict(
            drafter=["a", "a", "a", "b", "b"],
            category=["x", "y", "all", "x", "all"],
            gamma=[4] * 5,
            mode=["greedy"] * 5,
            acceptance_rate=[7 / 16, 2 / 4, 9 / 20, 1 / 4, 1 / 4],
        )
    )
    fig = perf_views.metric_bars_figure(
        summary, "acceptance_rate", cells=pd.concat([cells, other_gamma])
    )
    a = next(t for t in fig.data if t.name == "a")
    lo, hi = _error_ends(a)
    for i, (k, n) in enumerate([(7, 16), (2, 4), (9, 20)]):
        assert (lo[i], hi[i]) == pytest.approx(_wilson(k, n), abs=1e-9)
        assert f"{k} of {n} accepted" in a.hovertext[i]
    with pytest.raises(ValueError, match="slice"):  # cells that are not the summary's
        perf_views.metric_bars_figure(summary, "acceptance_rate", cells=cells.assign(accepted=0))


def test_bars_without_counts_keep_working_and_say_so():
    s = _summary().drop(columns=["accepted", "drafted"])
    fig = perf_views.metric_bars_figure(s, "acceptance_rate")
    assert not fig.data[0].error_y.visible and "counts not given" in fig.data[0].hovertext[0]
    other = perf_views.metric_bars_figure(s.assign(speedup=1.2), "speedup")
    assert not other.data[0].error_y.visible and "Wilson" not in other.layout.title.text


# -- fitted alpha, simulated points ----------------------------------------------------------


def test_fitted_alpha_states_counts_and_interval():
    acc = [0, 2, 3, 1, 3]
    k, m = alpha_counts(acc, 3)
    assert (k, m) == (sum(acc), sum(min(a + 1, 3) for a in acc))
    lo, hi = _wilson(k, m)
    fig = acc_views.rejection_histogram_figure(acc, 3)
    title = fig.layout.title.text
    assert f"{k} of {m} tested drafts accepted" in title and f"{lo:.3f} to {hi:.3f}" in title
    obs = next(t for t in fig.data if t.name == "observed")
    assert list(obs.marker.color) == [PALETTE["rejected"]] * 3 + [PALETTE["accepted"]]
    grid = acc_views.rejection_grid_figure({("g", 3): acc})
    assert f"[{lo:.2f}, {hi:.2f}] ({k} of {m})" in grid.layout.annotations[0].text


def test_simulated_alpha_interval_from_its_counts():
    pts = [
        acc_views.SimPoint(0.6, 4, 2.1, 0.05, "sim", accepted=30, tested=50),
        acc_views.SimPoint(0.7, 4, 2.4, 0.05, "no counts"),
    ]
    fig = acc_views.tokens_per_call_vs_alpha_figure(4, pts)
    sim = next(t for t in fig.data if t.name == "simulated")
    lo, hi = _wilson(30, 50)
    assert sim.error_x.visible
    assert sim.error_x.arrayminus[0] == pytest.approx(0.6 - lo)
    assert sim.error_x.array[0] == pytest.approx(hi - 0.6)
    assert sim.error_x.array[1] is None and "counts not given" in sim.text[1]
    assert "30 of 50 tested drafts accepted" in sim.text[0]
    assert sim.error_x.color == sim.marker.color == PALETTE["speculative"]


def test_no_hard_coded_colours_in_the_acceptance_figures():
    import inspect
    import re

    for mod in (acc_views, perf_views):
        src = inspect.getsource(mod)
        assert not re.search(r"[\"']#[0-9A-Fa-f]{6}[\"']", src), mod.__name__
        assert not re.search(r"color=[\"'](black|grey|gray)[\"']", src), mod.__name__
    assert np.isfinite(wilson_interval(1, 2)).all()
