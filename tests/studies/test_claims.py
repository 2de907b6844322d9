"""Claims are decided from the study's records by their declared rules (verdicts.compare)."""

import copy

from energyformer.studies import load_study
from energyformer.studies.claims import claims_table, evaluate, rule_text

from .tiny import TINY, write


def _spec(tmp_path, **claim):
    """A study over lengths 8 and 64 with one claim, eqt's accuracy.k32 against the baseline's accuracy.plain,
    ``claim`` replacing any of its keys (also used by test_claims_edges.py)."""
    data = copy.deepcopy(TINY)
    data["runs"]["grid"]["length"] = {8: ["task.data.length=8"], 64: ["task.data.length=64"]}
    base = {"id": "c", "text": "EqT beats the baseline", "paper": {"value": 1.0, "source": "Table 2"},
            "a": {"where": {"model": "eqt"}, "metric": "accuracy.k32"},
            "b": {"where": {"model": "baseline"}, "metric": "accuracy.plain"}}
    data["claims"] = [{**base, **claim}]
    return load_study(write(tmp_path / "s.yaml", **data))


def _recs(eqt: dict[int, float], base: dict[int, float], length="64"):
    out = {}
    for s, v in eqt.items():
        out[f"e{s}{length}"] = {"cell": {"model": "eqt", "length": length}, "seed": s, "metrics": {"accuracy": {"k32": v}}}
    for s, v in base.items():
        out[f"b{s}{length}"] = {"cell": {"model": "baseline", "length": length}, "seed": s,
                                "metrics": {"accuracy": {"plain": v}}}
    return out


def _verdict(spec, recs):
    (row,) = evaluate(spec, recs)
    return str(row.outcome.verdict)


def test_holds_does_not_hold_and_undecided_inside_the_seed_noise(tmp_path):
    spec = _spec(tmp_path)
    assert _verdict(spec, _recs({0: 70, 1: 71}, {0: 60, 1: 61})) == "HOLDS"
    assert _verdict(spec, _recs({0: 60, 1: 61}, {0: 70, 1: 71})) == "DOES NOT HOLD"
    assert _verdict(spec, _recs({0: 60, 1: 70}, {0: 62, 1: 64})) == "UNDECIDED"   # margin 2 < spread 10


def test_declared_noise_band_widens_the_band(tmp_path):
    recs = _recs({0: 70, 1: 71}, {0: 60, 1: 61})
    assert _verdict(_spec(tmp_path, rules={"noise": 20}), recs) == "UNDECIDED"


def test_one_seed_is_undecided_unless_the_margin_exceeds_the_declared_bound(tmp_path):
    recs = _recs({0: 70}, {0: 60})
    assert _verdict(_spec(tmp_path), recs) == "UNDECIDED"
    assert _verdict(_spec(tmp_path, rules={"single_seed_bound": 5}), recs) == "HOLDS"
    assert _verdict(_spec(tmp_path, rules={"single_seed_bound": 15}), recs) == "UNDECIDED"


def test_untestable_at_chance_or_floor_and_when_declared_or_not_run(tmp_path):
    at_chance = _recs({0: 50.2, 1: 50.4}, {0: 49.9, 1: 50.1})
    assert _verdict(_spec(tmp_path, rules={"chance": 50, "at_band": 1}), at_chance) == "UNTESTABLE"
    assert _verdict(_spec(tmp_path, rules={"floor": 0, "at_band": 0.1}), _recs({0: 0, 1: 0}, {0: 0, 1: 0})) == "UNTESTABLE"
    assert _verdict(_spec(tmp_path), _recs({0: 70}, {})) == "UNTESTABLE"   # no runs on one side
    spec = _spec(tmp_path, untestable="needs the paper's 6x256 backbone")
    (row,) = evaluate(spec, at_chance)
    assert str(row.outcome.verdict) == "UNTESTABLE" and row.outcome.reason == "needs the paper's 6x256 backbone"


def test_paired_claims_decide_on_the_per_seed_differences(tmp_path):
    """Seeds far apart but the same gain in each: unpaired is inside the noise, paired holds."""
    recs = _recs({0: 60, 1: 80}, {0: 58, 1: 78})
    assert _verdict(_spec(tmp_path), recs) == "UNDECIDED"
    assert _verdict(_spec(tmp_path, paired=True), recs) == "HOLDS"
    assert _verdict(_spec(tmp_path, paired=True, rules={"chance": 50, "at_band": 1}),
                    _recs({0: 50.2, 1: 50.4}, {0: 49.9, 1: 50.1})) == "UNTESTABLE"
    # the differences are not the metric: chance applies to the arms, not to A − B (probe Z: a paired claim whose
    # per-seed gain happened to equal the metric's chance level read "A at chance")
    assert _verdict(_spec(tmp_path, paired=True, rules={"chance": 11.1, "at_band": 1}),
                    _recs({0: 60, 1: 70}, {0: 48.9, 1: 58.9})) == "HOLDS"


