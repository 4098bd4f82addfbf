"""Issue 27: the demo's index page links each notebook's live small run to its committed
full-size report and says which verdicts only the full size gives -- read from what the two
exported pages printed, so a page that decides nothing at the demo size is flagged and one
that decides at both sizes is not."""

from __future__ import annotations

from nbformat.v4 import new_code_cell, new_notebook, new_output

from specviz.lab.report_index import NotebookEntry, claim_verdicts, printed_lines, write_index
from specviz.lab.verdicts import CANNOT_TELL, SUPPORTS, read_verdict
from specviz.views.export import export_html


def _report(path, *lines: str):
    nb = new_notebook()
    text = "".join(f"{line}\n" for line in lines)
    nb.cells = [
        new_code_cell("print(...)", outputs=[new_output("stream", name="stdout", text=text)])
    ]
    path.write_text(export_html(nb), encoding="utf-8")
    return path


def test_printed_lines_are_read_back_from_an_exported_page(tmp_path):
    page = _report(tmp_path / "a.html", "Claim 6: p = 0.3 < 0.5 & more: supports claim 6.", "x")
    assert printed_lines(page.read_text()) == [
        "Claim 6: p = 0.3 < 0.5 & more: supports claim 6.",
        "x",
    ]


def test_read_verdict_takes_the_first_verdict_word():
    assert read_verdict("Claim 12 verdict: not supported -- it lost") == "contradicts"
    assert read_verdict("Claim 1 verdict: partly supported -- ...") == CANNOT_TELL
    assert read_verdict("Claim 6: consistent -- supports claim 6 at this size") == SUPPORTS
    assert read_verdict("Claim 7: 8 of 8 prompts identical") is None


def test_claim_lines_judged_several_ways_read_as_mixed(tmp_path):
    """Issue-27 re-review of 07: the demo index summarised claim 2 as "cannot tell" (the least
    decided verdict), hiding that two drafters contradicted it. Mixed verdicts are shown as
    mixed, with counts; a claim every line judged alike keeps its one verdict."""
    lines = [
        "Claim 2, a: ... supports claim 2 at this size.",
        "Claim 2, b: ... cannot tell at this size.",
        "Toy control (i.i.d.), Claim 10: ... supports claim 10 at this size.",  # not the claim
        "Claim 3: ... not supported at this size.",
        "Claim 3: ... not supported at this size.",
    ]
    assert claim_verdicts(lines) == {2: "1 supports, 1 cannot tell (of 2)", 3: "contradicts"}
    demo07 = [  # 07's demo: head supports; prompt lookup and suffix: open writing accepted more
        "Claim 2, eagle_head: ... +39.3% (95% CI +24.1% to +54.4%): supports claim 2 at this size.",
        "Claim 2, prompt_lookup: ... -25.6% ...: claim 2 not supported at this size.",
        "Claim 2, suffix: ... -20.1% ...: claim 2 not supported at this size.",
        "Claim 2, early_exit:4: ... +3.0% ...: cannot tell at this size.",
    ]
    said = claim_verdicts(demo07)[2]
    assert said == "1 supports, 2 contradicts, 1 cannot tell (of 4)"
    e = NotebookEntry("07", None, demo_verdicts={2: said})
    page = write_index([e], tmp_path).read_text()
    assert '<span class="v mixed">claim 2: 1 supports, 2 contradicts, 1 cannot tell (of 4)' in page
    assert "undecided" not in page  # partly decided, not "cannot tell"


def test_index_flags_the_claims_only_the_full_size_decides(tmp_path):
    demo, full = tmp_path / "demo", tmp_path / "full"
    demo.mkdir()
    full.mkdir()
    a_demo = _report(
        demo / "03_a.html", "Verdicts at this size: claim 2 cannot tell; claim 3 supports."
    )
    a_full = _report(
        full / "03_a.html", "Verdicts at this size: claim 2 supports; claim 3 supports."
    )
    b_demo = _report(demo / "04_b.html", "Verdicts at this size: claim 9 supports.")
    entries = [
        NotebookEntry("03_a", a_demo, cpu_s=12.0, full=a_full).read(),
        NotebookEntry("04_b", b_demo, full=full / "04_b.html").read(),  # none committed
        NotebookEntry("05_c", demo / "05_c.html", status="FAILED").read(),
    ]
    assert entries[0].only_full() == [2]  # claim 3 was decided at both sizes
    assert entries[1].only_full() == []
    page = write_index(entries, demo, wall_s=600, cpu_s=900).read_text()
    assert "only the full size decides claim(s) 2" in page
    assert 'href="03_a.html"' in page and 'href="../full/03_a.html"' in page
    assert "no full-size report committed" in page and "FAILED" in page
    assert "decided at the demo size" in page  # 04_b decided everything it printed
    assert "12 s CPU" in page and "10.0 min wall time, 15.0 min CPU" in page


def test_notebook_08s_claim3_reaches_the_index():
    """08 printed its claim-3 verdicts inside "On the clock: Claim 3, ..." lines, which the
    index does not read (a line must start with "Claim N"): its committed report showed no
    verdict next to the demo's. Its "Verdicts at this size" line, from the two
    :class:`~specviz.lab.policy_lab.GammaClaim`s, is read back; a cannot-tell on one of them
    shows (the negative control)."""
    from specviz.lab.policy_lab import GammaClaim
    from specviz.lab.verdicts import verdict_summary

    clock, model = GammaClaim("supports", "x", {}), GammaClaim("supports", "y", {})
    buried = f"On the clock: Claim 3, best gamma ... {clock.verdict} claim 3 at this size."
    assert claim_verdicts([buried]) == {}  # why 08 needs the summary line
    line = verdict_summary([clock, model])
    assert line == "Verdicts at this size: claim 3 supports."
    assert claim_verdicts([buried, line]) == {3: SUPPORTS}
    mixed = verdict_summary([clock, GammaClaim("cannot tell", "overlap", {})])
    assert claim_verdicts([mixed]) == {3: "1 supports, 1 cannot tell (of 2)"}
    assert claim_verdicts([verdict_summary([GammaClaim("not supported", "z", {})])]) == {
        3: read_verdict("not supported")
    }
