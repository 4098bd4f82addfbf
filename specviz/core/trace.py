"""The record of a generation: one :class:`Step` per target call.

Everything downstream -- metrics, statistics, figures, widgets -- reads this one record type.
Traces are frozen and can be saved to / loaded from JSON Lines with a format version, so a
notebook can reload a run without recomputing it. A trace file is a header line
(``{"format": "specviz-trace", "version": 4, "meta": ...}``), one line per step and an end record
(``{"end": true, "steps": N}``); it is written atomically (temporary file, fsync, rename), and a
file without its end record is refused as truncated rather than read as a shorter run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "TRACE_FORMAT",
    "TRACE_VERSION",
    "TraceFormatError",
    "DraftPosition",
    "Step",
    "TreeNode",
    "Trace",
    "TraceSummary",
]

TRACE_FORMAT = "specviz-trace"
TRACE_VERSION = 4
"""Version 4 keeps a drafted position's p and q over one set of ids (the union of both top-k
lists, the drafted and the emitted token, at a rejection the residual's top-k; ``top_p_ids``
is that set by p, ``top_q_ids`` the same set by q) and writes ``u`` as NaN where no test took
place (the drafts after the first rejection); version 3 records token trees (``Step.tree``);
version 2 ended every file with ``{"end": true, "steps": N}`` and wrote strict JSON (NaN as
``null``). Files of versions 1 (no end record), 2 and 3 still load: their top-k lists stay
each law's own (a token in one list may be missing from the other), and the ``u`` they kept
for never-tested drafts is read as NaN."""


class TraceFormatError(ValueError):
    """A trace file that is corrupt, not a trace, or from a newer specviz."""


@dataclass(frozen=True)
class DraftPosition:
    """One drafted token and the decision taken on it (or the bonus slot, ``draft_token=-1``)."""

    position: int  # index among the generated tokens
    draft_token: int  # -1 for the bonus slot
    q_draft: float  # q of the drafted token (1.0 for a point-mass proposal, NaN for bonus)
    p_target: float  # p of the drafted token (NaN for bonus)
    accept_prob: float
    u: float  # the uniform draw (NaN when the rule draws none or the draft was never tested)
    accepted: bool
    evaluated: bool  # False for drafts after the first rejection (never looked at)
    emitted_token: int  # -1 when nothing was emitted at this slot
    emitted_kind: str  # "accepted" | "corrected" | "bonus" | "discarded"
    # p and q over one set of ids (version 4): both top-k lists, the drafted and the emitted
    # token, at a rejection the residual's top-k; by p in top_p_*, by q in top_q_*
    top_p_ids: tuple[int, ...] = ()
    top_p_probs: tuple[float, ...] = ()
    top_q_ids: tuple[int, ...] = ()  # empty: a point-mass proposal (q = 1 at the draft)
    top_q_probs: tuple[float, ...] = ()
    residual_ids: tuple[int, ...] = ()  # top-k of norm(max(0, p - q)) at a rejection, + the
    # corrected token
    residual_probs: tuple[float, ...] = ()
    source_id: int = -1  # cross-vocabulary drafting: the draft-side id of the drafted token
    source_piece: str = ""  # ... and its draft-side string


@dataclass(frozen=True)
class TreeNode:
    """One candidate of a token tree and what the verifier did with it."""

    node: int  # index in the tree
    token: int
    parent: int  # -1: a child of the last committed token
    depth: int  # 1 for the root's children
    position: int  # index among the generated tokens it would take
    q_draft: float  # q of its token in the law its sibling group was drawn from (NaN: none)
    p_target: float  # p of its token in the target law it was first tested against
    accept_prob: float  # NaN when never tried
    u: float  # the uniform draw (NaN when the rule draws none or it was never tried)
    status: str  # "accepted" | "rejected" | "unvisited"
    residual_ids: tuple[int, ...] = ()  # top-k of the law left after its rejection
    residual_probs: tuple[float, ...] = ()


@dataclass(frozen=True)
class Step:
    """One target call: ``drafted`` proposals, ``accepted`` kept, then one target token."""

    step: int
    position: int  # generated tokens before this step
    drafted: int
    accepted: int
    emitted: tuple[int, ...]  # tokens committed by this step (after EOS/length truncation)
    final_kind: str  # "corrected" | "bonus" | "target" (plain decoding)
    draft_time: float
    verify_time: float
    end_time: float  # seconds since the start of the generation
    positions: tuple[DraftPosition, ...] = ()
    tree: tuple[TreeNode, ...] = ()  # a tree step: every candidate (``drafted`` of them)
    path: tuple[int, ...] = ()  # a tree step: the accepted nodes, root's child first


@dataclass(frozen=True)
class TraceSummary:
    target_calls: int
    new_tokens: int
    drafted: int
    accepted: int
    acceptance_rate: float  # accepted / drafted
    mean_accepted_length: float  # generated tokens per target call
    per_position_acceptance: tuple[float, ...]  # P(accept at i | reached i)
    rejection_positions: tuple[int, ...]  # count of steps whose first rejection is at i
    draft_time: float
    verify_time: float


@dataclass(frozen=True)
class Trace:
    steps: tuple[Step, ...]
    meta: dict[str, Any] = field(default_factory=dict)

    # -- views ---------------------------------------------------------------------------
    def to_dataframe(self):
        """One row per drafted position (and bonus slot) -- for a tree step, one row per tree
        node (with ``node``, ``parent``, ``depth``, ``status``) -- with its step's numbers."""
        import pandas as pd

        rows = []
        for s in self.steps:
            for t in s.tree:
                row = asdict(t)
                row.update(
                    step=s.step,
                    draft_token=t.token,
                    accepted=t.status == "accepted",
                    evaluated=t.status != "unvisited",
                    step_drafted=s.drafted,
                    step_accepted=s.accepted,
                    draft_time=s.draft_time,
                    verify_time=s.verify_time,
                    index_in_step=t.depth - 1,
                )
                rows.append(row)
            for p in s.positions:
                row = asdict(p)
                row.update(
                    step=s.step,
                    step_drafted=s.drafted,
                    step_accepted=s.accepted,
                    draft_time=s.draft_time,
                    verify_time=s.verify_time,
                    index_in_step=p.position - s.position,
                )
                rows.append(row)
        cols = ["step", "position", "index_in_step", "draft_token", "q_draft", "p_target"]
        df = pd.DataFrame(rows)
        if df.empty:
            return pd.DataFrame(columns=cols + ["accept_prob", "u", "accepted", "emitted_token"])
        return df[cols + [c for c in df.columns if c not in cols]]

    def steps_dataframe(self):
        """One row per target call."""
        import pandas as pd

        return pd.DataFrame(
            [
                {k: v for k, v in asdict(s).items() if k not in ("positions", "tree")}
                for s in self.steps
            ]
        )

    def summary(self) -> TraceSummary:
        drafted = sum(s.drafted for s in self.steps)
        accepted = sum(s.accepted for s in self.steps)
        new_tokens = sum(len(s.emitted) for s in self.steps)
        gamma = max((s.drafted for s in self.steps), default=0)
        reached = [0] * gamma
        kept = [0] * gamma
        rejections = [0] * (gamma + 1)
        for s in self.steps:
            for i in range(min(s.drafted, s.accepted + 1)):
                reached[i] += 1
                kept[i] += i < s.accepted
            if s.drafted:
                rejections[s.accepted] += s.accepted < s.drafted
        calls = len(self.steps)
        return TraceSummary(
            target_calls=calls,
            new_tokens=new_tokens,
            drafted=drafted,
            accepted=accepted,
            acceptance_rate=accepted / drafted if drafted else math.nan,
            mean_accepted_length=new_tokens / calls if calls else math.nan,
            per_position_acceptance=tuple(
                k / r if r else math.nan for k, r in zip(kept, reached, strict=True)
            ),
            rejection_positions=tuple(rejections[:gamma]),
            draft_time=sum(s.draft_time for s in self.steps),
            verify_time=sum(s.verify_time for s in self.steps),
        )

    # -- persistence ---------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write JSON Lines: a header line, one line per step, then an end record.

        The file is written to a temporary file in the same folder, flushed to disk and then
        renamed onto ``path``, so ``path`` is either the complete new trace or (after a
        failure) whatever was there before -- never a partial file. The format is strict
        JSON: NaN is written as ``null`` and +-infinity as the strings ``"inf"`` /
        ``"-inf"``; :meth:`load` turns both back into floats in every float field of
        :class:`Step` and :class:`DraftPosition` (in ``meta`` they stay ``None`` / strings;
        a set in ``meta`` is written, and read back, as a sorted list).
        Parquet and other table formats are not written here: use
        ``trace.to_dataframe().to_parquet(path)``.
        """
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix in _NOT_JSONL_SUFFIXES:
            raise ValueError(
                f"{path}: Trace.save writes JSON Lines (.jsonl), not {suffix}; save to a "
                f"'.jsonl' path, or for Parquet use trace.to_dataframe().to_parquet(path)"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        header = {"format": TRACE_FORMAT, "version": TRACE_VERSION, "meta": self.meta}
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
                f.write(_dump_line(header))
                for s in self.steps:
                    f.write(_dump_line(asdict(s)))
                f.write(_dump_line({"end": True, "steps": len(self.steps)}))
                f.flush()
                os.fsync(f.fileno())
            _umask_mode(tmp)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_dir(path.parent)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        """Read a trace written by :meth:`save` (format version 1 to 4).

        Files of version 2 and later must end with the end record; a file without it (cut
        short by an interrupted write or copy), with a step count that disagrees with it, or
        with anything after it is a :class:`TraceFormatError`. Version 1 files (written before
        specviz recorded an end) load as they always did. Files before version 4 read ``u``
        as NaN at never-tested drafts (they kept the unused draw there).
        """
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix in _NOT_JSONL_SUFFIXES:
            raise TraceFormatError(
                f"{path}: Trace.load reads the JSON Lines (.jsonl) files written by "
                f"Trace.save, not {suffix} files (read a saved DataFrame with pandas, e.g. "
                f"pandas.read_parquet; a JSON Lines trace saved under this name by an older "
                f"specviz loads once renamed to .jsonl)"
            )
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise TraceFormatError(f"{path}: not a text trace file ({e})") from None
        lines = text.splitlines()
        if not lines:
            raise TraceFormatError(f"{path}: empty file, not a specviz trace")
        cut = not text.endswith("\n")  # a last line without its newline may be cut short
        header = _parse_line(path, 1, lines[0], strict=False, last=cut and len(lines) == 1)
        if not isinstance(header, dict) or header.get("format") != TRACE_FORMAT:
            raise TraceFormatError(f"{path}: line 1 is not a specviz trace header")
        version = _check_version(path, header)
        strict = version >= 2
        if strict:  # version 2 is written as strict JSON: no NaN/Infinity tokens anywhere
            header = _parse_line(path, 1, lines[0], strict=True)
        steps = []
        end: int | None = None  # line number of the end record
        for no, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            if end is not None:
                raise TraceFormatError(
                    f"{path}: line {no} comes after the end record (line {end}); "
                    f"the file has trailing content"
                )
            d = _parse_line(path, no, line, strict=strict, last=cut and no == len(lines))
            if strict and isinstance(d, dict) and "end" in d:
                _check_end(path, no, d, len(steps))
                end = no
                continue
            try:
                steps.append(_step_from_dict(d, version))
            except (TypeError, KeyError, AttributeError, ValueError) as e:
                raise TraceFormatError(f"{path}: line {no} is not a valid step ({e})") from None
        if strict and end is None:
            raise TraceFormatError(
                f"{path}: truncated trace file: no end record after {len(steps)} step(s) "
                f"(the file is incomplete, e.g. from an interrupted save or copy)"
            )
        meta = header.get("meta", {})
        if not isinstance(meta, dict):
            raise TraceFormatError(
                f"{path}: line 1: the header's meta is {type(meta).__name__} {meta!r}, expected "
                "a JSON object"
            )
        return cls(tuple(steps), meta)


# Suffixes of table/binary/compressed formats: a JSON Lines trace must not be saved under them.
_NOT_JSONL_SUFFIXES = frozenset(
    {
        ".parquet",
        ".pq",
        ".csv",
        ".tsv",
        ".arrow",
        ".feather",
        ".ipc",
        ".xlsx",
        ".gz",
        ".bz2",
        ".xz",
        ".zst",
        ".zip",
    }
)
_INF, _NEG_INF = "inf", "-inf"  # how +-infinity is written (NaN is written as null)


def _float_fields(cls: type) -> tuple[frozenset[str], frozenset[str]]:
    """Names of ``cls``'s ``float`` fields and of its ``tuple[float, ...]`` fields."""
    declared = dataclasses.fields(cls)
    return (
        frozenset(f.name for f in declared if f.type in ("float", float)),
        frozenset(f.name for f in declared if f.type == "tuple[float, ...]"),
    )


