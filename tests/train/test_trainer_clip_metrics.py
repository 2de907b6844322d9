"""Trainer options that the other tests leave at a value where a mistake cannot show: ``train.grad_clip``
(they set 0), the averaging of train metrics over micro-batches, and the per-rank RNG stream."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from train_toys import ToyData, ToyMLP, read_metrics

from energyformer.train import TrainConfig, Trainer
from energyformer.train.rng import seed_everything

_CFG = dict(seed=0, log_every=1, eval_every=0, save_every=0, progress=False, tensorboard=False, device="cpu")


def _big_loss(model, batch):
    """MSE × 1000: a gradient norm far above any clip, and a constant metric (1.0) whatever the batch."""
    x, y = batch
    return ((model(x) - y) ** 2).mean() * 1000, {"one": 1.0}


def _one_sgd_step(tmp_path, name, **cfg_kwargs):
    """One SGD step at lr 1 (no momentum, no decay, constant LR): the update is minus the (clipped) gradient.
    Returns the update's norm and the logged gradient norm."""
    seed_everything(0)
    model = ToyMLP(dropout=0.0)
    before = [p.detach().clone() for p in model.parameters()]
    cfg = TrainConfig(steps=1, lr=1.0, optimizer={"kind": "sgd"}, schedule={"kind": "constant", "warmup": 0.0},
                      **_CFG, **cfg_kwargs)
    Trainer(model, cfg, _big_loss, ToyData(batch_size=4), out_dir=tmp_path / name).fit()
    moved = math.sqrt(sum(float(((p.detach() - q) ** 2).sum()) for p, q in zip(model.parameters(), before)))
    (event,) = read_metrics(tmp_path / name)
    return moved, event["grad_norm"]


@pytest.mark.parametrize("clip, kw", [(0.5, {"grad_clip": 0.5}), (1.0, {})], ids=["grad_clip-0.5", "default-1.0"])
def test_grad_clip_bounds_the_update_norm(tmp_path, clip, kw):
    """Once a mutant ignored train.grad_clip (every test set it to 0) and the update norm was the raw gradient
    norm (~1300 here), also under the default grad_clip 1.0. The logged grad_norm is the norm before clipping."""
    assert TrainConfig().grad_clip == 1.0
    moved, grad_norm = _one_sgd_step(tmp_path, "clip", **kw)
    assert grad_norm > 100 * clip
    assert moved == pytest.approx(clip, rel=1e-4)


def test_grad_clip_0_does_not_clip(tmp_path):
    moved, grad_norm = _one_sgd_step(tmp_path, "noclip", grad_clip=0)
    assert grad_norm > 100
    assert moved == pytest.approx(grad_norm, rel=1e-4)


@pytest.mark.parametrize("weigh", [False, True], ids=["plain", "count_fn"])
@pytest.mark.parametrize("accum", [1, 2, 3])
def test_train_metrics_are_the_mean_over_micro_batches(tmp_path, accum, weigh):
    """A metric that is 1.0 on every micro-batch logs 1.0 at any grad_accum, plain or weighed by unequal item
    counts. A mutant summed the micro-batches' metrics: train/one was logged as grad_accum."""
    counter = itertools.count(1)  # 1, 2, 3, ...: unequal counts, so the weighed path is taken
    seed_everything(0)
    cfg = TrainConfig(steps=2, lr=1e-3, grad_accum=accum, grad_clip=0, **_CFG)
    out = tmp_path / f"m{accum}{weigh}"
    Trainer(ToyMLP(dropout=0.0), cfg, _big_loss, ToyData(batch_size=4), out_dir=out,
            count_fn=(lambda b: next(counter)) if weigh else None).fit()
    if weigh and accum > 1:
        assert next(counter) == 2 * accum + 1  # count_fn was used for every micro-batch
    events = read_metrics(out)
    assert [e["train/one"] for e in events] == pytest.approx([1.0, 1.0], abs=1e-12)


class _FirstDraw:
    """Records torch.rand(4) when training starts, right after the trainer seeded this rank's stream."""

    def __init__(self):
        self.draw = None

    def on_train_start(self, trainer):
        self.draw = torch.rand(4)


def _first_draw(tmp_path, monkeypatch, rank: int) -> torch.Tensor:
    # RANK without WORLD_SIZE > 1: no process group, but dist_info() (and so Trainer.rank) reads the rank
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", "1")
    seed_everything(123)  # the task's own seeding, the same on every rank
    cb = _FirstDraw()
    cfg = TrainConfig(steps=1, lr=1e-3, grad_clip=0, **_CFG)
    t = Trainer(ToyMLP(dropout=0.1), cfg, _big_loss, ToyData(batch_size=4), out_dir=tmp_path / f"r{rank}",
                callbacks=[cb])
    t.fit()
    assert t.rank == rank
    return cb.draw


def test_each_rank_gets_its_own_rng_stream(tmp_path, monkeypatch):
    """Fresh runs seed with seed + rank, so DDP ranks draw different dropout masks. A mutant seeded every rank
    with the same seed (identical masks on every rank) and no test noticed: the DDP test checks only that the
    replicas stay equal."""
    r0 = _first_draw(tmp_path, monkeypatch, 0)
    r1 = _first_draw(tmp_path, monkeypatch, 1)
    assert not torch.equal(r0, r1)
    assert torch.equal(_first_draw(tmp_path / "again", monkeypatch, 1), r1)  # and each is reproducible
