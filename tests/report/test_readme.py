"""The README's generated results section: verdict rows read from the pages, markers, round trip."""
from __future__ import annotations

from pathlib import Path

import pytest

from energyformer.errors import DataError
from energyformer.report.pages import Page, Registry, Reproduce
from energyformer.report.readme import (BEGIN, END, build_section, current_section, replace_section, verdict_of,
                                        verdict_rows)

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
    assert [(r.claim, r.paper, r.ours, r.verdict) for r in rows] == [
        ("corpus one: A beats B", "54.7 vs 49.3", "0.00 vs 0.00", "UNTESTABLE"),
        ("corpus one: C ≈ D", "≈", "4.1 \\| 4.2", "DOES NOT HOLD"),
        ("corpus two: F falls", "—", "3.0 → 2.0", "HOLDS"),
    ]


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
