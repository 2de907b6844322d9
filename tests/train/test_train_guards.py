"""Run-directory lock, no poisoned checkpoints, full disk (issue 9, classes 1, 2 and 3)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from energyformer.train import (
    CheckpointError, TrainConfig, Trainer, TrainingDiverged, latest_valid_checkpoint, list_checkpoints,
    save_checkpoint, verify_checkpoint,
)
from energyformer.train.lock import RunDirBusy, RunDirLock, lock_holder


class Batches:
    def __init__(self):
        self.i = 0

    def next_batch(self):
        self.i += 1
        g = torch.Generator().manual_seed(self.i)
        return torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)

    def state_dict(self):
        return {"i": self.i}

    def load_state_dict(self, d):
        self.i = d["i"]


def mse(model, batch):
    x, y = batch
    return ((model(x) - y) ** 2).mean(), {}


def _cfg(**kw):
    base = dict(steps=6, device="cpu", progress=False, tensorboard=False, eval_every=0, log_every=1,
                save_every=1, keep_checkpoints=2)
    return TrainConfig(**{**base, **kw})


def test_lock_refuses_a_second_holder_and_takes_over_stale_locks(tmp_path):
    with RunDirLock(tmp_path / "run"):
        assert lock_holder(tmp_path / "run")["pid"] == os.getpid()
        with pytest.raises(RunDirBusy, match=rf"run directory {tmp_path / 'run'} is in use by process {os.getpid()}"):
            RunDirLock(tmp_path / "run").acquire()
    # released: the next holder gets it; a lock file left by a dead process is stale and taken over
    (tmp_path / "stale").mkdir()
    (tmp_path / "stale" / ".lock").write_text(json.dumps({"pid": 999999, "host": "gone"}))
    with RunDirLock(tmp_path / "stale"):
        assert lock_holder(tmp_path / "stale")["pid"] == os.getpid()


@pytest.mark.slow
def test_two_real_trainings_in_one_run_directory(tmp_path):
    """Two processes: the second (fresh or --resume) is refused with a one-line message, exit 2."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        [str(Path(__file__).resolve().parents[2] / "src"), os.environ.get("PYTHONPATH", "")]))
    ov = ["model.dim=32", "model.n_layers=1", "model.heads=2", "model.max_seq_len=32", "task.seq_len=32",
          "task.batch_size=2", "task.eval_max_batches=1", "train.steps=100000", "train.eval_every=0",
          "train.save_every=50", "train.progress=false", "train.tensorboard=false", "name=busy",
          f"out_dir={tmp_path}"]
    sets = [x for o in ov for x in ("--set", o)]
    cmd = [sys.executable, "-m", "energyformer.cli", "train", "lm/llama", *sets]
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        lock = tmp_path / "busy" / ".lock"
        deadline = time.time() + 120
        while time.time() < deadline and not (lock.exists() and lock.read_text()):
            time.sleep(0.1)
        assert lock.read_text(), "the first training never took the lock"
        for extra in ([], ["--resume"]):
            r = subprocess.run(cmd + extra, env=env, capture_output=True, text=True, timeout=120)
            assert r.returncode == 2, r.stderr
            err = r.stderr.strip()
            assert "\n" not in err and f"is in use by process {first.pid}" in err, err
    finally:
        first.kill()
        first.wait()


