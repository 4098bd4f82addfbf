"""The demo pays or says why (issue 30): measured costs before the runs, a gamma chosen from
them (0 allowed), predicted next to measured per prompt, the kernel choice printed, and the
pair that pays on CPUs when the first one cannot."""

from __future__ import annotations

import math

import pytest

from specviz.lab import demo, payoff
from specviz.lab.policy_lab import TokenRecord
from specviz.perf.theory import VerifyCost

pytestmark = pytest.mark.usefixtures("one_thread")


def _cal(c: float, v5: float) -> payoff.Calibration:
    """Costs in units of a 10 ms target step: a draft token c steps, v(n) linear to v5."""
    ns = tuple(range(1, 10))
    secs = tuple(0.01 * (1 + (v5 - 1) * (n - 1) / 4) for n in ns)
    return payoff.Calibration(0.01, 0.01 * c, VerifyCost(ns, secs, 128), "test", 0.0)


def test_calibration_explains_whether_speculation_can_pay():
    cheap = _cal(0.05, 1.1)  # a head on packed weights: pays
    assert cheap.can_pay() and 0 < cheap.break_even() < 0.5
    assert "pays here once acceptance exceeds" in cheap.explain()
    dear = _cal(0.6, 2.4)  # a big draft, and verify passes 2.4x a decode step
    assert not dear.can_pay() and math.isnan(dear.break_even())
    why = dear.explain(gamma=4)
    assert "cannot pay" in why and "c = 0.60" in why and "v(5) = 2.40" in why
    g, s = cheap.best(0.9)
    assert g > 0 and s > 1 and dear.best(0.9) == (0, 1.0)


def test_gamma_is_chosen_by_replaying_the_exact_record():
    accept_all = TokenRecord((1.0,) * 40, (math.nan,) * 40)
    choice = payoff.choose_gamma(accept_all, _cal(0.05, 1.1), max_gamma=6)
    assert choice.gamma >= 4 and choice.speedup > 2 and choice.tokens_per_call > 3
    assert choice.speedup == max(choice.by_gamma.values())
    never = TokenRecord((0.0,) * 40, (math.nan,) * 40)
    choice = payoff.choose_gamma(never, _cal(0.05, 1.1), max_gamma=6)
    assert choice.gamma == 0 and choice.speedup == 1.0 and "predicted to lose" in choice.describe()
    # control: a record that pays on cheap costs loses on dear ones
    assert payoff.choose_gamma(accept_all, _cal(0.9, 3.0), max_gamma=6).gamma == 0


def _args(tmp_path, **kw):
    import argparse

    p = argparse.ArgumentParser()
    demo.add_arguments(p)
    argv = ["--target", "smollm2-135m", "--draft", "early_exit:8", "--max-new-tokens", "8",
            "--categories", "code", "--out", str(tmp_path)]  # fmt: skip
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}"] + ([] if v is None else [str(v)])
    return p.parse_args(argv)


def test_demo_prints_costs_kernels_and_predicted_next_to_measured(tmp_path, capsys):
    rows = demo.run(_args(tmp_path))
    out = capsys.readouterr().out
    assert "kernels for" in out and "target step" in out and "c=" in out
    assert "speculation" in out  # the verdict on this host, in numbers
    (row,) = rows
    assert row.identical and row.new_tokens == 8 and math.isfinite(row.predicted_speedup)
    line = demo._format(row)
    assert "predicted=" in line and "measured=" in line
    assert (tmp_path / f"{row.prompt_id}.baseline.jsonl").exists()
    rows = demo.run(_args(tmp_path, gamma=0))  # forced plain: nothing speculative runs
    assert rows[0].gamma == 0 and rows[0].speedup == 1.0 and "plain" in demo._format(rows[0])


def test_demo_switches_to_the_pair_that_pays_when_this_one_cannot(tmp_path, capsys, monkeypatch):
    real = payoff.calibrate
    calls = []

    def calibrate(target, drafter, **kw):
        calls.append(drafter)
        cal = real(target, drafter, **kw)
        # the first pair is made hopeless: a draft token as dear as ten target steps
        return payoff.Calibration(cal.target_step, 10 * cal.target_step, cal.verify,
                                  cal.source, cal.seconds) if len(calls) == 1 else cal  # fmt: skip

    monkeypatch.setattr(demo, "calibrate", calibrate)
    rows = demo.run(_args(tmp_path))
    out = capsys.readouterr().out
    assert "on this host speculation cannot pay for this pair" in out
    assert "switching to the pair that pays on CPUs: smollm2-135m + eagle_head" in out
    assert "smollm2-135m + eagle_head: greedy" in out and len(calls) == 2
    assert rows[0].identical and math.isfinite(rows[0].predicted_speedup)
    capsys.readouterr()
    calls.clear()
    demo.run(_args(tmp_path, no_fallback=None))  # --no-fallback: stays, says why
    out = capsys.readouterr().out
    assert "cannot pay" in out and "switching" not in out and len(calls) == 1
