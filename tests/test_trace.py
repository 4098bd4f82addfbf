"""Trace contents, summary metrics and persistence."""

from __future__ import annotations

import json
import math

import pytest

import specviz as sv
from specviz.trace import TRACE_VERSION, Trace, TraceFormatError

TARGET, DRAFT = sv.toy_pair(5, 2, seed=0)


@pytest.fixture(scope="module")
def result():
    return sv.speculative_generate(
        TARGET, DRAFT, [0, 1], gamma=3, max_new_tokens=40, do_sample=True, seed=11
    )


def test_dataframe_has_the_contract_columns(result):
    df = result.trace.to_dataframe()
    for col in [
        "step",
        "position",
        "draft_token",
        "q_draft",
        "p_target",
        "accept_prob",
        "u",
        "accepted",
        "emitted_token",
        "emitted_kind",
        "draft_time",
        "verify_time",
        "top_p_ids",
        "top_q_ids",
        "residual_ids",
    ]:
        assert col in df.columns, col
    assert set(df.emitted_kind) <= {"accepted", "corrected", "bonus", "discarded"}
    # accept_prob is min(1, p/q) at every drafted position
    drafted = df[df.draft_token >= 0]
    expect = (drafted.p_target / drafted.q_draft).clip(upper=1.0)
    assert (abs(drafted.accept_prob - expect) < 1e-6).all()
    # accepted iff u < accept_prob, up to the first rejection
    evaluated = drafted[drafted.evaluated]
    assert ((evaluated.u < evaluated.accept_prob) == evaluated.accepted).all()
    # residual top-k is present exactly at corrected positions
    assert (df[df.emitted_kind == "corrected"].residual_ids.map(len) > 0).all()
    assert (df[df.emitted_kind != "corrected"].residual_ids.map(len) == 0).all()


def test_emitted_tokens_rebuild_the_output(result):
    df = result.trace.to_dataframe()
    emitted = df[df.emitted_token >= 0].sort_values("position").emitted_token.tolist()
    assert emitted == result.new_tokens


def test_summary_metrics(result):
    s = result.summary()
    assert s.target_calls == result.target_calls == len(result.trace.steps)
    assert s.new_tokens == len(result.new_tokens) == 40
    assert math.isclose(s.mean_accepted_length, 40 / s.target_calls)
    assert s.accepted == sum(result.accepted_counts)
    assert math.isclose(s.acceptance_rate, s.accepted / s.drafted)
    steps = result.trace.steps
    reached0 = sum(1 for st in steps if st.drafted >= 1)
    kept0 = sum(1 for st in steps if st.accepted >= 1)
    assert math.isclose(s.per_position_acceptance[0], kept0 / reached0)
    assert sum(s.rejection_positions) == sum(1 for st in steps if st.accepted < st.drafted)


def test_save_load_roundtrip(result, tmp_path):
    path = result.trace.save(tmp_path / "t.jsonl")
    loaded = Trace.load(path)
    assert loaded.meta == json.loads(json.dumps(result.trace.meta))
    a, b = result.trace.to_dataframe(), loaded.to_dataframe()
    assert a.drop(columns=["u"]).equals(b.drop(columns=["u"]))
    assert ((a.u == b.u) | (a.u.isna() & b.u.isna())).all()
    assert loaded.summary() == result.trace.summary()


def test_corrupt_and_newer_files_are_clear_errors(result, tmp_path):
    path = result.trace.save(tmp_path / "t.jsonl")
    lines = path.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([lines[0], lines[1][:-7]]))
    with pytest.raises(TraceFormatError, match="line 2 is corrupt JSON"):
        Trace.load(bad)
    header = json.loads(lines[0])
    header["version"] = TRACE_VERSION + 1
    newer = tmp_path / "newer.jsonl"
    newer.write_text("\n".join([json.dumps(header), *lines[1:]]))
    with pytest.raises(TraceFormatError, match="newer than this specviz"):
        Trace.load(newer)
    other = tmp_path / "other.jsonl"
    other.write_text('{"hello": 1}\n')
    with pytest.raises(TraceFormatError, match="not a specviz trace header"):
        Trace.load(other)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(TraceFormatError, match="empty"):
        Trace.load(empty)
    missing = tmp_path / "missing.jsonl"
    missing.write_text(lines[0] + "\n" + json.dumps({"step": 0}) + "\n")
    with pytest.raises(TraceFormatError, match="line 2 is not a valid step"):
        Trace.load(missing)


def test_trace_off_still_counts(result):
    r = sv.speculative_generate(
        TARGET, DRAFT, [0, 1], gamma=3, max_new_tokens=40, do_sample=True, seed=11, trace=False
    )
    assert r.trace is None and r.new_tokens == result.new_tokens
    assert r.accepted_counts == result.accepted_counts
    with pytest.raises(ValueError, match="trace=False"):
        r.summary()


def test_baseline_trace_has_one_step_per_token():
    r = sv.autoregressive_generate(TARGET, [0], max_new_tokens=5, do_sample=True, seed=0)
    assert r.target_calls == 5 and len(r.trace.steps) == 5
    assert all(s.final_kind == "target" for s in r.trace.steps)
