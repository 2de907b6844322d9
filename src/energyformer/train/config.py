"""Trainer configuration: one typed config, validated when it is built (pydantic, see utils.config).

Layout of the ``train:`` section (every key optional)::

    train:
      steps: 1000
      lr: 2.0e-3                                   # peak learning rate
      optimizer: {kind: adamw, betas: [0.9, 0.95], eps: 1.0e-9, weight_decay: 0.1}
      schedule: {kind: warmup_cosine, warmup: 0.05, final_lr_factor: 0.1}
      no_decay_roles: [embedding, norm, bias, precond, diagonal, position, step_size, other_no_decay]
      lr_multipliers: {step_size: 0.1}             # optional, per parameter role
      grad_clip: 1.0
      ...

A bad value fails with one line that names the key, the value and what is allowed, e.g.::

    ConfigError: train.precision = 'fp16': allowed values are 'fp32' or 'bf16' (did you mean 'fp32'?)
    ConfigError: train.optimizer.kind = 'lion': unknown optimizer kind 'lion'; registered: adamw, adam, sgd
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from energyformer.utils.config import ConfigModel, from_dict
from energyformer.utils.fields import Seed
from energyformer.utils.validate import closest

from .compiling import COMPILE_MODES
from .device import DEVICE_ALLOWED, DEVICE_RE
from .optim import OPTIMIZERS
from .roles import DEFAULT_NO_DECAY_ROLES, ROLES, Role
from .schedule import SCHEDULES

PRECISIONS = ("fp32", "bf16")

# keys of the layout before optimiser/schedule kinds, and where they went
LEGACY_KEYS = {"betas": "optimizer.betas", "eps": "optimizer.eps",
               "weight_decay": "optimizer.weight_decay", "warmup": "schedule.warmup",
               "final_lr_factor": "schedule.final_lr_factor"}


def _float32_scalar(v: float) -> float:
    if v > 3.0e38:  # the optimisers apply lr as a float32 scalar: above 3.4e38 an internal overflow error
        raise ValueError("must be at most 3e38 (it is applied as a float32 scalar)")
    return v


class TrainConfig(ConfigModel):
    """Everything the trainer needs to know; nothing about the model, the energy or the data.

    Optimiser: ``optimizer.kind`` (adamw | adam | sgd, see :mod:`energyformer.train.optim`) over one
    parameter group per role (:mod:`energyformer.train.roles`); ``optimizer.weight_decay`` applies
    to roles not in ``no_decay_roles`` (by default only ``weight``: matrices and unrecognised
    parameters). ``lr_multipliers`` scales the learning rate of whole roles.

    Learning rate: ``lr`` times the ``schedule`` kind's factor (warmup_cosine | warmup_linear |
    constant, see :mod:`energyformer.train.schedule`).

    ``eval_every``, ``log_every`` and ``save_every`` count optimiser steps; ``0`` means "only at the
    end" (logging always happens at least at the last step). ``keep_checkpoints = 0`` keeps all.
    """

    steps: int = Field(1000, ge=1)
    """number of optimiser steps"""
    lr: Annotated[float, AfterValidator(_float32_scalar)] = Field(2e-3, gt=0)
    """peak learning rate (at most 3e38: the optimisers apply it as a float32 scalar, whose range ends at 3.4e38)"""
    optimizer: OPTIMIZERS.type("adamw") = OPTIMIZERS.field("adamw")
    """optimiser kind and its keys"""
    schedule: SCHEDULES.type("warmup_cosine") = SCHEDULES.field("warmup_cosine")
    """learning-rate schedule kind and its keys"""
    no_decay_roles: list[Role] = Field(default_factory=lambda: list(DEFAULT_NO_DECAY_ROLES))
    """parameter roles exempt from weight decay"""
    lr_multipliers: dict[str, float] = Field(default_factory=dict)
    """learning-rate factor per parameter role (default 1)"""
    grad_clip: float = Field(1.0, ge=0)
    """clip the global gradient norm to this (0: no clipping)"""
    grad_accum: int = Field(1, ge=1)
    """micro-batches per optimiser step (weighed by the items each one's loss averages over where that varies:
    Sudoku's blank cells, masked codes; so the step is that of the whole batch)"""
    precision: Literal["fp32", "bf16"] = "fp32"
    """fp32, or bf16 autocast"""
    compile: bool | str = False
    """false | true (= 'default') | 'default' | 'reduce-overhead' (+ CUDA graphs) | 'max-autotune' |
    'max-autotune-no-cudagraphs': torch.compile the model in that mode (:mod:`energyformer.train.compiling`)"""
    eval_every: int = Field(500, ge=0)
    """evaluate every N steps (0: only at the end)"""
    log_every: int = Field(10, ge=0)
    """log every N steps (0: only at the end)"""
    save_every: int = Field(1000, ge=0)
    """checkpoint every N steps (0: only at the end)"""
    keep_checkpoints: int = Field(2, ge=0)
    """checkpoints kept (0: all)"""
    seed: Seed = 0
    """seed of every random stream (0..2^63 − 1)"""
    device: str = "auto"
    """auto | cpu | cuda | cuda:N | mps"""
    progress: bool = True
    """show a progress bar"""
    tensorboard: bool = True
    """write TensorBoard event files"""
    ddp_find_unused_parameters: bool = False
    """DDP option for models with parameters unused in some steps"""

    @field_validator("compile", mode="before")
    @classmethod
    def _compile(cls, v: Any) -> bool | str:
        if isinstance(v, bool) or v in COMPILE_MODES:
            return v
        near = closest(str(v), COMPILE_MODES) if isinstance(v, str) else None
        raise ValueError("allowed values are false, true or a torch.compile mode: "
                         + ", ".join(map(repr, COMPILE_MODES)) + (f" (did you mean {near!r}?)" if near else ""))

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not DEVICE_RE.match(v):
            raise ValueError(DEVICE_ALLOWED)
        return v

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for old, new in LEGACY_KEYS.items():
                if old in data:
                    raise ValueError(f"key {old!r} moved to '{new}' (the optimiser and schedule "
                                     "kinds decide which keys they take)")
        return data

    @field_validator("no_decay_roles")
    @classmethod
    def _unique_roles(cls, v: list[str]) -> list[str]:
        dup = sorted({r for r in v if v.count(r) > 1})
        if dup:
            raise ValueError(f"lists {', '.join(map(repr, dup))} more than once")
        return v

    @field_validator("lr_multipliers")
    @classmethod
    def _positive_multipliers(cls, v: dict[str, float]) -> dict[str, float]:
        for role, m in v.items():
            if role not in ROLES:
                near = closest(role, ROLES)
                raise ValueError(f"{role!r} is not a parameter role"
                                 + (f" (did you mean {near!r}?)" if near else "")
                                 + f"; roles: {', '.join(ROLES)}")
            if not m >= 0:
                raise ValueError(f"multiplier of role {role!r} is {m!r}; must be >= 0")
        return v

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (YAML/JSON friendly)."""
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """Build from a mapping; unknown keys and bad values are one-line ConfigErrors."""
        return from_dict(cls, d)
