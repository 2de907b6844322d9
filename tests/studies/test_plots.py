"""The points a page plot reads from a value (studies/plots.py module docstring): rows that are lists are indexed by
``x`` / ``y_key`` (a negative index counts from the end, as in Python); a curve keyed by x (a dict of dicts) and a
sweep {x: y} (negative x too) come out in x order; a history of [x, y] pairs is smoothed by ``smooth``; a vline
that is a number is that x; a line is in x order, scaled, with an ``x`` that is no axis read from the record; a plot
with no values is not drawn."""

from energyformer.studies.page_spec import PlotSpec
from energyformer.studies.plots import _points, _vlines


def _spec(**kw) -> PlotSpec:
    return PlotSpec(file="p.png", alt="p", **{"y": "m", **kw})


def test_rows_that_are_lists_take_a_negative_index_from_the_end():
    assert _points([[0, 9, 5.0], [1, 9, 6.0]], _spec(x="0", y_key="-1"), None) == [(0.0, 5.0), (1.0, 6.0)]


def test_curves_keyed_by_x_come_out_in_x_order_negative_x_included():
    assert _points({"8": {"acc": 2.0}, "4": {"acc": 1.0}}, _spec(y_key="acc"), None) == [(4.0, 1.0), (8.0, 2.0)]
    assert _points({"2": 3.0, "-1": 1.0, "x": 7.0}, _spec(), None) == [(-1.0, 1.0), (2.0, 3.0)]


def test_a_history_of_pairs_is_smoothed():
    assert _points([[1, 1.0], [2, 3.0], [3, 5.0], [4, 7.0]], _spec(pairs=True, smooth=2), None) == [
        (1.5, 2.0), (3.5, 6.0)]


def test_a_vline_that_is_a_number_is_that_x():
    assert _vlines(None, _spec(vline="3")) == [3.0]


def test_a_line_is_in_x_order_scaled_with_x_read_from_a_record_path(tmp_path):
    """``x`` that is not an axis is the record's value at that path; ``scale`` multiplies every y."""
    from energyformer.studies import load_study
    from energyformer.studies.page import PageContext
    from energyformer.studies.plots import series_points

    from .tiny import write

    spec = load_study(write(tmp_path / "s.yaml"))
    runs = {f"eqt{s}": {"cell": {"model": "eqt", "length": "8"}, "seed": s, "steps": steps, "metrics": {"acc": acc}}
            for s, steps, acc in ((0, 20, 0.5), (1, 10, 0.7))}
    ctx = PageContext(spec, "tiny", "cpu", tmp_path, {"runs": runs}, [])
    got = series_points(ctx, _spec(y="acc", x="steps", scale=100.0), {"model": "eqt"})
    assert list(got.items()) == [(10.0, [70.0]), (20.0, [50.0])]


def test_a_plot_no_record_has_values_for_is_not_drawn(tmp_path):
    """line_plot: "None when no record has its values" (the page then leaves the plot out)."""
    from energyformer.studies import load_study
    from energyformer.studies.page import PageContext
    from energyformer.studies.plots import line_plot

    from .tiny import write

    spec = load_study(write(tmp_path / "s.yaml"))
    runs = {"eqt0": {"cell": {"model": "eqt", "length": "8"}, "seed": 0, "metrics": {"acc": 0.5}}}
    ctx = PageContext(spec, "tiny", "cpu", tmp_path, {"runs": runs}, [])
    assert line_plot(ctx, _spec(y="missing", series="model"), tmp_path / "p.png") is None
    assert not (tmp_path / "p.png").exists()
