"""The grid: tidy rows, pooled summaries, on-disk cache, resume, and every drafter on SmolLM2."""

from __future__ import annotations

import json
import time

import pytest

import specviz as sv
from specviz.drafting import EarlyExitDrafter, PromptLookupDrafter
from specviz.drafting.heads import HeadDrafter
from specviz.drafting.suffix import SuffixDrafter
from specviz.lab.analysis import run_grid, session, summarize
from specviz.prompts import load_prompts

TARGET, DRAFT = sv.toy_pair(5, 2, seed=0)
PROMPTS = [[0, 1, 2], [1, 2, 3, 1, 2], [4, 4, 4, 0], [2, 0, 1]]
GAMMAS = (2, 3)


pytestmark = pytest.mark.usefixtures("one_thread")


class Counting:
    """A factory that counts the drafters it makes (one per live generation)."""

    def __init__(self, make):
        self.make, self.calls = make, 0

    def __call__(self):
        self.calls += 1
        return self.make()


def _drafters():
    return {
        "model": DRAFT,
        "lookup": Counting(PromptLookupDrafter),
        "suffix": session(Counting(lambda: SuffixDrafter(sample=True, vocab_size=5))),
    }


def _grid(tmp_path, drafters, **kw):
    args = dict(gammas=GAMMAS, max_new_tokens=12, cache_dir=tmp_path, progress=False, seed=1)
    return run_grid(TARGET, drafters, PROMPTS, **(args | kw))


def test_grid_is_tidy_and_consistent(tmp_path):
    df = _grid(tmp_path, _drafters())
    assert len(df) == 3 * len(GAMMAS) * 2 * len(PROMPTS)
    assert df.groupby(["drafter", "gamma", "mode", "prompt_id"]).size().eq(1).all()
    greedy = df[df["mode"] == "greedy"]
    assert greedy["greedy_identical"].all()  # lossless greedy == the baseline, token for token
    assert df.loc[df["mode"] == "sampled", "greedy_identical"].isna().all()
    for _, r in df.iterrows():
        assert len(r["per_position_acceptance"]) == len(r["rejection_hist"]) == r["gamma"]
        assert sum(r["accepted_hist"]) == r["target_calls"]
        assert sum(r["accepted_hist"][j] * j for j in range(r["gamma"] + 1)) == r["accepted"]
        assert r["mean_accepted_length"] == pytest.approx(r["new_tokens"] / r["target_calls"])
        assert 0 <= r["draft_time_share"] <= 1
        assert r["speedup"] == pytest.approx(r["tokens_per_s"] / r["baseline_tokens_per_s"])


def test_second_run_loads_from_disk_and_an_interrupted_run_resumes(tmp_path):
    drafters = _drafters()
    t0 = time.perf_counter()
    first = _grid(tmp_path, drafters)
    t_first = time.perf_counter() - t0
    made = drafters["lookup"].calls
    assert made == len(GAMMAS) * 2 * len(PROMPTS) and first.attrs["cached"] == 0

    t0 = time.perf_counter()
    again = _grid(tmp_path, drafters)
    assert again.attrs == {"computed": 0, "cached": first.attrs["computed"]}
    assert drafters["lookup"].calls == made  # nothing generated
    assert time.perf_counter() - t0 < t_first
    cols = ["drafter", "gamma", "mode", "prompt_id", "new_tokens", "target_calls", "accepted"]
    assert again[cols].equals(first[cols])

    # "Interrupt": drop the cells of the last two prompts, as if the run had died there.
    lost = {f"p{i:03d}" for i in range(2, len(PROMPTS))}
    removed = 0
    for path in tmp_path.rglob("*.json"):
        if json.loads(path.read_text())["prompt_id"] in lost:
            path.unlink()
            removed += 1
    resumed = _grid(tmp_path, drafters)
    assert resumed.attrs["computed"] == removed
    # The suffix session replays the cached cells into its memory: same numbers as before.
    assert resumed[cols].equals(first[cols])


