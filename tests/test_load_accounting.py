"""Load-sweep accounting (issue 27): every token time includes the prompts' prefill, so a
server's busy time never exceeds its span and no request gets its first token before its
batch's prompts were prefilled; identical configurations are measured once; timing verdicts
carry a noise floor measured in the same run.

Timings of real engines are not asserted as numbers: a prefill made slow on purpose (a sleep
inside ``BatchTarget.start``) must show up in every first-token time, whatever the machine.
"""

from __future__ import annotations

import math
import time

import pytest

import specviz as sv
from specviz.decoding.targets import BatchTarget
from specviz.load import fixed_engine, load_sweep, make_engine, serve

SLOW_PREFILL = 0.25  # seconds added to every batch's prefill


@pytest.fixture
def slow_prefill(monkeypatch):
    start = BatchTarget.start

    def slow(self, prompts, hidden):
        time.sleep(SLOW_PREFILL)
        return start(self, prompts, hidden)

    monkeypatch.setattr(BatchTarget, "start", slow)


@pytest.mark.parametrize("speculative", [False, True])
def test_token_times_include_the_prefill(slow_prefill, speculative):
    """The clock starts before the prefill: the first token of every row comes after it,
    the measured prefill is reported, and no prefill-sized gap is left after the last token
    (the bug: the clock started after the prefill, so the token times missed it and the
    service time did not)."""
    target, draft = sv.toy_pair(5, 2, seed=0)
    eng = make_engine(target, draft, speculative=speculative, max_new_tokens=4, gamma=2)
    served = eng([[0, 1], [2], [3, 4, 0]])
    assert served.prefill_seconds >= SLOW_PREFILL
    for times in served.token_times:
        assert times[0] >= served.prefill_seconds  # TTFT >= the measured prefill
    last = max(t[-1] for t in served.token_times)
    assert served.service_time - last < SLOW_PREFILL
    assert served.prefill_time >= SLOW_PREFILL  # time to the batch's first token


def test_closed_loop_utilisation_and_ttft_count_the_prefill(slow_prefill):
    """Closed loop through the real engine: utilisation <= 100%, every TTFT >= its queueing
    plus the prefill, and the clients' span (first arrival to last token) covers the busy
    time up to less than one prefill."""
    target, draft = sv.toy_pair(5, 2, seed=0)
    prompts = [[0, 1], [2], [3, 4, 0], [1, 1]]
    for spec in (False, True):
        eng = make_engine(target, draft, speculative=spec, max_new_tokens=3, gamma=2)
        res = serve(eng, prompts, concurrency=2, n_requests=6, max_batch=2, progress=False)
        s = res.summary()
        assert s["utilization"] <= 1.0
        for r in res.requests:
            assert r.ttft >= r.queue_time + SLOW_PREFILL
        token_span = max(r.finish for r in res.requests) - min(r.arrival for r in res.requests)
        assert s["busy_s"] - token_span < SLOW_PREFILL


def test_fixed_engine_reports_its_prefill():
    served = fixed_engine(tokens=3, step_time=0.5, prefill_time=0.2)([[1]])
    assert served.prefill_seconds == 0.2 and served.token_times[0][0] == pytest.approx(0.7)


# -- identical configurations, interleaving, repeats and the noise floor ---------------------


class Drifting:
    """A fake engine whose every call is slower than the last (a machine slowing down): the
    order in which engines are measured decides who looks faster, unless they interleave."""

    def __init__(self, name, clock, speculative=False, step=0.1):
        self.name, self.speculative, self.clock, self.step = name, speculative, clock, step

    def __call__(self, prompts):
        self.clock[0] += 1
        slow = 1.0 + 0.01 * self.clock[0]
        return fixed_engine(tokens=4, step_time=self.step * slow)(prompts)


