"""Power-aware verdicts (issue 19): a check that could not see its stated TV threshold says
"inconclusive (could not see TV < x)" -- in the report, in the checklist's advice and in the
markdown report -- and is never counted as a pass; a powered lossless check says consistent;
a broken verifier at an adequate size says inconsistent and stops the checklist. Also the
readable greedy summary, token text on the first-token bars and exact ties in the margin
figure. (What notebooks 05, 06 and 10 print in their small configuration is checked where
they run: ``tests/test_notebooks.py``, ``SMALL_PRINTS``.)"""

from __future__ import annotations

import pandas as pd
import pytest

import specviz as sv
from specviz import stats
from specviz.checks.greedy import GreedyReport
from specviz.checks.report import outcome_phrase
from specviz.lab import checklist
from specviz.views.reports import consistency_figures, first_token_names
from specviz.views.stats import margin_figure

TARGET, DRAFT = sv.toy_pair(5, 2, seed=0)
pytestmark = pytest.mark.usefixtures("one_thread")

TABLE = pd.DataFrame(
    dict(
        category=["code", "code"],
        gamma=[2, 4],
        speedup=[1.4, 1.2],
        acceptance=[0.8, 0.7],
        tokens_per_call=[2.5, 2.9],
        first_rejection_share=[0.1, 0.2],
    )
)


def _check(n: int, verifier: str = "lossless", **kw):
    return sv.consistency_check(TARGET, DRAFT, [[0]], n_samples=n, max_new_tokens=2, seed=0,
                                n_boot=20, progress=False, verifier=verifier,
                                batch_size=min(n, 2000), **kw)  # fmt: skip


@pytest.fixture(scope="module")
def small():
    """60 samples per arm, as notebook 10's small configuration: no rejection, no power."""
    return _check(60)


@pytest.fixture(scope="module")
def big():
    return _check(3000)


@pytest.fixture(scope="module")
def broken():
    return _check(3000, "always_accept")


def _lines(advice) -> str:
    return "\n".join(a.line() for a in advice)


def test_an_underpowered_check_never_prints_a_pass(small, tmp_path):
    assert small.verdict == "consistent" and small.outcome == "inconclusive"
    mdt = small.min_detectable_tv
    assert mdt > small.tv_threshold
    phrase = outcome_phrase(small)
    assert phrase == f"inconclusive (could not see TV < {mdt:.3g})"
    assert small.summary().startswith("verdict: inconclusive (")
    assert "verdict: consistent" not in small.summary()
    advice = checklist.advise(TABLE, greedy_verdict="identical", consistency=small)
    stat = [a for a in advice if a.action.startswith("statistical check")]
    assert len(stat) == 1 and stat[0].severity == "warn"
    assert stat[0].line().startswith(f"[WARN] consistency: statistical check: {phrase}")
    text = _lines(advice)
    assert "[OK] consistency: statistical check" not in text and "[OK] overall" not in text
    overall = advice[-1]
    assert overall.scope == "overall" and overall.severity == "warn"
    assert overall.action == "not cleared: the statistical check could not tell at this sample size"
    assert phrase in overall.reason and "60 samples per arm" in overall.reason
    report = checklist.write_report(tmp_path / "r.md", title="t", environment={"x": "y"},
                                    sections=[("Statistical consistency", small.summary())],
                                    advice=advice)  # fmt: skip
    md = report.read_text()
    decisions = md.split("## Decisions (from the measurements below)")[1]
    assert decisions.lstrip().startswith(f"**{overall.line()}**")  # the overall item first
    assert "inconclusive (could not see TV <" in md and "[OK] overall" not in md


def test_a_stated_threshold_below_the_detectable_tv_is_inconclusive_at_any_verdict(big):
    """Notebook 06's case: the threshold is a bug's own exact TV, far below what the samples
    can see; a lossless check then cannot pass either."""
    assert big.outcome == "consistent"
    strict = _check(3000, tv_threshold=0.01)
    assert strict.verdict == "consistent" and strict.outcome == "inconclusive"
    assert outcome_phrase(strict).startswith("inconclusive (could not see TV < ")
    overall = checklist.advise(TABLE, greedy_verdict="identical", consistency=strict)[-1]
    assert overall.action.startswith("not cleared: the statistical check could not tell")


def test_a_powered_lossless_check_prints_consistent(big):
    assert big.outcome == "consistent" and big.min_detectable_tv <= big.tv_threshold
    assert big.summary().startswith("verdict: consistent (")
    assert outcome_phrase(big).startswith(
        f"consistent (a first-token TV of {big.min_detectable_tv:.3g} or more would have been seen"
    )
    advice = checklist.advise(TABLE, greedy_verdict="identical", consistency=big)
    text = _lines(advice)
    assert "[OK] consistency: statistical check: consistent -- no test rejected" in text
    assert "3000 samples per arm" in text
    assert advice[-1].line().startswith("[OK] overall: cleared: speculate where")


