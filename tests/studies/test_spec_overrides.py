"""A study file's seeds and claim options that would be ignored are refused; ``--set`` cannot change what a run's
cell or seed decides (the page would label the run with what it was not)."""

import copy

import pytest

from energyformer.studies import expand, load_study
from energyformer.utils.validate import ConfigError

from .tiny import TINY, refused, write


def test_study_and_scale_seeds_are_distinct_seeds_as_on_the_command_line(tmp_path):
    """``seeds: [0, 0]`` and ``seeds: [-1]`` loaded (--seeds refuses both): one run trained twice, a negative seed."""
    assert "seeds = [0, 0]: a seed is given twice" in refused(tmp_path, lambda d: d.update(seeds=[0, 0]))
    assert "seeds[0] = -1: input should be greater than or equal to 0" in refused(tmp_path, lambda d: d.update(seeds=[-1]))
    assert "scales.cpu.seeds = [1, 1]: a seed is given twice" in refused(
        tmp_path, lambda d: d["scales"]["cpu"].update(seeds=[1, 1]))
    assert "scales.gpu.seeds[1] = -2" in refused(tmp_path, lambda d: d["scales"]["gpu"].update(seeds=[0, -2]))


def test_a_tolerance_on_better_and_paired_against_a_number_are_refused(tmp_path):
    """Both were accepted and ignored: the claim was decided by another rule than the one written."""
    msg = refused(tmp_path, lambda d: d["claims"][0].update(tolerance=0.5))
    assert "claim 'gain': tolerance = 0.5 applies to claim: not_worse or equal, not better" in msg
    msg = refused(tmp_path, lambda d: d["claims"][0].update(b={"value": 90.0}))     # TINY's claim is paired
    assert "claim 'gain': paired: true needs per-seed values on both sides; b is a fixed value (90)" in msg
    data = copy.deepcopy(TINY)
    data["claims"][0].update(claim="not_worse", tolerance=0.5)
    assert load_study(write(tmp_path / "ok.yaml", **data)).claims[0].tolerance == 0.5


def _spec(tmp_path):
    data = copy.deepcopy(TINY)
    data["runs"]["config"]["model"]["eqt_k4"] = {"config": "eqt/eqt", "overrides": ["model.refine.eval_steps=4"]}
    data["runs"]["overrides"] = [*data["runs"]["overrides"], "task.data.n_test={seed}0"]
    return load_study(write(tmp_path / "s.yaml", **data))


@pytest.mark.parametrize("key, only, why", [
    ("task.data.length=64", None, "the grid axis 'length' sets this key; use --only length=..."),
    ("task.data={length: 64}", None, "the grid axis 'length' sets this key"),                     # above it
    ("task.data.n_test=5", None, "from each run's seed (task.data.n_test={seed}0); use --seeds"),
    ("train.seed=3", None, "the study sets each run's seed; use --seeds"),
    ("name=x", None, "runs.name names each run"),
])
def test_a_set_of_a_key_the_cell_or_seed_sets_is_refused(tmp_path, key, only, why):
    """Found by an outside tester: ``reproduce cem-gp --only kernel=rbf --set task.kernel.name=matern`` trained runs
    named rbf on the Matérn kernel (--set applies after the cell's overrides) and the page showed Matérn numbers in
    the rbf row. Now a key equal to, under or above one a grid axis, the seed or the name sets is refused."""
    with pytest.raises(ConfigError) as e:
        expand(_spec(tmp_path), "cpu", only=only, sets=["train.steps=2", key])
    assert str(e.value).startswith(f"--set {key.split('=')[0]}: ") and why in str(e.value), str(e.value)


def test_a_config_labels_own_key_is_replaced_with_a_warning_where_that_label_runs(tmp_path):
    """A config label's own overrides are its recipe (``train.steps``, a learning rate): ``--set`` replaces them as
    it replaces a config file's values — a shortened run of a study stays possible — but says so, naming the
    label; the page marks such records out of date (their config is not the study's)."""
    spec = _spec(tmp_path)
    for key in ("model.refine.eval_steps=2", "model.refine={eval_steps: 2}"):
        with pytest.warns(UserWarning, match=r"--set model\.refine.*replaces a study recipe value \(run label "
                                             r"model=eqt_k4 sets model\.refine\.eval_steps=4 itself\)"):
            plans = expand(spec, "cpu", only={"model": ["eqt_k4"]}, sets=[key])
        assert all(p.overrides[-3] == key for p in plans)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # labels that do not set it: no warning
        plans = expand(spec, "cpu", only={"model": ["eqt", "baseline"]}, sets=["model.refine.eval_steps=2",
                                                                               "task.data.n_train=64"])
    assert all(p.overrides[-3:-1] == ["task.data.n_train=64", "train.seed=0"] for p in plans)


def test_the_cli_refuses_a_grid_key_before_training(tmp_path, capsys):
    from energyformer.cli import main

    argv = ["reproduce", "cem-gp", "--only", "model=Plain", "--only", "kernel=rbf", "--seeds", "0",
            "--set", "task.kernel.name=matern", "--out", str(tmp_path / "o"), "--runs", str(tmp_path / "r")]
    argv += [a for kv in ("task.n_train=60", "task.n_test=20", "task.batch_size=20", "train.steps=1")
             for a in ("--set", kv)]          # (tiny: the old code trained the run)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("energyformer: error: --set task.kernel.name: the grid axis 'kernel' sets this key; "
                           "use --only kernel=...")
    assert not any(p.is_file() for p in tmp_path.rglob("*"))
