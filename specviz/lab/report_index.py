"""The demo's index page: each notebook's live small run next to its committed full-size
report, with the verdicts each printed and the ones only the full size gives.

``make demo`` runs every notebook at its demo size into ``reports/demo/``; a few notebooks
decide their main claim only at their default size, and those reports are committed under
``reports/``. :func:`write_index` reads the verdicts both pages printed (the "Verdicts at this
size" line of a notebook's "What we saw", else every ``Claim N`` line, read by
:func:`specviz.lab.verdicts.read_verdict`) and writes ``index.html`` with both links and, per
claim, the demo verdict, the full-size one, and whether only the full size decides it.

>>> lines = ["Claim 2, eagle_head: acceptance ... difference +12.4%: cannot tell at this size.",
...          "Claim 3: tokens per call ... supports claim 3 at this size."]
>>> claim_verdicts(lines)
{2: 'cannot tell', 3: 'supports'}
>>> claim_verdicts(["Verdicts at this size: claim 1 2 supports, 1 cannot tell (of 3); "
...                 "claim 10 cannot tell."])
{1: '2 supports, 1 cannot tell (of 3)', 10: 'cannot tell'}
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .verdicts import CANNOT_TELL, CONTRADICTS, NOT_SHOWN, SUPPORTS, read_verdict

__all__ = ["NotebookEntry", "claim_verdicts", "printed_lines", "write_index"]

_OUTPUT = re.compile(r'<div class="jp-RenderedText[^"]*"[^>]*>\s*<pre>(.*?)</pre>', re.S)
_CLAIM = re.compile(r"^\s*(?:Toy control[^,]*,\s*)?Claim (\d+)\b")
_SUMMARY = re.compile(r"Verdicts at this size: (.*)$")
_PART = re.compile(r"claim (\d+) (.+)")
_DECIDED = (SUPPORTS, CONTRADICTS)
_RANK = {SUPPORTS: 0, CONTRADICTS: 0, CANNOT_TELL: 1, NOT_SHOWN: 2}


def printed_lines(page: str) -> list[str]:
    """Every line a report's code cells printed (its text outputs), in page order."""
    out = []
    for block in _OUTPUT.findall(page):
        text = html.unescape(re.sub(r"<[^>]+>", "", block))
        out.extend(text.splitlines())
    return out


def claim_verdicts(lines: Iterable[str]) -> dict[int, str]:
    """Claim number -> verdict printed. A notebook's "Verdicts at this size" line wins; else
    each ``Claim N`` line counts (a toy control's line does not), and a claim printed several
    times with different verdicts (one line per drafter, say) is shown as mixed -- each
    verdict with its count, "1 supports, 2 contradicts (of 3)" -- not as its least decided one
    (07's demo claim 2, contradicted by two drafters, read "cannot tell" on the index)."""
    lines = list(lines)
    for line in reversed(lines):
        m = _SUMMARY.search(line)
        if m:
            found = {}
            for part in m.group(1).rstrip(".").split("; "):
                pm = _PART.match(part.strip())
                if pm:  # "claim 1 supports" or "claim 2 1 supports, 1 cannot tell (of 2)"
                    said = [v for v in _RANK if v in pm.group(2)] or [CANNOT_TELL]
                    found[int(pm.group(1))] = said[0] if len(said) == 1 else pm.group(2)
            return found
    said_by: dict[int, list[str]] = {}
    for line in lines:
        m = _CLAIM.match(line)
        if not m or line.lstrip().startswith("Toy control"):
            continue
        verdict = read_verdict(line)
        if verdict is not None:
            said_by.setdefault(int(m.group(1)), []).append(verdict)
    return {claim: _mixed(said) for claim, said in said_by.items()}


def _mixed(said: Sequence[str]) -> str:
    """One verdict when every line said the same; else each distinct verdict with its count,
    in order of first appearance -- the form of
    :func:`~specviz.lab.verdicts.verdict_summary` ("1 supports, 2 contradicts (of 3)"), so
    two drafters that contradicted a claim are not hidden behind one that could not tell.

    >>> _mixed(["supports", "supports"]), _mixed(["supports", "contradicts", "contradicts"])
    ('supports', '1 supports, 2 contradicts (of 3)')
    """
    kinds = list(dict.fromkeys(said))
    if len(kinds) == 1:
        return kinds[0]
    return ", ".join(f"{said.count(k)} {k}" for k in kinds) + f" (of {len(said)})"


