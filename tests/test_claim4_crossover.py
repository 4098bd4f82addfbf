"""Issue 19: computed verdicts for the serving claims (1, 4, 5, 12) and the checklist's
"turn it on here" branch, on fake engines with known timing models (nothing sleeps), plus the
draft / verify split the batched engine now measures (a tiny random Llama)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import pytest

from specviz import load
from specviz.lab import checklist
from specviz.load import (
    ClaimVerdict,
    call_split,
    claim1_verdict,
    claim4_verdict,
    claim5_verdict,
    claim12_verdict,
    fallback_batch,
    find_crossover,
    fixed_engine,
    load_sweep,
    pays_up_to,
)
from specviz.views import load as views

PROMPTS = [[1, 2], [3, 4, 5], [6], [7, 8]]
LEVELS = [1, 2, 4, 8]

# speculation's step is cheap alone but each extra row costs it more (wide verify pass, a
# drafter per row); plain decoding gets extra rows almost for free
PLAIN = fixed_engine(tokens=8, step_time=0.10, per_row_time=0.01, name="plain")
SPEC = fixed_engine(tokens=8, step_time=0.05, per_row_time=0.04, name="spec", speculative=True)
# the reverse: a draft whose cost batching amortises (the lossy what-if's shape)
SPEC_UP = fixed_engine(
    tokens=8, step_time=0.12, per_row_time=0.005, name="spec_up", speculative=True
)


def _sweep(*engines, levels=LEVELS):
    return load_sweep(None, None, PROMPTS, concurrencies=levels, n_requests=8, max_batch=8,
                      max_new_tokens=8, engines=list(engines), progress=False)  # fmt: skip


@dataclass(frozen=True)
class _Fallback:
    """A fake BatchFallback: the speculative timing up to ``max_batch`` rows, plain above."""

    spec: object
    plain: object
    max_batch: int
    name: str = "fallback"
    speculative: bool = True

    def __call__(self, prompts):
        return (self.spec if len(prompts) <= self.max_batch else self.plain)(prompts)


# -- claim 4 -----------------------------------------------------------------------------------


def test_claim4_supported_when_the_gain_falls_through_one():
    sw = _sweep(PLAIN, SPEC)
    x = sw.crossover("throughput_tok_s")
    assert x.status == "crosses" and 1 < x.level < 8
    v = claim4_verdict(x)
    assert v.status == "supported" and v.supported
    assert f"stops paying at about {x.level:.3g} clients" in v.line()
    assert v.line("closed loop").startswith("Claim 4 verdict (closed loop): supported -- ")


def test_claim4_not_supported_when_the_gain_grows_with_load():
    """A seeded run where claim 4 does not hold says so (the what-if's direction)."""
    sw = _sweep(PLAIN, SPEC_UP)
    sp = sw.speedups("throughput_tok_s")["speedup"].tolist()
    assert sp[-1] > sp[0]
    v = claim4_verdict(sw.crossover("throughput_tok_s"))
    assert v.status == "not supported" and "grew with load" in v.reason


@pytest.mark.parametrize(
    ("speedups", "status"),
    [
        ([1.4, 1.2, 0.9, 0.7], "supported"),
        ([1.6, 1.4, 1.2, 1.1], "partly supported"),  # shrinks, crossover beyond the range
        ([0.9, 1.0, 1.1, 1.2], "not supported"),  # grows: pays_above
        ([0.6, 0.5, 0.4, 0.3], "not shown"),  # never paid: no gain to lose
        ([1.2, 1.21, 1.19, 1.2], "not supported"),  # flat
        ([1.5, 0.9, 1.2, 1.45], "not supported"),  # dips below 1 and recovers: noise
    ],
)
def test_claim4_rules(speedups, status):
    assert claim4_verdict(find_crossover(LEVELS, speedups)).status == status


def test_claim4_cannot_tell_a_flat_trend_inside_a_wide_noise_floor():
    """Issue 27 (09 at the demo size): 1.55x at 1 client -> 1.27x at 2 with repeats 26% apart
    read "not supported: no clear trend" -- a verdict from the noise. A change smaller than a
    floor wider than the tolerance cannot tell; the same numbers on a quiet run still decide."""
    x = find_crossover([1, 2], [1.40, 1.38])
    v = claim4_verdict(x, noise=0.30)
    assert v.status == "cannot tell" and "+/-30%" in v.reason, v.reason
    assert claim4_verdict(x).status == "not supported"  # quiet: flat is flat
    assert claim4_verdict(x, noise=0.04).status == "not supported"  # floor under tolerance
    # 09's committed batch sweep: 1.55x -> 0.92x with a 59% floor (a 41% fall, inside it)
    v = claim4_verdict(find_crossover([1, 2, 4, 8, 16], [1.55, 1.62, 1.3, 1.0, 0.92]), noise=0.59)
    assert v.status == "cannot tell" and "moved less than the noise floor" in v.reason
    # a fall beyond the floor from a gain inside it: no gain was seen to shrink
    v = claim4_verdict(find_crossover([1, 2, 4], [1.5, 1.7, 0.5]), noise=0.55)
    assert v.status == "cannot tell" and "lay within the noise floor" in v.reason, v.reason
    # a trend beyond the floor is still judged
    assert claim4_verdict(find_crossover([1, 2], [1.9, 1.1]), noise=0.3).status == (
        "partly supported"
    )


def test_claim4_on_a_batch_sweep_counts_rows():
    x = find_crossover([1, 8, 32], [1.3, 1.1, 0.8], scenario="batch")
    assert "rows per batch" in claim4_verdict(x).reason


def test_verdict_status_is_checked():
    with pytest.raises(ValueError, match="status must be one of"):
        ClaimVerdict(4, "maybe", "")


# -- claim 5 -----------------------------------------------------------------------------------


def test_claim5_supported_when_metrics_disagree():
    """Speculation with a slow first token (draft prefill) but faster tokens after it: TTFT
    says plain, throughput says speculation."""
    slow_start = fixed_engine(tokens=8, step_time=0.04, prefill_time=0.5, name="s",
                              speculative=True)  # fmt: skip
    v = claim5_verdict(_sweep(PLAIN, slow_start, levels=[1, 2]))
    assert v.status == "supported"
    assert "loses on ttft_p50" in v.reason and "throughput_tok_s" in v.reason


def test_claim5_prints_the_floor_of_each_deciding_metric():
    """09's committed report read "tpot_p50 1.28x ... noise floor +/-30%" -- a win that looked
    inside the floor, because the largest floor (another metric's) was printed. Each deciding
    metric's own floor is printed, and a win is counted only beyond its own."""
    import pandas as pd

    class Sweep:
        scenario = "closed"

        def speedups(self, metric, engine=None):
            v = {"throughput_tok_s": 1.01, "ttft_p50": 0.74, "tpot_p50": 1.28}[metric]
            return pd.DataFrame({"level": [2.0], "speedup": [v]})

        def noise_floor(self, metric):
            return {"throughput_tok_s": 0.21, "ttft_p50": 0.10, "tpot_p50": 0.20}[metric]

    m = ("throughput_tok_s", "ttft_p50", "tpot_p50")
    v = claim5_verdict(Sweep(), m)
    assert v.status == "supported" and "wins on tpot_p50 and loses on ttft_p50" in v.reason
    assert "noise floors tpot_p50 +/-20%, ttft_p50 +/-10%" in v.reason and "21%" not in v.reason
    Sweep.noise_floor = lambda self, metric: 0.30  # the win 1.28x is now inside its floor
    assert claim5_verdict(Sweep(), m).status == "not supported"


class _Claim5Sweep:
    """Speed-ups per metric at one level (> 1: speculation better), every floor 20%."""

    scenario = "closed"

    def __init__(self, itl_p99):
        self.values = {"throughput_tok_s": 1.68, "ttft_p50": 1.05, "tpot_p50": 1.3,
                       "completion_p90": 1.4, "itl_p99": itl_p99}  # fmt: skip

    def speedups(self, metric, engine=None):
        import pandas as pd

        return pd.DataFrame({"level": [1.0], "speedup": [self.values[metric]]})

    def noise_floor(self, metric):
        return 0.20


def test_claim5_judges_the_tail_inter_token_gap_by_default():
    """Issue-27 review: 09 printed "inter-token gap p99 109 vs 69 ms" (0.63x) beside "Claim 5
    verdict: not supported -- no level where the metrics (throughput_tok_s, ttft_p50, tpot_p50,
    completion_p90) disagreed": the steady inter-token latency the claim names was not judged.
    """
    v = claim5_verdict(_Claim5Sweep(itl_p99=0.63))
    assert v.status == "supported" and "loses on itl_p99" in v.reason
    old = ("throughput_tok_s", "ttft_p50", "tpot_p50", "completion_p90")
    assert claim5_verdict(_Claim5Sweep(itl_p99=0.63), old).status == "not supported"
    # negative case: a p99 gap within the floor decides nothing
    assert claim5_verdict(_Claim5Sweep(itl_p99=0.9)).status == "not supported"


def test_claim5_cannot_tell_when_the_noise_could_hide_a_disagreement():
    """09's regenerated report: tpot_p50 1.66x beyond its +/-39% floor beside a p99 gap 0.47x
    (2.1x worse) inside a +/-86% floor printed "not supported ... tokens/s alone would have told
    the same story": the run could not have seen that disagreement. A material opposite move
    hidden by a wide floor is *cannot tell*; a small one (0.9x) inside a 20% floor is not."""

    class Wide(_Claim5Sweep):
        def noise_floor(self, metric):
            return 0.86 if metric == "itl_p99" else 0.20

    v = claim5_verdict(Wide(itl_p99=0.47))
    assert v.status == "cannot tell", v
    assert "itl_p99 moved the other way (0.47x) inside its floor +/-86%" in v.reason
    # every judged metric's floor is printed (09 judged itl_p99 against one it never showed)
    assert v.reason.endswith("(noise floors: throughput_tok_s +/-20%, ttft_p50 +/-20%, "
                             "tpot_p50 +/-20%, completion_p90 +/-20%, itl_p99 +/-86%)")  # fmt: skip
    assert "itl_p99 +/-86%" in claim5_verdict(Wide(itl_p99=1.1)).reason
    # negative cases: a small opposite move, and a wide floor with no opposite move
    assert claim5_verdict(Wide(itl_p99=0.9)).status == "not supported"
    assert claim5_verdict(Wide(itl_p99=1.1)).status == "not supported"
    assert claim5_verdict(_Claim5Sweep(itl_p99=0.9)).status == "not supported"


def test_claim5_not_supported_when_every_metric_agrees():
    better = fixed_engine(tokens=8, step_time=0.05, per_row_time=0.005, name="s",
                          speculative=True)  # fmt: skip
    v = claim5_verdict(_sweep(PLAIN, better, levels=[1, 2]))
    assert v.status == "not supported" and "tokens/s alone" in v.reason


# -- claim 12 ----------------------------------------------------------------------------------


def test_claim12_fallback_keeps_the_gain_and_avoids_the_loss():
    fb = _Fallback(SPEC, PLAIN, max_batch=2)
    sw = _sweep(PLAIN, SPEC, fb)
    v = claim12_verdict(sw, fallback="fallback", constant="spec", max_batch=2)
    assert v.status == "supported" and "recovered the loss" in v.reason
    # the same policy that never gets a batch above its threshold cannot be judged
    never = claim12_verdict(_sweep(PLAIN, SPEC, _Fallback(SPEC, PLAIN, 8)), fallback="fallback",
                            constant="spec", max_batch=8)  # fmt: skip
    assert never.status == "not shown" and "the fallback never triggered" in never.reason


def test_claim12_not_supported_when_the_fallback_throws_the_gain_away():
    """Falling back at 1 row where speculation pays everywhere (the reverse-direction pair)
    loses the gain: the verdict says so, naming the level."""
    fb = _Fallback(SPEC_UP, PLAIN, max_batch=1)
    sw = _sweep(PLAIN, SPEC_UP, fb)
    v = claim12_verdict(sw, fallback="fallback", constant="spec_up", max_batch=1)
    assert v.status == "not supported" and "fell short at" in v.reason


def test_claim12_is_not_decided_where_the_fallback_is_the_constant_gamma():
    """Issue 27 (the review of 09): at 1 client the fallback *is* the constant-gamma
    configuration, yet a slower run of it (10.6 against 17.0 tok/s, noise) made claim 12 "not
    supported". A level where the policy never triggered decides nothing; the verdict comes
    from the levels where it did, and the same sweep judged only at 1 client says so."""
    noisy = fixed_engine(tokens=8, step_time=0.07, per_row_time=0.04, name="noisy",
                         speculative=True)  # fmt: skip  # SPEC's configuration, a slow run
    sw = _sweep(PLAIN, SPEC, _Fallback(noisy, PLAIN, max_batch=1))
    wide = sw.table.pivot(index="level", columns="engine", values="throughput_tok_s")
    assert wide.loc[1, "fallback"] < 0.85 * wide.loc[1, "spec"]  # the old rule's "shortfall"
    v = claim12_verdict(sw, fallback="fallback", constant="spec", max_batch=1)
    assert v.status == "supported", v.reason
    assert "it triggered at 2, 4, 8 clients" in v.reason and "fell short" not in v.reason
    # where speculation itself lost below the threshold, the reason says whose matter it is
    slow = fixed_engine(tokens=8, step_time=0.13, per_row_time=0.04, name="slow",
                        speculative=True)  # fmt: skip
    sw = _sweep(PLAIN, slow, _Fallback(slow, PLAIN, max_batch=1))
    v = claim12_verdict(sw, fallback="fallback", constant="slow", max_batch=1)
    assert v.status == "supported" and "constant gamma lost to plain at 1 client," in v.reason
    # a noise floor wider than any difference leaves nothing to fall back from
    wide_noise = claim12_verdict(sw, fallback="fallback", constant="slow", max_batch=1,
                                 tolerance=5.0)  # fmt: skip
    assert wide_noise.status == "not shown" and "nothing to fall back from" in wide_noise.reason
    # the negative control: a fallback that does trigger and then falls short still fails
    bad = _sweep(PLAIN, SPEC, _Fallback(SPEC, noisy, max_batch=1))
    v = claim12_verdict(bad, fallback="fallback", constant="spec", max_batch=1)
    assert v.status == "not supported" and "fell short at" in v.reason


def test_claim12_cannot_tell_where_the_threshold_was_clipped_below_what_paid():
    """Issue 27 (09 at the demo size): max batch 2 forces the threshold to 1 row although the
    batch sweep measured speculation paying at 2, so the fallback ran plain where speculation
    paid and claim 12 read "not supported" -- a verdict on the clipped threshold. With
    ``pays_up_to`` the verdict says so (cannot tell); shortfalls on larger batches, or an
    unclipped threshold, still fail it (negative controls)."""
    fast = fixed_engine(tokens=8, step_time=0.05, per_row_time=0.005, name="fast",
                        speculative=True)  # fmt: skip  # pays at every batch size
    sw2 = _sweep(PLAIN, fast, _Fallback(fast, PLAIN, max_batch=1), levels=[1, 2])
    kw = dict(fallback="fallback", constant="fast", max_batch=1)
    assert claim12_verdict(sw2, **kw).status == "not supported"  # the old reading
    v = claim12_verdict(sw2, **kw, pays_up_to=2)
    assert v.status == "cannot tell", v.reason
    assert "clipped below the server's max batch" in v.reason and "2 rows" in v.reason
    assert claim12_verdict(sw2, **kw, pays_up_to=1).status == "not supported"  # not clipped
    # on 4 and 8 rows the sweep did not measure it paying: those shortfalls still count
    sw = _sweep(PLAIN, fast, _Fallback(fast, PLAIN, max_batch=1))
    v = claim12_verdict(sw, **kw, pays_up_to=2)
    assert v.status == "not supported" and "fell short at 4 clients" in v.reason, v.reason
    # a fallback that recovers a real loss stays supported whatever pays_up_to says
    good = _sweep(PLAIN, SPEC, _Fallback(SPEC, PLAIN, max_batch=2))
    v = claim12_verdict(good, fallback="fallback", constant="spec", max_batch=2, pays_up_to=4)
    assert v.status == "supported", v.reason


def test_fallback_batch_keeps_what_paid_and_can_trigger():
    bs = pd.DataFrame(
        dict(
            batch_size=[1, 1, 4, 4, 16, 16, 32, 32],
            mode=["plain", "speculative"] * 4,
            speedup=[1, 1.4, 1, 1.1, 1, 0.8, 1, 1.05],
        )
    )
    assert fallback_batch(bs, max_batch=16) == 4  # stops at the first loss (16)
    assert fallback_batch(bs, max_batch=4) == 3  # kept below max_batch: it can trigger
    assert fallback_batch(bs, max_batch=1) == 1
    lose = bs.assign(speedup=[1, 0.5] * 4)
    assert fallback_batch(lose, max_batch=16) == 1
    assert pays_up_to(bs) == 4 and pays_up_to(lose) == 0  # unclipped: what the sweep measured
    assert pays_up_to(bs.assign(speedup=[1, 1.2] * 4)) == 32


# -- claim 1 and the measured split --------------------------------------------------------------


def _bs_table():
    return pd.DataFrame(
        dict(
            batch_size=[1, 1],
            engine=["plain", "speculative(gamma=4)"],
            mode=["plain", "speculative"],
            target_calls=[24, 9],
            tokens_per_target_call=[1.0, 2.67],
            draft_seconds=[0.0, 0.25],
            verify_seconds=[2.4, 1.35],
        )
    )


def test_claim1_from_the_call_split():
    split = call_split(_bs_table())
    spec = split[split["mode"] == "speculative"].iloc[0]
    assert spec["draft ms per call"] == pytest.approx(250 / 9)
    assert spec["ms per call"] == pytest.approx(1600 / 9)
    v = claim1_verdict(split)
    assert v.status == "supported" and "drafting" in v.reason
    cheap = _bs_table().assign(verify_seconds=[2.4, 0.2], draft_seconds=[0.0, 0.0])
    assert claim1_verdict(call_split(cheap)).status == "partly supported"
    more = _bs_table().assign(tokens_per_target_call=[1.0, 0.9])
    assert claim1_verdict(call_split(more)).status == "not supported"


def test_batched_engine_times_drafting_and_verifying():
    from specviz.decoding.batched import autoregressive_generate_batch, speculative_generate_batch
    from specviz.drafting import early_exit_model
    from specviz.fixtures.shapes import random_llama

    target = random_llama("tiny", seed=0)
    draft = early_exit_model(target, 1)
    prompts = [[1, 5, 9, 3], [7, 2]]
    r = speculative_generate_batch(target, draft, prompts, gamma=2, max_new_tokens=5)
    assert r.draft_seconds > 0 and r.verify_seconds > 0
    assert r.draft_seconds + r.verify_seconds <= r.total_time
    a = autoregressive_generate_batch(target, prompts, max_new_tokens=5)
    assert a.verify_seconds > 0 and a.draft_seconds < a.verify_seconds
    df = load.batch_sweep(target, draft, prompts, batch_sizes=[1, 2], max_new_tokens=4,
                          gamma=2, progress=False)  # fmt: skip
    spec = df[df["mode"] == "speculative"]
    assert (spec["draft_seconds"] > 0).all() and (spec["verify_seconds"] > 0).all()
    split = call_split(df, 2)
    assert set(split["mode"]) == {"plain", "speculative"}


# -- the checklist's positive branch -----------------------------------------------------------


def _table():
    return pd.DataFrame(
        dict(
            category=["a", "a", "b", "b"],
            gamma=[2, 4, 2, 4],
            speedup=[1.3, 1.6, 0.9, 0.8],
            acceptance=[0.8, 0.75, 0.3, 0.2],
            tokens_per_call=[2.4, 3.1, 1.3, 1.2],
            first_rejection_share=[0.1, 0.1, 0.55, 0.7],
        )
    )


def test_checklist_turns_speculation_on_below_the_crossover():
    x = _sweep(PLAIN, SPEC).crossover("throughput_tok_s")
    adv = checklist.advise(_table().iloc[:0], crossovers=[x])
    load_items = [a for a in adv if a.scope == "load"]
    assert len(load_items) == 1
    item = load_items[0]
    assert item.action.startswith("throughput-first: speculate up to ")
    assert item.severity == "info" and item.line().startswith("[OK] load: throughput-first")
    v = checklist.claim12_verdict(adv)
    assert v.status == "supported" and "load boundary" in v.reason
    # speculation that never paid under load: nothing to turn on
    never = find_crossover(LEVELS, [0.5, 0.4, 0.4, 0.3], scenario="concurrency")
    v = checklist.claim12_verdict(checklist.advise(_table().iloc[:0], crossovers=[never]))
    assert v.status == "not shown"
    always = find_crossover(LEVELS, [1.5, 1.4, 1.3, 1.2], scenario="concurrency")
    v = checklist.claim12_verdict(checklist.advise(_table().iloc[:2], crossovers=[always]))
    assert v.status == "not supported" and "no fallback needed" in v.reason


def _twelve_cells(speedup, tokens_per_call, acceptance):
    return pd.DataFrame(dict(category=[c for c in "abcdef" for _ in (2, 4)], gamma=[2, 4] * 6,
                             speedup=speedup, tokens_per_call=tokens_per_call,
                             acceptance=acceptance))  # fmt: skip


SPEED12 = [0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5]


def test_checklist_claim10_verdict():
    # the accepted length follows the speed-up, the raw rate runs against it: beyond chance
    clear = _twelve_cells(SPEED12, [1.5 * x for x in SPEED12], [1.2 - 0.5 * x for x in SPEED12])
    v = checklist.claim10_verdict(clear, draft_cost=0.3)
    assert v.status == "supported" and v.claim == 10 and "bootstrap interval" in v.reason
    assert checklist.claim10_verdict(clear, draft_cost=1.2).status == "not supported"
    assert checklist.claim10_verdict(_table().iloc[:2]).status == "not shown"
    # a table where the raw acceptance rate tracks the speed-up and the accepted length does not
    odd = _twelve_cells(SPEED12, [3.0 - x for x in SPEED12], [0.5 * x for x in SPEED12])
    assert checklist.claim10_verdict(odd).status == "not supported"
    # 4 cells by default (the demo size: 2 categories x 2 gammas): too few to decide either way
    for t in (_table(), _table().assign(tokens_per_call=[1.2, 1.3, 3.1, 2.4])):
        few = checklist.claim10_verdict(t, draft_cost=0.3)
        assert few.status == "cannot tell" and "too few" in few.reason


def test_claim10_needs_the_two_correlations_apart_beyond_chance():
    """Issue-27 re-review: the committed 10 printed "supported" on rank correlations 0.39 (tokens
    per call) against -0.20 (acceptance) over 12 cells -- a gap whose bootstrap interval over
    the cells contains 0. The page's own 12 cells now read "cannot tell"."""
    page = _twelve_cells(
        [0.76, 0.89, 0.78, 0.98, 0.95, 0.88, 0.86, 0.84, 0.87, 0.96, 0.74, 0.77],
        [1.50, 1.60, 1.66, 1.81, 1.96, 2.29, 1.88, 2.09, 1.77, 1.97, 1.67, 1.86],
        [0.26, 0.16, 0.35, 0.22, 0.51, 0.35, 0.47, 0.30, 0.42, 0.26, 0.37, 0.24],
    )
    v = checklist.claim10_verdict(page, draft_cost=0.05)
    assert v.status == "cannot tell" and "contains 0" in v.reason
    # seeded: the same table gives the same interval
    assert checklist.claim10_verdict(page, draft_cost=0.05).reason == v.reason


# -- figures -------------------------------------------------------------------------------------


def test_figures_use_integer_ticks_and_split_calls():
    sw = _sweep(PLAIN, SPEC)
    fig = views.speedup_figure(sw)
    assert list(fig.layout.xaxis.ticktext) == ["1", "2", "4", "8"]
    assert any("stops paying at" in (t.name or "") for t in fig.data)
    fig = views.load_sweep_figure(sw)
    assert list(fig.layout.xaxis.ticktext) == ["1", "2", "4", "8"]
    fig = views.latency_tradeoff_figure(sw)
    assert {t.name for t in fig.data} == {"plain", "spec"}
    assert list(fig.data[0].text) == ["1", "2", "4", "8"]
    bs = _bs_table()
    fig = views.call_split_figure(bs)
    assert [t.name for t in fig.data] == ["verify call (target)", "drafting"]
    assert fig.layout.barmode == "stack"
    assert "2.67" not in str(fig.data[1].text) and "0.37 calls/token" in list(fig.data[1].text)
    bsf = views.batch_sweep_figure(
        pd.DataFrame(dict(batch_size=[1, 1, 4, 4], engine=["p", "s"] * 2,
                          mode=["plain", "speculative"] * 2, tokens_per_s=[1, 2, 3, 2],
                          speedup=[1, 2, 1, 0.7]))
    )  # fmt: skip
    assert list(bsf.layout.xaxis.ticktext) == ["1", "4"]