_STEP_FLOATS, _STEP_FLOAT_TUPLES = _float_fields(Step)
_POSITION_FLOATS, _POSITION_FLOAT_TUPLES = _float_fields(DraftPosition)
_NODE_FLOATS, _NODE_FLOAT_TUPLES = _float_fields(TreeNode)


def _check_version(path: Path, header: dict[str, Any]) -> int:
    if "version" not in header:
        raise TraceFormatError(f"{path}: the trace header has no format version")
    version = header["version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise TraceFormatError(
            f"{path}: trace format version {version!r} is not an integer "
            f"(expected 1..{TRACE_VERSION})"
        )
    if version < 1:
        raise TraceFormatError(
            f"{path}: trace format version {version!r} is invalid "
            f"(versions start at 1; expected 1..{TRACE_VERSION})"
        )
    if version > TRACE_VERSION:
        raise TraceFormatError(
            f"{path}: trace format version {version!r} is newer than this specviz "
            f"understands ({TRACE_VERSION}); upgrade specviz"
        )
    return version


def _check_end(path: Path, no: int, d: dict[str, Any], count: int) -> None:
    expected = d.get("steps")
    if (
        set(d) != {"end", "steps"}
        or d["end"] is not True
        or isinstance(expected, bool)
        or not isinstance(expected, int)
    ):
        raise TraceFormatError(f"{path}: line {no} is not a valid end record ({d!r})")
    if expected != count:
        raise TraceFormatError(
            f"{path}: the end record (line {no}) says {expected} step(s) but the file holds "
            f"{count}; the file is incomplete or was edited"
        )


