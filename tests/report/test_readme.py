"""The README's generated results section: verdict rows read from the pages, markers, round trip."""
from __future__ import annotations

from pathlib import Path

import pytest

from energyformer.errors import DataError
from energyformer.report.pages import Page, Registry, Reproduce
from energyformer.report.readme import (BEGIN, END, build_section, current_section, page_rows, replace_section,
                                        verdict_of, verdict_rows)

ROOT = Path(__file__).resolve().parents[2]

PAGE = """# A page

## corpus one

| claim | paper (Table 2) | rule | here | verdict |
|---|---|---|---|---|
| A beats B | 54.7 vs 49.3 | floor 0 | 0.00 vs 0.00 | UNTESTABLE |
| C ≈ D | ≈ | noise 0.1 | 4.1 \\| 4.2 | **DOES NOT HOLD** (inside noise? no) |
| E rises | rises | — | not run | — |

```
| claim | verdict |
|---|---|
| inside a code fence | HOLDS |
```

## corpus two

| claim (paper) | here |
|---|---|
| F falls | HOLDS: 3.0 → 2.0 |
"""


def test_verdict_words_are_read_whole_and_longest_first():
    assert verdict_of("**DOES NOT HOLD** (within noise)") == "DOES NOT HOLD"
    assert verdict_of("HOLDS") == "HOLDS"
    assert verdict_of("UNHOLDSX") is None
    assert verdict_of("not run") is None


def test_verdict_rows_from_tables_of_different_shapes():
    rows = verdict_rows(PAGE)
    assert [(r.label, r.claim, r.paper, r.ours, r.verdict) for r in rows] == [
        ("corpus one", "A beats B", "54.7 vs 49.3 (Table 2)", "0.00 vs 0.00", "UNTESTABLE"),
        ("corpus one", "C ≈ D", "≈ (Table 2)", "4.1 \\| 4.2", "DOES NOT HOLD"),
        ("corpus two", "F falls", "—", "3.0 → 2.0", "HOLDS"),
    ]


LABELLED = """# Labels

## One heading for all

| seed | kernel | claim | verdict | ours | paper (Table 3): RMSE |
|---|---|---|---|---|---|
| §4.1 | RBF | T2 beats T1 | HOLDS (margin 1) | 0.1 vs 0.2 | 0.09 vs 0.12 |
| Fig. 4 | Periodic | T2 beats T1 | UNDECIDED | 0.3 vs 0.3 | — |

| claim | paper (source) | A | B | rule | verdict | why |
|---|---|---|---|---|---|---|
| **gain** EqT beats the baseline (length = 64) | 4.66 (Table 2) | 60.5 | 54.6 | A > B | **HOLDS** | margin |
| **overheads** cost | +8% (§4) | – | – | declared | **UNTESTABLE** | a timing |

| variant | Δ at η = 1 | Δ variant | variant beats η = 1 |
|---|---|---|---|
| T4-eta0.5 | +0.0011 | +0.0005 | UNDECIDED (margin 1, band 2) |
"""


def test_rows_keep_their_label_source_and_both_sides():
    rows = verdict_rows(LABELLED)
    assert [(r.label, r.claim, r.paper, r.ours, r.verdict) for r in rows] == [
        ("RBF", "T2 beats T1", "0.09 vs 0.12 (Table 3, §4.1)", "0.1 vs 0.2", "HOLDS"),  # kernel column; source column
        ("Periodic", "T2 beats T1", "Fig. 4", "0.3 vs 0.3", "UNDECIDED"),  # no paper number: its source alone
        ("length = 64", "gain: EqT beats the baseline", "4.66 (Table 2)", "60.5 vs 54.6", "HOLDS"),
        ("", "overheads: cost", "+8% (§4)", "—", "UNTESTABLE"),  # no measurement on either side
        ("", "T4-eta0.5: variant beats η = 1", "—", "Δ at η = 1: +0.0011; Δ variant: +0.0005", "UNDECIDED"),
    ]


def test_a_negative_paper_value_keeps_its_sign_and_a_dash_stays_no_value():
    """The README showed EqT's Table 2 "-0.01" at L = 16 as "0.01": the placeholder-dash strip took the minus."""
    page = ("| claim | paper (source) | A | B | verdict |\n|---|---|---|---|---|\n"
            "| gain at 16 | -0.01 (Table 2) | 96 | 77 | UNDECIDED |\n"
            "| gain at 32 | −0.5 | 96 | 77 | HOLDS |\n"
            "| diagnostic | – (not in the paper) | 1 | 2 | UNDECIDED |\n"
            "| nothing | — | 1 | 2 | UNDECIDED |\n")
    assert [r.paper for r in verdict_rows(page)] == ["-0.01 (Table 2)", "−0.5", "(not in the paper)", "—"]


