"""The record of a generation: one :class:`Step` per target call.

Everything downstream -- metrics, statistics, figures, widgets -- reads this one record type.
Traces are frozen and can be saved to / loaded from JSON Lines with a format version, so a
notebook can reload a run without recomputing it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "TRACE_FORMAT",
    "TRACE_VERSION",
    "TraceFormatError",
    "DraftPosition",
    "Step",
    "Trace",
    "TraceSummary",
]

TRACE_FORMAT = "specviz-trace"
TRACE_VERSION = 1


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
    u: float  # the uniform draw (NaN when the rule draws none)
    accepted: bool
    evaluated: bool  # False for drafts after the first rejection (never looked at)
    emitted_token: int  # -1 when nothing was emitted at this slot
    emitted_kind: str  # "accepted" | "corrected" | "bonus" | "discarded"
    top_p_ids: tuple[int, ...] = ()
    top_p_probs: tuple[float, ...] = ()
    top_q_ids: tuple[int, ...] = ()
    top_q_probs: tuple[float, ...] = ()
    residual_ids: tuple[int, ...] = ()  # top-k of norm(max(0, p - q)) at a rejection
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
        """One row per drafted position (and bonus slot), with its step's numbers."""
        import pandas as pd

        rows = []
        for s in self.steps:
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
            [{k: v for k, v in asdict(s).items() if k != "positions"} for s in self.steps]
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
        """Write JSON Lines: a header line, then one line per step."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        header = {"format": TRACE_FORMAT, "version": TRACE_VERSION, "meta": self.meta}
        with path.open("w", encoding="utf-8") as f:
            f.write(json.dumps(header, default=_jsonable) + "\n")
            for s in self.steps:
                f.write(json.dumps(asdict(s), default=_jsonable) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        path = Path(path)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as e:
            raise TraceFormatError(f"{path}: not a text trace file ({e})") from None
        if not lines:
            raise TraceFormatError(f"{path}: empty file, not a specviz trace")
        header = _parse_line(path, 1, lines[0])
        if not isinstance(header, dict) or header.get("format") != TRACE_FORMAT:
            raise TraceFormatError(f"{path}: line 1 is not a specviz trace header")
        version = header.get("version")
        if not isinstance(version, int) or version > TRACE_VERSION:
            raise TraceFormatError(
                f"{path}: trace format version {version!r} is newer than this specviz "
                f"understands ({TRACE_VERSION}); upgrade specviz"
            )
        steps = []
        for no, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            d = _parse_line(path, no, line)
            try:
                positions = tuple(_position_from_dict(p) for p in d.pop("positions"))
                d["emitted"] = tuple(d["emitted"])
                steps.append(Step(positions=positions, **d))
            except (TypeError, KeyError, AttributeError) as e:
                raise TraceFormatError(f"{path}: line {no} is not a valid step ({e})") from None
        return cls(tuple(steps), header.get("meta", {}))


def _position_from_dict(d: dict[str, Any]) -> DraftPosition:
    for k, v in d.items():
        if isinstance(v, list):
            d[k] = tuple(v)
        elif v is None:  # NaN is written as null
            d[k] = math.nan
    return DraftPosition(**d)


def _parse_line(path: Path, no: int, line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise TraceFormatError(f"{path}: line {no} is corrupt JSON ({e.msg})") from None


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)
