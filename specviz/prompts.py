"""The project's prompt set, grouped by task category, and the helpers that load and render it.

Why this exists: how many draft tokens a target model accepts during speculative decoding depends
strongly on the task. Structured, repetitive output (JSON reformatting, tables, templates) is easy
to guess, open-ended writing is not. To measure acceptance *per task type* the project ships its
own small prompt set (``data/prompts.jsonl``, described in ``data/README.md``) with a fixed list of
categories and a ``train``/``heldout`` split (a self-drafting head is trained on ``train`` prompts
and evaluated on ``heldout`` ones, so its acceptance numbers are not measured on its training data).

The loader is strict on purpose: a typo in the data file (an unknown category, a duplicated id, a
bad role) would otherwise silently skew a per-category statistic, so every problem is reported as
a ``ValueError`` that names the file, the line number and what is wrong.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CATEGORIES",
    "ROLES",
    "SPLITS",
    "ENV_PROMPTS_PATH",
    "Prompt",
    "PromptFileError",
    "counts_by_category",
    "counts_table",
    "default_prompts_path",
    "load_prompts",
    "render_prompt",
]

#: Task categories, in the order used everywhere (reports, tables, the data card).
CATEGORIES: tuple[str, ...] = (
    "chat_writing",
    "translation",
    "summarization",
    "question_answering",
    "math_reasoning",
    "extraction",
    "code",
    "structured",
)

#: Split labels: ``train`` prompts may be used to fit a drafter, ``heldout`` ones only to evaluate.
SPLITS: tuple[str, ...] = ("train", "heldout")

#: Roles a chat message may have (the ones every chat template understands).
ROLES: tuple[str, ...] = ("system", "user", "assistant")

#: Environment variable that points the loader at another prompts file.
ENV_PROMPTS_PATH = "SPECVIZ_PROMPTS"

_REQUIRED_FIELDS: tuple[str, ...] = ("id", "category", "messages")


class PromptFileError(ValueError):
    """A prompts file line is invalid; the message names the file, the line and the problem."""

    def __init__(self, path: str | os.PathLike[str], line: int, problem: str) -> None:
        self.path = str(path)
        self.line = line
        self.problem = problem
        super().__init__(f"{self.path}, line {line}: {problem}")


@dataclass(frozen=True)
class Prompt:
    """One prompt of the set.

    ``messages`` is a tuple of ``{"role": ..., "content": ...}`` dicts, the shape that
    ``tokenizer.apply_chat_template`` takes; use :meth:`messages_list` to get fresh copies to
    hand to a tokenizer (so nothing downstream can mutate the loaded prompt). ``messages`` is
    excluded from the hash (dicts are unhashable), so prompts can still live in sets and dict keys;
    equality still compares the messages.
    """

    id: str
    category: str
    messages: tuple[dict[str, str], ...] = field(hash=False)
    split: str = "train"

    def messages_list(self) -> list[dict[str, str]]:
        """The messages as a new ``list[dict]``, ready for ``apply_chat_template``."""
        return [dict(m) for m in self.messages]

    @property
    def user_text(self) -> str:
        """Content of the last user message (the actual request), for labels and previews."""
        for m in reversed(self.messages):
            if m["role"] == "user":
                return m["content"]
        return ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON-serialisable record, in the same shape as a line of the prompts file."""
        return {
            "id": self.id,
            "category": self.category,
            "split": self.split,
            "messages": self.messages_list(),
        }


def default_prompts_path() -> Path:
    """Path of the shipped prompt set, or of the file named by ``$SPECVIZ_PROMPTS``.

    The package is installed editable from the repository and ``data/`` sits at the repository
    root (next to ``specviz/``), so the file is found relative to this module. The environment
    override lets a user point every tool at their own prompt file without code changes.

    Raises:
        FileNotFoundError: the file does not exist (the message says where it looked and why).
    """
    override = os.environ.get(ENV_PROMPTS_PATH)
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise FileNotFoundError(
                f"${ENV_PROMPTS_PATH} points to {path}, which is not a file; "
                f"unset it to use the shipped prompt set"
            )
        return path
    path = Path(__file__).resolve().parent.parent / "data" / "prompts.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"prompt set not found at {path}; it ships in the repository's data/ folder "
            f"(install specviz editable from a checkout, or set ${ENV_PROMPTS_PATH} to a prompts "
            f"JSONL file)"
        )
    return path