def test_a_single_heading_is_no_label_and_exact_repeats_count_once():
    page = "# P\n\n## The claims on these runs\n\n| claim | verdict |\n|---|---|\n| x | HOLDS |\n| x | HOLDS |\n"
    assert [(r.label, r.claim) for r in verdict_rows(page)] == [("", "x")]


def _write(folder, **files):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("__", "/")).parent.mkdir(parents=True, exist_ok=True)
        (folder / name.replace("__", "/")).write_text(text)


def test_an_index_file_lists_only_the_rows_its_other_files_do_not_state(tmp_path):
    """A row belongs to the page file that states it: the index's copy of gp.md's claims (and a scale
    table of verdicts per scale page) is counted, linked, never listed twice."""
    index = ("# Index\n\n## Claims\n\n| claim | verdict | ours |\n|---|---|---|\n| own claim | HOLDS | 1 |\n"
             "\n## GP\n\n| kernel | claim | verdict | ours |\n|---|---|---|---|\n| RBF | gp claim | HOLDS | 2 |\n"
             "\n## Verdicts by scale\n\n| claim | cpu | gpu |\n|---|---|---|\n"
             "| **c** scale claim | HOLDS | UNDECIDED |\n")
    gp = "# GP\n\n| kernel | claim | verdict | ours |\n|---|---|---|---|\n| RBF | gp claim | HOLDS | 2 |\n"
    cpu = "# cpu\n\n| claim | verdict | ours |\n|---|---|---|\n| c scale claim | HOLDS | 3 |\n"
    gpu = "# gpu\n\n| claim | verdict | ours |\n|---|---|---|\n| c scale claim | UNDECIDED | 4 |\n"
    _write(tmp_path / "docs/results/x", **{"README.md": index, "gp.md": gp, "cpu__README.md": cpu,
                                           "gpu__README.md": gpu})
    page = Page("x", "docs/results/x", ("README.md", "gp.md", "cpu/README.md", "gpu/README.md"), Reproduce("eqt"))
    rows = page_rows(page, tmp_path)
    assert [r.claim for r in rows["README.md"][0]] == ["own claim"]  # one table left: no heading label
    assert rows["README.md"][0][0].label == ""
    assert rows["README.md"][1:] == (["gp.md", "cpu/README.md", "gpu/README.md"], 2)  # the scale table's row too
    assert [(r.label, r.claim) for r in rows["gp.md"][0]] == [("RBF", "gp claim")]
    section = build_section([page], tmp_path)
    assert section.count("gp claim") == 1 and section.count("c scale claim") == 2  # once per scale page
    assert "1 verdict rows: HOLDS 1" in section and "2 more restate claims of [gp.md]" in section


def test_section_round_trips_through_the_markers(tmp_path):
    folder = tmp_path / "docs/results/x"
    folder.mkdir(parents=True)
    (folder / "README.md").write_text(PAGE)
    (folder / "notes.md").write_text("# Notes\n\n| claim | verdict |\n|---|---|\n| typed claim 7.7 | HOLDS |\n")
    pages = [Page("x", "docs/results/x", generator=Reproduce("bare-sa")),
             Page("notes", "docs/results/x", ("notes.md",), why="typed by hand")]
    section = build_section(pages, tmp_path)
    assert section.startswith(BEGIN) and section.endswith(END)
    assert "HOLDS 1 · DOES NOT HOLD 1 · UNDECIDED 0 · UNTESTABLE 1" in section
    assert "7.7" not in section and "Hand-written" in section  # a hand-written page's numbers never reach it
    readme = f"# title\n\nbefore\n\n{BEGIN}\nold text\n{END}\n\nafter\n"
    new = replace_section(readme, section)
    assert new.startswith("# title\n\nbefore\n\n") and new.endswith("\n\nafter\n")
    assert current_section(new) == section
    assert replace_section(new, section) == new


def test_missing_markers_are_one_line_error_naming_the_file():
    with pytest.raises(DataError, match=r"README.md: the markers <!-- results:begin .* are missing"):
        replace_section("# no markers\n", "x")


def test_committed_readme_section_is_the_one_generated_from_the_committed_pages():
    """Rerun `energyformer report` after changing a page (this is what --check compares, without rendering)."""
    readme = (ROOT / "README.md").read_text()
    reg = Registry()
    assert current_section(readme) == build_section(list(reg.pages), ROOT, reg.artifacts)
