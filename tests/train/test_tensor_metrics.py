"""A task's step metrics may be 0-dim tensors: the trainer reads them with the loss after the backward, in one host
transfer per step, and logs the same floats as from Python numbers (before, every metric went through ``float()``
inside the task's loss, a device sync before the backward was queued, and once more per micro-batch)."""

from __future__ import annotations

import math

import pytest
import torch
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
