"""RunConfig and config-name resolution (experiment module docstring): model.kind defaults to the task's first
model kind, the model must be one the task builds, run names cannot climb out of out_dir, and a missing YAML path
is refused by name."""

from __future__ import annotations

import pytest

from energyformer.experiment import RunConfig, load_run_config, resolve_config_path
from energyformer.utils.validate import ConfigError


def test_model_kind_defaults_to_the_tasks_first_model_kind():
    assert RunConfig.model_validate({"task": {"kind": "potts_mlm"}}).model.kind == "transformer"
    assert RunConfig.model_validate({"task": {"kind": "gp"}}).model.kind == "regressor"
    cfg = RunConfig.model_validate({"task": {"kind": "potts_mlm"}, "model": {"dim": 48}})  # keys without a kind
    assert cfg.model.kind == "transformer" and cfg.model.dim == 48
    assert RunConfig.model_validate({"task": {"kind": "gp"}, "model": {}}).model.kind == "regressor"


def test_a_model_the_task_does_not_build_is_refused(config_error_says):
    config_error_says(RunConfig, {"task": {"kind": "gp"}, "model": {"kind": "transformer"}},
                      ["model.kind = 'transformer': task 'gp' builds 'regressor'"])


@pytest.mark.parametrize("name", ["a..b", "..", "x/y"])
def test_a_run_name_cannot_climb_out_of_out_dir(name):
    with pytest.raises(ConfigError, match="no path separators, no '..'"):
        load_run_config("lm/llama", [f"name={name}"])


def test_a_name_with_dots_and_signs_is_a_run_name():
    assert load_run_config("lm/llama", ["name=cem_full_lr2e-3.v1+b=2"]).run_dir.name == "cem_full_lr2e-3.v1+b=2"


@pytest.mark.parametrize("missing", ["no_such.yaml", "sub/no_such.yml"])
def test_a_missing_yaml_path_is_named_as_a_file(missing, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=f"^config file '{missing}' not found$"):
        resolve_config_path(missing)
