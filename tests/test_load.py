"""The load generator: its virtual-clock server against independent reference computations,
the Poisson arrivals against the exponential law (with a negative control), the crossover
finder, and the real batched engines on toy models and a tiny random Llama.

Timings of real engines are never asserted (they are noise on a shared machine); the fake
``fixed_engine`` has a known timing model, so every latency it produces has an exact value.
"""

from __future__ import annotations

import doctest
import math
from types import SimpleNamespace

import pytest
import torch
from scipy import stats as sps

import specviz as sv
from specviz import load
from specviz.load import (
    LoadPrompt,
    ServedBatch,
    batch_sweep,
    find_crossover,
    fixed_engine,
    load_sweep,
    make_engine,
    poisson_arrivals,
    serve,
)

PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]


def test_docstring_examples_run():
    res = doctest.testmod(load, optionflags=doctest.ELLIPSIS)
    assert res.attempted >= 5 and res.failed == 0


# -- the virtual clock --------------------------------------------------------------------------


def _lindley(arrivals, service):
    """Reference FIFO single server, one request at a time: start = max(arrival, free)."""
    free, starts = 0.0, []
    for a in arrivals:
        s = max(a, free)
        starts.append(s)
        free = s + service
    return starts


def test_open_loop_batch_one_matches_the_lindley_recursion():
    eng = fixed_engine(tokens=3, step_time=0.5, prefill_time=0.2)  # service 1.7 s
    rate, n = 0.8, 40  # offered load 1.36: the queue builds up
    res = serve(eng, PROMPTS, rate=rate, n_requests=n, max_batch=1, seed=3, progress=False)
    arrivals = poisson_arrivals(rate, n, seed=3)
    starts = _lindley(arrivals, 1.7)
    for r, a, s in zip(res.requests, arrivals, starts, strict=True):
        assert r.arrival == pytest.approx(a)
        assert r.start == pytest.approx(s)
        assert r.ttft == pytest.approx(s - a + 0.7)  # queueing + prefill + one step
        assert r.completion_time == pytest.approx(s - a + 1.7)
        assert r.itl == pytest.approx((0.5, 0.5))
    assert max(r.queue_time for r in res.requests) > 5  # it really queued
    summ = res.summary()
    assert summ["busy_s"] == pytest.approx(1.7 * n)
    assert summ["utilization"] <= 1.0 + 1e-12


def test_static_batching_late_arrivals_wait_for_the_whole_batch():
    eng = fixed_engine(tokens=4, step_time=1.0)  # a batch takes 4 s
    res = serve(eng, PROMPTS, rate=1000.0, n_requests=5, max_batch=3, seed=0, progress=False)
    # all 5 arrive within milliseconds; the idle server jumps to the first arrival and takes
    # only that one; the other four wait for its whole 4 s batch, then go 3 + 1
    b = res.batches
    assert [x.size for x in b] == [1, 3, 1]
    arrivals = poisson_arrivals(1000.0, 5, seed=0)
    assert [x.start for x in b] == pytest.approx([arrivals[0], arrivals[0] + 4, arrivals[0] + 8])
    late = res.requests[-1]
    assert late.queue_time == pytest.approx(arrivals[0] + 8 - arrivals[-1])
    assert late.ttft == pytest.approx(late.queue_time + 1.0)


def test_closed_loop_concurrency_exact_throughput_and_latency():
    # c clients, batch <= c: each batch serves every client, rows cost step(c) per token
    for c in (1, 2, 4):
        eng = fixed_engine(tokens=5, step_time=0.1, per_row_time=0.05)
        res = serve(eng, PROMPTS, concurrency=c, n_requests=3 * c, max_batch=8, progress=False)
        step = 0.1 + 0.05 * c
        assert [x.size for x in res.batches] == [c, c, c]
        assert res.summary()["throughput_tok_s"] == pytest.approx(c / step)
        assert all(r.ttft == pytest.approx(step) for r in res.requests)
        assert {r.client for r in res.requests} == set(range(c))


