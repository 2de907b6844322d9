"""Two-process DDP (gloo, CPU) through torchrun: runs, ranks stay in sync, only rank 0 writes, resume.

Runs Nesterov SGD with a projection callback, so optimiser kinds and callbacks are covered under DDP.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from energyformer.train import latest_checkpoint, verify_checkpoint

SCRIPT = r'''
import json, sys
from pathlib import Path
import torch
from energyformer.train import ProjectionCallback, dist_info
from train_toys import build


def unit_rows(model):
    w = model.net[0].weight
    w.div_(w.norm(dim=1, keepdim=True))

out, steps, resume = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
torch.set_num_threads(1)
rank, world = dist_info()
assert world == 2, world
t = build(out, steps=steps, save_every=3, data_seed=rank, seed=0, dropout=0.1,
          optimizer={"kind": "sgd", "momentum": 0.9, "nesterov": True},
          callbacks=[ProjectionCallback(unit_rows)])
final = t.fit(resume=resume)
flat = torch.cat([p.detach().flatten() for p in t.model.parameters()])
row_norms = t.model.net[0].weight.norm(dim=1).tolist()
(out / f"rank{rank}-{'resume' if resume else 'first'}.json").write_text(json.dumps(
    {"params": flat.tolist(), "final": final, "losses": t.loss_history, "step": t.step,
     "row_norms": row_norms}))
'''


def _torchrun(script, out, steps, resume, env):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone",
           str(script), str(out), str(steps), resume]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150)
    # the ranks' result files say whether a failing rank had finished its training (a failure at exit) or not
    done = sorted(p.name for p in out.glob("rank*-*.json")) if out.is_dir() else []
    assert r.returncode == 0, f"torchrun failed (result files: {done}):\n{r.stdout}\n{r.stderr}"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_torchrun_two_process_gloo(tmp_path, subprocess_env):
    script = tmp_path / "ddp_script.py"
    script.write_text(SCRIPT)
    out = tmp_path / "run"
    _torchrun(script, out, 6, "0", subprocess_env)

    r0 = json.loads((out / "rank0-first.json").read_text())
    r1 = json.loads((out / "rank1-first.json").read_text())
    assert r0["params"] == r1["params"]  # DDP (and the callback on each rank) kept replicas identical
    assert r0["row_norms"] == pytest.approx([1.0] * len(r0["row_norms"]))  # the projection ran
    assert r0["losses"] == r1["losses"]  # the logged loss is the all-reduced mean
    assert len(r0["losses"]) == 6
    events = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    train = [e for e in events if e["event"] == "train"]
    assert [e["step"] for e in train] == list(range(1, 7))  # written once, by rank 0
    assert train[-1]["tokens"] == 6 * 2 * 16  # tokens of both ranks
    ckpt = latest_checkpoint(out)
    assert ckpt.name == "ckpt-00000006"
    verify_checkpoint(ckpt)
    info = json.loads((out / "run_info.json").read_text())
    assert info["world_size"] == 2

    # both ranks load the checkpoint and continue in sync
    _torchrun(script, out, 9, "1", subprocess_env)
    a = json.loads((out / "rank0-resume.json").read_text())
    b = json.loads((out / "rank1-resume.json").read_text())
    assert a["step"] == b["step"] == 9 and len(a["losses"]) == 3
    assert a["params"] == b["params"]


WEIGHED = r'''
import json, sys
from pathlib import Path
import torch
from energyformer.train import TrainConfig, Trainer, dist_info
from energyformer.train.rng import seed_everything
from train_toys import ToyData, ToyMLP


EMPTY = len(sys.argv) > 3  # the second rank's batches count no target at all


class Masked(ToyData):  # counts only the targets above 0.3: a different number on each rank
    def __init__(self, batch_size, seed):
        super().__init__(batch_size=batch_size, seed=seed)
        self.empty = EMPTY and seed == 1

    def next_batch(self):
        x, y = super().next_batch()
        return x, y, torch.zeros_like(y, dtype=torch.bool) if self.empty else y > 0.3


class Alternate:  # one process, the two ranks' batches in turn
    def __init__(self):
        self.parts = [Masked(batch_size=8, seed=0), Masked(batch_size=8, seed=1)]
        self.i = 0

    def next_batch(self):
        self.i += 1
        return self.parts[(self.i - 1) % 2].next_batch()

    def state_dict(self):
        return {"i": self.i}

    def load_state_dict(self, d):
        self.i = d["i"]


def loss(model, batch):
    x, y, keep = batch
    return ((model(x) - y) ** 2)[keep].mean(), {}


out, mode = Path(sys.argv[1]), sys.argv[2]
torch.set_num_threads(1)
seed_everything(0)
rank, world = dist_info() if mode == "ddp" else (0, 1)
data = Masked(batch_size=8, seed=rank) if mode == "ddp" else Alternate()
cfg = TrainConfig(steps=3, seed=0, log_every=1, eval_every=0, save_every=0, progress=False, tensorboard=False,
                  device="cpu", lr=1e-2, optimizer={"kind": "sgd"}, grad_clip=0, grad_accum=1 if mode == "ddp" else 2)
t = Trainer(ToyMLP(dropout=0.0), cfg, loss, data, out_dir=out / mode, count_fn=lambda b: int(b[2].sum()))
t.fit()
flat = torch.cat([p.detach().flatten() for p in t.model.parameters()])
(out / f"{mode}{rank}.json").write_text(json.dumps({"params": flat.tolist(), "losses": t.loss_history}))
'''


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("empty", [False, True], ids=["counts-differ", "one-rank-counts-none"])
def test_ranks_weigh_by_their_counted_items(tmp_path, subprocess_env, empty):
    """Two ranks whose batches count different numbers of targets take the step of one process that
    accumulates both batches weighed by their items (train/accumulate.py: n_i · world / N) — also when one
    rank's batches count none (its mean loss NaN: it backpropagates zeros, so the gradients' all-reduce runs)."""
    script = tmp_path / "weighed.py"
    script.write_text(WEIGHED)
    extra = ["empty"] if empty else []
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone", str(script),
           str(tmp_path), "ddp", *extra]
    r = subprocess.run(cmd, env=subprocess_env, capture_output=True, text=True, timeout=150)
    assert r.returncode == 0, f"torchrun failed:\n{r.stdout}\n{r.stderr}"
    r = subprocess.run([sys.executable, str(script), str(tmp_path), "one", *extra], env=subprocess_env,
                       capture_output=True, text=True, timeout=150)
    assert r.returncode == 0, r.stderr
    ddp, one = (json.loads((tmp_path / f"{m}0.json").read_text()) for m in ("ddp", "one"))
    assert ddp["losses"] == pytest.approx(one["losses"], rel=1e-5)
    assert ddp["params"] == pytest.approx(one["params"], rel=1e-4, abs=1e-6)
