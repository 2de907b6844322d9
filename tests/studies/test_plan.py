"""A scale's part of the plan: the labels a scale runs are those of any cell it runs (not only labels it runs with
every other label), and a --set of a key the scale's own overrides set from the seed is refused as the study's are."""

import copy

import pytest

from energyformer.studies import expand, load_study
from energyformer.studies.plan import scale_labels
from energyformer.utils.validate import ConfigError

from .tiny import TINY, write


def _spec(tmp_path, scale_cpu):
    data = copy.deepcopy(TINY)
    data["runs"]["grid"]["length"][16] = ["task.data.length=16"]
    data["scales"]["cpu"] = scale_cpu
    return load_study(write(tmp_path / "s.yaml", **data))


def test_a_label_the_scale_runs_in_one_cell_is_one_of_its_labels(tmp_path):
    spec = _spec(tmp_path, {"only": [{"model": ["eqt"], "length": ["8"]}, {"model": ["baseline"]}]})
    assert scale_labels(spec, "cpu", "model") == ["baseline", "eqt"]   # eqt runs at length 8 only
    assert scale_labels(spec, "cpu", "length") == ["8", "16"]


def test_a_set_of_a_key_the_scale_sets_from_the_seed_is_refused(tmp_path):
    spec = _spec(tmp_path, {"overrides": ["task.data.n_test={seed}0"]})
    with pytest.raises(ConfigError) as err:
        expand(spec, "cpu", sets=["task.data.n_test=5"])
    assert str(err.value) == ("--set task.data.n_test: the study sets this key from each run's seed "
                              "(task.data.n_test={seed}0); use --seeds")


# A scale's labels (plan.scale_labels: "the labels of axis that scale runs (any seed)") include a label the scale runs
# only in a selection that names seeds (``only: [{model: [eqt], seed: [1]}, ...]``): a claim ``per`` that axis has a
# row for it.


def test_a_label_run_only_with_some_seeds_is_one_of_the_scales_labels(tmp_path):
    data = copy.deepcopy(TINY)
    data["seeds"] = [0, 1]
    data["scales"]["cpu"] = {"only": [{"model": ["eqt"], "seed": [1]}, {"model": ["baseline"]}]}
    spec = load_study(write(tmp_path / "s.yaml", **data))
    assert [(p.cell["model"], p.seed) for p in expand(spec, "cpu")] == [("baseline", 0), ("baseline", 1), ("eqt", 1)]
    assert scale_labels(spec, "cpu", "model") == ["baseline", "eqt"]