def _parse_messages(raw: Any, err: Any) -> tuple[dict[str, str], ...]:
    """Validate the ``messages`` field of one record; ``err(problem)`` raises the line's error."""
    if not isinstance(raw, list):
        err(f"'messages' must be a list of messages, got {type(raw).__name__}")
    if not raw:
        err("'messages' is empty; a prompt needs at least one user message")
    out: list[dict[str, str]] = []
    for i, msg in enumerate(raw):
        if not isinstance(msg, dict):
            err(
                f"messages[{i}] must be an object with 'role' and 'content', got {type(msg).__name__}"
            )
        for key in ("role", "content"):
            if key not in msg:
                err(f"messages[{i}] is missing '{key}'")
        role, content = msg["role"], msg["content"]
        if role not in ROLES:
            err(f"messages[{i}] has bad role {role!r}; expected one of {', '.join(ROLES)}")
        if role == "system" and i != 0:
            err(f"messages[{i}] is a system message; only the first message may be one")
        if not isinstance(content, str) or not content.strip():
            err(f"messages[{i}] content must be a non-empty string")
        out.append({"role": role, "content": content})
    if out[-1]["role"] != "user":
        err(
            f"the last message has role {out[-1]['role']!r}; a prompt must end with a user "
            f"message (the model answers it)"
        )
    return tuple(out)


def _parse_line(text: str, lineno: int, path: Path) -> Prompt:
    def err(problem: str) -> None:
        raise PromptFileError(path, lineno, problem)

    try:
        rec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PromptFileError(
            path, lineno, f"invalid JSON ({exc.msg} at column {exc.colno})"
        ) from None
    if not isinstance(rec, dict):
        err(f"expected a JSON object, got {type(rec).__name__}")
    missing = [k for k in _REQUIRED_FIELDS if k not in rec]
    if missing:
        err(f"missing field(s): {', '.join(missing)}")
    pid, category, split = rec["id"], rec["category"], rec.get("split", "train")
    if not isinstance(pid, str) or not pid.strip():
        err("'id' must be a non-empty string")
    if category not in CATEGORIES:
        err(f"unknown category {category!r}; expected one of {', '.join(CATEGORIES)}")
    if split not in SPLITS:
        err(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    messages = _parse_messages(rec["messages"], err)
    return Prompt(id=pid, category=category, messages=messages, split=split)


def _check_choice(name: str, values: Iterable[str], allowed: tuple[str, ...]) -> None:
    bad = [v for v in values if v not in allowed]
    if bad:
        raise ValueError(f"unknown {name} {bad}; expected any of {', '.join(allowed)}")


def load_prompts(
    path: str | os.PathLike[str] | None = None,
    *,
    categories: Iterable[str] | str | None = None,
    split: str | None = None,
    per_category: int | None = None,
) -> list[Prompt]:
    """Load and validate a prompts JSONL file, optionally filtered.

    Every line is validated before any filter is applied, so a broken file fails loudly even when
    the broken line would have been filtered out. Blank lines are skipped. ``split`` is optional
    in a record and defaults to ``train``.

    Args:
        path: the JSONL file; ``None`` means :func:`default_prompts_path`.
        categories: keep only these categories (a single name is accepted too).
        split: keep only ``"train"`` or ``"heldout"`` prompts.
        per_category: keep the first N prompts of each category, in file order, after the other
            filters. Deterministic, so a quick run always sees the same prompts.

    Returns:
        The prompts in file order.

    Raises:
        FileNotFoundError: the file does not exist.
        PromptFileError: (a ``ValueError``) a line is invalid: bad JSON, a missing field, an
            unknown category or split, empty messages, a bad role, a duplicate id.
        ValueError: a filter argument is invalid.
    """
    if isinstance(categories, str):
        categories = (categories,)
    wanted = tuple(categories) if categories is not None else None
    if wanted is not None:
        _check_choice("categories", wanted, CATEGORIES)
    if split is not None:
        _check_choice("split", (split,), SPLITS)
    if per_category is not None and (isinstance(per_category, bool) or per_category < 1):
        raise ValueError(f"per_category must be a positive integer, got {per_category!r}")

    file = default_prompts_path() if path is None else Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"prompts file not found: {file}")

    prompts: list[Prompt] = []
    first_seen: dict[str, int] = {}
    with file.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            prompt = _parse_line(line, lineno, file)
            if prompt.id in first_seen:
                raise PromptFileError(
                    file,
                    lineno,
                    f"duplicate id {prompt.id!r} (first used on line {first_seen[prompt.id]})",
                )
            first_seen[prompt.id] = lineno
            prompts.append(prompt)

    if wanted is not None:
        prompts = [p for p in prompts if p.category in wanted]
    if split is not None:
        prompts = [p for p in prompts if p.split == split]
    if per_category is not None:
        taken: dict[str, int] = {}
        kept: list[Prompt] = []
        for p in prompts:
            if taken.get(p.category, 0) < per_category:
                taken[p.category] = taken.get(p.category, 0) + 1
                kept.append(p)
        prompts = kept
    return prompts