def test_per_axis_rows_pooling_fixed_numbers_and_the_table(tmp_path):
    recs = {**_recs({0: 70, 1: 71}, {0: 60, 1: 61}, "8"), **_recs({0: 60, 1: 61}, {0: 70, 1: 71}, "64")}
    rows = evaluate(_spec(tmp_path, per="length", paper={"value": "x", "source": "Table 2", "by": {64: 4.66}}), recs)
    assert [(r.label, str(r.outcome.verdict)) for r in rows] == [("8", "HOLDS"), ("64", "DOES NOT HOLD")]
    table = claims_table(rows)
    assert "(length = 64) | 4.66 (Table 2) |" in table and "(length = 8) | x (Table 2) |" in table
    (pooled,) = evaluate(_spec(tmp_path), recs)          # per seed: the mean over both lengths
    assert pooled.a == [65.0, 66.0] and str(pooled.outcome.verdict) == "UNDECIDED"
    fixed = _spec(tmp_path, b={"value": 60.0}, claim="not_worse", tolerance=1.0)
    (row,) = evaluate(fixed, _recs({0: 59.5, 1: 59.6}, {}))
    assert str(row.outcome.verdict) == "HOLDS" and "not worse than B by more than 1" in rule_text(fixed.claims[0])


def test_a_per_label_the_scale_runs_but_no_record_has_is_an_untestable_row_not_a_missing_one(tmp_path):
    """Old: the rows of a ``per`` claim were the labels some record had, so a study run with ``--only length=8``
    rendered a table with no length-64 row at all (read as complete); now the scale's labels each have a row, one
    with no record UNTESTABLE "not run". Labels the scale does not run stay off."""
    spec = _spec(tmp_path, per="length")
    recs = _recs({0: 70, 1: 71}, {0: 60, 1: 61}, "8")
    rows = evaluate(spec, recs, scale="cpu")
    assert [(r.label, str(r.outcome.verdict)) for r in rows] == [("8", "HOLDS"), ("64", "UNTESTABLE")]
    assert rows[1].outcome.reason == "not run: no record with length = 64 at scale cpu"
    assert "| – | not run |" in claims_table(rows)
    assert [r.label for r in evaluate(spec, recs)] == ["8"]          # no scale given: the labels recorded
    data = copy.deepcopy(TINY)
    data["runs"]["grid"]["length"] = {8: ["task.data.length=8"], 64: ["task.data.length=64"]}
    data["scales"] = {"cpu": {"only": {"length": [8]}}}
    data["claims"] = [{**spec.claims[0].model_dump(exclude_unset=True), "per": "length"}]
    small = load_study(write(tmp_path / "small.yaml", **data))
    assert [r.label for r in evaluate(small, recs, scale="cpu")] == ["8"]


def _max_hook(labels, values):
    return max(values) if len(values) > 1 else None


def test_an_arm_reduces_an_axis_by_its_function_and_subtracts_another_selection(tmp_path):
    """``reduce: {over, fn}``: per seed fn(labels, values) over one axis (None drops the seed); ``minus``:
    per seed this arm minus another selection, on the seeds both ran."""
    hook = f"{__name__}:_max_hook"
    spec = _spec(tmp_path, a={"where": {"model": "eqt"}, "metric": "accuracy.k32",
                              "reduce": {"over": "length", "fn": hook}}, b={"value": 50})
    recs = {**_recs({0: 60, 1: 70}, {}, "8"), **_recs({0: 80}, {}, "64")}
    (row,) = evaluate(spec, recs)
    assert row.a == [80.0]                      # seed 0: max(60, 80); seed 1 has one length: dropped
    spec = _spec(tmp_path, a={"where": {"model": "eqt"}, "metric": "accuracy.k32",
                              "minus": {"where": {"model": "baseline"}, "metric": "accuracy.plain"}}, b={"value": 0})
    (row,) = evaluate(spec, _recs({0: 90, 1: 95, 2: 99}, {0: 80, 1: 90}))
    assert row.a == [10.0, 5.0] and str(row.outcome.verdict) == "HOLDS"   # seed 2 has no baseline


