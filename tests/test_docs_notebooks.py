"""docs/notebooks.md against the notebooks it cites, without executing any notebook.

The page lists the source article's twelve claims; per claim an English statement, the
article's own words (a blockquote with CJK text) and bullets ``[NN](../notebooks/NN_x.ipynb)
§ *section heading* ...`` naming where the claim is measured. ``doc_problems`` checks that

- exactly the claims 1..12 have a section, each with a CJK blockquote, prose in English and
  at least one notebook link;
- every linked notebook exists;
- every cited ``§ *heading*`` is a markdown heading of the notebook linked before it (so the
  page fails when a notebook section is renamed), and every linked notebook cites one;
- every claim a notebook's first cell names ("**6**", "claim 11", "it serves: 1 (...)") is
  mapped to that notebook by the page;
- the "Notebook → claims" table lists every notebook with exactly the claims whose sections
  link it.

Negative controls: doctored copies of the page (a heading renamed, a claim dropped, the
Chinese words dropped, a dangling link, a stale table row) and of a notebook (a section
renamed, a claim added to its first cell) must each be rejected.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "notebooks.md"
NB_DIR = ROOT / "notebooks"
CLAIMS = set(range(1, 13))
# the source article; outside the repository (shared/seed/ next to the checkout) or $SPECVIZ_ARTICLE
ARTICLE_DIR = Path(os.environ.get("SPECVIZ_ARTICLE", ROOT.parent / "shared" / "seed"))

CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
NB_LINK = re.compile(r"\[[^\]]*\]\((\.\./notebooks/[^)\s]+\.ipynb)\)")
ANY_LINK = re.compile(r"\]\(([^)\s]+)\)")
CITE = re.compile(r"§\s*\*([^*]+)\*")
SECTION = re.compile(r"^(#{2,3}) (.+)$", re.M)
CLAIM_TITLE = re.compile(r"^Claim (\d+)\b")
MD_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
TABLE_TITLE = "Notebook → claims"


def _norm(text: str) -> str:
    return " ".join(text.split())


def _sections(doc: str) -> list[tuple[str, str]]:
    """(title, body) of every ``##`` / ``###`` section, in order."""
    marks = list(SECTION.finditer(doc))
    return [
        (m.group(2).strip(), doc[m.end() : marks[i + 1].start() if i + 1 < len(marks) else None])
        for i, m in enumerate(marks)
    ]


