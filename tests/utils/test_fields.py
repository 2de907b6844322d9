"""Issue 25: values that used to pass validation and fail only at the final evaluation are refused
when the config is loaded, with the key named (one validator per concept, shared by every task)."""

import pytest

from energyformer.cli import main

CASES = [
    (["task.kind=image_classification", "task.validation=0"], "task.validation"),
    (["task.kind=image_classification", "task.validation=1.5"], "task.validation"),
    (["task.kind=image_classification", "task.validation=true"], "task.validation"),
    (["task.kind=image_classification", "task.eval_iterations=[2,0]"], "task.eval_iterations"),
    (["task.kind=masked_image_modelling", "task.validation=0"], "task.validation"),
    (["task.kind=masked_image_modelling", "task.validation=0.0"], "task.validation"),
    (["task.kind=sudoku", "task.eval_iterations=[0,-2]"], "task.eval_iterations"),
    (["task.kind=sudoku", "task.generate.n_train=0"], "task.generate.n_train"),
    (["task.kind=sudoku", "task.generate.n_validation=0"], "task.generate.n_validation"),
    (["task.kind=potts_mlm", "task.eval_iterations=[0,-1]"], "task.eval_iterations"),
]


@pytest.mark.parametrize("sets, key", CASES, ids=lambda c: c if isinstance(c, str) else " ".join(c))
def test_bad_task_values_are_refused_at_config_time(sets, key, capsys):
    args = ["config"] + [x for s in sets for x in ("--set", s)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("energyformer: error: ") and err.count("\n") == 1, err
    assert key in err, err
    assert "internal error" not in err


@pytest.mark.parametrize("sets", [["task.kind=image_classification", "task.validation=0.2"],
                                  ["task.kind=image_classification", "task.validation=50"],
                                  ["task.kind=image_classification", "task.validation=2.0"],
                                  ["task.kind=sudoku", "task.eval_iterations=[1,16]"]])
def test_good_values_still_load(sets, capsys):
    assert main(["config"] + [x for s in sets for x in ("--set", s)]) == 0


def test_seeds_past_the_generators_range_are_refused_in_one_line(capsys):
    """A train.seed or a reproduce --seeds of 2^64 or more was an internal error ("Overflow when unpacking long
    long") once the first generator was seeded — after `reproduce` had printed its first run and made its folder."""
    import pytest

    from energyformer.cli import main
    from energyformer.utils.fields import SEED_MAX

    big = str(10**20)
    assert main(["config", "eqt/baseline", "--set", f"train.seed={big}"]) == 2
    err = capsys.readouterr().err
    assert f"train.seed = {big}: input should be less than or equal to {SEED_MAX}" in err, err
    assert main(["config", "eqt/baseline", "--set", f"train.seed={SEED_MAX}"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["reproduce", "eqt", "--seeds", "0", big])
    assert f"--seeds: {big} must be an integer in 0..{SEED_MAX}" in capsys.readouterr().err