@dataclass
class NotebookEntry:
    """One notebook on the index: its name, its demo report (or why there is none), the CPU
    seconds its demo run took, and its committed full-size report if there is one."""

    name: str
    demo: Path | None
    cpu_s: float | None = None
    full: Path | None = None
    status: str = "ok"
    demo_verdicts: dict[int, str] = field(default_factory=dict)
    full_verdicts: dict[int, str] = field(default_factory=dict)

    def read(self) -> NotebookEntry:
        for path, into in ((self.demo, self.demo_verdicts), (self.full, self.full_verdicts)):
            if path is not None and path.is_file():
                into.update(claim_verdicts(printed_lines(path.read_text(encoding="utf-8"))))
        return self

    def only_full(self) -> list[int]:
        """Claims the full size decides and the demo size does not."""
        return sorted(
            c
            for c, v in self.full_verdicts.items()
            if _decided(v) and not _decided(self.demo_verdicts.get(c, ""))
        )


def _decided(verdict: str) -> bool:
    """Decided, or partly (a claim judged several ways: "1 supports, 1 cannot tell")."""
    return verdict in _DECIDED or any(f"{n} {v}" in verdict for v in _DECIDED for n in "123456789")


def _link(path: Path | None, base: Path, text: str) -> str:
    if path is None or not path.is_file():
        return "&ndash;"
    rel = os.path.relpath(path, base)
    return f'<a href="{html.escape(rel)}">{html.escape(text)}</a>'


def _verdict_cell(verdicts: Mapping[int, str]) -> str:
    if not verdicts:
        return "&ndash;"
    return "<br>".join(
        f'<span class="v {v.replace(" ", "-") if v in _RANK else "mixed"}">claim {c}: '
        f"{html.escape(v)}</span>"
        for c, v in sorted(verdicts.items())
    )


def _note(e: NotebookEntry) -> str:
    """What the full size adds, in words."""
    only = e.only_full()
    undecided = sorted(c for c, v in e.demo_verdicts.items() if not _decided(v))
    if only:
        return (
            f'<span class="only">only the full size decides claim(s) {", ".join(map(str, only))}'
            "</span>"
        )
    if e.full is not None and e.full.is_file():
        if not e.full_verdicts:
            return "the full-size report prints no claim verdicts to compare"
        return "the demo size decides every claim the full size decides"
    if undecided:
        return (
            f"claim(s) {', '.join(map(str, undecided))} undecided at the demo size; no "
            "full-size report committed"
        )
    if not e.demo_verdicts:
        return "no verdicts printed at the demo size; no full-size report committed"
    return "decided at the demo size (no full-size report needed)"


def _row(e: NotebookEntry, out: Path) -> str:
    demo = _link(e.demo, out, "demo report") if e.status == "ok" else html.escape(e.status)
    cpu = "" if e.cpu_s is None else f"<br>{e.cpu_s:.0f} s CPU"
    return (
        f"<tr><td>{html.escape(e.name)}</td><td>{demo}{cpu}</td>"
        f"<td>{_verdict_cell(e.demo_verdicts)}</td>"
        f"<td>{_link(e.full, out, 'full-size report')}</td>"
        f"<td>{_verdict_cell(e.full_verdicts)}</td><td>{_note(e)}</td></tr>"
    )


_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top}
th{background:#f4f4f4}.v.supports{color:#332288}.v.contradicts{color:#CC3311}
.v.cannot-tell,.v.not-shown{color:#777}.v.mixed{color:#AA4499}.only{font-weight:bold}"""


def write_index(
    entries: Sequence[NotebookEntry],
    out: str | Path,
    *,
    wall_s: float | None = None,
    cpu_s: float | None = None,
) -> Path:
    """Write ``out/index.html`` for ``entries`` (read with :meth:`NotebookEntry.read`);
    atomic. Returns its path."""
    out = Path(out)
    rows = [_row(e, out) for e in entries]
    timing = ""
    if wall_s is not None:
        timing = f"<p>This run: {wall_s / 60:.1f} min wall time"
        timing += f", {cpu_s / 60:.1f} min CPU" if cpu_s is not None else ""
        timing += " (on a shared machine the wall time is not the notebooks' own).</p>"
    page = (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>specviz demo: the notebooks</title><style>{_STYLE}</style></head><body>"
        "<h1>specviz demo: the notebooks</h1>"
        "<p>Each notebook ran live at its <b>demo size</b> (small: minutes on a laptop). Some "
        "claims need more samples, prompts or tokens than that to come out either way; for "
        "those a <b>full-size report</b> is committed in the repository (regenerated with "
        "<code>make reports</code>). Both open offline. The verdict columns are what each page "
        "printed: <i>supports</i> / <i>contradicts</i> are decisions, <i>cannot tell</i> means "
        "the size was too small to decide, <i>not shown</i> that the case did not occur; a "
        "claim judged several ways (one line per drafter, say) lists each verdict with its "
        "count.</p>"
        f"{timing}<table><tr><th>notebook</th><th>live, demo size</th><th>verdicts at demo "
        "size</th><th>committed, full size</th><th>verdicts at full size</th><th>what only "
        f"the full size gives</th></tr>{''.join(rows)}</table></body></html>"
    )
    path = out / "index.html"
    tmp = path.with_name(f".index.{os.getpid()}.tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, path)
    return path
