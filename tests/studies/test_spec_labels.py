"""A study file's labels: two keys that are one label after ``str()`` and empty axes or selections are refused at
load, naming the key; a claim metric that is a mapping says so.

Before (probe W, 4 and 5): ``{16: ..., "16": ...}`` kept the second silently (runs named L16 trained at length 32);
``length: {}`` ran nothing and exited 0; ``where: {model: []}`` was accepted (UNTESTABLE "no runs on one side"); a
claim metric naming a mapping (``accuracy``) said "no selected run has the metric accuracy"."""

import copy

import pytest

from energyformer.studies import expand, load_study
from energyformer.studies.claims import evaluate
from energyformer.utils.validate import ConfigError

from .tiny import TINY, write


def _load(tmp_path, edit):
    data = copy.deepcopy(TINY)
    edit(data)
    return load_study(write(tmp_path / "s.yaml", **data))


def _refused(tmp_path, edit) -> str:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, edit)
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize("edit, said", [
    (lambda d: d["runs"]["grid"].update(length={16: ["task.data.length=16"], "16": ["task.data.length=32"]}),
     "runs.grid: axis 'length': labels 16 and '16' are the same label '16'"),
    (lambda d: d["runs"]["grid"].update(lr={0.004: ["train.lr=0.004"], "0.004": ["train.lr=0.001"]}) or
     d["runs"].update(name="L{length}_s{seed}_{model}_{lr}"),
     "runs.grid: axis 'lr': labels 0.004 and '0.004' are the same label '0.004'"),
    (lambda d: d["runs"].update(config={"model": {1: "eqt/baseline", "1": "eqt/eqt"}}),
     "runs.config: axis 'model': labels 1 and '1' are the same label '1'"),
    (lambda d: d["claims"][0]["paper"].update(by={8: 1.0, "8": 2.0}),
     "claims[0].paper.by: labels 8 and '8' are the same label '8'"),
])
def test_labels_equal_after_str_are_refused_naming_both(tmp_path, edit, said):
    msg = _refused(tmp_path, edit)
    assert msg.startswith("s.yaml: ") and said in msg, msg


@pytest.mark.parametrize("edit, said", [
    (lambda d: d["runs"]["grid"].update(length={}), "runs.grid: axis 'length' = {}: give at least one label"),
    (lambda d: d["runs"].update(config={"model": {}}), "runs.config: axis 'model' = {}: give at least one label"),
    (lambda d: d["claims"][0]["a"].update(where={"model": []}), "model = []: give at least one label"),
    (lambda d: d["scales"]["cpu"].update(only={"length": []}), "length = []: give at least one label"),
])
def test_an_empty_axis_or_selection_is_refused_naming_it(tmp_path, edit, said):
    msg = _refused(tmp_path, edit)
    assert said in msg, msg


def test_a_claim_metric_that_is_a_mapping_says_so(tmp_path):
    spec = _load(tmp_path, lambda d: d["claims"][0]["a"].update(metric="accuracy"))
    recs = {m: {"cell": {"model": m, "length": "8"}, "seed": 0, "metrics": {"accuracy": {"k0": 1.0, "plain": 2.0}}}
            for m in ("eqt", "baseline")}
    (row,) = evaluate(spec, recs)
    assert str(row.outcome.verdict) == "UNTESTABLE"
    assert row.outcome.reason == ("A: metric accuracy is a mapping, not a number (give a path inside it: "
                                  "accuracy.k0, accuracy.plain)")


@pytest.mark.parametrize("edit, sets, said", [
    (lambda d: d["runs"]["overrides"].__setitem__(1, "train.eval_evry=0"), [],
     "studies/tiny.yaml: runs.overrides[1] = 'train.eval_evry=0' (run L8_s0_baseline): unknown key 'train.eval_evry'"),
    (lambda d: d["scales"]["cpu"].update(overrides=["train.lr=1e-3"]), ["train.stpes=2"],
     "studies/tiny.yaml: --set train.stpes=2 (run L8_s0_baseline): unknown key 'train.stpes'"),
])
def test_an_override_typo_names_the_study_file_and_where_it_was_written(tmp_path, edit, sets, said):
    """Before: "unknown key 'train.eval_evry' (did you mean ...)" with no file, key path or run."""
    from energyformer.studies.runner import run_study

    spec = _load(tmp_path, edit)
    with pytest.raises(ConfigError) as err:
        run_study(spec, "tiny", "cpu", tmp_path / "out", tmp_path / "runs", sets=sets, log=lambda s: None)
    assert str(err.value).startswith(said), str(err.value)


# Labels are strings (spec._labels: "YAML may give a label as a number (64:): labels are strings"): a grid label
# written as a YAML boolean (``true:``) is the label 'True', and a scale's ``only``, a claim arm's or a page table's
# ``where`` naming it as a boolean selects it, as a number selects ``64``.


def test_a_boolean_label_is_selected_by_only_and_where_as_written(tmp_path):
    data = copy.deepcopy(TINY)
    data["runs"]["grid"]["bias"] = {True: ["model.bias=true"], False: ["model.bias=false"]}
    data["runs"]["name"] = "L{length}_s{seed}_{model}_{bias}"
    data["scales"]["cpu"] = {"only": {"bias": [True]}}
    data["claims"][0]["a"]["where"]["bias"] = False
    data["claims"][0]["b"]["where"]["bias"] = [True]
    data["report"]["README.md"][0]["table"]["where"] = {"bias": True}
    spec = load_study(write(tmp_path / "s.yaml", **data))
    assert spec.runs.axes["bias"] == ["True", "False"]
    assert [p.name for p in expand(spec, "cpu")] == ["L8_s0_baseline_True", "L8_s0_eqt_True"]
    assert spec.claims[0].a.where == {"model": "eqt", "bias": "False"}
    assert spec.claims[0].b.where == {"model": "baseline", "bias": ["True"]}
    assert spec.report["README.md"][0].table.where == {"bias": "True"}