def load_notebook(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def notebook_headings(nb: dict) -> set[str]:
    """Every markdown heading of a notebook, whitespace-normalised, without the ``#``s."""
    out = set()
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for line in "".join(cell["source"]).splitlines():
            m = MD_HEADING.match(line)
            if m:
                out.add(_norm(m.group(1)))
    return out


def first_cell_claims(text: str) -> set[int]:
    """Claim numbers a notebook's first cell names, from its first mention of "claim" on:
    bold bullets (``* **6** — ...``), plain mentions (``claim 11``) and lists
    (``it serves: 1 (fewer target calls), 2 (...)``)."""
    i = text.lower().find("claim")
    if i < 0:
        return set()
    tail = text[i:]
    nums = re.findall(r"\*\*(\d{1,2})\*\*", tail)
    nums += re.findall(r"\bclaims? (\d{1,2})\b", tail, re.I)
    nums += re.findall(r"(?:^|[\s:,])(\d{1,2}) \(", tail)
    return {int(n) for n in nums}


def parse_doc(doc: str) -> tuple[dict[int, str], dict[str, set[int]]]:
    """(claim number -> section body, notebook link -> claims of its table row)."""
    claims: dict[int, str] = {}
    table: dict[str, set[int]] = {}
    for title, body in _sections(doc):
        m = CLAIM_TITLE.match(title)
        if m:
            n = int(m.group(1))
            claims[n] = claims.get(n, "") + "\0duplicate\0" * (n in claims) + body
        elif title == TABLE_TITLE:
            for line in body.splitlines():
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                links = NB_LINK.findall(cells[0]) if line.startswith("|") else []
                if links:
                    table[links[0]] = {int(x) for x in re.findall(r"\d+", cells[-1])}
    return claims, table


def doc_problems(doc: str, doc_dir: Path, nb_dir: Path) -> list[str]:
    """Everything wrong with the page ``doc`` (its links relative to ``doc_dir``) against the
    notebooks in ``nb_dir``; empty when it is in step."""
    problems: list[str] = []
    claims, table = parse_doc(doc)
    if set(claims) != CLAIMS:
        problems.append(f"claim sections {sorted(claims)}, expected 1..12")
    notebooks: dict[str, dict] = {}
    for link in sorted(set(ANY_LINK.findall(doc))):
        if link.endswith(".ipynb"):
            path = doc_dir / link
            if not path.is_file():
                problems.append(f"link to a missing notebook: {link}")
            else:
                notebooks[link] = load_notebook(path)
    mapping: dict[str, set[int]] = {}
    for n, body in sorted(claims.items()):
        if "\0duplicate\0" in body:
            problems.append(f"claim {n}: more than one section")
        quotes = [ln for ln in body.splitlines() if ln.startswith(">") and CJK.search(ln)]
        if not quotes:
            problems.append(f"claim {n}: no blockquote in the article's words (CJK)")
        english = [
            ln
            for ln in body.splitlines()
            if ln and not ln.startswith((">", "-", " ", "|")) and not CJK.search(ln)
        ]
        if len(" ".join(english).split()) < 10:
            problems.append(f"claim {n}: no English statement")
        events = sorted(
            [(m.start(), "link", m.group(1)) for m in NB_LINK.finditer(body)]
            + [(m.start(), "cite", _norm(m.group(1))) for m in CITE.finditer(body)]
        )
        if not any(kind == "link" for _, kind, _ in events):
            problems.append(f"claim {n}: no notebook link")
        current, cited = None, set()
        for _, kind, value in events:
            if kind == "link":
                current = value
                mapping.setdefault(value, set()).add(n)
                continue
            if current is None:
                problems.append(f"claim {n}: section {value!r} cited before any notebook link")
                continue
            cited.add(current)
            nb = notebooks.get(current)
            if nb is not None and value not in notebook_headings(nb):
                problems.append(f"claim {n}: {Path(current).name} has no heading {value!r}")
        for link in sorted({v for _, k, v in events if k == "link"} - cited):
            problems.append(f"claim {n}: {Path(link).name} linked without a § *section*")
    for path in sorted(nb_dir.glob("[0-9][0-9]_*.ipynb")):
        link = f"../{nb_dir.name}/{path.name}"
        nb = notebooks.get(link) or load_notebook(path)
        named = first_cell_claims("".join(nb["cells"][0]["source"]))
        if not named or not named <= CLAIMS:
            problems.append(f"{path.name}: first cell names claims {sorted(named)}")
        missing = named - mapping.get(link, set())
        if missing:
            problems.append(f"{path.name}: first cell names claims {sorted(missing)} not mapped")
        if link not in table:
            problems.append(f"{path.name}: no row in the {TABLE_TITLE!r} table")
    for link, row in sorted(table.items()):
        if row != mapping.get(link, set()):
            problems.append(
                f"table row {Path(link).name}: claims {sorted(row)}, the sections link it "
                f"from {sorted(mapping.get(link, set()))}"
            )
    return problems


def quotes_missing_from(doc: str, article: str) -> list[str]:
    """The page's CJK blockquotes that are not verbatim in the article (``……`` = omission;
    whitespace ignored)."""
    flat = "".join(article.split())
    missing = []
    for line in doc.splitlines():
        if line.startswith(">") and CJK.search(line):
            quote = "".join(line[1:].split())
            if not all(part in flat for part in quote.split("……") if part):
                missing.append(line)
    return missing


# -- the page as committed ------------------------------------------------------------------


def test_the_page_is_in_step_with_the_notebooks():
    assert doc_problems(DOC.read_text(encoding="utf-8"), DOC.parent, NB_DIR) == []


def test_every_notebook_names_its_claims():
    for path in sorted(NB_DIR.glob("[0-9][0-9]_*.ipynb")):
        named = first_cell_claims("".join(load_notebook(path)["cells"][0]["source"]))
        assert named and named <= CLAIMS, (path.name, named)


def test_first_cell_claims_reads_the_three_forms():
    assert first_cell_claims("Claims measured here:\n\n* **1** — x;\n* **10** — y") == {1, 10}
    assert first_cell_claims("Claim measured here: **10** — x; kinds of claim 11)") == {10, 11}
    assert first_cell_claims("Claims it serves: 1 (fewer calls),\n6 (exact), 9 (bugs)") == {1, 6, 9}
    # numbers before the first "claim" (numbered lists, formulas) are not claims
    assert first_cell_claims("1. **a baseline** (x)\n\nClaims: **12** — y") == {12}
    assert first_cell_claims("no claims named") == set()


def test_the_chinese_quotes_are_the_articles_words():
    texts = sorted(ARTICLE_DIR.glob("*.txt")) if ARTICLE_DIR.is_dir() else []
    if not texts:
        pytest.skip(f"the source article is not at {ARTICLE_DIR}")
    article = "".join(p.read_text(encoding="utf-8") for p in texts)
    doc = DOC.read_text(encoding="utf-8")
    assert quotes_missing_from(doc, article) == []
    # negative control: a paraphrase is not a quote
    assert quotes_missing_from("> 推测解码总是让输出逐字一致。", article)


# -- negative controls: doctored copies must be rejected --------------------------------------


def _doctored(old: str, new: str) -> list[str]:
    doc = DOC.read_text(encoding="utf-8")
    assert old in doc, f"the control's anchor {old!r} is gone from the page"
    return doc_problems(doc.replace(old, new, 1), DOC.parent, NB_DIR)


def test_rejects_a_renamed_heading_in_the_page():
    problems = _doctored("§ *Memory*", "§ *Memory use*")
    assert any("no heading 'Memory use'" in p for p in problems), problems


def test_rejects_a_dropped_claim():
    problems = _doctored("### Claim 12 ·", "### Claim twelve ·")
    assert any("expected 1..12" in p for p in problems), problems
    # the notebooks that name claim 12 are no longer covered, the table is stale
    assert any("10_deployment_checklist.ipynb: first cell names claims [12]" in p for p in problems)
    assert any(p.startswith("table row 10_deployment_checklist.ipynb") for p in problems)


def test_rejects_a_claim_without_the_articles_words():
    doc = DOC.read_text(encoding="utf-8")
    start = doc.index("### Claim 7 ·")
    end = doc.index("### Claim 8 ·")
    body = "\n".join(ln for ln in doc[start:end].splitlines() if not ln.startswith(">"))
    problems = doc_problems(doc[:start] + body + doc[end:], DOC.parent, NB_DIR)
    assert problems == ["claim 7: no blockquote in the article's words (CJK)"], problems


def test_rejects_a_link_to_a_missing_notebook():
    problems = _doctored(
        "[04](../notebooks/04_when_lossless_breaks.ipynb) § *Evidence",
        "[04](../notebooks/04_when_lossless_broke.ipynb) § *Evidence",
    )
    assert any("missing notebook: ../notebooks/04_when_lossless_broke.ipynb" in p for p in problems)


def test_rejects_a_stale_table_row():
    row = "| 1, 7, 10 |"
    problems = _doctored(row, "| 1, 7 |")
    assert any(p.startswith("table row 00_quick_start.ipynb") for p in problems), problems


def _copy(tmp_path: Path) -> tuple[str, Path, Path]:
    """The page and the notebooks, copied side by side under ``tmp_path``."""
    (tmp_path / "docs").mkdir()
    nb_dir = tmp_path / "notebooks"
    shutil.copytree(NB_DIR, nb_dir, ignore=shutil.ignore_patterns(".*"))
    return DOC.read_text(encoding="utf-8"), tmp_path / "docs", nb_dir


def _edit_markdown(path: Path, old: str, new: str) -> None:
    nb = load_notebook(path)
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and old in src:
            cell["source"] = src.replace(old, new, 1)
            break
    else:
        raise AssertionError(f"{path.name}: no markdown cell with {old!r}")
    path.write_text(json.dumps(nb), encoding="utf-8")


def test_rejects_a_section_renamed_in_a_notebook(tmp_path):
    doc, doc_dir, nb_dir = _copy(tmp_path)
    assert doc_problems(doc, doc_dir, nb_dir) == []  # the copy itself is in step
    _edit_markdown(nb_dir / "09_throughput_latency_concurrency.ipynb", "## Memory", "## RAM")
    problems = doc_problems(doc, doc_dir, nb_dir)
    assert problems and all("has no heading 'Memory'" in p for p in problems), problems


def test_rejects_a_claim_named_by_a_notebook_but_not_mapped(tmp_path):
    doc, doc_dir, nb_dir = _copy(tmp_path)
    _edit_markdown(
        nb_dir / "01_how_it_works_exactly.ipynb",
        "Claims of the source article measured here:",
        "Claims of the source article measured here:\n\n* **5** — a claim the page omits;",
    )
    problems = doc_problems(doc, doc_dir, nb_dir)
    assert problems == ["01_how_it_works_exactly.ipynb: first cell names claims [5] not mapped"]