def test_closed_loop_think_time_and_max_batch():
    eng = fixed_engine(tokens=2, step_time=1.0)  # 2 s per batch
    res = serve(
        eng, PROMPTS, concurrency=3, n_requests=6, max_batch=2, think_time=0.5, progress=False
    )
    # t=0: clients 0,1 served (0-2 s); client 2 waits; at t=2 client 2 runs alone (clients
    # 0,1 re-arrive at 2.5): 2-4 s; then clients 0,1 (4-6 s), then client 2 (arrived 4.5)
    assert [x.size for x in res.batches] == [2, 1, 2, 1]
    assert [x.start for x in res.batches] == pytest.approx([0.0, 2.0, 4.0, 6.0])
    waited = [r for r in res.requests if r.client == 2][0]
    assert waited.queue_time == pytest.approx(2.0)


def test_requests_carry_prompt_labels_in_a_seeded_order():
    lp = [LoadPrompt((1, 2), "a", "structured"), LoadPrompt((3,), "b", "code")]
    eng = fixed_engine(tokens=1, step_time=0.1)
    r1 = serve(eng, lp, rate=5.0, n_requests=6, max_batch=2, seed=7, progress=False)
    r2 = serve(eng, lp, rate=50.0, n_requests=6, max_batch=2, seed=7, progress=False)
    order = [r.prompt_id for r in r1.requests]
    assert order == [r.prompt_id for r in r2.requests]  # same workload at every rate
    assert sorted(order) == ["a", "a", "a", "b", "b", "b"]  # cycled through all prompts
    df = r1.to_dataframe()
    assert set(df.category) == {"structured", "code"} and len(df) == 6


def test_service_cache_reuses_identical_batches():
    calls = []

    class Counting:
        name, speculative = "counting", False

        def __call__(self, prompts):
            calls.append(len(prompts))
            return fixed_engine(tokens=2, step_time=0.1)(prompts)

    cache: dict = {}
    lp = [[1, 2]]  # one prompt: every batch of the same size is the same batch
    serve(Counting(), lp, concurrency=2, n_requests=6, max_batch=2, service_cache=cache,
          progress=False)  # fmt: skip
    assert calls == [2]
    res = serve(Counting(), lp, concurrency=2, n_requests=4, max_batch=2, service_cache=cache,
                progress=False)  # fmt: skip
    assert calls == [2] and all(b.reused for b in res.batches)


# -- Poisson arrivals --------------------------------------------------------------------------


def test_poisson_gaps_are_exponential_with_a_negative_control():
    """KS test of the gaps against Exp(rate) at alpha = 0.001 (fixed seed). Control: gaps of
    the right mean but uniform must be rejected."""
    rate, n = 3.0, 5000
    t = torch.tensor([0.0] + poisson_arrivals(rate, n, seed=11), dtype=torch.float64)
    gaps = (t[1:] - t[:-1]).numpy()
    assert sps.kstest(gaps, "expon", args=(0, 1 / rate)).pvalue > 1e-3
    wrong = torch.rand(n, generator=torch.Generator().manual_seed(11)).numpy() * 2 / rate
    assert sps.kstest(wrong, "expon", args=(0, 1 / rate)).pvalue < 1e-6


# -- crossover ----------------------------------------------------------------------------------


def test_find_crossover_statuses_and_interpolation():
    c = find_crossover([1, 2, 4, 8], [1.5, 1.2, 0.9, 0.7])
    assert c.status == "crosses" and c.sign_changes == 1
    assert c.level == pytest.approx(2 * 2 ** (0.2 / 0.3))  # log-linear between 2 and 4
    assert find_crossover([1, 2], [0.8, 0.9]).status == "never_pays"
    assert find_crossover([1, 2], [1.8, 1.1]).status == "always_pays"
    up = find_crossover([0, 1, 2], [0.5, 0.9, 1.3])  # level 0: linear axis
    assert up.status == "pays_above" and up.level == pytest.approx(1.25)
    noisy = find_crossover([1, 2, 3, 4], [1.2, 0.99, 1.01, 0.8])
    assert noisy.status == "crosses" and noisy.sign_changes == 3
    assert "noisy" in noisy.describe()
    # unsorted input is sorted by level first
    assert find_crossover([4, 1, 2], [0.9, 1.5, 1.2]).level == pytest.approx(c.level)


