"""A task's step metrics may be 0-dim tensors: the trainer reads them with the loss after the backward, in one host
transfer per step, and logs the same floats as from Python numbers (before, every metric went through ``float()``
inside the task's loss, a device sync before the backward was queued, and once more per micro-batch)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode
from train_toys import ToyData, ToyMLP, read_metrics

from energyformer.train import TrainConfig, Trainer, seed_everything


def _loss(as_tensor: bool):
    def loss_fn(model, batch):
        x, y = batch
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
        mae = (model(x).float() - y).abs().mean()
        return loss, ({"mae": mae.detach()} if as_tensor else {"mae": float(mae.detach())})
    return loss_fn


def _run(tmp_path, as_tensor: bool, accum: int):
    seed_everything(0)
    cfg = TrainConfig(steps=4, seed=0, log_every=2, eval_every=0, save_every=0, progress=False, tensorboard=False,
                      device="cpu", lr=1e-2, grad_accum=accum)
    out = tmp_path / f"{as_tensor}{accum}"
    Trainer(ToyMLP(dropout=0.0), cfg, _loss(as_tensor), ToyData(batch_size=8), out_dir=out,
            run_config={"task": "toy"}).fit()
    return read_metrics(out)


@pytest.mark.parametrize("accum", [1, 3])
def test_tensor_metrics_are_logged_as_the_same_floats(tmp_path, accum):
    as_float, as_tensor = _run(tmp_path, False, accum), _run(tmp_path, True, accum)
    assert [r["train/mae"] for r in as_tensor] == pytest.approx([r["train/mae"] for r in as_float], rel=1e-6)
    assert all(isinstance(r["train/mae"], float) and math.isfinite(r["train/mae"]) for r in as_tensor)


def test_the_library_tasks_return_tensor_metrics_from_their_loss():
    """The losses that called float() (classification, masked images, parity, the auxiliary losses, bare SA) hand
    the trainer tensors; checked on parity with EqT (its auxiliary losses) at toy size."""
    from energyformer.experiment import build_model, build_task, load_run_config, resolve

    cfg = load_run_config("eqt/eqt", ["model.dim=16", "model.n_layers=1", "model.heads=2", "task.batch_size=2",
                                      "task.data.n_test=4"])
    task = build_task(cfg)
    model = build_model(resolve(cfg, task), task)
    _, metrics = task.loss(model, task.train_data.next_batch())
    assert metrics and all(torch.is_tensor(v) and v.dim() == 0 and not v.requires_grad for v in metrics.values())


class _HostReads(TorchDispatchMode):
    """Counts host reads (``_local_scalar_dense``: item/float/bool; ``Tensor.tolist``, patched by the test) and
    ``_foreach_mul_``/``mul_`` calls while ``on``; the optimiser's own step is left out (global step hooks)."""

    def __init__(self):
        super().__init__()
        self.on, self.reads, self.muls = False, 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.on:
            name = func.overloadpacket.__name__
            self.reads += name == "_local_scalar_dense"
            self.muls += name in ("_foreach_mul_", "mul_")
        return func(*args, **(kwargs or {}))


def _count_step(tmp_path, monkeypatch, grad_clip: float, steps: int = 3):
    seed_everything(0)
    cfg = TrainConfig(steps=steps, seed=0, log_every=1, eval_every=0, save_every=0, progress=False, tensorboard=False,
                      device="cpu", lr=1e-2, grad_clip=grad_clip)
    t = Trainer(ToyMLP(dropout=0.0), cfg, _loss(True), ToyData(batch_size=8), out_dir=tmp_path / f"c{grad_clip}")
    mode = _HostReads()
    tolist = torch.Tensor.tolist

    def counted_tolist(self):
        mode.reads += mode.on
        return tolist(self)

    monkeypatch.setattr(torch.Tensor, "tolist", counted_tolist)
    inner = t._train_step

    def step(*a):
        mode.on = True
        try:
            return inner(*a)
        finally:
            mode.on = False

    t._train_step = step
    pause = {}

    def pre(opt, args, kwargs):
        pause["was"], mode.on = mode.on, False

    def post(opt, args, kwargs):
        mode.on = pause["was"]

    h1 = register_optimizer_step_pre_hook(pre)
    h2 = register_optimizer_step_post_hook(post)
    try:
        with mode:
            t.fit()
    finally:
        h1.remove()
        h2.remove()
    return mode.reads / steps, mode.muls / steps


@pytest.mark.parametrize("grad_clip", [0.0, 0.05])
def test_a_training_step_reads_the_host_once(tmp_path, monkeypatch, grad_clip):
    """The loss, the tensor metrics and the gradient norm come back in one transfer per step (before: the norm was
    read with float() after the loss's tolist, two waits for the device per step); without clipping nothing
    multiplies the gradients (before: clip_grad_norm_ with max_norm=inf ran _foreach_mul_ by 1.0 over all of them)."""
    reads, muls = _count_step(tmp_path, monkeypatch, grad_clip)
    assert reads == 1
    assert (muls > 0) == (grad_clip > 0)


@pytest.mark.parametrize("grad_clip", [0.0, 0.05])
def test_the_trajectory_is_that_of_clip_grad_norm(tmp_path, monkeypatch, grad_clip):
    """Weights and logged norms equal bit for bit those of the trainer taking clip_grad_norm_ (max_norm=inf without
    clipping), the rule it followed before the norm and the clip were split (0.05 clips every step here)."""
    import energyformer.train.step as step_mod

    def run(name):
        seed_everything(0)
        cfg = TrainConfig(steps=4, seed=0, log_every=1, eval_every=0, save_every=0, progress=False, tensorboard=False,
                          device="cpu", lr=1e-2, grad_clip=grad_clip, grad_accum=2)
        t = Trainer(ToyMLP(dropout=0.0), cfg, _loss(True), ToyData(batch_size=8), out_dir=tmp_path / name)
        t.fit()
        return t.model.state_dict(), [r["grad_norm"] for r in read_metrics(tmp_path / name)]

    new_w, new_gn = run("new")
    monkeypatch.setattr(step_mod, "grad_norm", lambda params, clip: torch.nn.utils.clip_grad_norm_(
        params, clip if clip > 0 else float("inf")))
    old_w, old_gn = run("old")
    assert new_gn == old_gn and (grad_clip == 0 or min(new_gn) > grad_clip)
    assert all(torch.equal(new_w[k], old_w[k]) for k in old_w)
