"""utils/markdown.py: the tables every generated page writes."""

from energyformer.utils.markdown import md_table


def test_header_rule_and_rows():
    assert md_table(["a", "b"], [[1, "x"], [2.5, ""]]) == ["| a | b |", "|---|---|", "| 1 | x |", "| 2.5 |  |"]
    assert md_table(["only"], []) == ["| only |", "|---|"]


def test_a_pipe_in_a_cell_is_escaped_only_when_asked():
    assert md_table(["c"], [["a|b"]], escape=True)[2] == "| a\\|b |"
    assert md_table(["c"], [["`x | y`"]])[2] == "| `x | y` |"  # markdown cells as they are