def _to_float(v: Any) -> Any:
    """Undo :func:`_sanitize` for a float field: ``None`` -> NaN, ``"inf"``/``"-inf"`` -> +-inf."""
    if v is None:
        return math.nan
    if v == _INF:
        return math.inf
    if v == _NEG_INF:
        return -math.inf
    return v


_KINDS = {
    "final_kind": ("corrected", "bonus", "target"),
    "emitted_kind": ("accepted", "corrected", "bonus", "discarded"),
    "status": ("accepted", "rejected", "unvisited"),
}


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_fields(cls: type, d: Any, where: str) -> None:
    """Every field of a step / position / node record has its declared type (checked when
    read, so a damaged file fails here and not later in ``summary()``)."""
    if not isinstance(d, dict):
        raise ValueError(f"{where} is a {type(d).__name__}, not a JSON object")
    for f in dataclasses.fields(cls):
        if f.name not in d:
            continue
        v, t = d[f.name], f.type
        if t == "int":
            ok = isinstance(v, int) and not isinstance(v, bool)
        elif t == "float":
            ok = _is_number(v) or v is None or v in (_INF, _NEG_INF)
        elif t == "bool":
            ok = isinstance(v, bool)
        elif t == "str":
            ok = isinstance(v, str)
        elif t == "tuple[int, ...]":
            ok = isinstance(v, list) and all(
                isinstance(x, int) and not isinstance(x, bool) for x in v
            )
        elif t == "tuple[float, ...]":
            ok = isinstance(v, list) and all(
                _is_number(x) or x is None or x in (_INF, _NEG_INF) for x in v
            )
        else:  # nested records, checked by their own reader
            ok = isinstance(v, list)
        if not ok:
            want = {
                "tuple[int, ...]": "a list of integers",
                "tuple[float, ...]": "a list of numbers",
            }.get(t, t if t in ("int", "float", "bool", "str") else "a list of records")
            raise ValueError(f"{where} field {f.name!r} is {v!r}, expected {want}")
        if f.name in _KINDS and v not in _KINDS[f.name]:
            raise ValueError(f"{where} field {f.name!r} is {v!r}, expected one of {_KINDS[f.name]}")


