"""Trainer configuration: one dataclass, validated at construction.

Every value is checked in ``__post_init__`` with :mod:`energyformer.utils.validate`, so a bad value
fails with one line that names the key, the value and what is allowed, e.g.::

    ConfigError: train.precision = 'fp16': allowed values are 'fp32', 'bf16' (did you mean 'fp32'?)
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from energyformer.utils.validate import ConfigError, check_choice, check_float, check_int

PRECISIONS = ("fp32", "bf16")
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda|cuda:\d+|mps)$")


@dataclass
class TrainConfig:
    """Everything the trainer needs to know; nothing about the model, the energy or the data.

    Optimiser: AdamW(lr, betas, eps, weight_decay). Weight decay is applied **only to weight
    matrices**: parameters with ``ndim >= 2`` that are not embedding tables (``nn.Embedding`` /
    ``nn.EmbeddingBag`` weights, including an output head tied to one). Biases, norm gains, learned
    step sizes and every other 1-D/0-D parameter are not decayed. A parameter can also opt out by
    carrying the attribute ``no_weight_decay = True``.

    Learning rate: linear warm-up over ``round(warmup * steps)`` steps to ``lr``, then cosine decay to
    ``final_lr_factor * lr`` at the last step (see :func:`energyformer.train.schedule.lr_factor`).

    ``eval_every``, ``log_every`` and ``save_every`` count optimiser steps; ``0`` means "only at the
    end" (logging always happens at least at the last step). ``keep_checkpoints = 0`` keeps all.
    """

    steps: int = 1000
    lr: float = 2e-3
    final_lr_factor: float = 0.1
    warmup: float = 0.05
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-9
    grad_clip: float = 1.0
    grad_accum: int = 1
    precision: str = "fp32"
    compile: bool = False
    eval_every: int = 500
    log_every: int = 10
    save_every: int = 1000
    keep_checkpoints: int = 2
    seed: int = 0
    device: str = "auto"
    progress: bool = True
    tensorboard: bool = True
    ddp_find_unused_parameters: bool = False

    def __post_init__(self) -> None:
        p = "train"
        check_int(f"{p}.steps", self.steps, min=1)
        check_float(f"{p}.lr", self.lr, min=0.0, min_exclusive=True)
        check_float(f"{p}.final_lr_factor", self.final_lr_factor, min=0.0, max=1.0)
        check_float(f"{p}.warmup", self.warmup, min=0.0, max=1.0)
        check_float(f"{p}.weight_decay", self.weight_decay, min=0.0)
        if not isinstance(self.betas, (tuple, list)) or len(self.betas) != 2:
            raise ConfigError(f"{p}.betas = {self.betas!r}: must be a pair of numbers in [0, 1)")
        for i, b in enumerate(self.betas):
            check_float(f"{p}.betas[{i}]", b, min=0.0, max=1.0)
            if b >= 1.0:
                raise ConfigError(f"{p}.betas[{i}] = {b!r}: must be a number in [0, 1)")
        self.betas = (float(self.betas[0]), float(self.betas[1]))
        check_float(f"{p}.eps", self.eps, min=0.0, min_exclusive=True)
        check_float(f"{p}.grad_clip", self.grad_clip, min=0.0)
        check_int(f"{p}.grad_accum", self.grad_accum, min=1)
        check_choice(f"{p}.precision", self.precision, PRECISIONS)
        for name in ("compile", "progress", "tensorboard", "ddp_find_unused_parameters"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ConfigError(f"{p}.{name} = {value!r}: must be true or false")
        check_int(f"{p}.eval_every", self.eval_every, min=0)
        check_int(f"{p}.log_every", self.log_every, min=0)
        check_int(f"{p}.save_every", self.save_every, min=0)
        check_int(f"{p}.keep_checkpoints", self.keep_checkpoints, min=0)
        check_int(f"{p}.seed", self.seed, min=0)
        if not isinstance(self.device, str) or not _DEVICE_RE.match(self.device):
            raise ConfigError(
                f"{p}.device = {self.device!r}: allowed values are 'auto', 'cpu', 'cuda', "
                "'cuda:N' (N an integer), 'mps'"
            )

    @property
    def warmup_steps(self) -> int:
        """Number of linear warm-up steps: ``round(warmup * steps)``."""
        return int(round(self.warmup * self.steps))

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (YAML/JSON friendly) of the public fields."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = list(v) if isinstance(v, tuple) else v
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """Build from a mapping; unknown keys are a :class:`ConfigError` naming the key."""
        names = [f.name for f in dataclasses.fields(cls)]
        for k in d:
            if k not in names:
                from energyformer.utils.validate import closest

                near = closest(str(k), names)
                hint = f" (did you mean {near!r}?)" if near else ""
                raise ConfigError(
                    f"train.{k}: unknown key; allowed keys are {', '.join(names)}{hint}"
                )
        return cls(**d)
