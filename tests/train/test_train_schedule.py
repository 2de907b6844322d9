"""Learning-rate schedules: each kind at its boundaries (first step, end of warm-up, last step)."""

from __future__ import annotations

import math

import pytest
import torch

from energyformer.train import SCHEDULES, LRSchedule, TrainConfig, lr_factor


def _sched(**kw):
    return TrainConfig(schedule=kw).schedule


def _factors(cfg, total):
    return [cfg.factor(s, total) for s in range(total)]


@pytest.mark.parametrize("kind", ["warmup_cosine", "warmup_linear", "constant"])
def test_warmup_is_linear_and_reaches_the_peak(kind):
    cfg, total = _sched(kind=kind, warmup=0.25), 20  # W = 5
    assert cfg.warmup_steps(total) == 5
    vals = _factors(cfg, total)
    assert vals[:5] == pytest.approx([1 / 5, 2 / 5, 3 / 5, 4 / 5, 1.0])  # first step lr / W
    assert vals[4] == 1.0  # end of warm-up: the peak, exactly
    assert vals[5] == 1.0  # the decay (or the plateau) starts at the peak


@pytest.mark.parametrize("kind, final", [("warmup_cosine", 0.1), ("warmup_linear", 0.05)])
def test_decay_ends_exactly_at_final_factor_on_the_last_step(kind, final):
    cfg, total = _sched(kind=kind, warmup=0.25, final_lr_factor=final), 20
    vals = _factors(cfg, total)
    assert vals[-1] == pytest.approx(final, abs=1e-15)  # last step s = S - 1
    assert vals[-2] > final
    assert cfg.factor(total + 7, total) == pytest.approx(final, abs=1e-15)  # clamped after the end
    assert all(a >= b for a, b in zip(vals[4:], vals[5:]))  # monotone after warm-up


def test_cosine_shape_and_midpoint():
    cfg, total = _sched(kind="warmup_cosine", warmup=0.0, final_lr_factor=0.1), 101
    assert cfg.factor(0, total) == 1.0  # no warm-up: the first step uses the peak
    assert cfg.factor(50, total) == pytest.approx(0.1 + 0.9 * 0.5)
    assert cfg.factor(25, total) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4)))
    # the kind and the library function used by other tasks are one implementation
    assert [cfg.factor(s, total) for s in range(total)] == [lr_factor(s, total, 0, 0.1) for s in range(total)]


def test_linear_decay_is_a_straight_line():
    cfg, total = _sched(kind="warmup_linear", warmup=0.16, final_lr_factor=0.2), 25  # W = 4, span 20
    vals = _factors(cfg, total)
    assert vals[4] == 1.0 and vals[-1] == pytest.approx(0.2)
    assert vals[14] == pytest.approx(0.2 + 0.8 * 0.5)  # halfway
    diffs = [a - b for a, b in zip(vals[4:], vals[5:])]
    assert diffs == pytest.approx([0.8 / 20] * 20)  # constant slope down to f
    assert TrainConfig(schedule="warmup_linear").schedule.final_lr_factor == 0.0  # decays to 0


def test_constant_with_and_without_warmup():
    assert _factors(_sched(kind="constant"), 10) == [1.0] * 10
    vals = _factors(_sched(kind="constant", warmup=0.3), 10)
    assert vals == pytest.approx([1 / 3, 2 / 3, 1.0] + [1.0] * 7)
    assert vals[-1] == 1.0


def test_scheduler_sets_lr_with_role_multipliers_and_resumes():
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([{"params": [a]}, {"params": [b], "lr_multiplier": 0.5}], lr=123.0)
    cfg = _sched(kind="warmup_linear", warmup=0.2, final_lr_factor=0.1)
    sched = LRSchedule(opt, 2e-3, 20, cfg)
    seen = []
    for _ in range(20):
        seen.append((opt.param_groups[0]["lr"], opt.param_groups[1]["lr"]))
        sched.step()
    assert [x for x, _ in seen] == pytest.approx([2e-3 * cfg.factor(s, 20) for s in range(20)])
    assert [y for _, y in seen] == pytest.approx([0.5 * x for x, _ in seen])
    assert seen[-1][0] == pytest.approx(2e-4) and sched.get_lr(19) == pytest.approx(2e-4)

    opt2 = torch.optim.SGD([{"params": [a]}, {"params": [b], "lr_multiplier": 0.5}], lr=1.0)
    sched2 = LRSchedule(opt2, 2e-3, 20, cfg)
    sched2.load_state_dict({"last_step": 7})
    assert (opt2.param_groups[0]["lr"], opt2.param_groups[1]["lr"]) == pytest.approx(seen[7])


def test_registered_schedule_kinds():
    assert SCHEDULES.names() == ["warmup_cosine", "warmup_linear", "constant"]