def test_cells_of_drafters_with_new_weights_are_recomputed(tmp_path):
    """A drafter spec naming its weights (``cache_tag``, as the trained head does) keys its
    cells to them: other weights compute new cells instead of loading stale ones."""
    lookup = Counting(PromptLookupDrafter)
    lookup.cache_tag = "weights-a"
    first = _grid(tmp_path, {"lookup": lookup}, gammas=(2,))
    assert first.attrs["cached"] == 0
    assert _grid(tmp_path, {"lookup": lookup}, gammas=(2,)).attrs["computed"] == 0
    lookup.cache_tag = "weights-b"
    # every speculative cell again (1 gamma x 2 modes x the prompts); baselines stay cached
    assert _grid(tmp_path, {"lookup": lookup}, gammas=(2,)).attrs["computed"] == 2 * len(PROMPTS)


def test_head_fingerprint_names_the_weights(tmp_path):
    from specviz.drafting.heads import default_head_path, head_fingerprint

    stem = default_head_path()
    assert head_fingerprint() == head_fingerprint(stem) and len(head_fingerprint()) == 12
    other = tmp_path / "h.safetensors"
    other.write_bytes(b"not the same weights")
    assert head_fingerprint(other) != head_fingerprint()


def test_summarize_pools_ratios_per_drafter_and_category(tmp_path):
    prompts = load_prompts(split="heldout", categories=["code", "structured"], per_category=2)
    toy_prompts = [[i % 5, (i + 1) % 5] for i in range(len(prompts))]
    df = run_grid(TARGET, {"model": DRAFT}, toy_prompts, gammas=(2,), modes=("greedy",),
                  max_new_tokens=8, cache_dir=tmp_path, progress=False)  # fmt: skip
    df["category"] = [p.category for p in prompts]
    s = summarize(df)
    assert set(s["category"]) == {"code", "structured", "all"}
    code = df[df["category"] == "code"]
    row = s[(s["category"] == "code")].iloc[0]
    assert row["prompts"] == 2
    assert row["mean_accepted_length"] == pytest.approx(
        code["new_tokens"].sum() / code["target_calls"].sum()
    )
    assert row["greedy_identical"] == 1.0


def test_every_drafter_is_greedy_identical_on_smollm2(smollm2, tmp_path):
    model, tok = smollm2
    head = HeadDrafter.from_pretrained(model)
    drafters = {
        "prompt_lookup": PromptLookupDrafter,
        "suffix": session(SuffixDrafter),
        "early_exit": lambda: EarlyExitDrafter(model, 4),
        "eagle_head": head,
        "self": model,  # a model spec: a fresh ModelDrafter per generation
    }
    prompts = load_prompts(
        split="heldout", categories=["structured", "translation"], per_category=1
    )
    df = run_grid(model, drafters, prompts, tokenizer=tok, gammas=(4,), modes=("greedy",),
                  max_new_tokens=32, cache_dir=tmp_path, progress=False)  # fmt: skip
    assert len(df) == len(drafters) * len(prompts)
    assert df["greedy_identical"].all(), df[["drafter", "prompt_id", "greedy_identical"]]
    assert set(df["category"]) == {"structured", "translation"}
    assert (df.loc[df["drafter"] == "self", "mean_accepted_length"] >= 4.0).all()


def test_results_table_formats_a_grid(tmp_path):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "results_table.py"
    spec = importlib.util.spec_from_file_location("results_table", path)
    rt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rt)
    df = run_grid(TARGET, {"model": DRAFT, "suffix": session(SuffixDrafter)}, PROMPTS[:2],
                  gammas=(2,), modes=("greedy",), max_new_tokens=6, cache_dir=tmp_path,
                  progress=False)  # fmt: skip
    df["category"] = ["structured", "chat_writing"] * 2
    summary = rt.summary_table(df.assign(model="toy"))
    md = rt.markdown(summary, rt.parse([]), "python scripts/results_table.py", (1.0, 2.0))
    assert "## toy (greedy)" in md and "| drafter | structured | chat writing | all |" in md
    assert md.count("| model |") == 3 and md.count("| suffix |") == 3  # MAL, speedup, point
    assert "| drafter | copy-heavy | open | ratio |" in md
    assert "Greedy outputs identical to the baseline: 100%" in md
    assert "| all | greedy identical |" in md and md.count(" 2/2 |") == 2  # one per drafter
    rt.check_greedy_identity(df.assign(model="toy"))  # all identical: passes
    bad = df.assign(model="toy")
    bad.loc[1, "greedy_identical"] = False  # one differing cell must stop the table
    with pytest.raises(SystemExit, match="greedy identity FAILED in 1 of 4 cells"):
        rt.check_greedy_identity(bad)
