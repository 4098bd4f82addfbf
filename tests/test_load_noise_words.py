"""Issue 27 (re-review of 09 and 10): load and batch-sweep wording read against the run's
noise floor -- "paid" only beyond it, no crossover between two levels inside it, a plain
throughput that falls with load is timing noise, a fallback threshold never rests on a gain
inside the floor, the floor drawn on the crossover figure, no checkout path in a warning or
a printed report path."""

from __future__ import annotations

import warnings

import pandas as pd

from specviz.lab import checklist
from specviz.load import (
    LoadSweep,
    batch_crossover,
    claim4_verdict,
    fallback_batch,
    find_crossover,
    load_decisions,
    pays_up_to,
    plain_fell,
)
from specviz.verification.synthetic import SyntheticAcceptanceWarning


def _sweep(plain_thr, spec_thr, levels=(1, 2, 4), spread=0.2):
    """A LoadSweep from numbers: two repeats per configuration, ``spread`` apart."""
    rows = []
    for name, mode, thr in (("plain", "plain", plain_thr), ("spec", "speculative", spec_thr)):
        for lv, t in zip(levels, thr, strict=True):
            for rep, f in enumerate((1 - spread / 2, 1 + spread / 2)):
                rows.append(dict(engine=name, mode=mode, level=float(lv), repeat=rep,
                                 throughput_tok_s=t * f, tokens_per_target_call=2.0))  # fmt: skip
    runs = pd.DataFrame(rows)
    table = runs.groupby(["engine", "mode", "level"], as_index=False).median(numeric_only=True)
    return LoadSweep(table=table, results=(), scenario="concurrency", runs=runs, repeats=2)


def test_paid_only_beyond_the_floor():
    # 09 committed: 1.68x at 1, 1.05x at 8, 1.01x at 16 under +/-20% was "paid at every level"
    x = find_crossover([1, 8, 16], [1.68, 1.05, 1.01], metric="throughput_tok_s", noise=0.2)
    d = x.describe()
    assert "at every level" not in d and "paid beyond the noise at 1" in d
    assert "within the noise floor at 8, 16" in d
    # without a floor the old sentence stays
    quiet = find_crossover([1, 8, 16], [1.68, 1.05, 1.01], metric="throughput_tok_s")
    assert "paid on throughput_tok_s at every level" in quiet.describe()


def test_crossing_inside_the_floor_is_not_a_crossover():
    # 10's demo: 0.95x -> 1.10x under +/-31% was "starts paying at 1.11 clients"
    x = find_crossover([1, 2], [0.95, 1.10], metric="ttft_p50", noise=0.31)
    assert x.status == "pays_above" and not x.clear
    assert "starts paying" not in x.describe() and "no crossover was measured" in x.describe()
    assert find_crossover([1, 2], [0.6, 1.5], noise=0.31).clear


def test_claim4_gain_into_the_floor_is_not_had_not_vanished():
    x = find_crossover([1, 16], [1.68, 1.01], scenario="concurrency", noise=0.2)
    v = claim4_verdict(x)  # the floor comes with the crossover
    assert v.status == "partly supported" and "had not vanished" not in v.reason
    assert "into the noise floor" in v.reason
    still = claim4_verdict(find_crossover([1, 16], [1.9, 1.3], noise=0.2))
    assert "had not vanished" in still.reason


def test_plain_throughput_falling_with_load_is_noise():
    assert plain_fell([1, 2, 4], [11.5, 9.8, 14.0])[0][0] == 2.0
    assert plain_fell([1, 2], [10.0, 9.8]) == ()  # within the 5% tolerance
    sw = _sweep([11.5, 9.8, 14.0], [12.0, 13.7, 14.5])  # 1.40x at 2 made by the slow plain run
    x = sw.crossover("throughput_tok_s")
    assert [lv for lv, _ in x.suspect] == [2.0] and x.noise > 0
    assert x.calls()[1] == "noise"
    d = load_decisions([x], noise=0.31)[0]
    assert d.calls[1] == "tie" and "speculate at 2" not in d.action()


def test_batch_sweep_verdict_from_a_slowed_plain_run_cannot_tell():
    # demo 09: plain batch 2 slower than batch 1, "gain grew with load" was read from it
    bs = pd.DataFrame(
        dict(
            batch_size=[1, 1, 2, 2],
            mode=["plain", "speculative"] * 2,
            tokens_per_s=[10.0, 11.9, 8.0, 16.9],
            speedup=[1.0, 1.19, 1.0, 2.11],
            relative_range=[0.1, 0.62, 0.2, 0.1],
            tokens_per_target_call=[1.0, 2.5, 1.0, 2.5],
        )
    )
    x = batch_crossover(bs)
    assert x.noise == 0.62 and [lv for lv, _ in x.suspect] == [2.0]
    v = claim4_verdict(x)
    assert v.status == "cannot tell" and "plain throughput fell" in v.reason
    # a speed-up above its tokens per target call is noise too
    hi = bs.assign(tokens_per_s=[10.0, 11.9, 12.0, 25.0], speedup=[1.0, 1.19, 1.0, 2.9])
    assert "above its 2.50 tokens per target call" in dict(batch_crossover(hi).suspect)[2.0]


def test_fallback_threshold_does_not_rest_on_a_gain_inside_the_floor():
    # 09 committed: 1.034x at batch 4 under a +/-59% floor was "paying up to batch 4"
    bs = pd.DataFrame(
        dict(
            batch_size=[1, 1, 4, 4, 16, 16],
            mode=["plain", "speculative"] * 3,
            speedup=[1.0, 1.68, 1.0, 1.034, 1.0, 0.8],
            relative_range=[0.59, 0.1, 0.1, 0.1, 0.1, 0.1],
        )
    )
    assert pays_up_to(bs) == 1 and fallback_batch(bs, 16) == 1
    assert pays_up_to(bs, noise=0.0) == 4  # the old reading, without a floor


def test_speedup_figure_draws_the_floor_and_no_crossing_inside_it():
    from specviz.views import load as views

    sw = _sweep([10.0, 12.0, 14.0], [10.5, 12.2, 13.5], spread=0.3)
    fig = views.speedup_figure(sw, metrics=("throughput_tok_s",))
    assert any(s.type == "rect" for s in fig.layout.shapes)  # the band
    assert not any("stops paying" in (t.name or "") for t in fig.data)


def test_synthetic_warning_points_at_the_caller():
    from specviz.verification.base import get_verifier

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always", SyntheticAcceptanceWarning)
        get_verifier("synthetic:0.9", greedy=True)
    assert w and w[0].filename == __file__  # not specviz/verification/base.py of a checkout


def test_report_path_is_relative():
    assert checklist.shown_path("/srv/repo/reports/x.md", root="/srv/repo") == "reports/x.md"
    assert not checklist.shown_path("/elsewhere/deep/y.md", root="/srv/repo").startswith("/")


def test_the_unit_after_the_last_group_agrees_with_its_count():
    # 09 (re-review 27e-C): "within the noise floor at 1 concurrent clients"
    x = find_crossover([1, 2, 4], [1.0, 1.5, 1.6], metric="throughput_tok_s", noise=0.2,
                       scenario="concurrency")  # fmt: skip
    d = x.describe()
    assert "paid beyond the noise at 2, 4; within the noise floor at 1 concurrent client " in d
    many = find_crossover([1, 8, 16], [1.68, 1.05, 1.01], metric="throughput_tok_s", noise=0.2,
                          scenario="concurrency").describe()  # fmt: skip
    assert "within the noise floor at 8, 16 concurrent clients" in many