def test_reduce_and_minus_are_validated(tmp_path):
    import pytest

    from energyformer.utils.validate import ConfigError

    with pytest.raises(ConfigError, match=r"claims\[c\]\.a\.reduce\.over = 'size': allowed axes model, length"):
        _spec(tmp_path, a={"where": {"model": "eqt"}, "metric": "accuracy.k32", "reduce": {"over": "size", "fn": "m:f"}})
    with pytest.raises(ConfigError, match=r"claims\[c\]\.b\.minus\.where\.model = 'x'"):
        _spec(tmp_path, b={"where": {"model": "eqt"}, "metric": "accuracy.k32", "minus": {"where": {"model": "x"}}})
    with pytest.raises(ConfigError, match="reduce / minus apply to an arm over runs"):
        _spec(tmp_path, b={"value": 1, "minus": {"where": {"model": "eqt"}}})


def test_an_arm_aggregates_its_runs_per_seed_and_a_probe_is_one_value(tmp_path):
    recs = {**_recs({0: 60.0}, {0: 50.0}, "8"), **_recs({0: 70.0}, {0: 51.0}, "64")}
    for agg, want in (("mean", 65.0), ("min", 60.0), ("max", 70.0), ("range", 10.0)):
        spec = _spec(tmp_path, a={"where": {"model": "eqt"}, "metric": "accuracy.k32", "agg": agg},
                     b={"value": 0.0}, rules={"single_seed_bound": 0})
        (row,) = evaluate(spec, recs)
        assert row.a == [want], agg
    data = copy.deepcopy(TINY)
    data["probes"] = {"mem": "builtins:str"}
    data["claims"] = [{"id": "m", "text": "A uses more memory", "paper": {"value": "high", "source": "slides"},
                       "a": {"probe": "mem", "metric": "big model.peak"}, "b": {"probe": "mem", "metric": "small.peak"},
                       "rules": {"single_seed_bound": 0}}]
    spec = load_study(write(tmp_path / "p.yaml", **data))
    (row,) = evaluate(spec, {}, {"mem": {"big model": {"peak": 9.0}, "small": {"peak": 2.0}}})
    assert row.a == [9.0] and row.b == [2.0] and str(row.outcome.verdict) == "HOLDS"
    (row,) = evaluate(spec, {}, {})          # not measured: no value
    assert str(row.outcome.verdict) == "UNTESTABLE"


def test_rule_text_says_a_declared_noise_decides_one_seed(tmp_path):
    assert "one seed: decided against the band" in rule_text(_spec(tmp_path, rules={"noise": 0.02}).claims[0])
    assert "one seed: undecided" in rule_text(_spec(tmp_path).claims[0])


def test_a_seed_missing_one_of_the_arms_cells_is_left_out_not_averaged_over_fewer(tmp_path):
    """An arm over two lengths: seed 1's run at length 64 is missing (not run, failed, or without the metric), so
    its mean would be over length 8 alone beside seed 0's over both — that seed is left out of the arm (and of a
    paired claim's seeds); a complete seed set is unchanged."""
    recs = {**_recs({0: 60.0, 1: 10.0}, {0: 50.0, 1: 50.0}, "8"), **_recs({0: 70.0}, {0: 51.0, 1: 52.0}, "64")}
    spec = _spec(tmp_path, b={"value": 0.0}, rules={"single_seed_bound": 0})
    (row,) = evaluate(spec, recs)
    assert row.a == [65.0]
    recs["e164"] = {"cell": {"model": "eqt", "length": "64"}, "seed": 1, "metrics": {"accuracy": {"k32": 30.0}}}
    (row,) = evaluate(spec, recs)
    assert row.a == [65.0, 20.0]
    recs["e164"]["metrics"] = {"accuracy": {}}  # the run exists but lacks the metric
    (row,) = evaluate(spec, recs)
    assert row.a == [65.0]


