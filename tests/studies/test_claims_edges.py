"""Claim evaluation edges (studies/claims.py) the other claim tests left open: top-level and negative-index metric
paths, a ``range`` over one cell, a ``minus`` over different cells, the gate's mean over seeds and B's reason."""

from energyformer.studies.claims import arm_values, evaluate, metric_value
from energyformer.studies.spec import ArmSpec

from .test_claims import _spec


def _rec(model, seed, length="64", **metrics):
    return {"cell": {"model": model, "length": length}, "seed": seed, "metrics": metrics}


def test_metric_paths_reach_top_level_numbers_and_a_one_element_lists_last_item():
    """metric_value docstring: "or its top-level numbers: tokens_per_s, params.total"; ``train_ce.-1`` is the
    last element, also of a one-element list."""
    rec = {"metrics": {"train_ce": [2.5]}, "tokens_per_s": 123.0, "params": {"total": 42}}
    assert metric_value(rec, "tokens_per_s") == 123.0
    assert metric_value(rec, "params.total") == 42
    assert metric_value(rec, "train_ce.-1") == 2.5 and metric_value(rec, "train_ce.0") == 2.5


def test_a_range_over_one_cell_is_zero():
    """``agg: range`` is max - min over the arm's cells: 0 for a single cell, never the value itself."""
    recs = {f"e{s}": _rec("eqt", s, accuracy={"k32": 70.0 + s}) for s in (0, 1)}
    assert arm_values(recs, ArmSpec(where={"model": "eqt"}, agg="range"), "accuracy.k32", {}) == {0: 0.0, 1: 0.0}


def test_a_minus_selection_over_other_cells_is_untestable_not_subtracted(tmp_path):
    """A gain ``A - minus`` is taken over the same cells or not at all: eqt ran lengths 8 and 64, the baseline only
    64 -> UNTESTABLE naming the cells (it subtracted and said HOLDS)."""
    spec = _spec(tmp_path, a={"where": {"model": "eqt"}, "metric": "accuracy.k32",
                               "minus": {"where": {"model": "baseline"}, "metric": "accuracy.plain"}},
                  b={"value": 0}, rules={"single_seed_bound": 0})
    recs = {}
    for s in (0, 1):
        for L in ("8", "64"):
            recs[f"e{s}{L}"] = _rec("eqt", s, L, accuracy={"k32": 90.0})
        recs[f"b{s}"] = _rec("baseline", s, "64", accuracy={"plain": 50.0})
    (row,) = evaluate(spec, recs)
    assert str(row.outcome.verdict) == "UNTESTABLE" and "different cells" in row.outcome.reason


def test_the_gate_reads_the_mean_over_seeds_not_one_seed(tmp_path):
    """rules.gate: UNTESTABLE when "the mean over seeds [is] within at_band of chance": seeds 50.2 and 60.0 (mean 55.1)
    are off chance 50 +- 1, so the claim is decided."""
    spec = _spec(tmp_path, b={"value": 0}, rules={"single_seed_bound": 0,
                  "gate": {"metric": "accuracy.plain", "chance": 50, "at_band": 1}})
    recs = {f"e{s}": _rec("eqt", s, accuracy={"k32": 80.0, "plain": p}) for s, p in ((0, 50.2), (1, 60.0))}
    (row,) = evaluate(spec, recs)
    assert str(row.outcome.verdict) == "HOLDS", row.outcome


def test_b_without_its_metric_is_untestable_naming_b(tmp_path):
    """_decide: "UNTESTABLE with the reason where an arm selected runs but has no value", for B as for A."""
    import warnings

    spec = _spec(tmp_path, b={"where": {"model": "baseline"}, "metric": "accuracy.plian"})
    recs = {**{f"e{s}": _rec("eqt", s, accuracy={"k32": 80.0}) for s in (0, 1)},
            **{f"b{s}": _rec("baseline", s, accuracy={"plain": 50.0}) for s in (0, 1)}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (row,) = evaluate(spec, recs)
    assert str(row.outcome.verdict) == "UNTESTABLE" and row.outcome.reason.startswith("B: ")
    assert "accuracy.plian" in row.outcome.reason
