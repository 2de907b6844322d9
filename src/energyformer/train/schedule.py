"""Learning-rate schedule: linear warm-up, then cosine decay to a final fraction of the peak.

With ``S`` total steps, ``W`` warm-up steps and final factor ``f``, the learning rate used by the
optimiser step with 0-based index ``s`` is ``lr * lr_factor(s)`` where::

    lr_factor(s) = (s + 1) / W                                   for s < W
                 = f + (1 - f) * 0.5 * (1 + cos(pi * p))         for s >= W,
                   p = min(1, (s - W) / max(1, S - 1 - W))

so the first step uses ``lr / W``, step ``W - 1`` reaches the peak, and the last step
(``s = S - 1``) uses exactly ``f * lr``.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def lr_factor(step: int, total_steps: int, warmup_steps: int, final_lr_factor: float) -> float:
    """Multiplier of the peak learning rate for the optimiser step with 0-based index ``step``."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    span = max(1, total_steps - 1 - warmup_steps)
    progress = min(1.0, max(0.0, (step - warmup_steps) / span))
    return final_lr_factor + (1.0 - final_lr_factor) * 0.5 * (1.0 + math.cos(math.pi * progress))


class WarmupCosineSchedule:
    """Sets ``lr = base_lr * lr_factor(step)`` on every parameter group of ``optimizer``.

    Call :meth:`step` after each ``optimizer.step()``. Only the step counter is state
    (:meth:`state_dict`); the schedule's shape comes from the current config, so a resumed run with
    a longer ``steps`` follows the new schedule from where it stands.
    """

    def __init__(
        self, optimizer: torch.optim.Optimizer, base_lr: float, total_steps: int,
        warmup_steps: int, final_lr_factor: float,
    ) -> None:
        self.optimizer = optimizer
        self.base_lr = float(base_lr)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.final_lr_factor = float(final_lr_factor)
        self.last_step = 0  # number of optimiser steps already taken
        self._apply()

    def get_lr(self, step: int | None = None) -> float:
        """Learning rate for the optimiser step with 0-based index ``step`` (default: the next one)."""
        s = self.last_step if step is None else step
        return self.base_lr * lr_factor(s, self.total_steps, self.warmup_steps, self.final_lr_factor)

    def _apply(self) -> None:
        lr = self.get_lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def step(self) -> None:
        self.last_step += 1
        self._apply()

    def state_dict(self) -> dict[str, Any]:
        return {"last_step": self.last_step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.last_step = int(state["last_step"])
        self._apply()
