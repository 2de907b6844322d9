"""Callbacks after each optimiser step: order and step numbers, metrics, annealing, projection, state."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from train_toys import ToyData, ToyMLP, build, mse_loss, read_metrics

from energyformer.train import (
    AnnealCallback,
    Callback,
    ProjectionCallback,
    TrainConfig,
    Trainer,
    latest_checkpoint,
)
from energyformer.train.callbacks import anneal_value
from energyformer.utils.config import ConfigModel


class Recorder(Callback):
    """Records what a callback sees at each call."""

    def __init__(self):
        self.starts, self.calls = [], []
        self._last = None

    def on_train_start(self, trainer):
        self.starts.append(trainer.step)
        self._last = [p.detach().clone() for p in trainer.model.parameters()]

    def on_step_end(self, trainer, step):
        params = [p.detach().clone() for p in trainer.model.parameters()]
        moved = any(not torch.equal(a, b) for a, b in zip(params, self._last))
        self._last = params
        self.calls.append({"step": step, "trainer_step": trainer.step, "moved": moved,
                           "sched": trainer.scheduler.last_step, "metrics": dict(trainer.step_metrics),
                           "history": len(trainer.loss_history)})


def test_on_step_end_runs_after_each_optimizer_step_with_its_number(tmp_path):
    rec = Recorder()
    t = build(tmp_path, steps=5, log_every=1, callbacks=[rec])
    t.fit()
    assert rec.starts == [0]
    assert [c["step"] for c in rec.calls] == [1, 2, 3, 4, 5]
    for c in rec.calls:
        assert c["trainer_step"] == c["sched"] == c["step"]  # after optimizer + schedule step
        assert c["moved"]  # the weights of this step are already updated
        assert c["history"] == c["step"] - 1  # before the step is logged / recorded
    # callbacks see the step's metrics: the same loss and lr the trainer logs
    logged = read_metrics(tmp_path)
    assert [c["metrics"]["loss"] for c in rec.calls] == t.loss_history == [e["loss"] for e in logged]
    assert [c["metrics"]["lr"] for c in rec.calls] == [e["lr"] for e in logged]
    assert all({"grad_norm", "train/rmse"} <= set(c["metrics"]) for c in rec.calls)


def test_anneal_reaches_end_exactly_at_steps_and_forward_passes_see_it(tmp_path):
    seen = []

    def loss_fn(model, batch):
        seen.append(model.gamma)
        return mse_loss(model, batch)

    model = ToyMLP(dropout=0.0)
    model.gamma = 123.0  # overwritten at train start
    cb = AnnealCallback("gamma", start=10.0, end=1.0, steps=8)
    cfg = TrainConfig(steps=12, device="cpu", progress=False, tensorboard=False, log_every=1, save_every=0)
    Trainer(model, cfg, loss_fn, ToyData(), out_dir=tmp_path, callbacks=[cb]).fit()
    # step k (1-based) runs with the value after k - 1 completed steps
    assert seen == [anneal_value(k, 10.0, 1.0, 8) for k in range(12)]
    assert seen[0] == 10.0 and seen[8] == 1.0 and seen[7] > 1.0  # exactly `end` after step 8
    assert seen[8:] == [1.0] * 4 and model.gamma == 1.0
    assert all(a > b for a, b in zip(seen[:9], seen[1:9]))
    assert [e["anneal/gamma"] for e in read_metrics(tmp_path)] == seen[1:] + [1.0]


def test_anneal_shapes_and_begin():
    lin = [anneal_value(t, 10.0, 1.0, 4) for t in range(6)]
    assert lin == [10.0, 7.75, 5.5, 3.25, 1.0, 1.0]
    cos = [anneal_value(t, 10.0, 1.0, 4, "cosine") for t in range(6)]
    assert cos[0] == 10.0 and cos[2] == pytest.approx(5.5) and cos[4] == 1.0 and cos[5] == 1.0
    assert cos[1] == pytest.approx(1.0 + 9.0 * 0.5 * (1 + math.cos(math.pi / 4)))
    late = [anneal_value(t, 0.0, 1.0, 2, begin=3) for t in range(7)]
    assert late == [0.0, 0.0, 0.0, 0.0, 0.5, 1.0, 1.0]
    assert anneal_value(5, 0.1, 0.3, 5) == 0.3  # no float drift at the end


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("gamma", torch.tensor(0.0))
        self.lin = nn.Linear(2, 2)


class SolverCfg(ConfigModel):
    gamma: float = 0.0


def test_anneal_targets_buffers_wildcards_and_configs(tmp_path):
    model = nn.ModuleDict({"blocks": nn.ModuleList([Block(), Block()])})
    cb = AnnealCallback("blocks.*.gamma", 10.0, 1.0, steps=2, shape="cosine")
    trainer = type("T", (), {"model": model, "step": 1})()
    cb.on_train_start(trainer)
    assert [b.gamma.item() for b in model.blocks] == [5.5, 5.5]  # buffers filled in place
    assert isinstance(model.blocks[0].gamma, torch.Tensor)
    cb.on_step_end(trainer, 2)
    assert [b.gamma.item() for b in model.blocks] == [1.0, 1.0]

    cfgs = [SolverCfg(), SolverCfg()]
    cb2 = AnnealCallback("gamma", 2.0, 0.0, steps=4, target=cfgs)
    trainer.step = 0
    cb2.on_train_start(trainer)
    cb2.on_step_end(trainer, 3)
    assert [c.gamma for c in cfgs] == [0.5, 0.5]
    picked = AnnealCallback("gamma", 1.0, 0.0, steps=1, target=lambda m: [m.blocks[1]])
    picked.on_train_start(trainer)
    assert [b.gamma.item() for b in model.blocks] == [1.0, 1.0]
    with pytest.raises(ValueError, match=r"Block has no attribute 'gama'"):
        AnnealCallback("blocks.*.gama", 1.0, 0.0, steps=1).on_train_start(trainer)
    with pytest.raises(ValueError, match=r"steps = 0: must be an integer >= 1"):
        AnnealCallback("gamma", 1.0, 0.0, steps=0)


def _unit_rows(model):
    w = model.net[0].weight
    w.div_(w.norm(dim=1, keepdim=True))


class ConstraintCheck(Callback):
    def __init__(self):
        self.norms = []

    def on_step_end(self, trainer, step):
        self.norms.append(trainer.model.net[0].weight.norm(dim=1))


def test_projection_keeps_a_constraint_satisfied(tmp_path):
    check = ConstraintCheck()
    t = build(tmp_path, steps=6, callbacks=[ProjectionCallback(_unit_rows), check])
    t.fit()
    assert len(check.norms) == 6
    for n in check.norms:  # after every step, rows lie on the unit sphere (the step left them)
        torch.testing.assert_close(n, torch.ones_like(n))


class SphereLinear(nn.Linear):
    def project_(self):
        self.weight.div_(self.weight.norm(dim=1, keepdim=True))


def test_projection_calls_project_methods_and_needs_one(tmp_path):
    model = nn.Sequential(SphereLinear(8, 4), nn.Linear(4, 1))
    cfg = TrainConfig(steps=3, device="cpu", progress=False, tensorboard=False, save_every=0)
    Trainer(model, cfg, mse_loss, ToyData(), out_dir=tmp_path / "a",
            callbacks=[ProjectionCallback()]).fit()
    torch.testing.assert_close(model[0].weight.norm(dim=1), torch.ones(4))
    t = Trainer(ToyMLP(), cfg, mse_loss, ToyData(), out_dir=tmp_path / "b",
                callbacks=[ProjectionCallback()])
    with pytest.raises(ValueError, match=r"no module of ToyMLP has a project_\(\) method"):
        t.fit()


class LossEMA(Callback):
    """Stateful and affecting training: nudges the output bias by an EMA of the loss."""

    name = "ema"

    def __init__(self):
        self.ema = torch.zeros(())
        self.count = 0
        self.trace = []

    def on_step_end(self, trainer, step):
        self.count += 1
        self.ema = 0.9 * self.ema + 0.1 * trainer.step_metrics["loss"]
        with torch.no_grad():
            trainer.model.net[4].bias.add_(1e-3 * self.ema)
        self.trace.append(float(self.ema))
        return {"ema": float(self.ema)}

    def state_dict(self):
        return {"ema": self.ema.clone(), "count": self.count}

    def load_state_dict(self, state):
        self.ema = state["ema"].clone()
        self.count = int(state["count"])


def test_callback_state_resumes_exactly(tmp_path):
    steps = 12
    ref_cb = LossEMA()
    ref = build(tmp_path / "ref", steps=steps, save_every=4,
                callbacks=[ref_cb, AnnealCallback("gamma", 10.0, 1.0, steps=10, target=SolverCfg())])
    ref.fit()

    cb1, cfg1 = LossEMA(), SolverCfg()
    t1 = build(tmp_path / "run", steps=steps, save_every=4,
               callbacks=[cb1, AnnealCallback("gamma", 10.0, 1.0, steps=10, target=cfg1)])
    inner, calls = t1.loss_fn, {"n": 0}

    def crash(model, batch):
        calls["n"] += 1
        if calls["n"] == 11:
            raise RuntimeError("crash")
        return inner(model, batch)

    t1.loss_fn = crash
    with pytest.raises(RuntimeError):
        t1.fit()
    assert latest_checkpoint(tmp_path / "run").name == "ckpt-00000008"

    cb2, cfg2 = LossEMA(), SolverCfg()
    t2 = build(tmp_path / "run", steps=steps, save_every=4,
               callbacks=[cb2, AnnealCallback("gamma", 10.0, 1.0, steps=10, target=cfg2)])
    t2.fit(resume=True)
    assert cb2.count == ref_cb.count == steps
    assert torch.equal(cb2.ema, ref_cb.ema)
    assert cb2.trace == ref_cb.trace[8:]
    assert t2.loss_history == ref.loss_history[8:]  # the callback's effect on training resumed exactly
    assert cfg2.gamma == 1.0
    events = read_metrics(tmp_path / "run")
    assert [e["ema"] for e in events] == ref_cb.trace


def test_callback_errors(tmp_path):
    with pytest.raises(TypeError, match=r"has neither on_step_end"):
        Trainer(ToyMLP(), TrainConfig(steps=1), mse_loss, ToyData(), out_dir=tmp_path, callbacks=[object()])

    class Bad(Callback):
        def on_step_end(self, trainer, step):
            return 3.0

    t = build(tmp_path / "b", steps=2, callbacks=[Bad()])
    with pytest.raises(TypeError, match=r"Bad.on_step_end returned float"):
        t.fit()

    class Clash(Callback):
        def on_step_end(self, trainer, step):
            return {"loss": 0.0}

    with pytest.raises(ValueError, match=r"callback Clash returned metric 'loss', a name the trainer "
                                         r"logs itself"):
        build(tmp_path / "c", steps=2, callbacks=[Clash()]).fit()


def test_missing_callback_state_warns(tmp_path):
    build(tmp_path, steps=2, save_every=2).fit()
    with pytest.warns(UserWarning, match=r"callback ema: the checkpoint holds no state for it"):
        build(tmp_path, steps=2, callbacks=[LossEMA()]).fit(resume=True)
