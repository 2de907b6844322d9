"""Page cells (studies/page.py, _cell) at an edge test_page.py leaves open: a plain ``mean`` column over a
non-finite seed says so (it read a bare "nan", as if the metric were undefined rather than a run diverging)."""

from energyformer.studies import load_study
from energyformer.studies.page import PageContext, render_table
from energyformer.studies.page_spec import TableSpec

from .tiny import write


def test_a_mean_column_over_a_non_finite_seed_names_it(tmp_path):
    spec = load_study(write(tmp_path / "s.yaml"))
    runs = {f"eqt{s}": {"cell": {"model": "eqt", "length": "8"}, "seed": s,
                        "metrics": {"accuracy": {"k32": v}}} for s, v in ((0, 90.0), (1, float("nan")))}
    ctx = PageContext(spec, "tiny", "cpu", tmp_path, {"runs": runs}, [])
    t = TableSpec(rows=["model"], columns=[{"label": "acc", "metric": "accuracy.k32", "agg": "mean", "fmt": ".1f"}])
    assert "| eqt | nan (non-finite in 1 of 2 seed(s)) |" in render_table(ctx, t)


def test_si_format_switches_at_exactly_one_thousand():
    """fmt_value ``si``: a value of exactly 1e3 / 1e6 takes the suffix (``abs(v) >= s``), as 1000 params = 1.00K."""
    from energyformer.studies.page import fmt_value

    assert fmt_value(1000, "si") == "1.00K" and fmt_value(1_000_000, "si") == "1.00M" and fmt_value(999, "si") == "999"