def test_a_broken_verifier_at_adequate_size_prints_inconsistent_and_stops(broken):
    assert broken.outcome == "inconsistent"
    assert outcome_phrase(broken) == "inconsistent (a test rejected at alpha=0.01)"
    advice = checklist.advise(TABLE, greedy_verdict="identical", consistency=broken)
    stat = [a for a in advice if a.scope == "consistency" and a.severity == "stop"]
    assert len(stat) == 1 and "inconsistent (a test rejected" in stat[0].reason
    assert (advice[-1].action, advice[-1].severity) == ("do not deploy", "stop")


def test_verdict_strings_without_power_are_not_a_pass():
    bare = checklist.advise(TABLE, greedy_verdict="identical", consistency_verdict="consistent")
    assert "[OK] consistency: statistical" not in _lines(bare)
    assert bare[-1].action == "not cleared: the statistical check's power is not stated"
    inconclusive = checklist.advise(
        TABLE, greedy_verdict="identical", consistency_verdict="inconclusive"
    )
    assert inconclusive[-2].severity == "warn" and inconclusive[-1].severity == "warn"
    nothing = checklist.advise(TABLE)
    assert nothing[-1].action == "not cleared: no greedy check; no statistical check"


def test_greedy_report_has_a_readable_one_line_summary():
    r = stats.greedy_consistency(
        [[1, 2, 3], [4, 5, 6], [7, 8]], [[1, 2, 3], [4, 9, 6], [7, 0]], [None, 0.0, 2.5]
    )
    report = GreedyReport(r, (), ())
    line = report.summary()
    assert "GreedyConsistencyResult" not in line and "\n" not in line
    assert line.startswith("greedy: bug -- 1 of 3 prompts identical (33%)")
    assert "prompt 1 diverged at token 1, an exact tie (margin 0) (numerics: below 0.05)" in line
    assert "prompt 2 diverged at token 1, margin 2.5 (bug: not below 0.05)" in line
    assert str(report) == line and f"{report}" == line
    clean = GreedyReport(stats.greedy_consistency([[1]], [[1]], [None]), (), ())
    assert clean.summary() == "greedy: identical -- 1 of 1 prompts identical (100%)"


def test_first_token_bars_show_token_text_when_a_tokenizer_is_known(small):
    names = ["a", " b", "\n", "d", "e"]
    fig = consistency_figures(small, tokenizer=names)["first_token"]
    x = list(fig.data[0].x)
    ids = [int(i) for i in small.first_token_counts[0]]
    assert sorted(x) == sorted(first_token_names(ids, names))
    assert set(x) <= {"a", "·b", "↵", "d", "e"}
    assert fig.layout.xaxis.type == "category"
    assert "inconclusive: could not see TV <" in fig.layout.title.text
    plain = consistency_figures(small)["first_token"]  # no tokenizer: ids, marked as ids
    assert all(s.startswith("#") for s in plain.data[0].x)
    # two ids decoding alike stay two bars
    assert first_token_names([0, 1], ["x", "x"]) == ["x #0", "x #1"]


def test_margin_figure_counts_and_labels_exact_ties():
    fig = margin_figure(
        {"bf16": [0.0, 0.0, 0.3, 2.0], "fp32": [0.5, 1.0]},
        [dict(label="bf16 plain", margin=0.0), dict(label="fp32 lookup", margin=0.01)],
    )
    names = [t.name for t in fig.data]
    assert "bf16: 4 greedy steps, 2 exact ties (margin 0, drawn at 0.0001)" in names
    assert "fp32: 2 greedy steps" in names
    marks = [t for t in fig.data if t.name.startswith("first divergences")]
    assert [list(t.text) for t in marks] == [["bf16 plain (exact tie)"], ["fp32 lookup"]]
    # issue 27 re-review: several divergences in one bin are one cross with their count
    fig = margin_figure(
        {"bf16": [0.0, 0.3, 2.0]},
        [dict(label=f"bf16 run{i}", margin=0.0) for i in range(3)]
        + [dict(label="bf16 other", margin=0.25), dict(label="bf16 far", margin=2.0)],
    )
    (marks,) = [t for t in fig.data if t.name.startswith("first divergences")]
    assert marks.name == "first divergences, bf16 (5)"
    assert list(marks.text) == ["3 divergences (exact ties)", "bf16 other", "bf16 far"]
    assert (
        marks.hovertext[0].count("<br>") == 2 and "bf16 run2: margin 0.0000" in marks.hovertext[0]
    )
