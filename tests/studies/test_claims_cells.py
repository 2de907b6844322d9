"""Both arms of a claim are compared over the same cells or not at all; a diverged run is a result, not a gap."""

import copy

import pytest

from energyformer.studies import load_study
from energyformer.studies.claims import claims_table, evaluate

from .tiny import TINY, write


def _spec(tmp_path, **claim):
    data = copy.deepcopy(TINY)
    data["runs"]["grid"]["length"] = {64: ["task.data.length=64"], 96: ["task.data.length=96"]}
    base = {"id": "c", "text": "EqT beats the baseline", "paper": {"value": 1.0, "source": "Table 2"},
            "a": {"where": {"model": "eqt", "length": [64, 96]}, "metric": "accuracy.k32"},
            "b": {"where": {"model": "baseline", "length": [64, 96]}, "metric": "accuracy.plain"}}
    data["claims"] = [{**base, **claim}]
    return load_study(write(tmp_path / "s.yaml", **data))


def _rec(model, length, seed, value=None, key=None):
    metrics = {} if value is None else {"accuracy": {key or ("k32" if model == "eqt" else "plain"): value}}
    return {"cell": {"model": model, "length": str(length)}, "seed": seed, "metrics": metrics}


def _recs(eqt96_diverged=True):
    """eqt wins at 64 by 10 points; eqt at 96 diverged in both seeds (or scored 40: far below the baseline)."""
    out = {}
    for s in (0, 1):
        out[f"e64-{s}"] = _rec("eqt", 64, s, 86.0 + s)
        out[f"b64-{s}"] = _rec("baseline", 64, s, 76.0 + s)
        out[f"b96-{s}"] = _rec("baseline", 96, s, 75.0)
        out[f"e96-{s}"] = ({**_rec("eqt", 96, s), "diverged": "training diverged at step 2"} if eqt96_diverged
                           else _rec("eqt", 96, s, 40.0))
    return out


def _row(spec, recs):
    (row,) = evaluate(spec, recs)
    return row


def test_a_diverged_cell_is_a_non_finite_result_not_a_cell_dropped_from_one_arm(tmp_path):
    """Found by an outside tester (eqt hard-gain): eqt at length 96 diverged in every seed, so A was its mean over
    length 64 alone and B over 64 and 96 — the claim said HOLDS (paired and unpaired). Now the diverged run is a
    non-finite result: UNTESTABLE, naming the diverged runs."""
    for paired in (False, True):
        row = _row(_spec(tmp_path, paired=paired), _recs())
        assert str(row.outcome.verdict) == "UNTESTABLE", paired
        assert row.outcome.reason == "a non-finite result (diverged run): e96-0, e96-1"
        assert "non-finite in 2 of 2 seed(s)" in claims_table([row])
    # the same records with the run finished (a bad score) decide against the claim
    assert str(_row(_spec(tmp_path, paired=True), _recs(eqt96_diverged=False)).outcome.verdict) == "DOES NOT HOLD"


def test_a_diverged_learning_rate_is_not_dropped_from_a_range(tmp_path):
    """``agg: range`` over the lengths (standing in for a learning-rate sweep): a diverged setting left the range
    over the others (0 here: 'insensitive' HOLDS against 5); now UNTESTABLE."""
    recs = {k: r for k, r in _recs().items() if k.startswith("e")}
    spec = _spec(tmp_path, a={"where": {"model": "eqt"}, "metric": "accuracy.k32", "agg": "range"},
                 b={"value": 5.0}, higher_is_better=False, rules={"single_seed_bound": 0})
    row = _row(spec, recs)
    assert str(row.outcome.verdict) == "UNTESTABLE" and "diverged run" in row.outcome.reason


def test_a_cell_one_arm_never_ran_is_not_compared_over_fewer_cells(tmp_path):
    """eqt never ran length 96 (no record at all): A over {64} beside B over {64, 96} was compared silently."""
    recs = {k: r for k, r in _recs().items() if not k.startswith("e96")}
    row = _row(_spec(tmp_path, paired=True), recs)
    assert str(row.outcome.verdict) == "UNTESTABLE"
    assert row.outcome.reason.startswith("the arms ran different cells: only B has length=96")
    # axes the arms select differently (model) or reduce are not compared; a per-axis row compares its label
    rows = evaluate(_spec(tmp_path, per="length", paired=True), recs)
    assert [(r.label, str(r.outcome.verdict)) for r in rows] == [("64", "HOLDS"), ("96", "UNTESTABLE")]


def test_a_metric_path_no_selected_run_has_is_named(tmp_path):
    """A typo inside a metric path (accuracy.k33: 'accuracy' exists) gave 'no runs on one side' in every row."""
    with pytest.warns(UserWarning, match=r"claim c: metric 'accuracy.k33' is in none of the 8 run records \(nearest: "
                                         r"accuracy.k32, .*\): a misspelled path"):
        row = _row(_spec(tmp_path, a={"where": {"model": "eqt", "length": [64, 96]}, "metric": "accuracy.k33"}),
                   _recs(eqt96_diverged=False))
    assert str(row.outcome.verdict) == "UNTESTABLE"
    assert row.outcome.reason == "A: no selected run has the metric accuracy.k33 (they have accuracy.k32, accuracy)"
    recs = _recs(eqt96_diverged=False)     # length 96's runs lack the metric: not a mean over length 64 alone
    for s in (0, 1):
        recs[f"e96-{s}"] = _rec("eqt", 96, s, 50.0, key="k8")
    row = _row(_spec(tmp_path), recs)
    assert row.outcome.reason == "A: metric accuracy.k32 missing in every run of length=96, model=eqt"