def counts_by_category(prompts: Iterable[Prompt]) -> dict[str, dict[str, int]]:
    """``{category: {"train": n, "heldout": n, "total": n}}`` for every category, in order."""
    counts = {c: {"train": 0, "heldout": 0, "total": 0} for c in CATEGORIES}
    for p in prompts:
        counts[p.category][p.split] += 1
        counts[p.category]["total"] += 1
    return counts


def counts_table(prompts: Iterable[Prompt]) -> str:
    """Markdown table of prompt counts per category and split (used by the data card).

    The data card embeds this table verbatim and a test compares it with the file, so the card's
    numbers cannot drift from the data.
    """
    counts = counts_by_category(prompts)
    rows = ["| category | train | heldout | total |", "| --- | ---: | ---: | ---: |"]
    for cat, c in counts.items():
        rows.append(f"| `{cat}` | {c['train']} | {c['heldout']} | {c['total']} |")
    tot = {k: sum(c[k] for c in counts.values()) for k in ("train", "heldout", "total")}
    rows.append(f"| **all** | {tot['train']} | {tot['heldout']} | {tot['total']} |")
    return "\n".join(rows)


def _as_messages(prompt: Prompt | str | Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    if isinstance(prompt, Prompt):
        return prompt.messages_list()
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    messages = [dict(m) for m in prompt]
    if not messages:
        raise ValueError("render_prompt: no messages to render")
    for i, m in enumerate(messages):
        if "role" not in m or "content" not in m:
            raise ValueError(
                f"render_prompt: message {i} needs 'role' and 'content', got {sorted(m)}"
            )
    return messages


def _as_int_list(encoded: Any) -> list[int]:
    """Normalise what a tokenizer returned to a plain ``list[int]``.

    ``apply_chat_template(tokenize=True)`` returns a ``BatchEncoding`` (a mapping with
    ``input_ids``) in transformers 5.x and a plain list in 4.x; tensors or arrays and a batch of
    one are accepted too, so callers never have to care.
    """
    if hasattr(encoded, "keys") and "input_ids" in encoded:
        encoded = encoded["input_ids"]
    if hasattr(encoded, "tolist"):
        encoded = encoded.tolist()
    encoded = list(encoded)
    if len(encoded) == 1 and isinstance(encoded[0], (list, tuple)):
        encoded = list(encoded[0])
    return [int(t) for t in encoded]


def render_prompt(
    tokenizer: Any,
    prompt: Prompt | str | Sequence[Mapping[str, str]],
    *,
    add_generation_prompt: bool = True,
) -> list[int]:
    """Token ids of a prompt, formatted the way the model was trained to see it.

    With a chat template the messages go through ``tokenizer.apply_chat_template`` (which adds the
    role markers and, with ``add_generation_prompt``, the opening of the assistant turn). Without
    one (a base model or a toy tokenizer) the message contents are joined by blank lines and
    encoded plainly. A ``str`` is treated as a single user message.

    Returns:
        A plain ``list[int]``, whatever container the tokenizer returned.
    """
    messages = _as_messages(prompt)
    if getattr(tokenizer, "chat_template", None):
        encoded = tokenizer.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tokenize=True
        )
    else:
        text = "\n\n".join(m["content"] for m in messages)
        encoded = tokenizer.encode(text) if hasattr(tokenizer, "encode") else tokenizer(text)
    return _as_int_list(encoded)
