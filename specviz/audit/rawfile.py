"""Reading an audit's resumable ``raw.jsonl`` back: every line checked, nothing damaged counted.

The file is one header line (``{"kind": "header", "key": <hash of the settings>}``) and one line
per complete result (:func:`specviz.audit.run._record`). When an audit resumes from it:

* a header that is not JSON, not a header, or from an audit with other settings is an
  :class:`~specviz.audit.client.AuditError` that says what to do (another ``--out`` folder, or
  delete the file): the file is left as it is;
* a result line that is not valid -- corrupt JSON, not UTF-8, not an object, an unknown kind or
  arm, a prompt or sample index this audit does not have, fields of the wrong type, more tokens
  than asked for, or a completion cut short -- is *set aside*: appended to
  ``raw.rejected.jsonl`` next to it, named in one warning (line and reason) and sampled again;
  the good lines are kept, and the file is rewritten (atomically) with them only;
* a last line cut mid-way (a crash while appending) is dropped silently: it is redone.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from .client import AuditError
from .config import ARMS, AuditConfig

__all__ = ["check_record", "load_raw"]

_FINISH = ("stop", "length")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) or v is None


def check_record(rec: Any, cfg: AuditConfig | None) -> str | None:
    """Why ``rec`` cannot be a result of the audit ``cfg`` (None: it can)."""
    if not isinstance(rec, dict):
        return f"a {type(rec).__name__}, not a JSON object"
    kind = rec.get("kind")
    if kind not in ("sample", "greedy"):
        return f"kind is {kind!r}, expected 'sample' or 'greedy'"
    if rec.get("arm") not in ARMS:
        return f"arm is {rec.get('arm')!r}, expected one of {ARMS}"
    for name in ("prompt", "index"):
        if not _is_int(rec.get(name)) or rec[name] < 0:
            return f"{name} is {rec.get(name)!r}, expected an integer >= 0"
    tokens, logprobs = rec.get("tokens"), rec.get("logprobs")
    # pieces (str) from a server's API, token ids (int) from an in-process engine
    if not isinstance(tokens, list) or not (
        all(isinstance(t, str) for t in tokens) or all(_is_int(t) for t in tokens)
    ):
        return f"tokens is {_show(tokens)}, expected a list of strings (or of token ids)"
    if not isinstance(logprobs, list) or not all(_is_num(v) for v in logprobs):
        return f"logprobs is {_show(logprobs)}, expected a list of numbers"
    if logprobs and len(logprobs) != len(tokens):
        return f"{len(tokens)} tokens but {len(logprobs)} logprobs"
    if any(v is not None and not math.isfinite(v) for v in logprobs):
        return "a logprob is not finite"
    top = rec.get("top")
    if top is not None and (
        not isinstance(top, list)
        or not all(isinstance(t, dict) and all(_is_num(v) for v in t.values()) for t in top)
    ):
        return f"top is {_show(top)}, expected null or a list of {{piece: logprob}} objects"
    failed = isinstance(rec.get("error"), str) and rec["error"] != ""
    if failed and rec.get("finish_reason") == "error":
        pass  # a request that raised: kept as a finding (an engine audit counts it), not redone
    elif rec.get("finish_reason") not in _FINISH:
        return f"finish_reason is {rec.get('finish_reason')!r}, expected one of {_FINISH}"
    for name in ("seed", "draft_n", "draft_n_accepted", "completion_tokens"):
        if rec.get(name) is not None and not _is_int(rec[name]):
            return f"{name} is {rec[name]!r}, expected an integer or null"
    if not _is_int(rec.get("unreported", 0)) or rec.get("unreported", 0) < 0:
        return f"unreported is {rec.get('unreported')!r}, expected an integer >= 0"
    if not _is_num(rec.get("seconds")):
        return f"seconds is {rec.get('seconds')!r}, expected a number"
    if cfg is None:
        return None
    if rec["prompt"] >= len(cfg.prompts):
        return f"prompt {rec['prompt']} but this audit has {len(cfg.prompts)} prompt(s)"
    limit = cfg.max_tokens if kind == "sample" else cfg.greedy_max_tokens
    if logprobs:  # token outcomes: the pieces are the server's tokens
        if len(tokens) > limit:
            return f"{len(tokens)} tokens, more than the {limit} asked for"
        whole = rec.get("completion_tokens") == limit  # pieces merged by the server
        if rec["finish_reason"] == "length" and len(tokens) != limit and not whole:
            return f"finish_reason 'length' with {len(tokens)} tokens of {limit}: cut short"
    return None


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _header_problem(line: bytes) -> str | None:
    try:
        head = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return "is not JSON"
    if not isinstance(head, dict) or head.get("kind") != "header":
        return "is not a specviz audit header"
    return None


def load_raw(path: Path, key: str, cfg: AuditConfig | None = None) -> list[dict[str, Any]]:
    """The valid result records of ``path`` (see the module docstring for what happens to
    the rest)."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    cut = lines.pop()  # the bytes after the last newline: a line cut short, or b""
    unterminated = not lines  # the header alone, without its newline
    if unterminated:
        lines, cut = [cut], b""
    why = _header_problem(lines[0])
    if why is not None:
        raise AuditError(
            f"{path}: line 1 {why}, so this --out folder holds something other than the raw "
            f"results of an audit; use another --out folder, or delete {path} to start over"
        )
    if json.loads(lines[0]).get("key") != key:
        raise AuditError(
            f"{path} holds results of an audit with different prompts, sampling "
            "settings or endpoints; use another --out folder (or delete the file)"
        )
    good: list[bytes] = [lines[0]]
    records: list[dict[str, Any]] = []
    rejected: list[tuple[int, str, bytes]] = []
    for no, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            rec = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            rejected.append((no, "not UTF-8 text", line))
            continue
        except json.JSONDecodeError as err:
            rejected.append((no, f"corrupt JSON ({err.msg})", line))
            continue
        problem = check_record(rec, cfg)
        if problem is not None:
            rejected.append((no, problem, line))
            continue
        good.append(line)
        records.append(rec)
    if rejected:
        _set_aside(path, rejected)
    if rejected or cut.strip() or unterminated:  # appends must start on a clean line
        _rewrite(path, good)
    return records


def _set_aside(path: Path, rejected: list[tuple[int, str, bytes]]) -> None:
    aside = path.with_name(path.stem + ".rejected.jsonl")
    with aside.open("ab") as f:
        for _, _, line in rejected:
            f.write(line.rstrip(b"\r") + b"\n")
    shown = "; ".join(f"line {no}: {why}" for no, why, _ in rejected[:3])
    more = f"; {len(rejected) - 3} more" if len(rejected) > 3 else ""
    print(
        f"specviz audit: {path}: {len(rejected)} damaged line(s) set aside in {aside} and "
        f"sampled again ({shown}{more})",
        file=sys.stderr,
        flush=True,
    )


def _rewrite(path: Path, lines: list[bytes]) -> None:
    """``path`` with only ``lines`` (atomically: temporary file, fsync, rename)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(b"".join(line.rstrip(b"\r") + b"\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
