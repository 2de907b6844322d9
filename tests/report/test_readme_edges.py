"""The README's generated section: a cell cut at CELL_CHARS
closes the code span it cut and never leaves half of an escaped pipe, rows under level-4 headings are told apart
by them, markers in the wrong order are refused, and a page without a title is linked by its name."""
from __future__ import annotations

import pytest

from energyformer.errors import DataError
from energyformer.report.pages import Page, Reproduce
from energyformer.report.readme import BEGIN, CELL_CHARS, END, build_section, replace_section, verdict_rows


def _one_row(claim: str) -> str:
    (row,) = verdict_rows(f"| claim | verdict |\n|---|---|\n| {claim} | HOLDS |\n")
    return row.claim


def test_a_cut_cell_closes_the_code_span_it_cut():
    claim = _one_row("see `" + "x" * 300 + "`")
    assert claim.endswith("`…") and claim.count("`") == 2 and len(claim) <= CELL_CHARS + 1


def test_a_cut_cell_never_ends_in_half_an_escaped_pipe():
    claim = _one_row("a" * (CELL_CHARS - 2) + "\\|" + "b" * 50)
    assert claim == "a" * (CELL_CHARS - 2) + "…"
    assert _one_row("short \\| claim") == "short \\| claim"


def test_rows_under_level_four_headings_are_labelled_by_them():
    page = ("# P\n\n## Runs\n\n### CPU\n\n#### MNIST\n\n| claim | verdict |\n|---|---|\n| x | HOLDS |\n"
            "\n#### CIFAR\n\n| claim | verdict |\n|---|---|\n| x | UNDECIDED |\n")
    assert [(r.label, r.claim, r.verdict) for r in verdict_rows(page)] == [("MNIST", "x", "HOLDS"),
                                                                           ("CIFAR", "x", "UNDECIDED")]


def test_markers_in_the_wrong_order_are_refused():
    with pytest.raises(DataError, match=r"README.md: the markers .* are missing"):
        replace_section(f"# t\n\n{END}\n\n{BEGIN}\n", f"{BEGIN}\nnew\n{END}")


def test_a_page_without_a_title_is_linked_by_its_name(tmp_path):
    folder = tmp_path / "docs/results/x"
    folder.mkdir(parents=True)
    (folder / "README.md").write_text("no title line\n\n| claim | verdict |\n|---|---|\n| y | HOLDS |\n")
    section = build_section([Page("my-page", "docs/results/x", generator=Reproduce("bare-sa"))], tmp_path)
    assert "### [my-page](docs/results/x/README.md)" in section


def test_a_verdict_named_column_without_verdicts_does_not_hide_the_one_that_has_them():
    page = ("| claim | outcome | verdict basis |\n|---|---|---|\n"
            "| A beats B | HOLDS (margin 2) | seed noise |\n")
    assert [(r.claim, r.verdict) for r in verdict_rows(page)] == [("A beats B", "HOLDS")]


def test_a_row_without_its_closing_pipe_keeps_an_escaped_pipe_at_its_end():
    page = "| claim | verdict | ours |\n|---|---|---|\n| x | HOLDS | 4.1 \\|\n"
    assert [r.ours for r in verdict_rows(page)] == ["4.1 \\|"]
