"""The gp task through the shared Trainer; the cem-gp reproduction end to end."""

import json
from pathlib import Path

import pytest
import torch

from energyformer.experiment import RunConfig, build_task, load_trained, run_experiment
from energyformer.tasks.gp import GPBatcher
from energyformer.utils.config import load_config
from energyformer.utils.validate import ConfigError


@pytest.fixture
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _cfg(tmp_path, block="cem", steps=2, **train):
    return load_config(RunConfig, {
        "name": f"gp-{block if isinstance(block, str) else block['kind']}{steps}", "out_dir": str(tmp_path),
        "task": {"kind": "gp", "kernel": {"name": "rbf"}, "n_train": 200, "n_test": 100, "batch_size": 50},
        "model": {"block": {"kind": "cem", "steps": steps} if block == "cem" else block},
        "train": {"steps": 60, "lr": 1e-2, "optimizer": {"kind": "adam"}, "eval_every": 0, "save_every": 0,
                  "progress": False, "tensorboard": False, "device": "cpu", **train}})


def test_model_kind_defaults_to_the_tasks_and_mismatch_is_an_error(tmp_path):
    cfg = _cfg(tmp_path)
    assert cfg.model.kind == "regressor" and cfg.task.kind == "gp"
    with pytest.raises(ConfigError, match=r"unknown key 'task.seq_len' for task kind 'gp'; kinds that accept it: lm"):
        load_config(RunConfig, {"task": {"kind": "gp", "seq_len": 3}})
    with pytest.raises(ConfigError, match=r"task.kind = 'gpp': unknown task kind 'gpp' \(did you mean 'gp'\?\)"):
        load_config(RunConfig, {"task": {"kind": "gpp"}})
    with pytest.raises(ConfigError, match=r"model.kind = 'regressor': task 'lm' builds 'transformer'"):
        load_config(RunConfig, {"task": "lm", "model": {"kind": "regressor"}})


@pytest.mark.parametrize("block", [{"kind": "gelu", "norm": "rms"}, "swiglu", "cem"], ids=["plain", "gated", "cem"])
def test_training_through_the_trainer_reduces_rmse_and_is_seeded(tmp_path, one_thread, block):
    cfg = _cfg(tmp_path, block)
    task = build_task(cfg)
    from energyformer.experiment import build_model, resolve

    before = task.evaluate(build_model(resolve(cfg, task), task))
    res = run_experiment(cfg, task=task)
    assert res.final["eval/train_rmse"] < 0.5 * before["train_rmse"]
    assert res.final["eval/test_rmse"] < before["test_rmse"]
    again = run_experiment(cfg.model_copy(update={"name": cfg.name + "-again"}))
    assert again.final["eval/train_rmse"] == pytest.approx(res.final["eval/train_rmse"], rel=1e-6)
    _, model, task2 = load_trained(res.run_dir)
    assert task2.evaluate(model)["test_rmse"] == pytest.approx(res.final["eval/test_rmse"], rel=1e-6)


def test_batcher_epochs_are_permutations_and_resume_exactly():
    x, y = torch.arange(10.0)[:, None], torch.arange(10.0)
    b = GPBatcher(x, y, 4, seed=0)
    epoch = torch.cat([b.next_batch()[1] for _ in range(3)])  # ceil(10/4) = 3 batches
    assert sorted(epoch.tolist()) == list(range(10))
    state = b.state_dict()
    ahead = [b.next_batch()[1] for _ in range(5)]
    c = GPBatcher(x, y, 4, seed=123)
    c.load_state_dict(state)
    assert all(torch.equal(u, c.next_batch()[1]) for u in ahead)


def test_reproduce_entry_point_writes_report_and_results(tmp_path, one_thread, capsys):
    from energyformer.reproduce.cem_gp import main

    out = tmp_path / "gp"
    assert main(["--reps", "2", "--epochs", "1", "--n-train", "60", "--n-test", "20", "--kernels", "rbf",
                 "--models", "Gated", "CEM-T1", "CEM-T2", "CEM-T4", "CEM-T8", "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    res = json.loads((out / "results.json").read_text())
    assert "Test RMSE (paper)" in md and "**" in md
    assert len(res["runs"]) == 2 * 5 and res["claims"][0]["kernel"] == "rbf"
    assert "paper_table3_not_measured" in res
    assert "| RBF | recursion improves: T2 beats T1 |" in capsys.readouterr().out
    assert res["claims"][0]["verdict"] in ("HOLDS", "DOES NOT HOLD", "UNDECIDED", "UNTESTABLE")
    assert (Path(res["runs"][0]["run_dir"]) / "config.yaml").exists()  # each row is an ordinary run


def test_reproduce_config_yaml_and_precedence(tmp_path):
    from energyformer.reproduce.cem_gp import FULL, PRESET_FILE, QUICK, GPExperiment, parse_args
    from energyformer.utils.config import load_config, read_yaml

    # the preset beside the reproduction holds the built-in defaults and is what parse_args starts from
    assert load_config(GPExperiment, read_yaml(PRESET_FILE)) == GPExperiment()
    assert {k: getattr(parse_args([]), k) for k in QUICK} == QUICK
    a = parse_args(["--config", str(PRESET_FILE), "--reps", "2"])
    assert (a.reps, a.n_train, a.epochs) == (2, QUICK["n_train"], QUICK["epochs"])
    assert (parse_args(["--full"]).reps, parse_args(["--full"]).n_train) == (FULL["reps"], FULL["n_train"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("repz: 2\n")
    with pytest.raises(SystemExit):
        parse_args(["--config", str(bad)])
    with pytest.raises(SystemExit):
        parse_args(["--models", "CEM-T3"])