def test_a_metric_damaged_into_text_or_a_bool_is_an_error_not_a_seed_less_or_a_one(tmp_path):
    """Found by an outside probe: an accuracy edited to "abc" in results.json silently left that seed out, and
    to true was read as 1.0 and turned the verdict to HOLDS; now the first is a one-line error naming the run and
    metric, the second is refused when the records are read (no metric is a bool)."""
    import json

    import pytest

    from energyformer.errors import UserError
    from energyformer.studies.runner import load_results

    recs = _recs({0: 70, 1: 71}, {0: 60, 1: 61})
    recs["e164"]["metrics"]["accuracy"]["k32"] = "abc"
    with pytest.raises(UserError, match=r"runs\['e164'\]: metric accuracy.k32 is 'abc', not a number"):
        evaluate(_spec(tmp_path), recs)
    recs["e164"]["metrics"]["accuracy"]["k32"] = True
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"format": load_results(tmp_path / "none.json", "s", "cpu")["format"], "runs": recs}))
    with pytest.raises(UserError, match=r"results.json: runs\['e164'\].metrics.accuracy.k32 is a true/false"):
        load_results(path, "s", "cpu")


def test_a_gate_makes_a_claim_about_a_trained_model_untestable_at_chance(tmp_path):
    """Hyper-SET's Fig. 5/6 claims (energies fall, rank rises) were DOES NOT HOLD on a model whose cell accuracy
    never left chance; a claim's ``rules.gate`` now reads A's runs on another metric and says UNTESTABLE there."""
    spec = load_study(write(tmp_path / "s.yaml", claims=[{
        "id": "falls", "text": "the energy falls", "paper": {"value": "falls", "source": "Fig. 5"},
        "a": {"where": {"model": "eqt"}, "metric": "accuracy.k32"}, "b": {"value": 0},
        "rules": {"single_seed_bound": 0, "gate": {"metric": "accuracy.plain", "chance": 50, "at_band": 1}}}]))
    for plain, verdict in ((50.5, "UNTESTABLE"), (51.0, "UNTESTABLE"), (51.01, "HOLDS"), (90.0, "HOLDS")):
        recs = {f"eqt{s}": {"cell": {"model": "eqt", "length": "8"}, "seed": s,
                            "metrics": {"accuracy": {"k32": 3.0, "plain": plain}}} for s in (0, 1)}
        (row,) = evaluate(spec, recs)
        assert row.outcome.verdict.value == verdict, row.outcome
        if plain == 50.5:
            assert "A's model at chance on accuracy.plain (50.5 vs 50 ± 1)" in row.outcome.reason
    # the band's edge is in it (51.0 above; probe Z: '<' made it a verdict), and at_band 0 means exactly at chance
    spec0 = load_study(write(tmp_path / "s0.yaml", claims=[{
        "id": "falls", "text": "the energy falls", "paper": {"value": "falls", "source": "Fig. 5"},
        "a": {"where": {"model": "eqt"}, "metric": "accuracy.k32"}, "b": {"value": 0},
        "rules": {"single_seed_bound": 0, "gate": {"metric": "accuracy.plain", "chance": 50, "at_band": 0}}}]))
    recs = {f"eqt{s}": {"cell": {"model": "eqt", "length": "8"}, "seed": s,
                        "metrics": {"accuracy": {"k32": 3.0, "plain": 50.0}}} for s in (0, 1)}
    (row,) = evaluate(spec0, recs)
    assert row.outcome.verdict.value == "UNTESTABLE", row.outcome


def test_a_gate_reads_a_plain_mean_and_a_missing_gate_metric_is_untestable(tmp_path):
    """The gate read A's own aggregation (a gain arm compared a difference with chance) and a gate metric no run had
    turned the gate off silently (a typo decided six claims on a model at chance)."""
    def spec(metric, minus=False):
        a = {"where": {"model": "eqt"}, "metric": "accuracy.k32"}
        if minus:
            a["minus"] = {"where": {"model": "baseline"}}
        return load_study(write(tmp_path / "s.yaml", claims=[{
            "id": "c", "text": "t", "paper": {"value": "x", "source": "y"}, "a": a, "b": {"value": 0},
            "rules": {"single_seed_bound": 0, "gate": {"metric": metric, "chance": 50, "at_band": 1}}}]))

    recs = {f"{m}{s}": {"cell": {"model": m, "length": "8"}, "seed": s,
                        "metrics": {"accuracy": {"k32": 3.0 if m == "eqt" else 1.0, "plain": 50.2}}}
            for m in ("eqt", "baseline") for s in (0, 1)}
    (row,) = evaluate(spec("accuracy.plain", minus=True), recs)
    assert row.outcome.verdict.value == "UNTESTABLE" and "at chance on accuracy.plain (50.2" in row.outcome.reason
    (row,) = evaluate(spec("accuracy.plian"), recs)
    assert row.outcome.verdict.value == "UNTESTABLE" and "gate accuracy.plian: no finite value" in row.outcome.reason


