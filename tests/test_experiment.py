"""energyformer.experiment: RunConfig and config-name resolution (model.kind defaults to the task's first model kind,
the model must be one the task builds, run names cannot climb out of out_dir, a missing YAML path is refused by
name), the model keys a task sets (resolve) and a run directory's checks and summary."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from energyformer.experiment import (RunConfig, build_task, load_run_config, load_trained, resolve, resolve_config_path,
                                     run_experiment)
from energyformer.utils.validate import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
from cli_tiny import TINY  # noqa: E402


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


# resolve(): the model keys a task sets (vocabulary size from the tokenizer, ...) are filled in; a value the config
# gave for such a key that is not the task's is refused in one line naming the key (it used to be replaced silently),
# while the key's default given explicitly is not a choice and is filled in as if unset.


def test_a_model_key_the_task_sets_given_another_value_is_refused():
    cfg = load_run_config("lm/llama", TINY + ["model.vocab_size=10"])
    with pytest.raises(ConfigError, match=r"model.vocab_size = 10: the 'lm' task sets it \(\d+ here.*leave "
                                          r"model.vocab_size unset"):
        resolve(cfg, build_task(cfg, rank=0))


def test_a_model_key_the_task_sets_given_its_default_or_the_tasks_value_is_filled_in():
    from energyformer.models import MODELS

    default = MODELS.get("transformer").config.model_fields["vocab_size"].default
    sets = TINY + ["task.tokenizer=bytes"]  # a vocabulary other than the default's
    cfg = load_run_config("lm/llama", sets)
    want = resolve(cfg, build_task(cfg, rank=0)).model.vocab_size
    assert want != default
    for given in (default, want):
        cfg = load_run_config("lm/llama", sets + [f"model.vocab_size={given}"])
        assert resolve(cfg, build_task(cfg, rank=0)).model.vocab_size == want


# A run directory's checks and summary (experiment.py): a new run on top of old checkpoints names the newest one (the
# one --resume continues from); eval of a path that is a file says it is no run directory; a resumed run's tokens/s is
# over its training time across resumes (the docstring's rule), not this call's.


def _cfg(tmp_path, *more):
    return load_run_config("lm/llama", TINY + ["name=r", f"out_dir={tmp_path}", *more])


def test_a_new_run_on_old_checkpoints_names_the_newest(tmp_path):
    run_experiment(_cfg(tmp_path, "train.steps=2", "train.save_every=1", "train.keep_checkpoints=0"))
    assert sorted(p.name for p in (tmp_path / "r").glob("ckpt-*")) == ["ckpt-00000001", "ckpt-00000002"]
    with pytest.raises(FileExistsError, match=r"already holds checkpoints \(ckpt-00000002\): use --resume"):
        run_experiment(_cfg(tmp_path, "train.steps=2", "train.save_every=1", "train.keep_checkpoints=0"))


def test_a_resumed_runs_tokens_per_second_is_over_its_whole_training_time(tmp_path):
    run_experiment(_cfg(tmp_path, "train.steps=2", "train.save_every=2"))
    with pytest.warns(UserWarning, match="resuming with a changed train config: steps: 2 -> 4"):
        res = run_experiment(_cfg(tmp_path, "train.steps=4", "train.save_every=2"), resume=True)
    assert res.final["step"] == 4 and res.final["tokens"] > 0
    assert res.tokens_per_s == pytest.approx(res.final["tokens"] / res.final["elapsed_s"], rel=1e-9)


def test_a_file_given_as_the_run_is_said_to_be_no_directory(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("x")
    with pytest.raises(ConfigError, match=r"notes.txt is not a directory \(give a run directory"):
        load_trained(f)


def test_eval_refuses_a_config_yaml_whose_task_was_edited_after_training(tmp_path):
    """config.yaml is what eval reads: a task edited there (here the validation fraction) would score another
    validation set under the run's name, so the checkpoint's own task settings are checked against it."""
    run_experiment(_cfg(tmp_path, "train.steps=1", "train.save_every=1"))
    path = tmp_path / "r" / "config.yaml"
    path.write_text(path.read_text().replace("  val_fraction: 0.05\n", "  val_fraction: 0.2\n", 1))
    with pytest.raises(ConfigError, match=r"config.yaml does not match checkpoint .*task.val_fraction"):
        load_trained(tmp_path / "r")


def test_a_loaded_model_is_ready_to_evaluate(tmp_path):
    """load_trained's model is in eval mode: with dropout in the model, two forward passes agree."""
    import torch

    run_experiment(_cfg(tmp_path, "train.steps=1", "train.save_every=1", "model.block.dropout=0.5"))
    _, model, _ = load_trained(tmp_path / "r")
    x = torch.randint(0, 100, (1, 8))
    with torch.no_grad():
        a, b = model(x), model(x)
    a, b = (getattr(o, "logits", o) for o in (a, b))
    assert not model.training and torch.equal(a, b)