def test_sweep_finds_the_exact_crossover_of_known_engines():
    # speculative: fast alone, expensive per row; plain: slower alone, cheap per row.
    # step ratio plain/spec = (0.1 + 0.01 c) / (0.05 + 0.04 c) = 1 at c = 5/3
    spec = fixed_engine(tokens=8, step_time=0.05, per_row_time=0.04, name="s", speculative=True)
    plain = fixed_engine(tokens=8, step_time=0.1, per_row_time=0.01, name="p")
    sw = load_sweep(
        None,
        None,
        PROMPTS,
        concurrencies=[1, 2, 4],
        n_requests=8,
        max_batch=8,
        max_new_tokens=8,
        engines=[plain, spec],
        progress=False,
    )
    sp = sw.speedups("throughput_tok_s")
    expected = [(0.1 + 0.01 * c) / (0.05 + 0.04 * c) for c in (1, 2, 4)]
    assert sp["speedup"].tolist() == pytest.approx(expected)
    x = sw.crossover("throughput_tok_s")
    s1, s2 = expected[0], expected[1]
    assert x.status == "crosses"
    assert x.level == pytest.approx(math.exp(math.log(2) * (s1 - 1) / (s1 - s2)))
    # TTFT is lower-is-better: same ratio, same crossover
    assert sw.crossover("ttft_p50").level == pytest.approx(x.level)
    assert set(sw.table["mode"]) == {"plain", "speculative"} and len(sw.table) == 6


# -- errors ------------------------------------------------------------------------------------


def test_bad_inputs_are_named():
    eng = fixed_engine(tokens=1, step_time=0.1)
    with pytest.raises(ValueError, match="exactly one of rate"):
        serve(eng, PROMPTS, n_requests=2, max_batch=1)
    with pytest.raises(ValueError, match="exactly one of rate"):
        serve(eng, PROMPTS, rate=1.0, concurrency=2, n_requests=2, max_batch=1)
    with pytest.raises(ValueError, match="rate must be a positive"):
        serve(eng, PROMPTS, rate=0.0, n_requests=2, max_batch=1)
    with pytest.raises(ValueError, match="concurrency must be an integer"):
        serve(eng, PROMPTS, concurrency=0, n_requests=2, max_batch=1)
    with pytest.raises(ValueError, match="max_batch"):
        serve(eng, PROMPTS, rate=1.0, n_requests=2, max_batch=0)
    with pytest.raises(ValueError, match="non-empty list"):
        serve(eng, [], rate=1.0, n_requests=2, max_batch=1)
    with pytest.raises(ValueError, match="no tokens"):
        serve(eng, [[]], rate=1.0, n_requests=2, max_batch=1)
    with pytest.raises(TypeError, match="load_prompts_for"):
        serve(eng, ["hello"], rate=1.0, n_requests=2, max_batch=1)
    with pytest.raises(ValueError, match="needs a draft"):
        make_engine(None, None, speculative=True, max_new_tokens=4)
    with pytest.raises(ValueError, match="token times"):
        ServedBatch(((1, 2),), ((0.1,),), 0.1)
    with pytest.raises(ValueError, match="both modes"):
        sw = load_sweep(None, None, PROMPTS, rates=[1.0], n_requests=2, max_batch=1,
                        max_new_tokens=1, engines=[eng], progress=False)  # fmt: skip
        sw.speedups("throughput_tok_s")
    with pytest.raises(ValueError, match="unknown metric"):
        sw.speedups("nope")

    class Short:
        name, speculative = "short", False

        def __call__(self, prompts):
            return ServedBatch(((1,),), ((0.1,),), 0.1)

    with pytest.raises(RuntimeError, match="returned 1 rows for a batch of 2"):
        serve(Short(), PROMPTS, concurrency=2, n_requests=2, max_batch=2, progress=False)