def _step_from_dict(d: dict[str, Any], version: int = TRACE_VERSION) -> Step:
    _check_fields(Step, d, "the step")
    for name in ("step", "position", "drafted", "accepted"):
        if name in d and d[name] < 0:
            raise ValueError(f"the step field {name!r} is {d[name]}, expected >= 0")
    if "accepted" in d and "drafted" in d and d["accepted"] > d["drafted"]:
        raise ValueError(f"the step accepts {d['accepted']} of {d['drafted']} drafts")
    positions = tuple(_position_from_dict(p) for p in d.pop("positions"))
    if version < 4:  # the unused draw of a never-tested draft: no test, so no u
        positions = tuple(
            p if p.evaluated else dataclasses.replace(p, u=math.nan) for p in positions
        )
    d["tree"] = tuple(_node_from_dict(t) for t in d.get("tree", ()))  # versions < 3: none
    d["path"] = tuple(d.get("path", ()))
    d["emitted"] = tuple(d["emitted"])
    for k in _STEP_FLOATS & d.keys():
        d[k] = _to_float(d[k])
    for k in _STEP_FLOAT_TUPLES & d.keys():
        d[k] = tuple(map(_to_float, d[k]))
    return Step(positions=positions, **d)


def _node_from_dict(d: dict[str, Any]) -> TreeNode:
    _check_fields(TreeNode, d, "a tree node")
    for k, v in d.items():
        if isinstance(v, list):
            d[k] = tuple(map(_to_float, v)) if k in _NODE_FLOAT_TUPLES else tuple(v)
        elif k in _NODE_FLOATS:
            d[k] = _to_float(v)
    return TreeNode(**d)


