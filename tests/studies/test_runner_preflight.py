"""run_study checks what a cheap check can find before any run trains: every model builds (meta device) and every
function the study names imports. Before, a model-build check (``mlp.solver.precond_rank = 16: must be an integer in
[1, 15]``) failed only in the run that built that model, after the earlier runs had trained; a misspelt metric
failed after the first run trained, a misspelt probe or page function after every run."""

import copy
import re

import pytest

from energyformer.studies import load_study
from energyformer.studies.runner import run_study
from energyformer.utils.validate import ConfigError

from .tiny import TINY, write

#: a CEM MLP with a diagonal + low-rank preconditioner of rank 16 (its default) at width 16: the model refuses it
BAD_MLP = ["model.block.mlp.kind=cem", "model.block.mlp.solver.precond=diag_low_rank"]


def _fails_before_training(tmp_path, spec, match: str) -> None:
    with pytest.raises(ConfigError) as err:
        run_study(spec, "tiny", "cpu", tmp_path / "out", tmp_path / "runs", log=lambda s: None)
    runs = tmp_path / "runs"
    assert not runs.exists() or not any(runs.iterdir()), "a run directory was made before the error"
    assert not (tmp_path / "out" / "results.json").exists()
    assert re.search(match, str(err.value)), str(err.value)   # one line naming the run or the study key


def test_model_build_error_of_a_later_run_fails_before_the_first_trains(tmp_path):
    """Old: L8_s0_plain trained (a run directory with checkpoints), then L8_s0_cem failed building its model."""
    runs = {**TINY["runs"], "config": "eqt/baseline",
            "grid": {"length": {8: ["task.data.length=8"]}, "mlp": {"plain": [], "cem": BAD_MLP}},
            "name": "L{length}_s{seed}_{mlp}"}
    spec = load_study(write(tmp_path / "tiny.yaml", runs=runs, report={"README.md": [{"claims": ""}]}, claims=[]))
    _fails_before_training(tmp_path, spec, r"run L8_s0_cem: mlp\.solver\.precond_rank = 16: must be an integer in "
                                           r"\[1, 15\] \(checked before any run trains\)")


@pytest.mark.parametrize("change, where", [
    ({"metrics": {**TINY["metrics"], "acc2": "energyformer.analysis.eqt_report:no_such_metric"}}, "metrics.acc2"),
    ({"probes": {"mem": "energyformer.analysis.no_such_module:memory"}}, "probes.mem"),
    ({"render": "energyformer.analysis.eqt_report:no_such_page", "report": {}}, "render"),
])
def test_a_function_that_does_not_import_fails_before_any_run(tmp_path, change, where):
    """Old: the runs trained first (a metric: the first run; a probe: all of them; render: run_study never
    imported it, the page failed after every run)."""
    spec = load_study(write(tmp_path / "tiny.yaml", **change))
    _fails_before_training(tmp_path, spec, rf"tiny\.yaml {where}: '.*': cannot be imported")


def _report(block):
    return {"README.md": [*copy.deepcopy(TINY["report"]["README.md"]), block]}


@pytest.mark.parametrize("block, where", [
    ({"figure": {"fn": "energyformer.analysis.eqt_report:no_such_figure", "file": "f.png", "alt": "x"}},
     r"report\['README.md'\]\[2\]\.figure\.fn"),
    ({"section": "energyformer.analysis.eqt_report:no_such_section"}, r"report\['README.md'\]\[2\]\.section"),
])
def test_a_page_function_that_does_not_import_fails_before_any_run(tmp_path, block, where):
    """A page's figure and section functions, wherever in the page they sit (in a dict of lists), are checked too."""
    spec = load_study(write(tmp_path / "tiny.yaml", report=_report(block)))
    _fails_before_training(tmp_path, spec, rf"^studies/tiny\.yaml {where}: 'energyformer\.analysis\.eqt_report:no_such_"
                                           r"\w+': cannot be imported")


def test_a_claim_reducer_that_does_not_import_fails_before_any_run(tmp_path):
    claims = copy.deepcopy(TINY["claims"])
    claims[0]["a"]["reduce"] = {"over": "length", "fn": "energyformer.analysis.eqt_report:no_such_reducer"}
    spec = load_study(write(tmp_path / "tiny.yaml", claims=claims))
    _fails_before_training(tmp_path, spec, r"^studies/tiny\.yaml claims\[0\]\.a\.reduce\.fn: "
                                           r"'energyformer\.analysis\.eqt_report:no_such_reducer': cannot be imported")


def test_a_name_that_imports_but_is_no_function_is_refused(tmp_path):
    spec = load_study(write(tmp_path / "tiny.yaml", metrics={**TINY["metrics"], "version": "energyformer:__version__"}))
    _fails_before_training(tmp_path, spec, r"^studies/tiny\.yaml metrics\.version: 'energyformer:__version__' "
                                           r"is a str, not a function$")


def test_a_study_given_as_a_path_is_named_by_its_file(tmp_path):
    """Through the Python API a study may be a YAML path: the error names that file (before: ``studies/<the
    path>.yaml.yaml``), as a config error of its runs does."""
    path = write(tmp_path / "tiny.yaml", metrics={**TINY["metrics"], "acc2": "energyformer.analysis.eqt_report:nope"})
    with pytest.raises(ConfigError, match=r"^tiny\.yaml metrics\.acc2: '.*': cannot be imported"):
        run_study(load_study(path), str(path), "cpu", tmp_path / "out", tmp_path / "runs", log=lambda s: None)
