"""Edges of ``energyformer.train.resume`` reached by no end-to-end resume test.

Single-process resumes never exercise a rank other than 0, a rank beyond the checkpoint's, the report of a
changed seed or of a switched section kind, optimiser parameters that had no state yet, a checkpoint one
step past ``train.steps``, or a stored config holding both layouts. Each is pinned here on the function
itself with tiny fakes (no training run).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from energyformer.errors import ConfigError
from energyformer.train import resume as R
from energyformer.train.rng import get_rng_state


class _Data:
    def __init__(self):
        self.loaded = None

    def load_state_dict(self, d):
        self.loaded = d


def _trainer(rank, world, seed=10):
    return SimpleNamespace(rank=rank, world_size=world, cfg=SimpleNamespace(seed=seed, steps=9), train_data=_Data())


def test_each_rank_restores_its_own_entry_and_rng():
    """Rank 1 loads ``entries[1]``'s data state and RNG snapshot (not rank 0's), so its next draw is the saved one."""
    torch.manual_seed(1)
    rng1 = get_rng_state()
    want = torch.rand(3)
    entries = [{"data": "d0", "rng": {"torch": torch.random.default_generator.get_state()}},
               {"data": "d1", "rng": rng1}]
    t = _trainer(1, 2)
    torch.manual_seed(99)
    R.restore_rank_streams(t, entries, "ckpt")
    assert t.train_data.loaded == "d1"
    assert torch.equal(torch.rand(3), want)


def test_a_rank_beyond_the_checkpoint_seeds_with_seed_plus_rank():
    """Checkpoint of 2 ranks, run of 3: rank 2 warns and seeds with ``seed + 2`` like a fresh run's rank 2."""
    t = _trainer(2, 3, seed=10)
    with pytest.warns(UserWarning, match="written by 2 rank"):
        R.restore_rank_streams(t, [{"data": 0, "rng": {}}, {"data": 1, "rng": {}}], "ckpt")
    got = torch.rand(3)
    torch.manual_seed(12)
    assert torch.equal(got, torch.rand(3)) and t.train_data.loaded is None


def test_changed_seed_is_reported_and_a_kind_switch_hides_the_old_kinds_keys():
    """``seed`` is not a quiet key; a switched ``optimizer.kind`` is one line, not one per old/new key."""
    assert R.config_changes({"seed": 0}, {"seed": 1}) == ["seed: 0 -> 1"]
    old = {"optimizer": {"kind": "adamw", "betas": [0.9, 0.95]}}
    new = {"optimizer": {"kind": "sgd", "momentum": 0.9}}
    assert R.config_changes(old, new) == ["optimizer.kind: 'adamw' -> 'sgd'"]


def test_parameters_known_but_without_state_are_not_reported_missing():
    """A parameter the saved optimiser held but had no state for (no gradient yet) is not "new"; only a
    parameter absent from the checkpoint is."""
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    names = [n for n, _ in model.named_parameters()]
    opt = torch.optim.SGD([{"params": list(model.parameters()), "names": names}], lr=0.1, momentum=0.9)
    model[0](torch.ones(1, 2)).sum().backward()  # layer 1 gets no gradient: no momentum state
    opt.step()
    saved = opt.state_dict()
    fresh = torch.optim.SGD([{"params": list(model.parameters()), "names": names}], lr=0.1, momentum=0.9)
    assert R.load_optimizer_state(fresh, saved, model, "ckpt") == []


def test_a_checkpoint_one_step_past_train_steps_is_refused(monkeypatch):
    """Checkpoint at step 10, ``train.steps = 9``: a one-line ConfigError before anything is restored."""
    monkeypatch.setattr(R, "load_checkpoint", lambda *a, **k: {"step": 10})
    t = SimpleNamespace(optimizer=object(), scheduler=object(), cfg=SimpleNamespace(steps=9))
    with pytest.raises(ConfigError, match="is at step 10, past it"):
        R.restore_run(t, "ckpt")


def test_a_config_with_an_optimizer_section_is_not_upgraded():
    """The current layout (an ``optimizer`` section) is left as it is even beside a flat legacy key name."""
    cfg = {"optimizer": {"kind": "sgd", "lr": 0.1}, "warmup": 5}
    assert R.upgrade_train_config(cfg) == (cfg, False)
