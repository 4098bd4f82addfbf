"""Issue 27, the outside re-review of the committed 09 and 10 reports (2026-12-06 b): verdicts
that contradicted the numbers printed beside them. Each test feeds the page's own numbers (or a
fake sweep with the same shape) and fails on the code that printed the contradiction."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from specviz.lab import checklist
from specviz.lab.verdicts import next_gamma
from specviz.load import (
    claim12_verdict,
    describe_fallback,
    fallback_batch,
    find_crossover,
    fixed_engine,
    load_decisions,
    load_sweep,
    pays_up_to,
    plain_step_note,
)
from specviz.perf.theory import VerifyCost

# -- 09: the fallback threshold and its sentence -------------------------------------------------


def _bs(speedups, *, floor=0.2, sizes=(1, 2, 4, 8, 16)):
    """A batch-sweep table: plain rows at 1.0, speculative rows at ``speedups``."""
    rows = []
    for b, s in zip(sizes, speedups, strict=True):
        rows.append(dict(batch_size=b, mode="plain", speedup=1.0, relative_range=floor))
        rows.append(dict(batch_size=b, mode="speculative", speedup=s, relative_range=floor / 2))
    return pd.DataFrame(rows)


# 09's committed batch sweep: 1.061x at batch 1 (inside +/-20%), 1.493x and 1.235x beyond it
BS09 = _bs([1.061, 1.493, 1.235, 0.991, 0.977])


def test_a_gain_beyond_the_floor_above_batch_1_sets_the_threshold():
    """09 printed "the batch sweep measured no gain beyond the noise floor at any batch size"
    two lines above 1.493x at batch 2 and 1.235x at batch 4 (floor +/-20%): the old rule
    counted only a run of paying batch sizes starting at batch 1 (1.061x, inside the floor),
    set the fallback threshold to 1 -- plain decoding where speculation paid most."""
    assert pays_up_to(BS09) == 4  # the old rule: 0
    assert fallback_batch(BS09, 16) == 4  # the old rule: 1
    line = describe_fallback(BS09, fallback_batch(BS09, 16), 16)
    assert line.startswith("fallback policy: plain decoding above 4 rows (max batch 16); ")
    assert "paying beyond the noise floor at batch 2, 4" in line
    assert "within it at 1, 8, 16" in line and "noise floor +/-20%" in line
    assert "no gain" not in line and "so that is the threshold" in line
    # clipped below what paid (a server of 2 rows), the line says so
    clipped = describe_fallback(BS09, fallback_batch(BS09, 2), 2)
    assert clipped.startswith("fallback policy: plain decoding above 1 row (max batch 2)")
    assert "clipped to 1" in clipped


def test_the_threshold_stops_at_a_loss_and_says_when_nothing_paid():
    """Negative controls: a loss beyond the floor before any gain leaves no threshold chosen
    from the sweep; no gain anywhere is said as such; a loss above the last gain stops it."""
    early_loss = _bs([0.7, 1.5, 1.4, 1.0, 1.0])
    assert pays_up_to(early_loss) == 0 and fallback_batch(early_loss, 16) == 1
    line = describe_fallback(early_loss, 1, 16)
    assert "lost at batch 1 before any batch size paid" in line
    assert "not chosen from the sweep" in line
    nothing = _bs([1.05, 1.1, 0.95, 0.9, 0.85])
    assert pays_up_to(nothing) == 0
    assert "measured no gain beyond the noise floor at any batch size" in describe_fallback(
        nothing, 1, 16
    )
    stops = _bs([1.3, 1.0, 0.7, 1.5, 1.6])  # paid at 1, lost at 4: the later gains do not count
    assert pays_up_to(stops) == 1
    # a batch size within the floor above the last gain is not "measured to pay"
    assert pays_up_to(_bs([1.3, 1.25, 1.1, 1.0, 0.95])) == 2


PLAIN = fixed_engine(tokens=8, step_time=0.10, per_row_time=0.01, name="plain")
FAST = fixed_engine(tokens=8, step_time=0.05, per_row_time=0.005, name="fast", speculative=True)


class _Fallback:
    """A fake BatchFallback: the speculative timing up to ``max_batch`` rows, plain above."""

    name, speculative = "fallback", True

    def __init__(self, spec, plain, max_batch):
        self.spec, self.plain, self.max_batch = spec, plain, max_batch

    def __call__(self, prompts):
        return (self.spec if len(prompts) <= self.max_batch else self.plain)(prompts)


def test_claim12_cannot_tell_on_a_threshold_not_chosen_from_the_sweep():
    """With nothing paying in the batch sweep the threshold is the policy's smallest, not a
    choice: a shortfall then judges that arbitrary threshold (09: "not supported ... fell
    short at 2 clients: 12.6 vs best 19.4"), so the verdict is "cannot tell"."""
    sw = load_sweep(None, None, [[1, 2], [3, 4, 5], [6], [7, 8]], concurrencies=[1, 2],
                    n_requests=8, max_batch=8, max_new_tokens=8, progress=False,
                    engines=[PLAIN, FAST, _Fallback(FAST, PLAIN, 1)])  # fmt: skip
    kw = dict(fallback="fallback", constant="fast", max_batch=1)
    assert claim12_verdict(sw, **kw).status == "not supported"  # no pays_up_to: as before
    v = claim12_verdict(sw, **kw, pays_up_to=0)
    assert v.status == "cannot tell", v.reason
    assert "not chosen from the sweep" in v.reason and "fell short at 2 clients" in v.reason
    # a threshold the sweep did choose is still judged (negative control)
    assert claim12_verdict(sw, **kw, pays_up_to=1).status == "not supported"


def test_plain_step_note_from_the_runs_own_numbers():
    """09's batch-2 plain step cost 2.08x its batch-1 step (3.531 s vs 1.693 s over 24 steps),
    which is why speculation peaked at 2 rows on that CPU; a cheap second row says nothing."""
    bs = pd.DataFrame(dict(batch_size=[1, 1, 2, 2], mode=["plain", "speculative"] * 2,
                           verify_seconds=[1.693, 1.5, 3.531, 2.0], target_calls=[24, 9, 24, 9],
                           tokens_per_s=[11.288, 11.972, 11.314, 16.895]))  # fmt: skip
    note = plain_step_note(bs)
    assert "147 ms against 71 ms at batch 1 (2.09x for 2x the rows)" in note
    assert "11.29 -> 11.31" in note
    cheap = bs.assign(verify_seconds=[1.693, 1.5, 2.0, 2.0])
    assert plain_step_note(cheap) == ""


# -- 10: one noise floor per metric, and claim 12's summary --------------------------------------


def _xs10():
    """10's committed load crossovers: 1, 4, 16 clients, each metric with its own floor."""
    return [
        find_crossover([1, 4, 16], [0.829, 1.203, 0.859], metric="throughput_tok_s",
                       scenario="concurrency", noise=0.17),
        find_crossover([1, 4, 16], [0.71, 0.88, 1.10], metric="ttft_p50",
                       scenario="concurrency", noise=0.17),
        find_crossover([1, 4, 16], [0.83, 1.25, 0.87], metric="completion_p50",
                       scenario="concurrency", noise=0.21),
    ]  # fmt: skip


def test_each_metric_is_read_and_printed_against_its_own_floor():
    """10 printed "completion_p50 0.83x, 1.25x, 0.87x ...; noise floor +/-17%" (throughput's
    floor, passed for every metric) beside "speculation on completion_p50: ... noise floor
    +/-21%". Each metric now uses and names its own floor."""
    thr, lat = load_decisions(_xs10(), noise=0.17)
    assert lat.floors == {"ttft_p50": 0.17, "completion_p50": 0.21}
    text = lat.numbers()
    assert "completion_p50 0.83x, 1.25x, 0.87x (noise floor of completion_p50 +/-21%)" in text
    assert "ttft_p50 0.71x, 0.88x, 1.10x (noise floor of ttft_p50 +/-17%)" in text
    assert "; noise floor +/-" not in text  # no unqualified floor
    assert "(noise floor of throughput_tok_s +/-17%)" in thr.numbers()
    # the decision reads completion time's own floor: 1.19x is a gain under +/-17%, not +/-21%
    xs = _xs10()[2:]
    xs = [find_crossover([1, 4, 16], [0.83, 1.19, 0.87], metric="completion_p50", noise=0.21)]
    assert load_decisions(xs, noise=0.17)[0].calls == ("tie", "tie", "tie")
    # a crossover without a floor of its own takes the caller's (as before)
    bare = [find_crossover([1, 4, 16], [0.83, 1.19, 0.87], metric="completion_p50")]
    assert load_decisions(bare, noise=0.17)[0].calls == ("tie", "on", "tie")


def test_claim12_summary_names_where_a_mixed_family_paid():
    """10: "Claim 12 verdict (decisions): cannot tell -- speculation paid: nowhere" two cells
    below "speculation on throughput_tok_s: paid beyond the noise at 4"."""
    table = pd.DataFrame(dict(category=["a", "b"], gamma=[2, 2], speedup=[0.7, 0.8],
                              speedup_ci_low=[0.6, 0.7], speedup_ci_high=[0.8, 0.9],
                              prompts=[2, 2], acceptance=[0.3, 0.3], tokens_per_call=[1.6, 1.7],
                              first_rejection_share=[0.4, 0.4]))  # fmt: skip
    adv = checklist.advise(table, crossovers=_xs10(), noise=0.17)
    v = checklist.claim12_verdict(adv)
    assert v.status == "cannot tell", v.reason
    assert "nowhere" not in v.reason
    assert "load (throughput) at 4 concurrent clients only, no boundary" in v.reason
    assert "load (latency) at 4 concurrent clients only, no boundary" in v.reason
    # negative control: no family paid anywhere -> still "nowhere"
    lose = [find_crossover([1, 4], [0.5, 0.6], metric="throughput_tok_s", noise=0.1)]
    v = checklist.claim12_verdict(checklist.advise(table, crossovers=lose))
    assert "speculation paid: nowhere" in v.reason


# -- 10: theory charges the verify pass ------------------------------------------------------------


def test_next_gamma_charges_the_measured_verify_cost():
    """10: "predicted speed-up at gamma 2: 1.41x; suggested gamma: 2" (verification free) beside
    a measured 0.70x-1.00x and "keep plain decoding". 08 measured a 3-token pass at 1.88 decode
    steps on this CPU: (1 - 0.39^3) / 0.61 / (2 x 0.05 + 1.88) = 0.78x, what 10 measured."""
    vc = VerifyCost((1, 2, 3, 4, 5), (0.070, 0.100, 0.1316, 0.150, 0.170), 100)
    ng = next_gamma(229, 586, 0.05, gamma=2, verify_cost=vc, measured=0.86)
    assert ng.verify_ratio == pytest.approx(1.88)
    assert ng.predicted[2] == pytest.approx(1.40, abs=0.01)
    assert ng.predicted_verify[2] == pytest.approx(0.78, abs=0.01)
    assert ng.suggested == 0
    text = ng.sentence()
    assert "1.40x with verification free (Leviathan), 0.78x charging the measured verify" in text
    assert "closer to the prediction that charges the verify pass" in text
    assert "suggested gamma: none" in text
    # without a verify cost the old prediction stays, but it cannot advise past a measured loss
    free = next_gamma(229, 586, 0.05, gamma=2, measured=0.86)
    assert free.suggested == 2 and "the measurement, not theory, decides" in free.sentence()
    # negative control: a cheap verify pass and a measured gain suggest speculating
    cheap = VerifyCost((1, 2, 3), (0.07, 0.071, 0.072), 100)
    ok = next_gamma(130, 160, 0.05, gamma=2, verify_cost=cheap, measured=1.6)
    assert ok.suggested > 0 and "decides" not in ok.sentence()
    assert math.isnan(next_gamma(130, 160, 0.05, gamma=2).measured)


# -- 10's speed-up figure and 09's timeline ------------------------------------------------------


def test_category_figure_names_its_bars_by_the_prompt_count():
    from specviz.views import category_speedup_figure

    table = pd.DataFrame(dict(category=["a", "b"], gamma=[2, 2], speedup=[0.7, 0.95],
                              speedup_ci_low=[0.6, 0.8], speedup_ci_high=[0.82, 1.1],
                              prompts=[2, 2]))  # fmt: skip
    fig = category_speedup_figure(table, title="Speed-up by task")
    title = fig.layout.title.text
    assert "95%" not in title.replace("too few for a 95% interval", "")
    assert "bars: range over 2 prompts" in title
    assert all(t.insidetextanchor == "start" for t in fig.data)  # labels clear of the bars' tops
    three = category_speedup_figure(table.assign(prompts=[3, 3]))
    assert "bars: 95% interval over prompts" in three.layout.title.text


def test_timeline_axis_reaches_the_last_bar():
    from specviz.views.load import timeline_figure

    reqs = [SimpleNamespace(request_id=i, arrival=float(i), start=float(i) + 0.5,
                            token_times=[float(i) + 1.0], finish=10.0 + 8 * i)
            for i in range(3)]  # fmt: skip
    res = SimpleNamespace(requests=reqs, batches=[SimpleNamespace(start=0.5)], scenario="rate",
                          engine="plain", level=1.0, max_batch=4)  # fmt: skip
    lo, hi = timeline_figure(res).layout.xaxis.range
    assert lo <= 0 and hi >= 26.0


# -- 09, re-review 27d: figures ------------------------------------------------------------------


def test_batch_sweep_draws_its_noise_floor_and_call_split_keeps_legend_off_labels():
    from specviz.views.load import batch_sweep_figure, call_split_figure

    bs = _bs([1.06, 1.49, 1.24, 0.9, 0.8]).assign(engine=lambda d: d["mode"], tokens_per_s=10.0)
    fig = batch_sweep_figure(bs)
    band = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(band) == 1 and (band[0].y0, band[0].y1) == pytest.approx((0.8, 1.2))
    assert any("noise floor +/-20%" in (a.text or "") for a in fig.layout.annotations)
    assert not [s for s in batch_sweep_figure(bs.drop(columns="relative_range")).layout.shapes
                if s.type == "rect"]  # fmt: skip
    calls = bs.assign(target_calls=10, draft_seconds=0.1, verify_seconds=1.0,
                      tokens_per_target_call=2.0)  # fmt: skip
    assert call_split_figure(calls).layout.legend.x > 1  # right of the bars, not over labels


def test_a_third_engine_never_takes_a_metric_colour():
    # 09: olive was the fallback engine in two figures and time per output token between them
    from specviz.views.load import _EXTRA, _color

    metric_colours = set(_EXTRA[:5])  # speedup_figure's first five metrics (09 draws five)
    assert _color("fallback", 2) not in metric_colours
    assert _color("plain", 0) != _color("speculative", 1)
