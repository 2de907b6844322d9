"""Resuming under another rank count (gloo, CPU, torchrun): every rank keeps a stream of its own.

Old behaviour: ``restore_run`` gave rank ``r`` the checkpoint's entry ``r % len(entries)``, so a 1-rank checkpoint
resumed by 2 ranks handed rank 1 a copy of rank 0's data position and RNG state: both ranks drew the same
batches (the run trained on half the data it counted) and every later checkpoint kept the duplication. The
warning only said the streams "will not resume exactly".
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest
import torch
from train_toys import ToyData

from energyformer.train import latest_checkpoint

SCRIPT = r'''
import hashlib, json, sys
from pathlib import Path
import torch
from energyformer.train import TrainConfig, Trainer, dist_info, seed_everything
from train_toys import ToyData, ToyMLP, mse_loss


def digest(t):
    return hashlib.sha1(t.numpy().tobytes()).hexdigest()


class Recorded(ToyData):  # notes each batch drawn, and the torch RNG state at the first one
    def __init__(self, **kw):
        super().__init__(**kw)
        self.seen, self.rng = [], None

    def next_batch(self):
        if self.rng is None:
            self.rng = digest(torch.get_rng_state())
        x, y = super().next_batch()
        self.seen.append(digest(x))
        return x, y


out, steps, tag = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(1)
rank, world = dist_info()
seed_everything(0)
cfg = TrainConfig(steps=steps, seed=0, log_every=1, eval_every=0, save_every=3, progress=False, tensorboard=False,
                  device="cpu", lr=1e-2)
data = Recorded(batch_size=16, seed=rank)
t = Trainer(ToyMLP(dropout=0.1), cfg, mse_loss, data, out_dir=out, run_config={"task": "toy", "train": cfg.to_dict()})
t.fit(resume=tag != "first")
(out / f"{tag}-rank{rank}.json").write_text(json.dumps({"seen": data.seen, "rng": data.rng, "step": t.step}))
'''


def _run(cmd, env):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150)
    assert r.returncode == 0, f"failed:\n{r.stdout}\n{r.stderr}"
    return " ".join(r.stderr.split())


def _batches(seed, start, stop):
    """Digests of batches start..stop-1 of a fresh toy stream with data seed ``seed``."""
    d = ToyData(batch_size=16, seed=seed)
    xs = [d.next_batch()[0] for _ in range(stop)]
    return [hashlib.sha1(x.numpy().tobytes()).hexdigest() for x in xs[start:]]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_more_ranks_than_the_checkpoint_keep_their_own_streams(tmp_path, subprocess_env):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    out = tmp_path / "run"
    _run([sys.executable, str(script), str(out), "3", "first"], subprocess_env)  # 1 rank, ckpt at step 3

    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone"]
    err = _run([*torchrun, str(script), str(out), "6", "two"], subprocess_env)
    r0, r1 = (json.loads((out / f"two-rank{r}.json").read_text()) for r in (0, 1))
    assert r0["step"] == r1["step"] == 6
    assert r0["seen"] == _batches(0, 3, 6)  # rank 0 continues the saved stream
    assert r1["seen"] == _batches(1, 0, 3)  # rank 1 starts its own (data seed 1), not a copy of rank 0's
    assert r0["rng"] != r1["rng"]  # and its own RNG (dropout)
    ranks = torch.load(latest_checkpoint(out) / "state.pt", weights_only=True)["ranks"]
    assert len(ranks) == 2 and not torch.equal(ranks[0]["data"]["perm"], ranks[1]["data"]["perm"])
    assert "written by 1 rank(s), this run has 2" in err and "rank(s) 1 have no saved stream" in err

    # fewer ranks than the checkpoint: rank 0 continues its own stream, rank 1's is dropped (and said so)
    err = _run([sys.executable, str(script), str(out), "9", "one"], subprocess_env)
    assert "written by 2 rank(s), this run has 1" in err and "rank(s) 1 are dropped" in err
    one = json.loads((out / "one-rank0.json").read_text())
    assert one["seen"] == _batches(0, 6, 9)
