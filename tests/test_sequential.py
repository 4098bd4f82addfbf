"""Sequential verdicts (issue 26): anytime-valid under continuous peeking, quick on gross
differences, "equivalent within tau" for honest samplers, clear errors before any model runs.

Every statistical test here is seeded and states its false-positive rate; each has a negative
control that must fail: a fixed-n chi-square test looked at after every batch (optional
stopping breaks its level), a TV bound that forgets all sets but singletons (it stops covering
the true TV), and samplers that really differ (they must not be called equivalent).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

import numpy as np
import pytest
from scipy import stats as st

import specviz as sv
from specviz import stats
from specviz.audit.broken_server import ServerConfig, make_server
from specviz.audit.cli import main as audit_main
from specviz.audit.engines import Engine, EngineSample
from specviz.audit.sequential import audit_sequential, engine_audit_sequential
from specviz.checks import consistency_check
from specviz.checks.sequential import SequentialReport, sequence_views
from specviz.views import sequential_figure
from specviz.views.palette import PALETTE

pytestmark = pytest.mark.usefixtures("one_thread")

LAW = stats.zipf_law(5)


def _draws(rng: np.random.Generator, p: np.ndarray, n: int) -> list[int]:
    return rng.choice(p.size, size=n, p=p).tolist()


def test_null_false_alarms_under_continuous_peeking():
    """400 null runs on an exact multinomial, checked after every batch of 25 up to 1,000 pairs
    at alpha = 0.05: the betting test's false alarms stay within the binomial 99% bound of
    alpha. Negative control: a fixed-n chi-square looked at after every batch exceeds it."""
    rng = np.random.default_rng(26)
    runs, cap, batch, alpha = 400, 1000, 25, 0.05
    alarms = naive = 0
    for _ in range(runs):
        x, y = _draws(rng, LAW, cap), _draws(rng, LAW, cap)
        test = stats.PairedBettingTest()
        hit = peeked = False
        for s in range(batch, cap + 1, batch):
            test.update(x[s - batch : s], y[s - batch : s])
            hit |= test.e_value >= 1 / alpha
            ca, cb = np.bincount(x[:s], minlength=5), np.bincount(y[:s], minlength=5)
            peeked |= stats.homogeneity(ca, cb).pvalue < alpha
        alarms += hit
        naive += peeked
    bound = st.binom.ppf(0.99, runs, alpha)
    assert alarms <= bound, (alarms, bound)
    assert naive > bound, (naive, bound)


class _SingletonsOnly(stats.TVConfidenceSequence):
    """Negative control: the TV bound over single outcomes only (not every set)."""

    def _fix_bins(self, xs, ys):
        super()._fix_bins(xs, ys)
        keep = self._set_b.sum(1) == 1
        self._set_a, self._set_b = self._set_a[keep], self._set_b[keep]
        self._log_w, self._rejected = self._log_w[keep], self._rejected[keep]


def test_tv_bound_covers_the_true_tv_under_peeking():
    """200 runs at a true TV of 0.1 (mass moved from the commoner half of a Zipf law to the
    rarer half), checked every 50 pairs up to 2,000: the upper end falls to the true TV or
    below in at most the binomial 99% bound of alpha = 0.05 runs. Negative control: the same
    bound over singletons only misses the TV carried by a set of outcomes."""
    rng = np.random.default_rng(7)
    tv, runs, alpha = 0.1, 200, 0.05
    q = stats.tv_alternative(LAW, tv)
    misses = {"sets": 0, "singletons": 0}
    for _ in range(runs):
        x, y = _draws(rng, LAW, 2000), _draws(rng, q, 2000)
        for name, cls in (("sets", stats.TVConfidenceSequence), ("singletons", _SingletonsOnly)):
            cs = cls(alpha, tv_tolerance=0.05)
            for s in range(0, 2000, 50):
                cs.update(x[s : s + 50], y[s : s + 50])
            misses[name] += cs.upper <= tv
    bound = st.binom.ppf(0.99, runs, alpha)
    assert misses["sets"] <= bound, misses
    assert misses["singletons"] > bound, misses


def test_a_gross_difference_is_decided_early():
    """Bar: a TV 0.2 difference is rejected with a median below 0.25x the fixed-n samples of
    a design for TV 0.05 (Zipf law on 10 outcomes, 40 seeded runs)."""
    law = stats.zipf_law(10)
    design = stats.sample_size_for_tv(10, 0.05, alpha=0.01, two_sample=True)
    q = stats.tv_alternative(law, 0.2)
    rng = np.random.default_rng(3)
    used = []
    for _ in range(40):
        res = stats.sequential_homogeneity(
            _draws(rng, law, design), _draws(rng, q, design), tv_tolerance=0.05, batch=50
        )
        assert res.decision == "reject", res
        assert res.pvalue <= 0.01 and res.statistic >= 100
        used.append(res.n)
    assert np.median(used) <= 0.25 * design, (np.median(used), design)


def test_an_honest_sampler_is_called_equivalent_and_a_broken_one_never():
    """Same law in both arms: "equivalent within 0.05" before a 1.5x cap in most of 40 runs
    (the benchmark measures >= 80% on 200; 40 runs allow 0.7). Negative control: a TV 0.1
    difference is never called equivalent within 0.05 (at most the binomial bound of alpha)."""
    law = stats.zipf_law(4)
    design = stats.sample_size_for_tv(
        4, 0.05, alpha=0.01, two_sample=True, alternative="least-favourable"
    )
    cap = int(1.5 * design)  # the default cap (checks.sequential.fixed_n_design)
    q = stats.tv_alternative(law, 0.1)
    rng = np.random.default_rng(11)
    honest, broken = [], []
    for _ in range(40):
        for other, out in ((law, honest), (q, broken)):
            res = stats.sequential_homogeneity(
                _draws(rng, law, cap), _draws(rng, other, cap), tv_tolerance=0.05, batch=100
            )
            out.append(res.decision)
    assert honest.count("equivalent") >= 0.7 * 40, honest
    assert "reject" not in honest
    assert broken.count("equivalent") <= st.binom.ppf(0.99, 40, 0.01), broken
    assert broken.count("reject") >= 36, broken


# ------------------------------------------------------------------------------ the cap's design


PEAKED = np.array([0.7, 0.2, 0.07, 0.03])  # one dominant token, like SmolLM2's first one


def _chi2(p: np.ndarray, q: np.ndarray) -> float:
    return float(np.sum((q - p) ** 2 / p))


def test_least_favourable_alternative_is_at_tv_tau_and_the_hardest_move():
    """The least-favourable alternative sits at TV exactly tau, its chi-square distance is
    tau^2 (1/P(S) + 1/P(S^c)) for the split nearest 1/2 -- the smallest over every split
    (brute force over all subsets of an 8-outcome law) -- never above the head-tail move's;
    a dominant token is split off alone; beyond 16 outcomes it is within 0.4% of the bound 4."""
    rng = np.random.default_rng(5)
    laws = [PEAKED, stats.zipf_law(10), stats.uniform_law(6), rng.dirichlet(np.ones(8))]
    for p in laws + [stats.zipf_law(101, 1.2)]:
        for tau in (0.05, 0.2):
            q = stats.tv_alternative(p, tau, kind="least-favourable")
            assert stats.tv_distance(p, q) == pytest.approx(tau, abs=1e-12)
            assert q.min() >= 0 and q.sum() == pytest.approx(1.0)
            head_tail = stats.tv_alternative(p, tau)
            assert _chi2(p, q) <= _chi2(p, head_tail) * (1 + 1e-9)
    for p in laws:
        masses = np.array([p[list(c)].sum() for c in _subsets(p.size)])
        best = float(np.min(1 / masses + 1 / (1 - masses)))
        q = stats.tv_alternative(p, 0.05, kind="least-favourable")
        assert _chi2(p, q) == pytest.approx(0.05**2 * best, rel=1e-9)
    moved = stats.tv_alternative(PEAKED, 0.05, kind="least-favourable") - PEAKED
    assert moved[0] == pytest.approx(-0.05) and np.all(moved[1:] > 0)
    big = stats.zipf_law(101, 1.2)
    q = stats.tv_alternative(big, 0.05, kind="least-favourable")
    assert 4.0 <= _chi2(big, q) / 0.05**2 <= 4.0 * 1.004


def _subsets(k: int):
    import itertools

    for r in range(1, k):
        yield from itertools.combinations(range(k), r)


def test_a_peaked_law_gets_a_larger_cap_than_the_head_tail_design():
    """The default cap is 1.5x the least-favourable design: for a peaked law about twice the
    head-tail design (which promised power only against a move into the rare half); for a
    uniform law the two agree (the control). The report says which basis it used."""
    from specviz.checks.sequential import SequentialRun, fixed_n_design

    def head_tail(p):
        return stats.sample_size_for_tv(p, 0.05, alpha=0.01, two_sample=True)

    n_peaked, basis = fixed_n_design([PEAKED], 0.05, 0.01)
    assert n_peaked > 1.8 * head_tail(PEAKED), (n_peaked, head_tail(PEAKED))
    assert "least-favourable" in basis
    # the design is powered against the head-tail move too (an easier one)
    q = stats.tv_alternative(PEAKED, 0.05)
    assert stats.power_homogeneity(PEAKED, q, n_peaked, 0.01) >= 0.9
    uniform = stats.uniform_law(4)
    assert fixed_n_design([uniform], 0.05, 0.01)[0] == head_tail(uniform)
    run = SequentialRun(1, 1, alpha=0.01, tv_tolerance=0.05, batch=100)
    draws = [[min(i % 10, 7) // 7 + (i % 10 == 9)] for i in range(100)]  # 70% / 20% / 10%
    run.feed([(draws, draws)])
    rep = run.report(seconds=0.0, compared="x")
    assert rep.cap == int(np.ceil(1.5 * rep.fixed_n))
    assert rep.fixed_n > 1.8 * head_tail(np.array([0.7, 0.2, 0.1]))
    assert "least-favourable" in rep.fixed_n_basis and rep.fixed_n_basis in rep.summary()


def test_least_favourable_design_refuses_bad_input():
    with pytest.raises(ValueError, match="kind must be"):
        stats.tv_alternative(PEAKED, 0.05, kind="balanced")
    with pytest.raises(ValueError, match="kind must be"):
        stats.sample_size_for_tv(PEAKED, 0.05, alternative="nope")
    with pytest.raises(ValueError, match="larger side"):  # more than the half it moves from
        stats.tv_alternative(stats.uniform_law(4), 0.6, kind="least-favourable")
    with pytest.raises(ValueError, match="tv must be > 0"):
        stats.sample_size_for_tv(PEAKED, 0.0, alternative="least-favourable")


def test_bad_input_is_refused_before_any_model_runs():
    class NoModel:
        def __getattr__(self, name):
            raise AssertionError(f"the model was used ({name}) before the arguments were checked")

    model = NoModel()
    common = dict(max_new_tokens=2, sequential=True, progress=False)
    for kw, needle in (
        (dict(tv_tolerance=0.0), "tv_tolerance must be in (0, 1)"),
        (dict(tv_tolerance=1.0), "tv_tolerance must be in (0, 1)"),
        (dict(tv_tolerance=float("nan")), "tv_tolerance must be in (0, 1)"),
        (dict(alpha=1.5), "alpha"),
        (dict(alpha=0.0), "alpha"),
        (dict(n_samples=100, batch_size=256), "below one batch"),
    ):
        with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
            consistency_check(model, model, [[0]], **{**common, **kw})
    with pytest.raises(TypeError, match="needs n_samples"):
        consistency_check(model, model, [[0]], max_new_tokens=2, progress=False)
    with pytest.raises(ValueError, match="tv_tolerance"):
        stats.sequential_homogeneity([1], [1], tv_tolerance=-0.1)
    with pytest.raises(ValueError, match="equal lengths"):
        stats.sequential_homogeneity([1, 2], [1])


def test_consistency_check_sequential_on_the_toy_pair():
    """The lossless rule is never flagged; a broken rule is flagged well before the cap; the
    report names its outcome, the samples used and the fixed-n design, and draws its figure."""
    target, draft = sv.toy_pair(5, 2, seed=0)
    kw = dict(max_new_tokens=2, seed=0, batch_size=100, progress=False, sequential=True)
    honest = consistency_check(target, draft, [[0]], tv_tolerance=0.2, **kw)
    broken = consistency_check(target, draft, [[0]], verifier="typical", tv_tolerance=0.2, **kw)
    assert isinstance(honest, SequentialReport)
    assert honest.outcome.startswith(("equivalent", "inconclusive")), honest.summary()
    if honest.decision == "equivalent":  # the bound is exclusive: say what was rejected
        assert f"every TV of {honest.tv_upper:g} or more rejected" in honest.summary()
        assert "upper end 0.2;" not in honest.summary()
    assert honest.samples_per_arm <= honest.cap == int(np.ceil(1.5 * honest.fixed_n))
    assert broken.outcome == "inconsistent" and broken.samples_per_arm < broken.cap
    assert "fixed-n design for TV 0.2 needs" in broken.summary()
    traj = broken.trajectory
    assert list(traj.samples_per_arm) == list(range(100, broken.samples_per_arm + 1, 100))
    assert traj.e_value.iloc[-1] >= 1 / broken.alpha
    fig = honest.figures()["e_value"]
    colours = {t.line.color for t in fig.data if t.name and "verifier" in t.name}
    assert colours == {PALETTE[honest.decision]}
    json.dumps(broken.to_json(), default=str)


def test_sequence_views_mark_ended_continuations():
    views = sequence_views([[1, 2, 3], [1]], 3)
    assert views["token@1"] == [2, "<end>"] and views["bigram@0"] == [(1, 2), (1,)]
    assert views["continuation"] == [(1, 2, 3), (1,)]


def test_sequential_figure_colours_runs_by_verdict():
    traj = np.array([[100, 2.0, 0.3], [200, 150.0, 0.2]])
    fig = sequential_figure(
        {"a": traj, "b": traj}, alpha=0.01, tv_tolerance=0.05, outcomes={"a": "inconsistent"}
    )
    by_name = {t.name: t.line.color for t in fig.data if t.showlegend}
    assert by_name == {"a (inconsistent)": PALETTE["inconsistent"], "b (inconclusive)": "#999999"}


def test_sequential_figure_axis_spans_the_decision_not_the_extremes():
    # issue 27: a caught rule's e-value of 1e92 flattened every curve against 1/alpha = 100
    caught = np.array([[100, 3.0, 0.3], [200, 1e92, 0.2]])
    lossless = np.array([[100, 0.5, 0.2], [200, 0.0, 0.1]])
    fig = sequential_figure({"bug": caught, "ok": lossless}, alpha=0.01, fixed_n=150)
    assert tuple(fig.layout.yaxis.range) == (-3.0, 4.0)  # 1e-3 .. 1e4, 1/alpha inside
    e_traces = [t for t in fig.data if t.showlegend]
    assert list(e_traces[0].y) == [3.0, 1e4] and list(e_traces[0].customdata) == [3.0, 1e92]
    assert list(e_traces[1].y) == [0.5, 1e-3]  # the hover keeps the real value
    assert e_traces[0].marker.symbol != e_traces[1].marker.symbol


# ------------------------------------------------------------------------------ the audit


@pytest.fixture(scope="module")
def servers():
    """Plain sampling, lossless and always_accept speculation on the toy model, in-process."""
    made = {
        "off": make_server(ServerConfig(speculation=False)),
        "on": make_server(ServerConfig(verifier="lossless")),
        "broken": make_server(ServerConfig(verifier="always_accept")),
    }
    for srv in made.values():
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield {k: f"http://127.0.0.1:{srv.server_port}" for k, srv in made.items()}
    for srv in made.values():
        srv.shutdown()
        srv.server_close()


SEQ = dict(max_tokens=3, tv_tolerance=0.3, batch=50, n_samples=200, progress=False)


def test_sequential_audit_flags_the_broken_server_and_resumes(servers, tmp_path):
    honest = audit_sequential(servers["off"], servers["on"], ["ab", "cd"], **SEQ)
    assert not honest.outcome.startswith("inconsistent"), honest.summary()
    out = tmp_path / "b"
    broken = audit_sequential(servers["off"], servers["broken"], ["ab", "cd"], out_dir=out, **SEQ)
    assert broken.outcome == "inconsistent", broken.summary()
    raw = out / "raw.jsonl"
    lines = raw.read_text().splitlines()
    assert len(lines) == 1 + 2 * 2 * broken.samples_per_arm  # header + both arms, both prompts
    # an interrupted run: the last batch lost; rerunning redoes it and decides the same way
    raw.write_text("\n".join(lines[: 1 + 2 * 2 * (broken.samples_per_arm - 50)]) + "\n")
    again = audit_sequential(servers["off"], servers["broken"], ["ab", "cd"], out_dir=out, **SEQ)
    assert (again.outcome, again.samples_per_arm) == (broken.outcome, broken.samples_per_arm)
    assert again.e_value == pytest.approx(broken.e_value)
    assert len(raw.read_text().splitlines()) == len(lines)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["outcome"] == "inconsistent"
    assert summary["samples_per_arm"] == again.samples_per_arm
    assert "plotly" in (out / "report.html").read_text().lower()


def test_sequential_audit_cli_exit_codes(servers, tmp_path, capsys):
    base = ["--a", servers["off"], "--prompt", "ab", "--max-tokens", "3", "--quiet"]
    seq = ["--sequential", "--batch", "50", "--n-samples", "200", "--tv-tolerance", "0.3"]
    assert audit_main(base + ["--b", servers["broken"], "--out", str(tmp_path / "x")] + seq) == 1
    assert "inconsistent" in capsys.readouterr().out
    for bad, needle in (
        (["--tv-tolerance", "1.5"], "--tv-tolerance must be in (0, 1)"),
        (["--n-samples", "20"], "below one batch"),
        (["--batch", "0"], "--batch must be an integer >= 1"),
    ):
        rc = audit_main(base + ["--b", servers["on"]] + seq + bad)
        err = capsys.readouterr().err
        assert rc == 2 and needle in err and "Traceback" not in err, err


# ------------------------------------------------------------------------------ in-process engines


@dataclass
class _Drafty(Engine):
    """A fake in-process engine: 3-token continuations from a fixed law per seed, the draft
    counts of a lossless engine (all accepted) or, with ``reject``, one rejected per request."""

    engine: str = "fake"
    reject: bool = False
    shift: float = 0.0
    loads: int = 0

    def __post_init__(self) -> None:
        self.sampled_draft = True

    def load(self) -> None:
        self.loads += 1

    def close(self) -> None:
        self._loaded = False

    def sample_one(self, prompt, sampling, seed):
        rng = np.random.default_rng(seed)
        p = np.array([0.5, 0.3, 0.2]) + np.array([-self.shift, 0, self.shift])
        toks = (int(rng.choice(3, p=p)), int(10 + rng.integers(0, 3)), 20)
        return EngineSample(toks[: sampling.max_tokens], 0.001, 2, 1 if self.reject else 2)


ENGINE_SEQ = dict(max_tokens=3, tv_tolerance=0.1, batch=50, n_samples=400, progress=False)


def test_sequential_engine_audit_flags_the_broken_engine_and_resumes(tmp_path):
    """specviz's own decoder as an in-process engine: the lossless rule is never flagged, a
    broken rule is flagged before the cap; the raw file is the fixed-n engine audit's (a
    sequential rerun replays it, the fixed-n audit reuses it); each arm's engine is freed
    between batches unless keep_loaded."""
    plain = "specviz:toy,speculate=0"
    honest = engine_audit_sequential(plain, "specviz:toy,verifier=lossless", ["ab"], **ENGINE_SEQ)
    assert not honest.outcome.startswith("inconsistent"), honest.summary()
    out = tmp_path / "e"
    broken = engine_audit_sequential(
        plain, "specviz:toy,verifier=always_accept", ["ab"], out_dir=out, **ENGINE_SEQ
    )
    assert broken.outcome == "inconsistent" and broken.samples_per_arm < 400, broken.summary()
    lines = (out / "raw.jsonl").read_text().splitlines()
    assert len(lines) == 1 + 2 * broken.samples_per_arm
    again = engine_audit_sequential(
        plain, "specviz:toy,verifier=always_accept", ["ab"], out_dir=out, **ENGINE_SEQ
    )
    assert (again.outcome, again.samples_per_arm) == (broken.outcome, broken.samples_per_arm)
    assert again.e_value == pytest.approx(broken.e_value)
    assert len((out / "raw.jsonl").read_text().splitlines()) == len(lines)
    assert json.loads((out / "summary.json").read_text())["outcome"] == "inconsistent"
    # reload per batch (the default) or keep both loaded: the same draws, the same verdict
    used = set()
    for keep in (False, True):
        a, b = _Drafty(spec="plain", label="A"), _Drafty(spec="spec", label="B", shift=0.25)
        rep = engine_audit_sequential(a, b, ["p"], keep_loaded=keep, **ENGINE_SEQ)
        assert rep.outcome == "inconsistent" and rep.samples_per_arm < 400, rep.summary()
        loads = 1 if keep else rep.samples_per_arm // 50
        assert (a.loads, b.loads) == (loads, loads) and loads >= 1
        used.add((rep.samples_per_arm, rep.e_value))
    assert len(used) == 1


def test_sequential_identity_probe_on_engines(tmp_path):
    """The in-process identity probe, sequentially: a lossless engine (every drafted token
    accepted, same law) is not flagged; one rejected draft ends the run inconsistent after the
    first batch, whatever the e-value says (negative control: the same law, so the e-value
    alone would not flag it); an engine that does not sample its drafts is refused."""
    a, b = _Drafty(spec="plain", label="A"), _Drafty(spec="spec", label="B")
    ok = engine_audit_sequential(a, b, ["p"], identity=True, **ENGINE_SEQ)
    assert not ok.outcome.startswith("inconsistent"), ok.summary()
    assert "identity probe: " in ok.compared and "accepted" in ok.compared
    b.reject = True
    bad = engine_audit_sequential(a, b, ["p"], identity=True, **ENGINE_SEQ)
    assert bad.outcome.startswith("inconsistent (identity probe: a draft equal to the target")
    assert bad.samples_per_arm == 50 and bad.e_value < 100, bad.summary()
    assert "50/100 drafted tokens accepted" in bad.summary()
    b.sampled_draft = None
    with pytest.raises(ValueError, match="samples its drafts"):
        engine_audit_sequential(a, b, ["p"], identity=True, **ENGINE_SEQ)


def test_sequential_audit_cli_with_engines(tmp_path, capsys):
    base = ["--a", "specviz:toy,speculate=0", "--prompt", "ab", "--max-tokens", "3", "--quiet"]
    seq = ["--sequential", "--batch", "50", "--n-samples", "400", "--tv-tolerance", "0.1"]
    out = tmp_path / "cli"
    argv = base + ["--b", "specviz:toy,verifier=always_accept", "--out", str(out)] + seq
    assert audit_main(argv) == 1
    assert "inconsistent after" in capsys.readouterr().out and (out / "report.html").is_file()
    # the identity probe: B built from A's spec (draft = target); the toy pair's own draft
    # stands in, so only the refusals are checked here
    for argv, needle in (
        (
            ["--a", "http://127.0.0.1:1", "--b", "http://127.0.0.1:2", "--prompt", "x"]
            + ["--identity-probe"]
            + seq,
            "acceptance check runs at temperature 0",
        ),
        (base + ["--b", "specviz:toy", "--keep-loaded"], "--keep-loaded is for --sequential"),
        (
            base + ["--b", "specviz:toy,speculate=0", "--identity-probe"] + seq,
            "samples its drafts",
        ),
    ):
        assert audit_main(argv) == 2
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err, err