# -- the real batched engines ------------------------------------------------------------------


def test_toy_models_served_tokens_equal_serial_greedy_decoding():
    """Through the real batch engines (different prompt lengths in one batch), every request's
    tokens equal serial plain greedy decoding of its prompt, speculation on or off."""
    target, draft = sv.toy_pair(5, 2, seed=0)
    prompts = [[0, 1], [2], [3, 4, 0, 1]]
    ref = {
        tuple(p): sv.autoregressive_generate(target, p, max_new_tokens=6).new_tokens
        for p in prompts
    }
    for spec in (False, True):
        eng = make_engine(target, draft, speculative=spec, max_new_tokens=6, gamma=3)
        res = serve(eng, prompts, rate=50.0, n_requests=6, max_batch=3, progress=False)
        for r in res.requests:
            pid = int(r.prompt_id[1:])
            assert list(r.tokens) == ref[tuple(prompts[pid])], (spec, r.prompt_id)
            assert len(r.token_times) == 6
            assert all(b >= a for a, b in zip(r.token_times, r.token_times[1:], strict=False))
        s = res.summary()
        assert s["new_tokens"] == 36
        if spec:
            assert 0 <= s["acceptance_rate"] <= 1 and s["tokens_per_target_call"] >= 1
        else:  # one target call per token and row
            assert s["tokens_per_target_call"] == 1.0


def test_a_policy_engine_falls_back_on_large_batches():
    """gamma may be a policy: AcceptanceEMA(max_batch=1) speculates for requests served
    alone and decodes plainly in larger batches, with the same greedy tokens."""
    from specviz.drafting.policies import AcceptanceEMA

    target, draft = sv.toy_pair(5, 2, seed=0)
    prompts = [[0, 1], [2], [3, 4, 0, 1]]
    policy = AcceptanceEMA(3, c=0.1, prior=0.9, max_batch=1)
    eng = make_engine(target, draft, speculative=True, max_new_tokens=6, gamma=policy)
    assert eng.name == f"speculative({policy.name})"
    alone = eng([prompts[0]])
    together = eng(prompts)
    assert alone.drafted > 0 and together.drafted == 0
    assert together.new_tokens[0] == alone.new_tokens[0]
    assert together.target_calls == 6  # plain steps: one call per token
    with pytest.raises(ValueError, match="gamma must be"):
        make_engine(target, draft, speculative=True, max_new_tokens=6, gamma=0)


def test_tiny_llama_sweep_runs_end_to_end():
    """A random tiny Llama and its one-layer early exit through both batched engines:
    identical greedy tokens, a tidy table and a crossover verdict (whatever it is)."""
    from specviz.drafting import early_exit_model
    from specviz.fixtures.shapes import random_llama

    target = random_llama("tiny", seed=0)
    draft = early_exit_model(target, 1)
    prompts = [[1, 5, 9, 3], [7, 2], [4, 4, 4, 4, 4, 8]]
    sw = load_sweep(
        target,
        draft,
        prompts,
        concurrencies=[1, 3],
        n_requests=6,
        max_batch=4,
        max_new_tokens=5,
        gamma=2,
        progress=False,
    )
    toks = {}
    for res in sw.results:
        for r in res.requests:
            toks.setdefault(r.request_id, set()).add(r.tokens)
    assert all(len(v) == 1 for v in toks.values())  # plain == speculative, request by request
    assert sw.crossover("throughput_tok_s").status in {
        "crosses",
        "never_pays",
        "always_pays",
        "pays_above",
    }
    df = batch_sweep(
        target, draft, prompts, batch_sizes=[1, 2], max_new_tokens=4, gamma=2, progress=False
    )
    assert len(df) == 4 and (df[df["mode"] == "plain"]["speedup"] == 1.0).all()
    assert (df["tokens"] == df["batch_size"] * 4).all()