def _position_from_dict(d: dict[str, Any]) -> DraftPosition:
    _check_fields(DraftPosition, d, "a drafted position")
    for k, v in d.items():
        if isinstance(v, list):
            d[k] = tuple(map(_to_float, v)) if k in _POSITION_FLOAT_TUPLES else tuple(v)
        elif v is None:  # NaN is written as null
            d[k] = math.nan
        elif k in _POSITION_FLOATS:
            d[k] = _to_float(v)
    return DraftPosition(**d)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _parse_line(path: Path, no: int, line: str, *, strict: bool = False, last: bool = False) -> Any:
    """One JSON value; ``strict`` refuses NaN/Infinity tokens (never written by version 2)."""
    try:
        if strict:
            return json.loads(line, parse_constant=_reject_constant)
        return json.loads(line)
    except json.JSONDecodeError as e:
        hint = "; the file looks truncated (its last line is cut short)" if last else ""
        raise TraceFormatError(f"{path}: line {no} is corrupt JSON ({e.msg}){hint}") from None
    except ValueError as e:
        raise TraceFormatError(f"{path}: line {no} is not strict JSON ({e})") from None


def _sanitize(obj: Any) -> Any:
    """A copy of ``obj`` that strict JSON can hold: NaN -> None, +-inf -> ``"inf"``/``"-inf"``."""
    if isinstance(obj, float):
        if math.isnan(obj):
            return None
        if math.isinf(obj):
            return _INF if obj > 0 else _NEG_INF
        return obj
    if obj is None or isinstance(obj, (str, int)):
        return obj
    if isinstance(obj, dict):
        return {_sanitize_key(k): _sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_sanitize(v) for v in obj]
    if isinstance(obj, (set, frozenset)):  # JSON has no sets: a sorted list (read back as one)
        try:
            return [_sanitize(v) for v in sorted(obj)]
        except TypeError:
            return [_sanitize(v) for v in sorted(obj, key=repr)]
    converted = _jsonable(obj)
    return converted if isinstance(converted, str) else _sanitize(converted)


def _sanitize_key(key: Any) -> Any:
    if isinstance(key, float) and not math.isfinite(key):
        return "NaN" if math.isnan(key) else ("Infinity" if key > 0 else "-Infinity")
    return key


def _dump_line(obj: Any) -> str:
    # allow_nan=False: anything the sanitiser missed fails loudly instead of writing "NaN".
    return json.dumps(_sanitize(obj), allow_nan=False) + "\n"


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)


def _umask_mode(path: Path) -> None:
    """Give a temp file (created 0600) the permissions a plain ``open`` would have given."""
    umask = os.umask(0)
    os.umask(umask)
    path.chmod(0o666 & ~umask)


def fsync_dir(folder: Path) -> None:
    """Persist a rename in ``folder`` (best effort: not every platform can open a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
