"""Trace contents, summary metrics and persistence."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import stat

import pytest

import specviz as sv
from specviz.core import trace as trace_module
from specviz.core.trace import (
    TRACE_FORMAT,
    TRACE_VERSION,
    DraftPosition,
    Step,
    Trace,
    TraceFormatError,
)

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


def _sampled(vocab: int, **kw):
    target, draft = sv.toy_pair(vocab, 2, noise=2.0, seed=3)
    return sv.speculative_generate(
        target, draft, [0, 1], gamma=4, max_new_tokens=40, do_sample=True, seed=5, **kw
    ).trace


def test_p_and_q_are_kept_over_one_set_of_ids(monkeypatch):
    """Version 4: a drafted row keeps p and q over the union of both top-k lists, the drafted
    and the emitted token (and the residual's top-k at a rejection), so every bar has both
    values; each list is sorted by its own law, its first k entries that law's top-k. Checked
    with k = 2 against the same run recorded over the whole vocabulary (recording draws no
    randomness, so the runs are the same)."""
    from specviz.decoding import records

    full = _sampled(5)
    monkeypatch.setattr(records, "TOP_K_TRACE", 2)
    cut = _sampled(5)
    assert [s.emitted for s in cut.steps] == [s.emitted for s in full.steps]
    grew = 0
    for s_full, s_cut in zip(full.steps, cut.steps, strict=True):
        for whole, r in zip(s_full.positions, s_cut.positions, strict=True):
            p_all = dict(zip(whole.top_p_ids, whole.top_p_probs, strict=True))
            p = dict(zip(r.top_p_ids, r.top_p_probs, strict=True))
            assert list(r.top_p_probs) == sorted(r.top_p_probs, reverse=True)
            assert all(p[i] == pytest.approx(p_all[i]) for i in p)
            assert set(r.top_p_ids[:2]) == set(whole.top_p_ids[:2])
            if r.emitted_token >= 0:
                assert r.emitted_token in p
            if r.draft_token < 0:  # the bonus slot: no q
                assert r.top_q_ids == ()
                continue
            q_all = dict(zip(whole.top_q_ids, whole.top_q_probs, strict=True))
            q = dict(zip(r.top_q_ids, r.top_q_probs, strict=True))
            assert set(q) == set(p) and r.draft_token in p
            assert list(r.top_q_probs) == sorted(r.top_q_probs, reverse=True)
            assert all(q[i] == pytest.approx(q_all[i]) for i in q)
            assert set(r.top_q_ids[:2]) == set(whole.top_q_ids[:2])
            assert p[r.draft_token] == pytest.approx(r.p_target)
            assert q[r.draft_token] == pytest.approx(r.q_draft)
            grew += len(p) > 2
            if r.emitted_kind == "corrected":  # the corrected token is in the residual's list
                res = dict(zip(r.residual_ids, r.residual_probs, strict=True))
                assert r.emitted_token in res and res[r.emitted_token] > 0
                assert set(res) <= set(p)
                assert list(r.residual_probs) == sorted(r.residual_probs, reverse=True)
    assert grew  # the union is wider than either top-2 list somewhere


def test_never_tested_drafts_have_no_uniform_draw(result):
    rows = [r for s in result.trace.steps for r in s.positions if r.draft_token >= 0]
    assert any(not r.evaluated for r in rows)
    assert all(math.isnan(r.u) for r in rows if not r.evaluated)
    assert all(0 <= r.u < 1 for r in rows if r.evaluated)


def test_version_3_file_loads_with_no_u_at_never_tested_drafts(saved, tmp_path):
    """Version 3 kept the unused draw of a draft after the first rejection; it loads as NaN."""
    _, lines = saved
    header = dict(lines[0], version=3)
    steps = json.loads(json.dumps(lines[1:-1]))
    edited = 0
    for st in steps:
        for row in st["positions"]:
            if not row["evaluated"]:
                row["u"], edited = 0.25, edited + 1
    assert edited
    old = tmp_path / "v3.jsonl"
    _write(old, [header, *steps, lines[-1]])
    loaded = Trace.load(old)
    rows = [r for s in loaded.steps for r in s.positions]
    assert all(math.isnan(r.u) for r in rows if not r.evaluated)
    assert [r.u for r in rows if r.evaluated] == pytest.approx(
        [r.u for s in Trace.load(saved[0]).steps for r in s.positions if r.evaluated],
        nan_ok=True,
    )


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


# --------------------------------------------------------------------------- file safety


def _nan_trace() -> Trace:
    """A small trace with NaN and +-inf in every float field of Step and DraftPosition."""
    nan, inf = math.nan, math.inf
    drafted = DraftPosition(
        position=0,
        draft_token=3,
        q_draft=nan,
        p_target=inf,
        accept_prob=-inf,
        u=0.25,
        accepted=True,
        evaluated=True,
        emitted_token=3,
        emitted_kind="accepted",
        top_p_ids=(3, 1),
        top_p_probs=(0.5, nan),
        top_q_ids=(3,),
        top_q_probs=(inf,),
        residual_ids=(1,),
        residual_probs=(-inf,),
    )
    bonus = DraftPosition(1, -1, nan, nan, nan, nan, False, False, 4, "bonus")
    steps = (
        Step(0, 0, 1, 1, (3, 4), "bonus", nan, inf, -inf, (drafted, bonus)),
        Step(1, 2, 0, 0, (2,), "target", 0.5, 0.25, 1.0),
    )
    return Trace(steps, {"temperature": 1.0, "missing": nan, "tuple": (1, 2)})


def _same_float(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _assert_same_trace(a: Trace, b: Trace) -> None:
    assert len(a.steps) == len(b.steps)
    for sa, sb in zip(a.steps, b.steps, strict=True):
        for f in dataclasses.fields(Step):
            if f.name == "positions":
                continue
            x, y = getattr(sa, f.name), getattr(sb, f.name)
            assert _same_float(x, y) if f.type == "float" else x == y, (f.name, x, y)
        assert len(sa.positions) == len(sb.positions)
        for pa, pb in zip(sa.positions, sb.positions, strict=True):
            for f in dataclasses.fields(DraftPosition):
                x, y = getattr(pa, f.name), getattr(pb, f.name)
                if f.type == "float":
                    assert _same_float(x, y), (f.name, x, y)
                elif f.type == "tuple[float, ...]":
                    assert type(y) is tuple and len(x) == len(y), (f.name, x, y)
                    assert all(map(_same_float, x, y)), (f.name, x, y)
                else:
                    assert x == y and type(x) is type(y), (f.name, x, y)


def _strict_loads(line: str):
    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name} in {line!r}")

    return json.loads(line, parse_constant=refuse)


def test_save_writes_strict_json_with_end_record(result, tmp_path):
    assert TRACE_VERSION == 4
    path = result.trace.save(tmp_path / "t.jsonl")
    text = path.read_text()
    assert text.endswith("\n")
    lines = [_strict_loads(line) for line in text.splitlines()]
    assert lines[0]["format"] == TRACE_FORMAT and lines[0]["version"] == TRACE_VERSION
    assert lines[-1] == {"end": True, "steps": len(result.trace.steps)}
    assert len(lines) == len(result.trace.steps) + 2
    assert "NaN" not in text and "Infinity" not in text
    assert any(p.u != p.u for s in result.trace.steps for p in s.positions)  # NaN u written...
    assert '"u": null' in text  # ... as null
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]  # no temp file left


def test_nan_and_inf_round_trip_in_every_float_field(tmp_path):
    trace = _nan_trace()
    path = trace.save(tmp_path / "nan.jsonl")
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    for line in text.splitlines():
        _strict_loads(line)
    step0 = json.loads(text.splitlines()[1])
    assert step0["draft_time"] is None
    assert step0["verify_time"] == "inf" and step0["end_time"] == "-inf"
    assert step0["positions"][0]["q_draft"] is None
    assert step0["positions"][0]["top_p_probs"] == [0.5, None]
    loaded = Trace.load(path)
    _assert_same_trace(trace, loaded)
    # meta has no field types: NaN comes back as None, tuples as lists
    assert loaded.meta == {"temperature": 1.0, "missing": None, "tuple": [1, 2]}


def test_unsanitised_nan_cannot_be_written(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_module, "_sanitize", lambda obj: obj)
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        _nan_trace().save(tmp_path / "nan.jsonl")
    assert list(tmp_path.iterdir()) == []


def _write(path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture
def saved(result, tmp_path):
    """(path, parsed lines) of a version-2 trace."""
    path = result.trace.save(tmp_path / "t.jsonl")
    return path, [json.loads(line) for line in path.read_text().splitlines()]


def test_truncated_at_a_line_boundary_is_refused(saved, tmp_path):
    _, lines = saved
    n = len(lines) - 2
    cut = tmp_path / "cut.jsonl"
    _write(cut, lines[:-1])  # every step, no end record
    with pytest.raises(TraceFormatError, match=rf"truncated trace file: no end record after {n} "):
        Trace.load(cut)
    _write(cut, lines[:3])  # cut after the second step
    with pytest.raises(TraceFormatError, match=r"truncated.*after 2 step\(s\).*incomplete"):
        Trace.load(cut)


def test_header_only_file_is_refused(saved, tmp_path):
    _, lines = saved
    header_only = tmp_path / "header.jsonl"
    _write(header_only, lines[:1])
    with pytest.raises(TraceFormatError, match=r"truncated trace file: no end record after 0 "):
        Trace.load(header_only)
    # an empty trace is fine once it has its end record
    empty = Trace(()).save(tmp_path / "empty.jsonl")
    assert Trace.load(empty).steps == ()


def test_cut_mid_line_says_truncated(saved, tmp_path):
    path, _ = saved
    text = path.read_text()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text[: len(text) - 5])  # inside the end record, no final newline
    with pytest.raises(TraceFormatError, match=r"corrupt JSON .*looks truncated"):
        Trace.load(cut)


def test_end_record_count_mismatch_is_refused(saved, tmp_path):
    _, lines = saved
    n = len(lines) - 2
    short = tmp_path / "short.jsonl"
    _write(short, [*lines[:2], *lines[3:]])  # one step line lost, end record kept
    with pytest.raises(TraceFormatError, match=rf"says {n} step\(s\) but the file holds {n - 1}"):
        Trace.load(short)
    bad_end = tmp_path / "bad_end.jsonl"
    _write(bad_end, [*lines[:-1], {"end": True, "steps": str(n)}])
    with pytest.raises(TraceFormatError, match="is not a valid end record"):
        Trace.load(bad_end)


@pytest.mark.parametrize("extra", ["garbage", '{"step": 99}', '{"end": true, "steps": 0}'])
def test_content_after_end_record_is_refused(saved, tmp_path, extra):
    path, lines = saved
    trailing = tmp_path / "trailing.jsonl"
    trailing.write_text(path.read_text() + extra + "\n")
    no = len(lines) + 1
    with pytest.raises(
        TraceFormatError, match=rf"line {no} comes after the end record \(line {no - 1}\)"
    ):
        Trace.load(trailing)
    blank = tmp_path / "blank.jsonl"
    blank.write_text(path.read_text() + "\n\n")  # trailing blank lines are harmless
    assert len(Trace.load(blank).steps) == len(lines) - 2


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (0, r"version 0 is invalid \(versions start at 1"),
        (-3, r"version -3 is invalid"),
        (1.0, r"version 1.0 is not an integer"),
        (2.5, r"version 2.5 is not an integer"),
        ("2", r"version '2' is not an integer"),
        (True, r"version True is not an integer"),
        (None, r"version None is not an integer"),
        ("missing", r"the trace header has no format version"),
        (TRACE_VERSION + 1, r"version 5 is newer than this specviz understands \(4\); upgrade"),
    ],
)
def test_bad_versions_are_refused(saved, tmp_path, version, message):
    _, lines = saved
    header = dict(lines[0])
    if version == "missing":
        del header["version"]
    else:
        header["version"] = version
    bad = tmp_path / "bad.jsonl"
    _write(bad, [header, *lines[1:]])
    with pytest.raises(TraceFormatError, match=message):
        Trace.load(bad)


def test_version_2_refuses_nan_tokens(saved, tmp_path):
    path, _ = saved
    text = path.read_text()
    assert '"u": null' in text
    edited = tmp_path / "edited.jsonl"
    edited.write_text(text.replace('"u": null', '"u": NaN', 1))
    with pytest.raises(TraceFormatError, match="not strict JSON .*constant NaN"):
        Trace.load(edited)


def test_version_1_file_still_loads(result, tmp_path):
    """The format written before version 2: NaN tokens, no end record."""
    header = {"format": TRACE_FORMAT, "version": 1, "meta": result.trace.meta}
    old = tmp_path / "old.jsonl"
    with old.open("w") as f:
        f.write(json.dumps(header, default=str) + "\n")
        for s in result.trace.steps:
            f.write(json.dumps(dataclasses.asdict(s)) + "\n")
    assert "NaN" in old.read_text()
    loaded = Trace.load(old)
    _assert_same_trace(result.trace, loaded)
    assert loaded.meta == json.loads(json.dumps(result.trace.meta))
    assert loaded.summary() == result.trace.summary()
    header_only = tmp_path / "old_header.jsonl"
    header_only.write_text(json.dumps(header, default=str) + "\n")
    assert Trace.load(header_only).steps == ()  # version 1 has no end record to miss


def test_interrupted_save_leaves_the_old_file_intact(result, tmp_path, monkeypatch):
    path = result.trace.save(tmp_path / "t.jsonl")
    before = path.read_bytes()
    real_dumps, calls = json.dumps, []

    def failing_dumps(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # header and one step written, then the "disk" fails
            raise OSError("simulated failure midway")
        return real_dumps(*args, **kwargs)

    monkeypatch.setattr(json, "dumps", failing_dumps)
    with pytest.raises(OSError, match="simulated failure midway"):
        _nan_trace().save(path)
    with pytest.raises(OSError, match="simulated failure midway"):
        calls.clear()
        _nan_trace().save(tmp_path / "new.jsonl")
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]  # no new, no temp file
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError("fsync failed")))
    with pytest.raises(OSError, match="fsync failed"):
        _nan_trace().save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


@pytest.mark.parametrize("suffix", [".parquet", ".pq", ".csv", ".arrow", ".feather", ".PARQUET"])
def test_table_suffixes_are_refused(tmp_path, suffix):
    path = tmp_path / f"t{suffix}"
    with pytest.raises(ValueError, match=r"Trace.save writes JSON Lines \(\.jsonl\)") as info:
        _nan_trace().save(path)
    assert "trace.to_dataframe().to_parquet(path)" in str(info.value)
    assert not path.exists() and list(tmp_path.iterdir()) == []
    path.write_bytes(b"PAR1\x00\x00")
    with pytest.raises(TraceFormatError, match=r"Trace.load reads the JSON Lines \(\.jsonl\)"):
        Trace.load(path)


@pytest.mark.parametrize("name", ["t.jsonl", "t.json", "trace", "run.speculative.jsonl"])
def test_accepted_names_round_trip(tmp_path, name):
    trace = _nan_trace()
    _assert_same_trace(trace, Trace.load(trace.save(tmp_path / "sub" / name)))