def test_figures_draw_the_measured_numbers():
    from specviz.views import load as loadplots

    spec = fixed_engine(tokens=4, step_time=0.05, per_row_time=0.04, name="s", speculative=True)
    plain = fixed_engine(tokens=4, step_time=0.1, per_row_time=0.01, name="p")
    sw = load_sweep(None, None, PROMPTS, concurrencies=[1, 2, 4], n_requests=4, max_batch=4,
                    max_new_tokens=4, engines=[plain, spec], progress=False)  # fmt: skip
    fig = loadplots.speedup_figure(sw, ["throughput_tok_s"])
    assert list(fig.data[0].y) == pytest.approx(sw.speedups("throughput_tok_s")["speedup"])
    assert fig.data[1].x[0] == pytest.approx(sw.crossover("throughput_tok_s").level)
    fig = loadplots.load_sweep_figure(sw, ["ttft_p50"])
    assert {t.name for t in fig.data} == {"p", "s"}
    res = sw.results[0]
    fig = loadplots.timeline_figure(res)
    queued = next(t for t in fig.data if t.name == "queued")
    assert len(queued.x) == 3 * len(res.requests)
    df = batch_sweep(None, None, PROMPTS, batch_sizes=[1, 2], max_new_tokens=4,
                     engines=[plain, spec], progress=False)  # fmt: skip
    fig = loadplots.batch_sweep_figure(df)
    assert len(fig.data) == 3  # two tokens/s lines + one speed-up line


def test_figures_with_two_speculative_engines():
    from specviz.views import load as loadplots

    plain = fixed_engine(tokens=4, step_time=0.1, per_row_time=0.01, name="p")
    fast = fixed_engine(tokens=4, step_time=0.05, per_row_time=0.04, name="s1", speculative=True)
    slow = fixed_engine(tokens=4, step_time=0.2, per_row_time=0.0, name="s2", speculative=True)
    sw = load_sweep(None, None, PROMPTS, concurrencies=[1, 2, 4], n_requests=4, max_batch=4,
                    max_new_tokens=4, engines=[plain, fast, slow], progress=False)  # fmt: skip
    with pytest.raises(ValueError, match="pass engine="):
        loadplots.speedup_figure(sw)
    f1 = loadplots.speedup_figure(sw, ["throughput_tok_s"], engine="s1")
    f2 = loadplots.speedup_figure(sw, ["throughput_tok_s"], engine="s2")
    assert list(f1.data[0].y) != list(f2.data[0].y)
    assert list(f2.data[0].y) == pytest.approx(
        sw.speedups("throughput_tok_s", engine="s2")["speedup"]
    )
    fig = loadplots.load_sweep_figure(sw, ["ttft_p50"])
    colors = {t.name: t.line.color for t in fig.data}
    assert len(set(colors.values())) == 3, colors


# -- the deployment checklist (specviz.checklist) -------------------------------------------


class _ToyTokenizer:
    """Words -> toy ids (vocabulary 5), no chat template."""

    eos_token_id = None

    def encode(self, text):
        return [len(w) % 5 for w in text.split()][:12] or [0]


