"""Issue 28, files and folders: trace files with wrong field types are refused when read (C13),
model folders without their files get a message saying so (C12). The model cache's bit rot
(C14) is pinned in tests/test_models.py next to the other cache damage."""

from __future__ import annotations

import json

import pytest

import specviz as sv
from specviz.core.trace import TraceFormatError
from specviz.fixtures.llamas import tiny_llama
from specviz.models import load_model, load_pair, load_tokenizer

T, D = tiny_llama(50, seed=0), tiny_llama(50, seed=1)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("traces")
    chain = sv.speculative_generate(T, D, [0, 3], max_new_tokens=12, seed=0, do_sample=True)
    tree = sv.speculative_generate(
        T, sv.TreeDrafter(D, (2, 2)), [0, 3], max_new_tokens=8, seed=0, do_sample=True
    )
    return {"chain": chain.trace.save(root / "chain.jsonl"), "tree": tree.trace.save(root / "tree.jsonl")}  # fmt: skip


def _edited(src, tmp_path, edit, line: int = 1):
    lines = src.read_text().splitlines(keepends=True)
    d = json.loads(lines[line])
    edit(d)
    lines[line] = json.dumps(d) + "\n"
    out = tmp_path / "edited.jsonl"
    out.write_text("".join(lines))
    return out


def _set(key, value):
    return lambda d: d.update({key: value})


def _pos(key, value):
    return lambda d: d["positions"][0].update({key: value})


def _node(key, value):
    return lambda d: d["tree"][0].update({key: value})


@pytest.mark.parametrize(
    "kind, edit, message",
    [
        ("chain", _set("accepted", "three"), r"field 'accepted' is 'three', expected int"),
        ("chain", _set("accepted", 99), r"the step accepts 99 of \d+ drafts"),
        ("chain", _set("accepted", -1), r"field 'accepted' is -1, expected >= 0"),
        ("chain", _set("emitted", "12"), r"field 'emitted' is '12', expected a list of integers"),
        ("chain", _set("final_kind", "maybe"), r"field 'final_kind' is 'maybe', expected one of"),
        ("chain", _set("draft_time", "fast"), r"field 'draft_time' is 'fast', expected float"),
        ("chain", _pos("q_draft", "x"), r"a drafted position field 'q_draft' is 'x', expected float"),
        ("chain", _pos("accepted", "yes"), r"field 'accepted' is 'yes', expected bool"),
        ("chain", _pos("top_p_probs", ["a"]), r"'top_p_probs' is \['a'\], expected a list of numbers"),
        ("tree", _node("status", 5), r"a tree node field 'status' is 5, expected str"),
        ("tree", _node("status", "maybe"), r"field 'status' is 'maybe', expected one of"),
        ("tree", _node("parent", 0.5), r"field 'parent' is 0.5, expected int"),
    ],
)  # fmt: skip
def test_trace_fields_of_the_wrong_type_are_refused_when_read(
    traces, tmp_path, kind, edit, message
):
    """The report's C13: such files loaded and failed later in summary() (or gave an
    acceptance rate above 1); now the line and the field are named at load."""
    bad = _edited(traces[kind], tmp_path, edit)
    with pytest.raises(TraceFormatError, match=rf"line 2 is not a valid step \(.*{message}"):
        sv.Trace.load(bad)


def test_intact_traces_still_load_negative_control(traces):
    for path in traces.values():
        tr = sv.Trace.load(path)
        assert tr.summary().acceptance_rate <= 1
        tr.to_dataframe()


def test_a_step_line_that_is_not_an_object_and_a_bad_meta(traces, tmp_path):
    lines = traces["chain"].read_text().splitlines(keepends=True)
    (tmp_path / "a.jsonl").write_text("".join([lines[0], "[1, 2]\n", *lines[2:]]))
    with pytest.raises(TraceFormatError, match="line 2 is not a valid step .*list, not a JSON"):
        sv.Trace.load(tmp_path / "a.jsonl")
    bad = _edited(traces["chain"], tmp_path, _set("meta", 5), line=0)
    with pytest.raises(
        TraceFormatError, match="the header's meta is int 5, expected a JSON object"
    ):
        sv.Trace.load(bad)


def test_a_set_in_meta_round_trips_as_a_sorted_list(tmp_path):
    r = sv.speculative_generate(T, D, [0, 3], max_new_tokens=3)
    tr = sv.Trace(r.trace.steps, {**r.trace.meta, "ids": {3, 1, 2}})
    assert sv.Trace.load(tr.save(tmp_path / "s.jsonl")).meta["ids"] == [1, 2, 3]


# -- C12: folders without their files ----------------------------------------------------------


def test_a_folder_without_config_or_tokenizer_files_is_named(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match=rf"{empty} is not a model folder: it has no config.json \(it holds nothing\)"):  # fmt: skip
        load_model(str(empty), progress=False)
    weights = tmp_path / "weights-only"
    D.save_pretrained(weights)
    with pytest.raises(FileNotFoundError, match=rf"{weights} has no tokenizer files"):
        load_tokenizer(str(weights), progress=False)
    with pytest.raises(FileNotFoundError, match=rf"{weights} has no tokenizer files"):
        load_pair(str(weights), str(weights), progress=False)
    # negative control: the same folder loads as a model
    assert load_model(str(weights), progress=False).config.vocab_size == 50
