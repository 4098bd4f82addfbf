"""Counts that add up, one position convention, gamma 0 among the best gammas, the measured c
in every theory figure, and verdicts that say "not supported" / "cannot tell" when the numbers
do (issue 19, notebooks 07 and 08). Small toys only: every test runs in well under a second."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import specviz as sv
from specviz.drafting import PromptLookupDrafter
from specviz.lab import policy_lab
from specviz.lab.analysis import cell_outcomes, run_grid, task_type_effect, task_type_effects
from specviz.lab.experiments import pooled_cells
from specviz.perf import theory
from specviz.views import acceptance as acc_views
from specviz.views import perf as perf_views
from specviz.views.palette import PALETTE

pytestmark = pytest.mark.usefixtures("one_thread")

TARGET, DRAFT = sv.toy_pair(5, 2, seed=0)
NB = Path(__file__).resolve().parent.parent / "notebooks"


def _nb_source(prefix: str) -> str:
    (path,) = NB.glob(f"{prefix}_*.ipynb")
    nb = json.loads(path.read_text(encoding="utf-8"))
    return "\n".join("".join(c["source"]) for c in nb["cells"])


# -- every step is counted once ----------------------------------------------------------


def test_a_final_draft_cut_short_and_kept_is_counted():
    # the toy draft agrees with the greedy target: gamma 4, 7 tokens -> a full draft, then a
    # 1-token draft cut short by max_new_tokens, both kept
    r = sv.speculative_generate(TARGET, DRAFT, [0, 1, 2], gamma=4, max_new_tokens=7)
    assert r.drafted_counts == (4, 1) and r.accepted_counts == (4, 1)
    o = perf_views.StepOutcomes.from_counts(r.accepted_counts, r.drafted_counts, 4)
    assert (o.all_accepted, o.cut_short, sum(o.rejected), o.empty) == (1, 1, 0, 0)
    assert o.steps == r.target_calls == 2
    assert o.first_rejection_share == 0.0  # not "100% rejected the first token"


def test_every_steps_outcome_adds_up_in_the_grid(tmp_path):
    prompts = [[0, 1, 2, 0, 1, 2, 0], [4, 4, 4, 0], [2, 0, 1, 3]]
    grid = run_grid(
        TARGET,
        {"model": DRAFT, "lookup": PromptLookupDrafter},
        prompts,
        gammas=(3,),
        max_new_tokens=11,
        cache_dir=tmp_path,
        progress=False,
    )
    cut = 0
    for _, row in grid.iterrows():
        o = cell_outcomes(row)
        assert o.steps == row["target_calls"]
        assert sum(o.counts(with_empty=True).values()) == row["target_calls"]
        # the old count left the cut-short kept drafts out
        old = sum(row["rejection_hist"]) + row["accepted_hist"][row["gamma"]] + row["empty_drafts"]
        assert old + o.cut_short == row["target_calls"]
        cut += o.cut_short
    assert cut > 0, "the toy grid should contain final drafts cut short"
    pooled = pooled_cells(grid)
    for r in pooled.itertuples():
        assert r.outcomes.steps == r.steps
        assert r.outcomes.cut_short == r.cut_short and r.outcomes.all_accepted == r.all_accepted
        fig = perf_views.rejection_positions_figure(r.outcomes)
        bar = fig.data[0]
        assert sum(bar.customdata) == r.steps
        assert sum(bar.y) == pytest.approx(1.0)
        assert f"{r.steps} steps" in fig.layout.title.text


def test_histograms_and_counts_agree():
    acc, dra = [0, 2, 1, 3, 0, 1], [3, 2, 3, 3, 0, 3]
    o = perf_views.StepOutcomes.from_counts(acc, dra, 3)
    hist = np.bincount(acc, minlength=4).tolist()
    rej = [sum(1 for n, d in zip(acc, dra, strict=True) if n < d and n == i) for i in range(3)]
    assert perf_views.StepOutcomes.from_histograms(hist, rej, empty=1) == o
    assert o.steps == len(acc) and o.empty == 1 and o.cut_short == 1 and o.all_accepted == 1
    both = o + o
    assert both.steps == 2 * o.steps and both.rejected == tuple(2 * x for x in o.rejected)
    with pytest.raises(ValueError):
        perf_views.StepOutcomes.from_histograms([1, 0], [3], empty=0)


def test_notebook_07_counts_from_the_outcomes():
    src = _nb_source("07")
    assert "r.outcomes" in src and "accepted_hist[G]" not in src


# -- one position convention: the first drafted token is position 1 ----------------------


def test_first_drafted_token_is_position_1_in_every_figure():
    accepted = [0, 0, 1, 3]  # two steps rejected the first drafted token
    hist = acc_views.rejection_histogram_figure(accepted, 3)
    obs = next(t for t in hist.data if t.name == "observed")
    assert list(obs.x)[:3] == ["1", "2", "3"] and obs.customdata[0] == 2
    assert "1 = the first drafted token" in hist.layout.xaxis.title.text
    o = perf_views.StepOutcomes.from_counts(accepted, [3, 3, 3, 3])
    pos = perf_views.rejection_positions_figure(o)
    assert list(pos.data[0].x)[:3] == ["1", "2", "3"] and pos.data[0].customdata[0] == 2
    assert "1 = the first drafted token" in pos.layout.xaxis.title.text
    by = perf_views.rejection_positions_by_group_figure({"a": o, "b": o})
    assert all(list(t.x)[0] == "1" for t in by.data)
    ppa = acc_views.per_position_acceptance_figure({"x": [0.5, 0.4, 0.3]})
    assert list(ppa.data[0].x)[0] == 1
    assert perf_views.rejection_position_label(0) == "1"
    for prefix in ("07", "08"):
        assert "position 0" not in _nb_source(prefix)


# -- gamma 0 (plain decoding) is a candidate --------------------------------------------


def test_plain_decoding_wins_names_gamma_0():
    assert policy_lab.best_gamma({1: 0.8, 3: 0.83}) == (0, 1.0)
    assert policy_lab.gamma_label(0) == "gamma 0 (plain)"
    assert policy_lab.best_gamma({1: 1.1, 3: 1.4}) == (3, 1.4)
    table = _table({"x": {1: 0.8, 3: 0.83}, "y": {1: 1.3, 3: 1.1}}, prompts=3)
    bests = policy_lab.best_gammas(table, seed=0)
    assert bests["x"].gamma == 0 and bests["x"].speedup == 1.0
    assert "gamma 0 (plain)" in bests["x"].describe() and "gamma 3" not in bests["x"].describe()
    assert bests["y"].gamma == 1
    # the theory's best gamma also runs from 0
    assert theory.optimal_gamma(0.05, 0.5, max_gamma=6) == 0
    assert theory.predicted_best_gammas([0.05], 0.5, max_gamma=6)[0]["best_leviathan"] == 0
    fig = perf_views.measured_speedup_figure(
        pd.DataFrame(
            dict(
                category=["x", "x"],
                gamma=[1, 3],
                measured=[0.8, 0.83],
                predicted_leviathan=[1.1, 1.2],
                predicted_with_verify=[0.9, 0.8],
            )
        ),
        best={"x": 0},
    )
    measured = next(t for t in fig.data if t.name == "measured")
    assert list(measured.x) == [0, 1, 3] and measured.y[0] == 1.0
    ring = next(t for t in fig.data if t.name == "best measured gamma")
    assert list(ring.x) == [0]


def _table(speedups: dict[str, dict[int, float]], *, prompts: int, noise: float = 0.0):
    """A prompt x gamma table whose pooled speedups are ``speedups`` (plain: 1 s for 10
    tokens per prompt)."""
    rng = np.random.default_rng(0)
    rows = []
    for cat, sp in speedups.items():
        for p in range(prompts):
            for g, s in sp.items():
                jitter = 1 + noise * rng.uniform(-1, 1)
                rows.append(
                    dict(
                        category=cat,
                        prompt=f"{cat}{p}",
                        gamma=g,
                        tokens=10,
                        seconds=1.0 / (s * jitter),
                        plain_tokens=10,
                        plain_seconds=1.0,
                    )
                )
    return pd.DataFrame(rows)


# -- the theory uses the measured c -----------------------------------------------------


def test_theory_figure_uses_the_measured_c():
    ids = {"p0": [0, 1, 2], "p1": [3, 1, 4, 1]}
    runs, plain = policy_lab.gamma_sweep(
        TARGET, PromptLookupDrafter(), ids, [1, 3], max_new_tokens=8
    )
    c = theory.measured_draft_cost(list(runs.values()), list(plain.values()))
    steps = [s for r in runs.values() for s in r.trace.steps]
    per_draft = sum(s.draft_time for s in steps) / sum(s.drafted for s in steps)
    per_token = sum(r.total_time for r in plain.values()) / sum(
        len(r.new_tokens) for r in plain.values()
    )
    assert c == pytest.approx(per_draft / per_token)
    vc = theory.VerifyCost((1, 2, 3, 4), (1.0, 1.1, 1.3, 1.4), 16)
    fig = perf_views.predicted_speedup_figure((0.5, 0.9), c, vc, max_gamma=6)
    assert f"c = {c:.3f}" in fig.layout.title.text and "0.020" not in fig.layout.title.text
    # two panels (issue 27): Leviathan left, with the measured verify cost right
    lev = next(t for t in fig.data if t.name == "a=0.5" and t.xaxis in (None, "x"))
    assert list(lev.x)[0] == 0  # plain decoding is on the curve
    assert list(lev.y) == pytest.approx([theory.speedup(0.5, g, c) for g in range(7)])
    ver = next(t for t in fig.data if t.name == "a=0.5" and t.xaxis == "x2")
    assert max(ver.x) + 1 <= vc.measured_up_to  # measured part only
    ext = next(t for t in fig.data if (t.name or "").startswith("a=0.5, v(n) extrapolated"))
    assert ext.xaxis == "x2"
    assert [g for g in ext.x if g + 1 > vc.measured_up_to] == [4, 5, 6]
    assert vc.extrapolated(5) and not vc.extrapolated(4)
    with pytest.raises(ValueError):
        perf_views.predicted_speedup_figure((0.5,), None, vc)  # no fallback c
    with pytest.raises(ValueError):
        theory.predicted_best_gammas((0.5,), math.nan)
    src = _nb_source("08")
    assert "0.02" not in src and "measured_draft_cost" in src


def test_one_colour_per_acceptance_rate():
    vc = theory.VerifyCost((1, 2), (1.0, 1.2), 16)
    rates = (0.5, 0.7, 0.8, 0.9)
    fig = perf_views.predicted_speedup_figure(rates, 0.01, vc, max_gamma=4)
    by_rate: dict[str, set[str]] = {}
    for t in fig.data:
        if t.name:
            by_rate.setdefault(t.legendgroup, set()).add(t.line.color)
    assert all(len(cols) == 1 for cols in by_rate.values())  # both lines of a rate: one colour
    cols = [next(iter(c)) for c in by_rate.values()]
    assert len(set(cols)) == len(rates)  # no two rates share one
    assert perf_views.acceptance_colors(rates)[0.9] == PALETTE["accepted"]


# -- verdicts conditional on the numbers ------------------------------------------------


def test_claim_2_verdicts():
    yes = task_type_effect([(9, 10), (8, 10), (9, 10)], [(2, 10), (1, 10)], drafter="d")
    assert yes.verdict == "supports" and "supports claim 2 at this size" in yes.sentence()
    assert yes.ci[0] > 0 and "95% CI" in yes.sentence()
    no = task_type_effect([(1, 10), (2, 10)], [(9, 10), (8, 10)], drafter="d")
    assert no.verdict == "not supported" and "not supported" in no.sentence()
    overlap = task_type_effect([(5, 10), (9, 10)], [(4, 10), (8, 10)])
    assert overlap.verdict == "cannot tell" and "cannot tell at this size" in overlap.sentence()
    one = task_type_effect([(9, 10)], [(1, 10)])
    assert one.verdict == "cannot tell" and "at least 2" in one.sentence()
    none = task_type_effect([(0, 0), (0, 0)], [(1, 10), (2, 10)])
    assert none.verdict == "cannot tell"
    # seeded: the same counts give the same interval
    again = task_type_effect([(9, 10), (8, 10), (9, 10)], [(2, 10), (1, 10)], drafter="d")
    assert again.ci == yes.ci


def test_claim_2_on_a_grid_where_it_fails():
    rows = [
        dict(
            drafter="d",
            gamma=3,
            mode="greedy",
            category=cat,
            prompt_id=f"{cat}{i}",
            accepted=a,
            drafted=10,
        )
        for cat, accs in (("structured", (1, 2, 1)), ("code", (2, 1)), ("chat_writing", (9, 8, 9)))
        for i, a in enumerate(accs)
    ]
    (effect,) = task_type_effects(pd.DataFrame(rows), gamma=3, mode="greedy")
    assert effect.formatted_prompts == 5 and effect.open_prompts == 3
    assert effect.verdict == "not supported"
    assert "not supported at this size" in effect.sentence()


def test_claim_3_verdicts():
    plain_everywhere = policy_lab.best_gamma_claim(
        policy_lab.best_gammas(_table({"x": {1: 0.7, 3: 0.6}, "y": {1: 0.8, 3: 0.5}}, prompts=3))
    )
    assert plain_everywhere.verdict == "not supported"
    s = plain_everywhere.sentence()
    assert "not supported at this size" in s and "gamma 0 (plain)" in s
    differs = policy_lab.best_gamma_claim(
        policy_lab.best_gammas(_table({"x": {1: 0.7, 3: 0.6}, "y": {1: 1.2, 3: 1.9}}, prompts=3))
    )
    assert differs.verdict == "supports" and "supports claim 3 at this size" in differs.sentence()
    few = policy_lab.best_gamma_claim(
        policy_lab.best_gammas(_table({"x": {1: 0.7, 3: 0.6}, "y": {1: 1.2, 3: 1.9}}, prompts=1))
    )
    assert few.verdict == "cannot tell" and "cannot tell at this size" in few.sentence()
    noisy = policy_lab.best_gamma_claim(
        policy_lab.best_gammas(
            _table({"x": {1: 1.0, 3: 1.01}, "y": {1: 1.01, 3: 1.0}}, prompts=4, noise=0.3)
        )
    )
    assert noisy.verdict == "cannot tell"


def test_claim_3_flags_a_speed_up_above_its_tokens_per_call():
    """Wrong number 4 of the issue-27 review (08's demo): "extraction gamma 1 ... tokens per
    call 1.674 ... measured 1.895", printed as "best gamma 1 (1.89x)". A call costs at least a
    plain decode step, so that is timing noise: the line says so and claim 3 leaves the
    category out of its comparison."""
    table = _table({"x": {1: 1.895, 6: 1.59}, "y": {1: 0.95, 6: 0.93}}, prompts=3)
    calls = {("x", 1): 6, ("x", 6): 3, ("y", 1): 9, ("y", 6): 8}  # 10 tokens per prompt each
    table["target_calls"] = [
        calls[(c, g)] for c, g in zip(table.category, table.gamma, strict=True)
    ]
    bests = policy_lab.best_gammas(table, seed=0)
    assert bests["x"].above_bound == {1: pytest.approx(10 / 6)}
    assert bests["y"].above_bound == {}
    assert "timing noise: gamma 1's 1.90x is above its 1.67 tokens per target call" in (
        bests["x"].describe()
    )
    claim = policy_lab.best_gamma_claim(bests)
    assert claim.verdict == "cannot tell"
    assert "x left out: a speed-up above its tokens per target call, timing noise" in (
        claim.sentence()
    )
    # negative case: the same table with a possible 1.5x at gamma 1 is not flagged
    table.loc[(table.category == "x") & (table.gamma == 1), "seconds"] = 1.0 / 1.5
    bests = policy_lab.best_gammas(table, seed=0)
    assert bests["x"].above_bound == {} and "timing noise" not in bests["x"].describe()
    assert "left out" not in policy_lab.best_gamma_claim(bests).sentence()


def test_prediction_flags_a_measured_speed_up_above_its_tokens_per_call():
    assert theory.above_call_bound(1.895, 1.674) and not theory.above_call_bound(1.35, 1.8)
    assert not theory.above_call_bound(math.nan, 1.5)
    assert "timing noise" in theory.call_bound_note(1.895, 1.674)
    assert theory.call_bound_note(1.591, 3.273) == ""


def test_a_count_not_given_is_not_drawn_as_zero():
    # the histogram-only call (no cut_short): no bar pretends there were 0 such steps
    fig = perf_views.rejection_positions_figure([3, 1], 2)
    assert "none: all accepted (cut short)" not in list(fig.data[0].x)
    assert "cut short and kept: not counted" in fig.layout.title.text