def test_checklist_runs_tables_and_report_on_toy_models(tmp_path):
    from specviz.lab import checklist
    from specviz.prompts import load_prompts

    target, draft = sv.toy_pair(5, 2, seed=0)
    prompts = load_prompts(categories=["structured", "code"], per_category=1)
    runs = checklist.category_runs(
        target, draft, _ToyTokenizer(), prompts, gammas=[1, 3], max_new_tokens=12, progress=False
    )
    assert len(runs) == 2 * 3 and set(runs.gamma) == {0, 1, 3}
    assert runs.same_as_plain.all()  # greedy speculation reproduces plain greedy decoding
    spec = runs[runs.gamma > 0]
    assert (spec.accepted <= spec.drafted).all() and (
        spec.first_rejections <= spec.steps_with_drafts
    ).all()
    table = checklist.category_table(runs)
    base = table[table.gamma == 0]
    assert (base.speedup == 1.0).all() and base.acceptance.isna().all()
    s = table[table.gamma > 0]
    assert s.acceptance.between(0, 1).all() and (s.tokens_per_call >= 1).all()
    row = runs[(runs.category == "code") & (runs.gamma == 3)].iloc[0]
    got = table[(table.category == "code") & (table.gamma == 3)].iloc[0]
    assert got.tokens_per_call == pytest.approx(row.tokens / row.target_calls)
    env = checklist.environment("toy", "toy-draft", target=None, sampling={"t": 0.7})
    assert {"torch", "transformers", "prompts file", "sampling: t"} <= set(env)
    advice = checklist.advise(table, greedy_verdict="identical", consistency_verdict="consistent")
    path = checklist.write_report(
        tmp_path / "r" / "report.md",
        title="toy",
        environment=env,
        sections=[("per category", table), ("note", "a | b")],
        advice=advice,
    )
    text = path.read_text()
    assert "## Decisions" in text and "| category | gamma |" in text
    assert all(a.line() in text for a in advice)


def test_checklist_advice_follows_the_thresholds():
    import pandas as pd

    from specviz.lab import checklist

    table = pd.DataFrame(
        dict(
            category=["a", "a", "b", "b"],
            gamma=[2, 4, 2, 4],
            speedup=[1.3, 1.6, 0.9, 0.8],
            acceptance=[0.8, 0.75, 0.3, 0.2],
            tokens_per_call=[2.4, 3.1, 1.3, 1.2],
            first_rejection_share=[0.1, 0.1, 0.55, 0.7],
        )
    )
    adv = checklist.advise(table)
    assert [(a.scope, a.action) for a in adv] == [
        ("category a", "speculate with gamma 4"),
        ("category b", "plain decoding"),
        ("category b", "shorten gamma or change the drafter"),
        ("overall", "not cleared: no greedy check; no statistical check"),  # always last
    ]
    # a higher bar turns category a off too; a lower alarm flags nothing new for a (10%)
    adv = checklist.advise(table, min_speedup=2.0, first_rejection_alarm=0.6)
    assert [a.action for a in adv[:-1]] == ["plain decoding", "plain decoding"]
    xs = [
        find_crossover(
            [1, 4, 16], [1.4, 1.1, 0.7], metric="throughput_tok_s", scenario="concurrency"
        ),
        find_crossover([1, 4], [0.5, 0.4], metric="ttft_p50", scenario="concurrency"),
        find_crossover([1, 4], [1.5, 1.4], metric="tpot_p50", scenario="concurrency"),
    ]
    adv = checklist.advise(table.iloc[:0], crossovers=xs, greedy_verdict="bug",
                           consistency_verdict="inconsistent")  # fmt: skip
    # one load item, one decision per metric family (issue 27: "[OK] paid up to 2 clients"
    # next to "[WARN] keep speculation off" read as a contradiction); TTFT lost everywhere
    # and TPOT won everywhere: the latency family is a trade-off (not "it lost"), throughput
    # has a boundary
    load_item = adv[0]
    assert load_item.scope == "load" and [a.scope for a in adv].count("load") == 1
    assert load_item.action == (
        "throughput-first: speculate up to 4 concurrent clients, plain decoding from 16; "
        "latency-first: a trade-off at every tested load: speculation gained on tpot_p50 and "
        "lost on ttft_p50 -- choose by the latency that matters"
    )
    assert [d.status for d in load_item.decisions] == ["boundary", "trade-off"]
    assert [a.severity for a in adv[1:]] == ["stop", "stop", "stop"]
    assert (adv[-1].scope, adv[-1].action) == ("overall", "do not deploy")
    assert checklist.markdown_table(pd.DataFrame({"x": ["a|b"]})).endswith("| a\\|b |")