def test_poisoned_weights_are_never_saved_and_the_last_good_checkpoint_survives(tmp_path):
    """Clipping off, a huge SGD step turns finite weights into inf; nothing non-finite is written."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    cfg = _cfg(grad_clip=0.0, optimizer={"kind": "sgd"}, lr=1e-3, keep_checkpoints=1)
    t = Trainer(model, cfg, mse, Batches(), out_dir=tmp_path)
    calls = {"n": 0}
    real_step = torch.optim.SGD.step

    def step(self, *a, **k):  # the 3rd update overflows the weights (loss and gradients were finite)
        out = real_step(self, *a, **k)
        calls["n"] += 1
        if calls["n"] == 3:
            with torch.no_grad():
                model.weight.mul_(1e38).mul_(1e38)
        return out

    torch.optim.SGD.step = step
    try:
        with pytest.raises(TrainingDiverged, match=r"step 3: weights or optimizer state = nan.*ckpt-00000002"):
            t.fit()
    finally:
        torch.optim.SGD.step = real_step
    ckpts = list_checkpoints(tmp_path)
    assert [p.name for p in ckpts] == ["ckpt-00000002"]  # pruning kept the newest finite one
    verify_checkpoint(ckpts[0])  # finite


def test_infinite_gradient_with_finite_loss_stops_without_clipping(tmp_path):
    model = nn.Linear(4, 1)

    def inf_grad_loss(m, batch):  # finite value (0), infinite gradient
        return _Inf.apply(m.weight.sum()), {}

    t = Trainer(model, _cfg(grad_clip=0.0), inf_grad_loss, Batches(), out_dir=tmp_path)
    with pytest.raises(TrainingDiverged, match="gradient norm"):
        t.fit()
    assert not list_checkpoints(tmp_path)


class _Inf(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 0.0

    @staticmethod
    def backward(ctx, g):
        return g * float("inf")


def test_old_nonfinite_checkpoints_are_invalid_and_skipped(tmp_path):
    good = nn.Linear(2, 2)
    save_checkpoint(tmp_path, 1, good, keep=0)
    bad = nn.Linear(2, 2)
    with torch.no_grad():
        bad.weight[0, 0] = float("nan")
    with pytest.raises(CheckpointError, match="refusing to save step 2: non-finite values in weight"):
        save_checkpoint(tmp_path, 2, bad, keep=0)
    # a poisoned checkpoint written by an older version (bypassing the guard) is not "valid"
    from safetensors.torch import save_model

    from energyformer.train import checkpoint as C

    (tmp_path / "ckpt-00000003").mkdir()
    save_model(bad, str(tmp_path / "ckpt-00000003" / C.MODEL_FILE))
    torch.save({"step": 3, "optimizer": None}, tmp_path / "ckpt-00000003" / C.STATE_FILE)
    files = {f: {"size": (tmp_path / "ckpt-00000003" / f).stat().st_size,
                 "sha256": C._sha256(tmp_path / "ckpt-00000003" / f)} for f in (C.MODEL_FILE, C.STATE_FILE)}
    (tmp_path / "ckpt-00000003" / C.MANIFEST_FILE).write_text(json.dumps({"step": 3, "files": files}))  # (every
    # manifest has held its step since the first checkpoint format; one without is damaged, passed over as well)
    found, skipped = latest_valid_checkpoint(tmp_path, warn=False)
    assert found.name == "ckpt-00000001" and "non-finite" in skipped[0][1]


def test_manifest_listing_no_files_is_invalid(tmp_path):
    path = save_checkpoint(tmp_path, 1, nn.Linear(2, 2))
    (path / "manifest.json").write_text(json.dumps({"files": {}}))
    with pytest.raises(CheckpointError, match="must list model.safetensors and state.pt"):
        verify_checkpoint(path)


def test_full_disk_says_so_and_leaves_no_temporary_files(tmp_path, monkeypatch):
    def full(*a, **k):  # what torch.save raises when the disk fills up mid-write
        raise RuntimeError("[enforce fail at inline_container.cc:859] . PytorchStreamWriter failed writing "
                           "file data/0: file write failed")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(OSError) as info:
        save_checkpoint(tmp_path, 1, nn.Linear(2, 2))
    assert info.value.errno == errno.ENOSPC
    assert [p.name for p in tmp_path.iterdir()] == []  # no ckpt-*.tmp left behind
    from energyformer.cli import describe_error

    assert describe_error(info.value)[0].startswith("no space left on device")


@pytest.mark.parametrize("grad_clip, precision, advice", [
    (0.0, "bf16", "Try a lower train.lr, train.grad_clip > 0 or train.precision='fp32'."),
    (1.0, "fp32", "Try a lower train.lr."),  # it advised fp32 and clipping to a run using both
    (0.0, "fp32", "Try a lower train.lr or train.grad_clip > 0."),
])
def test_the_divergence_advice_names_only_remedies_the_run_does_not_use(grad_clip, precision, advice):
    err = TrainingDiverged(3, float("nan"), "loss", None, _cfg(grad_clip=grad_clip, precision=precision))
    assert str(err).endswith(advice), str(err)