def test_interleaved_sweep_cancels_drift_and_measures_the_noise_floor():
    """Two identical engines on a drifting machine: measured engine by engine, the second
    looks ~2x slower; interleaved level by level with the order rotated between repeats,
    their medians agree within the measured noise floor, which is reported."""
    clock = [0]
    a, b = Drifting("plain", clock), Drifting("twin", clock, speculative=True)
    sw = load_sweep(None, None, [[1, 2], [3]], concurrencies=[1, 2, 4], n_requests=8,
                    max_batch=4, max_new_tokens=4, engines=[a, b], repeats=2,
                    reuse_service=False, warmup=False, progress=False)  # fmt: skip
    assert sw.repeats == 2 and len(sw.results) == 12 and len(sw.table) == 6
    assert set(sw.runs["repeat"]) == {0, 1}
    floor = sw.noise_floor("throughput_tok_s")
    assert 0 < floor < 0.5
    sp = sw.speedups("throughput_tok_s")["speedup"]
    assert ((sp - 1).abs() <= floor).all()
    # one repeat: no noise floor to report
    one = load_sweep(None, None, [[1, 2]], concurrencies=[1], n_requests=2, max_batch=1,
                     max_new_tokens=4, engines=[a, b], progress=False)  # fmt: skip
    assert math.isnan(one.noise_floor())


def test_a_fallback_below_its_threshold_reuses_the_constant_gamma_measurement():
    """At one client every batch has one row, so BatchFallback runs its constant gamma step
    for step: the sweep measures it once for both engines, and claim 12's verdict cannot be
    decided by timing noise between identical configurations there."""
    from specviz.drafting.policies import BatchFallback

    target, draft = sv.toy_pair(5, 2, seed=0)
    kw = dict(max_new_tokens=4, speculative=True)
    const = make_engine(target, draft, gamma=2, **kw)
    fb = make_engine(target, draft, gamma=BatchFallback(2, max_batch=1), **kw)
    plain = make_engine(target, speculative=False, max_new_tokens=4)
    assert fb.config_key([[0, 1]]) == const.config_key([[0, 1]])
    assert fb.config_key([[0, 1], [2]]) != const.config_key([[0, 1], [2]])
    sw = load_sweep(None, None, [[0, 1], [2], [3, 4]], concurrencies=[1], n_requests=3,
                    max_batch=2, max_new_tokens=4, engines=[plain, const, fb],
                    progress=False)  # fmt: skip
    t = sw.table.set_index("engine")
    assert t.loc[fb.name, "throughput_tok_s"] == t.loc[const.name, "throughput_tok_s"]
    fb_runs = [r for r in sw.results if r.engine == fb.name]
    assert all(b.reused for r in fb_runs for b in r.batches)


def test_verdicts_do_not_read_noise_as_an_effect():
    """Speed-ups inside the noise floor decide nothing: claim 4 is 'not shown' when no level
    paid beyond the noise, claim 5 needs a win and a loss beyond it."""
    from specviz.load import claim4_verdict, find_crossover

    x = find_crossover([1, 2, 4], [1.08, 0.97, 0.93])
    assert claim4_verdict(x).status == "supported"  # no noise floor: the old reading
    assert claim4_verdict(x, noise=0.1).status == "not shown"
    assert claim4_verdict(find_crossover([1, 2, 4], [1.5, 1.1, 0.7]), noise=0.1).supported


def test_accounting_line_states_both_checks_and_fails_a_prefill_left_out(slow_prefill):
    from specviz.load import ServedBatch, accounting_line

    target, draft = sv.toy_pair(5, 2, seed=0)
    eng = make_engine(target, draft, speculative=True, max_new_tokens=3, gamma=2)
    sw = load_sweep(None, None, [[0, 1], [2], [3, 4, 0]], concurrencies=[1, 2], n_requests=3,
                    max_batch=2, max_new_tokens=3, engines=[make_engine(target, speculative=False,
                    max_new_tokens=3), eng], progress=False)  # fmt: skip
    line = accounting_line(sw)
    assert line.startswith("Accounting (4 runs): server busy at most ") and "FAILED" not in line

    class OldClock:  # the bug: token times from after the prefill, service time with it
        name, speculative = "old", False

        def __call__(self, prompts):
            times = tuple((0.05, 0.10) for _ in prompts)
            toks = tuple((1, 2) for _ in prompts)
            return ServedBatch(toks, times, 0.1 + SLOW_PREFILL, prefill_seconds=SLOW_PREFILL)

    old = load_sweep(None, None, [[1], [2]], concurrencies=[2], n_requests=4, max_batch=2,
                     max_new_tokens=2, engines=[OldClock()], progress=False)  # fmt: skip
    assert "FAILED" in accounting_line(old)