def test_sweep_with_two_speculative_engines_needs_a_name():
    plain = fixed_engine(tokens=2, step_time=0.1, name="p")
    g2 = fixed_engine(tokens=2, step_time=0.05, name="g2", speculative=True)
    g4 = fixed_engine(tokens=2, step_time=0.2, name="g4", speculative=True)
    sw = load_sweep(None, None, PROMPTS, concurrencies=[1, 2], n_requests=2, max_batch=2,
                    max_new_tokens=2, engines=[plain, g2, g4], progress=False)  # fmt: skip
    with pytest.raises(ValueError, match="several speculative engines"):
        sw.crossover()
    assert sw.speedups("throughput_tok_s", engine="g2")["speedup"].tolist() == pytest.approx([2, 2])
    assert sw.crossover("tpot_p50", engine="g4").status == "never_pays"
    with pytest.raises(ValueError, match="no speculative engine 'g8'"):
        sw.speedups("ttft_p50", engine="g8")


def test_mixed_prompts_are_distinct_and_round_robin():
    from specviz.prompts import CATEGORIES

    lp = load.mixed_prompts(_ToyTokenizer(), 20)
    assert len({p.prompt_id for p in lp}) == 20
    assert [p.category for p in lp[:8]] == list(CATEGORIES)
    two = load.mixed_prompts(_ToyTokenizer(), 4, categories=["code", "structured"])
    assert [p.category for p in two] == ["code", "structured", "code", "structured"]
    with pytest.raises(ValueError, match="distinct prompts"):
        load.mixed_prompts(_ToyTokenizer(), 31, categories=["code", "structured"])


def test_batch_sweep_warns_when_rows_repeat_prompts():
    eng = fixed_engine(tokens=2, step_time=0.1)
    with pytest.warns(UserWarning, match="exceeds the 1 distinct prompts"):
        batch_sweep(None, None, [[1, 2]], batch_sizes=[2], max_new_tokens=2, engines=[eng],
                    progress=False)  # fmt: skip


def test_each_batch_gets_its_own_seed_and_keeps_it():
    """Rows are seeded seed + i; without a per-batch offset every request served alone would
    replay one random stream (with sampling: correlated requests)."""
    from specviz.load.engines import _batch_seed

    a, b = _batch_seed(0, [[1, 2]]), _batch_seed(0, [[1, 3]])
    assert a != b and a == _batch_seed(0, [[1, 2]]) and _batch_seed(5, [[1, 2]]) == a + 5
    target, draft = sv.toy_pair(5, 2, seed=0)
    eng = make_engine(target, draft, speculative=False, max_new_tokens=8, do_sample=True)
    outs = {eng([p]).new_tokens[0] for p in ([0], [1], [2], [3], [4], [0, 1], [1, 0])}
    assert len(outs) > 1  # different prompts alone in a batch: different streams
    assert eng([[0, 1]]).new_tokens == eng([[0, 1]]).new_tokens  # same batch, same draws


class _FirstCallCommitsFive:
    """A speculative engine whose first call, right after a 0.1 s prefill, commits 5 tokens
    of each row at once (a model draft drafts from the prompt: gamma 4, all accepted), and a
    second call the sixth; each call takes 0.03 s."""

    name, speculative = "spec", True

    def __call__(self, prompts):
        times = (0.13,) * 5 + (0.16,)
        n = len(prompts)
        return ServedBatch(((1,) * 6,) * n, (times,) * n, 0.16, 2, 8 * n, 8 * n, 2 * n,
                           prefill_seconds=0.1)  # fmt: skip