def test_claim_rules_at_their_edges(tmp_path):
    """Outside-probe mutants of claims.py that survived: a paired claim over the seeds of A alone (B lacks seed 2:
    an internal KeyError), a gate on a probe arm reading every run, and a diverged run of a ``minus`` selection left
    unnamed in the UNTESTABLE reason."""
    recs = _recs({0: 70, 1: 80, 2: 75}, {0: 60, 1: 70})
    (row,) = evaluate(_spec(tmp_path, paired=True), recs)
    assert str(row.outcome.verdict) == "HOLDS" and "paired over seeds [0, 1]" in row.outcome.reason
    assert "spread of the per-seed differences 0" in row.outcome.reason and "seed spread" not in row.outcome.reason
    data = copy.deepcopy(TINY)
    data["probes"] = {"mem": "builtins:str"}
    data["claims"] = [{"id": "m", "text": "A is big", "paper": {"value": "big", "source": "slides"},
                       "a": {"probe": "mem", "metric": "peak"}, "b": {"value": 1.0},
                       "rules": {"single_seed_bound": 0, "gate": {"metric": "accuracy.plain", "chance": 50,
                                                                  "at_band": 1}}}]
    spec = load_study(write(tmp_path / "p.yaml", **data))
    (row,) = evaluate(spec, _recs({0: 70}, {0: 90}), {"mem": {"peak": 9.0}})
    assert str(row.outcome.verdict) == "UNTESTABLE" and "A selects no runs" in row.outcome.reason
    gain = {"where": {"model": "eqt"}, "metric": "accuracy.k32",
            "minus": {"where": {"model": "baseline"}, "metric": "accuracy.plain"}}
    recs = _recs({0: 70, 1: 71}, {0: 60, 1: 61})
    recs["b164"] = {"cell": {"model": "baseline", "length": "64"}, "seed": 1, "diverged": "loss nan at step 3"}
    (row,) = evaluate(_spec(tmp_path, a=gain, b={"value": 0.0}, rules={"single_seed_bound": 0}), recs)
    assert str(row.outcome.verdict) == "UNTESTABLE" and "b164" in row.outcome.reason, row.outcome


def _max_or_none_below_75(labels, values):
    return max(values) if max(values) >= 75 else None


def test_reduce_drops_a_seed_its_function_refuses_and_sees_a_diverged_label(tmp_path):
    """More survivors: a reduce function's None became 0.0 (a seed counted, not dropped), a diverged run inside a
    reduced axis was not non-finite, and the reduced axis counted as a cell the other arm must also run (B at one
    length beside A's maximum over two is still compared: A's length axis is reduced away)."""
    a = {"where": {"model": "eqt"}, "metric": "accuracy.k32",
         "reduce": {"over": "length", "fn": f"{__name__}:_max_or_none_below_75"}}
    spec = _spec(tmp_path, a=a, b={"value": 50})
    recs = {**_recs({0: 60, 1: 70}, {}, "8"), **_recs({0: 80, 1: 72}, {}, "64")}
    (row,) = evaluate(spec, recs)
    assert row.a == [80.0]                       # seed 1: max 72 < 75, refused by the function: dropped
    recs["e164"] = {"cell": {"model": "eqt", "length": "64"}, "seed": 1, "diverged": "loss nan at step 5"}
    (row,) = evaluate(spec, recs)
    assert str(row.outcome.verdict) == "UNTESTABLE" and "e164" in row.outcome.reason, row.outcome
    spec = _spec(tmp_path, a=a, b={"where": {"model": "baseline"}, "metric": "accuracy.plain"},
                 rules={"single_seed_bound": 0})
    recs = {**_recs({0: 60, 1: 70}, {}, "8"), **_recs({0: 80, 1: 90}, {0: 50, 1: 51}, "64")}
    (row,) = evaluate(spec, recs)
    assert row.a == [80.0, 90.0] and str(row.outcome.verdict) == "HOLDS", row.outcome


def test_the_table_gives_each_arms_mean_with_its_range_or_its_one_seed(tmp_path):
    spec = _spec(tmp_path, rules={"single_seed_bound": 5})
    table = claims_table(evaluate(spec, _recs({0: 60.0, 1: 70.0}, {0: 50.0})))
    assert "| 65 [60, 70] | 50 (1 seed) |" in table, table
