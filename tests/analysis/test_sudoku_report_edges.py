"""sudoku_report numbers at edges test_sudoku_report.py leaves open."""

from energyformer.analysis.sudoku_report import wilson


def test_wilson_interval_is_clamped_to_0_100_at_k_0_and_k_n():
    """wilson: "95% Wilson interval (in %)", within [0, 100]; unclamped, 0 of 10 gave -2.8e-15 % (a page's
    "-0.0%") and 19 of 19 gave 100.00000000000003 %."""
    assert wilson(0, 10)[0] == 0.0 and wilson(0, 5)[0] == 0.0
    assert wilson(19, 19)[1] == 100.0 and wilson(5, 5)[1] == 100.0

