"""The bare self-attention tasks (potts_mlm with bare_sa, denoise) under two-process DDP (gloo, CPU, torchrun),
and a cheap guard for every task: its loss must call the model it is given (the DDP wrapper's forward).

Old behaviour: their loss called ``unwrap_model(model).local_loss(...)``, so the DDP wrapper's forward never
ran, its gradient all-reduce was never armed and every rank stepped on its own local gradient: the ranks'
J drifted apart and rank 0's (trained on rank 0's data only) was saved as the run. Now the loss goes through
``model(x, local_loss=True)``: the ranks stay equal, and equal one process trained on both ranks' batches.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from energyformer.experiment import build_model, build_task, known_configs, load_run_config, resolve

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from toy_configs import toy_overrides  # noqa: E402

STEPS, LR = 3, 10.0
#: tiny sizes; init_std > 0 so the step is not one from J = 0
CONFIGS = {
    "bare_sa/potts_bare_sa": ["task.data.L=5", "task.data.C=3", "task.data.n_train=64", "task.data.n_test=32",
                              "task.data.burn_in=20", "task.data.samples_per_chain=8", "task.n_validation=32",
                              "task.batch_size=8", "task.calibrate_sequences=16", "model.init_std=0.1"],
    "bare_sa/digits_denoise": ["task.n_train=64", "task.batch_size=8", "task.eval_images=8", "task.nearest_train=16",
                               "model.init_std=0.1"],
}

SCRIPT = r'''
import sys
from pathlib import Path
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from energyformer.experiment import build_model, build_task, load_run_config, resolve

name, out, steps, lr, overrides = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5:]
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
cfg = load_run_config(name, overrides)
task = build_task(cfg)  # this rank's data stream
model = build_model(resolve(cfg, task), task)
ddp = DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=lr)
batches = []
for _ in range(steps):
    batch = task.train_data.next_batch()
    loss, _ = task.loss(ddp, batch)  # the trainer hands loss_fn the DDP wrapper
    opt.zero_grad()
    loss.backward()
    opt.step()
    every = [None] * world
    dist.all_gather_object(every, batch)
    batches.append(every)
torch.save({"params": {n: p.detach() for n, p in model.named_parameters()}, "batches": batches},
           out / f"rank{rank}.pt")
dist.barrier()
del ddp  # the wrapper's reducer before the group: left to the interpreter's teardown, gloo's threads sometimes
dist.destroy_process_group()  # aborted the process ("terminate called without an active exception", exit -6)
import os
os._exit(0)  # the results are on disk; skip the rest of the teardown
'''


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_ranks_stay_equal_and_match_one_process_on_both_batches(tmp_path, monkeypatch, name):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path / "data"))
    overrides = CONFIGS[name]
    cfg = load_run_config(name, overrides)
    task = build_task(cfg, rank=0)  # generates any data once, before the two ranks read it
    script = tmp_path / "ddp_bare_sa.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    src = str(Path(__file__).resolve().parents[2] / "src")
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([src, env.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone", str(script),
           name, str(tmp_path), str(STEPS), str(LR), *overrides]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=200)
    assert r.returncode == 0, f"torchrun failed:\n{r.stdout}\n{r.stderr}"
    r0, r1 = (torch.load(tmp_path / f"rank{k}.pt", weights_only=True) for k in (0, 1))
    for n, p in r0["params"].items():
        assert torch.equal(p, r1["params"][n]), f"{name}: {n} differs across ranks (gradients not all-reduced)"

    # one process, the same initial weights, each step on both ranks' batches concatenated (the loss is a mean)
    model = build_model(resolve(cfg, task), task)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for both in r0["batches"]:
        assert not torch.equal(both[0][0], both[1][0])  # the ranks drew different data
        batch = tuple(torch.cat(parts) for parts in zip(*both))
        loss, _ = task.loss(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    for n, p in model.named_parameters():
        torch.testing.assert_close(r0["params"][n], p.detach(), rtol=1e-5, atol=1e-6)


def test_forward_local_loss_is_the_method_on_ids_and_on_tokens():
    """``model(x, local_loss=True)`` (the call the tasks now make) is :meth:`local_loss` bit for bit, for token ids
    (embedded) and continuous tokens; options of the dynamics are refused with it. Old: no such argument."""
    from energyformer.models.bare_attention import BareSAConfig, BareSelfAttention

    m = BareSelfAttention(BareSAConfig(n_tokens=4, dim=3, n_colours=3, init_std=0.1))
    ids = torch.randint(0, 3, (5, 4), generator=torch.Generator().manual_seed(0))
    loss, metrics = m(ids, local_loss=True)
    want, want_metrics = m.local_loss(m.embed(ids))
    assert torch.equal(loss, want) and metrics == want_metrics
    x = m.embed(ids)
    assert torch.equal(m(x, local_loss=True)[0], want)
    with pytest.raises(ValueError, match="iterations"):
        m(ids, local_loss=True, iterations=2)


class _Wrapper(nn.Module):
    """Stands for the DDP wrapper: ``unwrap_model`` sees through it (its ``_orig_mod``, as for a compiled module),
    and it counts the calls of its forward, the only call that arms DDP's gradient all-reduce."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self._orig_mod = inner
        self.calls = 0

    def forward(self, *args, **kwargs):
        self.calls += 1
        return self._orig_mod(*args, **kwargs)


def _one_config_per_task_and_model_kind() -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for name in known_configs():
        cfg = load_run_config(name, [])
        out.setdefault((cfg.task.kind, cfg.model.kind), name)
    return out


@pytest.mark.parametrize("name", sorted(_one_config_per_task_and_model_kind().values()))
def test_every_task_loss_calls_the_model_it_is_given(name, tmp_path):
    """Each task's loss, handed a wrapper, calls the wrapper's forward (train/trainer.py's loss_fn contract): a
    loss computed on ``unwrap_model(model)`` alone leaves DDP's gradients unsynchronised, the ranks training
    separate models without a word. Old: the bare_sa potts and denoise losses never called it."""
    cfg = load_run_config(name, [])
    extra = ["train.device=cpu"]
    if cfg.task.kind in ("image_classification", "masked_image_modelling"):
        extra.append("task.dataset=digits")  # ships with scikit-learn: nothing to prepare
    if cfg.model.kind == "vision":
        extra.append("model.patch_size=4")  # divides the digits' side 8
    cfg = load_run_config(name, toy_overrides(name, tmp_path, "guard", extra))
    task = build_task(cfg, rank=0)
    model = _Wrapper(build_model(resolve(cfg, task), task))
    data = task.train_data
    batch = data.next_batch() if hasattr(data, "next_batch") else next(data)
    loss, _ = task.loss(model, batch)
    assert model.calls >= 1, f"{name}: the {cfg.task.kind} loss never called model(...): DDP would not sync it"
    assert loss.requires_grad