def test_decode_phase_counts_only_tokens_made_after_the_prefill():
    """Wrong number 5 of the issue-27 review (09's what-if, 5.06x at gamma 4): the decoding
    phase is everything after the measured prefill; tokens a first call committed together with
    the first token are not credited to a window that starts after them."""
    plain = fixed_engine(tokens=6, step_time=0.02, prefill_time=0.1, name="plain")
    df = batch_sweep(None, None, PROMPTS, batch_sizes=[1, 2], max_new_tokens=6,
                     engines=[plain, _FirstCallCommitsFive()], progress=False)  # fmt: skip
    spec = df[df["mode"] == "speculative"].set_index("batch_size")
    pl = df[df["mode"] == "plain"].set_index("batch_size")
    # plain: 6 tokens in the 0.12 s after the prefill; speculative: 6 tokens in 0.06 s
    assert pl.loc[1, "decode_tokens_per_s"] == pytest.approx(6 / 0.12)
    assert spec.loc[1, "decode_tokens_per_s"] == pytest.approx(6 / 0.06)
    assert spec.loc[2, "decode_speedup"] == pytest.approx(2.0)
    # the bound: a call costs at least a decode step, so no more than the tokens per call
    assert (spec["decode_speedup"] <= spec["tokens_per_target_call"]).all()
    # the old count (5 tokens after the first over the 0.03 s after it) gave 3.33x > 3
    assert spec.loc[2, "decode_speedup"] != pytest.approx((5 / 0.03) / (5 / 0.10))


class _VaryingEngine:
    """Each call a different speed (factor 1, 3, 2, ...): prefill, drafting and verifying all
    scale with it, and the fake clock below advances by the call's service time."""

    name, speculative = "spec", True

    def __init__(self, factors, clock):
        self.factors, self.clock, self.calls = list(factors), clock, 0

    def __call__(self, prompts):
        f = self.factors[self.calls % len(self.factors)]
        self.calls += 1
        n = len(prompts)
        served = ServedBatch(((1, 1),) * n, ((0.5 * f, 1.0 * f),) * n, 1.0 * f, 2, 2 * n, 2 * n,
                             2 * n, draft_time=0.2 * f, verify_time=0.3 * f,
                             prefill_seconds=0.4 * f)  # fmt: skip
        self.clock.now += served.service_time
        return served


def test_a_batch_row_comes_from_one_repeat_so_its_parts_add_up():
    """Issue-27 re-review of 09: the batch table printed the median time beside the last
    repeat's prefill, drafting and verifying (10.099 + 1.898 + 4.794 = 16.79 s against
    15.854 s). Every column of a row now comes from the median repeat."""
    clock = SimpleNamespace(now=0.0)
    eng = _VaryingEngine([9.0, 1.0, 3.0, 2.0], clock)  # warm-up 9, then repeats 1, 3, 2
    df = batch_sweep(None, None, PROMPTS, batch_sizes=[1], max_new_tokens=2, engines=[eng],
                     repeats=3, progress=False, clock=lambda: clock.now)  # fmt: skip
    row = df.iloc[0]
    assert row.seconds == pytest.approx(2.0)  # the median repeat (factor 2)
    assert row.prefill_s + row.draft_seconds + row.verify_seconds == pytest.approx(0.9 * 2.0)
    assert row.decode_seconds == pytest.approx(2.0 - 0.8)
    assert row.relative_range == pytest.approx((3.0 - 1.0) / 2.0)
    # the last repeat at an extreme (factor 3): the parts still follow the kept time
    clock.now, eng2 = 0.0, _VaryingEngine([9.0, 2.0, 1.0, 3.0], clock)
    df = batch_sweep(None, None, PROMPTS, batch_sizes=[1], max_new_tokens=2, engines=[eng2],
                     repeats=3, progress=False, clock=lambda: clock.now)  # fmt: skip
    row = df.iloc[0]
    assert row.seconds == pytest.approx(2.0)
    assert row.prefill_s + row.draft_seconds + row.verify_seconds == pytest.approx(1.8)
