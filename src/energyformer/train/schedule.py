"""Learning-rate schedules by kind (``train.schedule``): a factor of the peak LR per optimiser step.

With ``S`` total steps, ``W = round(warmup * S)`` warm-up steps, final factor ``f`` and the 0-based
index ``s`` of the optimiser step, the step uses ``lr * factor(s)``. Every kind warms up the same
way, ``factor(s) = (s + 1) / W`` for ``s < W`` (the first step uses ``lr / W``, step ``W - 1`` the
peak), and after warm-up, with ``p = min(1, (s - W) / max(1, S - 1 - W))``:

* ``warmup_cosine``: ``f + (1 - f) * 0.5 * (1 + cos(pi * p))``  (the peak at ``s = W``, ``f`` at
  the last step ``s = S - 1``);
* ``warmup_linear``: ``f + (1 - f) * (1 - p)``  (linear decay to ``f``; the intrinsic-optimizer
  paper's App. A.8 schedule);
* ``constant``: ``1``.

Steps past ``S - 1`` keep the last value. A warm-up that ends at or after the last step (``W >= S - 1``, e.g.
``warmup: 1.0``) leaves no step to decay: the last steps run at the peak and ``f`` has no effect. A new kind registers a config class with a
``factor(step, total_steps)`` rule in :data:`SCHEDULES`.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from pydantic import Field

from energyformer.utils.config import KindConfig, Registry

SCHEDULES = Registry("schedule")


def _warmup(step: int, warmup_steps: int) -> float | None:
    """Linear warm-up factor ``(step + 1) / W`` while ``step < W``, else None."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    return None


def _progress(step: int, total_steps: int, warmup_steps: int) -> float:
    """Fraction ``p`` of the decay done: 0 at step ``W``, 1 at the last step ``S - 1`` (clamped)."""
    span = max(1, total_steps - 1 - warmup_steps)
    return min(1.0, max(0.0, (step - warmup_steps) / span))


def lr_factor(step: int, total_steps: int, warmup_steps: int, final_lr_factor: float) -> float:
    """Warm-up + cosine factor of the peak LR for the optimiser step with 0-based index ``step``."""
    w = _warmup(step, warmup_steps)
    if w is not None:
        return w
    p = _progress(step, total_steps, warmup_steps)
    return final_lr_factor + (1.0 - final_lr_factor) * 0.5 * (1.0 + math.cos(math.pi * p))


def linear_factor(step: int, total_steps: int, warmup_steps: int, final_lr_factor: float) -> float:
    """Warm-up + linear-decay factor: ``f + (1 - f) * (1 - p)`` after warm-up."""
    w = _warmup(step, warmup_steps)
    if w is not None:
        return w
    p = _progress(step, total_steps, warmup_steps)
    return final_lr_factor + (1.0 - final_lr_factor) * (1.0 - p)


def constant_factor(step: int, warmup_steps: int) -> float:
    """Warm-up, then 1."""
    w = _warmup(step, warmup_steps)
    return 1.0 if w is None else w


class _WarmupSchedule(KindConfig):
    warmup: float = Field(0.05, ge=0, le=1)
    """fraction of the steps spent in linear warm-up"""

    def warmup_steps(self, total_steps: int) -> int:
        """Number of warm-up steps: ``round(warmup * total_steps)``."""
        return int(round(self.warmup * total_steps))

    def factor(self, step: int, total_steps: int) -> float:
        """Multiplier of the peak LR for the optimiser step with 0-based index ``step``."""
        return SCHEDULES.build(self, step, total_steps)


class WarmupCosineConfig(_WarmupSchedule):
    """Linear warm-up, then cosine decay to final_lr_factor * lr at the last step."""

    kind: Literal["warmup_cosine"] = "warmup_cosine"
    final_lr_factor: float = Field(0.1, ge=0, le=1)
    """learning rate at the last step, as a fraction of the peak"""


class WarmupLinearConfig(_WarmupSchedule):
    """Linear warm-up, then linear decay to final_lr_factor * lr at the last step."""

    kind: Literal["warmup_linear"] = "warmup_linear"
    final_lr_factor: float = Field(0.0, ge=0, le=1)
    """learning rate at the last step, as a fraction of the peak"""


class ConstantConfig(_WarmupSchedule):
    """Constant learning rate, optionally after a linear warm-up."""

    kind: Literal["constant"] = "constant"
    warmup: float = Field(0.0, ge=0, le=1)
    """fraction of the steps spent in linear warm-up (0: none)"""


@SCHEDULES.register("warmup_cosine", WarmupCosineConfig)
def _cosine(cfg: WarmupCosineConfig, step: int, total_steps: int) -> float:
    return lr_factor(step, total_steps, cfg.warmup_steps(total_steps), cfg.final_lr_factor)


@SCHEDULES.register("warmup_linear", WarmupLinearConfig)
def _linear(cfg: WarmupLinearConfig, step: int, total_steps: int) -> float:
    return linear_factor(step, total_steps, cfg.warmup_steps(total_steps), cfg.final_lr_factor)


@SCHEDULES.register("constant", ConstantConfig)
def _constant(cfg: ConstantConfig, step: int, total_steps: int) -> float:
    return constant_factor(step, cfg.warmup_steps(total_steps))


class LRSchedule:
    """Sets ``lr = base_lr * schedule.factor(step) * group["lr_multiplier"]`` on every group.

    Call :meth:`step` after each ``optimizer.step()``. Only the step counter is state
    (:meth:`state_dict`); the shape comes from the current config, so a resumed run with another
    ``steps`` or schedule follows the new schedule from where it stands.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, base_lr: float, total_steps: int,
                 schedule: KindConfig) -> None:
        SCHEDULES.get(schedule.kind)  # unknown kinds fail here, with the registered ones listed
        self.optimizer = optimizer
        self.base_lr = float(base_lr)
        self.total_steps = int(total_steps)
        self.schedule = schedule
        self.last_step = 0  # number of optimiser steps already taken
        self._apply()

    def get_lr(self, step: int | None = None) -> float:
        """Peak-relative LR for 0-based step ``step`` (default: the next one), before multipliers."""
        s = self.last_step if step is None else step
        return self.base_lr * SCHEDULES.build(self.schedule, s, self.total_steps)

    def _apply(self) -> None:
        lr = self.get_lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group.get("lr_multiplier", 1.0)

    def step(self) -> None:
        self.last_step += 1
        self._apply()

    def state_dict(self) -> dict[str, Any]:
        return {"last_step": self.last_step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.last_step = int(state["last_step"])
        self._apply()
