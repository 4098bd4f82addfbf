"""Load-sweep accounting (issue 27): every token time includes the prompts' prefill, so a
server's busy time never exceeds its span and no request gets its first token before its
batch's prompts were prefilled; identical configurations are measured once; timing verdicts
carry a noise floor measured in the same run.

Timings of real engines are not asserted as numbers: a prefill made slow on purpose (a sleep
inside ``BatchTarget.start``) must show up in every first-token time, whatever the machine.
"""

from __future__ import annotations

import time

import pytest

import specviz as sv
from specviz import load
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
