"""Learning-rate schedule and TrainConfig validation."""

from __future__ import annotations

import math

import pytest
import torch

from energyformer.train import TrainConfig, WarmupCosineSchedule, lr_factor
from energyformer.utils.validate import ConfigError


def test_warmup_is_linear_and_reaches_peak():
    steps, warm = 100, 10
    vals = [lr_factor(s, steps, warm, 0.1) for s in range(warm)]
    assert vals == pytest.approx([(s + 1) / warm for s in range(warm)])
    assert lr_factor(warm - 1, steps, warm, 0.1) == pytest.approx(1.0)
    assert lr_factor(warm, steps, warm, 0.1) == pytest.approx(1.0)  # cosine starts at the peak


def test_cosine_midpoint_and_final_factor():
    steps, warm, f = 101, 0, 0.1
    # last step index 100, span 100: midpoint s = 50 is halfway between 1 and f
    assert lr_factor(50, steps, warm, f) == pytest.approx(f + (1 - f) * 0.5)
    assert lr_factor(steps - 1, steps, warm, f) == pytest.approx(f)
    assert lr_factor(steps + 10, steps, warm, f) == pytest.approx(f)  # clamped after the end
    vals = [lr_factor(s, steps, warm, f) for s in range(steps)]
    assert all(a >= b for a, b in zip(vals, vals[1:]))  # monotone decay
    s = 25
    assert lr_factor(s, steps, warm, f) == pytest.approx(f + (1 - f) * 0.5 * (1 + math.cos(math.pi * 0.25)))


def test_final_factor_one_is_constant_after_warmup():
    assert {round(lr_factor(s, 50, 5, 1.0), 12) for s in range(5, 50)} == {1.0}


def test_scheduler_sets_optimizer_lr_and_resumes():
    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.AdamW([p], lr=123.0)
    sched = WarmupCosineSchedule(opt, 2e-3, 20, 4, 0.1)
    seen = []
    for _ in range(20):
        seen.append(opt.param_groups[0]["lr"])
        sched.step()
    assert seen == pytest.approx([2e-3 * lr_factor(s, 20, 4, 0.1) for s in range(20)])
    assert seen[-1] == pytest.approx(2e-4)

    opt2 = torch.optim.AdamW([p], lr=1.0)
    sched2 = WarmupCosineSchedule(opt2, 2e-3, 20, 4, 0.1)
    sched2.load_state_dict({"last_step": 7})
    assert opt2.param_groups[0]["lr"] == pytest.approx(seen[7])


def test_config_defaults_and_warmup_steps():
    cfg = TrainConfig(steps=200)
    assert (cfg.lr, cfg.final_lr_factor, cfg.warmup, cfg.weight_decay) == (2e-3, 0.1, 0.05, 0.1)
    assert cfg.betas == (0.9, 0.95) and cfg.eps == 1e-9 and cfg.grad_clip == 1.0
    assert cfg.warmup_steps == 10
    assert TrainConfig(betas=[0.8, 0.9]).betas == (0.8, 0.9)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"precision": "fp16"}, "train.precision = 'fp16'"),
        ({"steps": 0}, "train.steps = 0"),
        ({"lr": 0.0}, "train.lr = 0.0"),
        ({"warmup": 1.5}, "train.warmup = 1.5"),
        ({"grad_accum": 2.0}, "train.grad_accum = 2.0"),
        ({"device": "gpu"}, "train.device = 'gpu'"),
        ({"betas": (0.9, 1.0)}, "train.betas[1] = 1.0"),
        ({"compile": "yes"}, "train.compile = 'yes'"),
    ],
)
def test_config_errors_name_key_value_and_allowed(kwargs, fragment):
    with pytest.raises(ConfigError) as e:
        TrainConfig(**kwargs)
    assert fragment in str(e.value)
    assert ":" in str(e.value)  # "... : what is allowed"


def test_config_from_dict_rejects_unknown_keys():
    with pytest.raises(ConfigError, match=r"train.stpes: unknown key.*did you mean 'steps'"):
        TrainConfig.from_dict({"stpes": 3})
    assert TrainConfig.from_dict({"steps": 3, "betas": [0.5, 0.6]}).betas == (0.5, 0.6)
