"""The gp task through the shared Trainer (the cem-gp study end to end: tests/reproduce/test_cem_gp.py)."""

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
    # a batch above the training set was cut to it without a word; full batch (= n_train) stays allowed
    with pytest.raises(ConfigError, match=r"task.batch_size = 201 exceeds task.n_train = 200: .* at most 200"):
        load_config(RunConfig, {"task": {"kind": "gp", "n_train": 200, "batch_size": 201}})
    assert load_config(RunConfig, {"task": {"kind": "gp", "n_train": 200, "batch_size": 200}}).task.batch_size == 200
    with pytest.raises(ValueError, match=r"batch_size = 11: allowed 1..10"):
        GPBatcher(torch.zeros(10, 2), torch.zeros(10), 11, seed=0)


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


def test_eval_steps_sets_the_cem_blocks_step_count(tmp_path, one_thread, capsys):
    """`eval --steps 8` on a GP run with a CEM block was refused ('no energy descent steps to set'); it now runs
    the block with that many steps (the run's own count gives the run's numbers), and a block without descent
    steps still refuses it"""
    from energyformer.cli import main

    cfg = _cfg(tmp_path, steps=2)
    cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"steps": 5})})
    run_experiment(cfg)
    _, model, task = load_trained(str(cfg.run_dir))
    with torch.no_grad():
        base, same, more = task.evaluate(model), task.evaluate(model, steps=2), task.evaluate(model, steps=8)
    assert base == same and more != base
    capsys.readouterr()
    assert main(["eval", str(cfg.run_dir), "--steps", "8"]) == 0
    out = capsys.readouterr().out
    assert ") with --steps 8: " in out and f"{more['test_rmse']:.4g}" in out, out
    plain = _cfg(tmp_path, block={"kind": "gelu"})
    plain = plain.model_copy(update={"train": plain.train.model_copy(update={"steps": 2})})
    run_experiment(plain)
    assert main(["eval", str(plain.run_dir), "--steps", "8"]) != 0
    assert "no energy descent steps to set" in capsys.readouterr().err


def test_rmse_reads_once_whatever_the_number_of_chunks(host_reads):
    """The chunks' squared-error sums stay on the device and are read in one transfer: the host reads of ``rmse`` do
    not grow with the chunks (before: one ``float()`` per chunk). The value is that of reading each chunk's sum
    and adding them in Python, exactly (float32 and float64 models)."""
    import math

    from energyformer.tasks.gp import rmse

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 3, generator=g), torch.randn(40, generator=g)
    for dtype in (torch.float32, torch.float64):
        torch.manual_seed(0)
        lin = torch.nn.Linear(3, 1).to(dtype)
        model = lambda t: lin(t)[..., 0]  # noqa: E731
        model.parameters = lin.parameters
        reads = []
        for chunk in (40, 10):
            with torch.no_grad():
                want = math.sqrt(sum(float((model(x[i:i + chunk].to(dtype)) - y[i:i + chunk]).pow(2).sum())
                                     for i in range(0, 40, chunk)) / 40)
            with host_reads() as count:
                got = rmse(model, x.to(dtype), y, chunk=chunk)
            reads.append(count.n)
            assert got == want
        assert reads[0] == reads[1], reads


@pytest.mark.parametrize("chunk", [4096, 1])
def test_rmse_is_the_root_of_the_mean_squared_error(chunk):
    """A zero model on targets [3, 4]: RMSE = sqrt((9 + 16) / 2) = sqrt(12.5), whole or one point per chunk.
    Before, nothing checked the value: returning the MSE (12.5) instead passed every test."""
    import math

    from energyformer.tasks.gp import rmse

    class Zero(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(()))

        def forward(self, x):
            return self.w * x[:, 0]

    got = rmse(Zero(), torch.ones(2, 1), torch.tensor([3.0, 4.0]), chunk=chunk)
    assert got == pytest.approx(math.sqrt(12.5), rel=1e-6)
