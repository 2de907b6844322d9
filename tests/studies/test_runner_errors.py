"""run_study's refusals before any run: a config error names the study file and the place the faulty value was
written — the later of two places that set one key, since its value is the one applied — also for a study given
as a YAML path; --jobs below 1 is refused (the CLI refuses it first; the Python API too)."""

import copy

import pytest

from energyformer.studies import load_study
from energyformer.studies.runner import run_study
from energyformer.utils.validate import ConfigError

from .tiny import TINY, write


def _error(tmp_path, name="tiny", **change) -> str:
    path = write(tmp_path / "tiny.yaml", **change)
    with pytest.raises(ConfigError) as err:
        run_study(load_study(path), str(path) if name is None else name, "cpu", tmp_path / "out", tmp_path / "runs",
                  log=lambda s: None)
    assert not (tmp_path / "out" / "results.json").exists()
    return str(err.value)


def test_of_two_places_setting_one_key_the_later_whose_value_applies_is_named(tmp_path):
    scales = copy.deepcopy(TINY["scales"])
    scales["cpu"] = {"overrides": ["train.steps=-1"]}      # after runs.overrides' train.steps=3
    msg = _error(tmp_path, scales=scales)
    assert msg.startswith("studies/tiny.yaml: scales.cpu.overrides[0] = 'train.steps=-1' (run L8_s0_baseline): "), msg


def test_a_study_given_as_a_path_is_named_by_its_file(tmp_path):
    runs = copy.deepcopy(TINY["runs"])
    runs["overrides"][1] = "train.eval_evry=0"
    msg = _error(tmp_path, name=None, runs=runs)
    assert msg.startswith("tiny.yaml: runs.overrides[1] = 'train.eval_evry=0' (run L8_s0_baseline): "
                          "unknown key 'train.eval_evry'"), msg


@pytest.mark.parametrize("jobs", [0, -2])
def test_jobs_below_one_is_refused(tmp_path, jobs):
    spec = load_study(write(tmp_path / "tiny.yaml"))
    with pytest.raises(ConfigError, match=rf"^--jobs {jobs}: must be >= 1$"):
        run_study(spec, "tiny", "cpu", tmp_path / "out", tmp_path / "runs", jobs=jobs, log=lambda s: None)
    assert not (tmp_path / "runs").exists()
