"""Trainer configuration: one typed config, validated when it is built (pydantic, see utils.config).

A bad value fails with one line that names the key, the value and what is allowed, e.g.::

    ConfigError: train.precision = 'fp16': allowed values are 'fp32' or 'bf16' (did you mean 'fp32'?)
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from energyformer.utils.config import ConfigModel, from_dict

PRECISIONS = ("fp32", "bf16")
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda|cuda:\d+|mps)$")


class TrainConfig(ConfigModel):
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

    steps: int = Field(1000, ge=1)
    """number of optimiser steps"""
    lr: float = Field(2e-3, gt=0)
    """peak learning rate"""
    final_lr_factor: float = Field(0.1, ge=0, le=1)
    """learning rate at the last step, as a fraction of the peak"""
    warmup: float = Field(0.05, ge=0, le=1)
    """fraction of the steps spent in linear warm-up"""
    weight_decay: float = Field(0.1, ge=0)
    """decoupled weight decay on weight matrices"""
    betas: tuple[float, float] = (0.9, 0.95)
    """Adam betas, each in [0, 1)"""
    eps: float = Field(1e-9, gt=0)
    """Adam epsilon"""
    grad_clip: float = Field(1.0, ge=0)
    """clip the global gradient norm to this (0: no clipping)"""
    grad_accum: int = Field(1, ge=1)
    """micro-batches per optimiser step"""
    precision: Literal["fp32", "bf16"] = "fp32"
    """fp32, or bf16 autocast"""
    compile: bool = False
    """torch.compile the model"""
    eval_every: int = Field(500, ge=0)
    """evaluate every N steps (0: only at the end)"""
    log_every: int = Field(10, ge=0)
    """log every N steps (0: only at the end)"""
    save_every: int = Field(1000, ge=0)
    """checkpoint every N steps (0: only at the end)"""
    keep_checkpoints: int = Field(2, ge=0)
    """checkpoints kept (0: all)"""
    seed: int = Field(0, ge=0)
    """seed of every random stream"""
    device: str = "auto"
    """auto | cpu | cuda | cuda:N | mps"""
    progress: bool = True
    """show a progress bar"""
    tensorboard: bool = True
    """write TensorBoard event files"""
    ddp_find_unused_parameters: bool = False
    """DDP option for models with parameters unused in some steps"""

    @field_validator("betas")
    @classmethod
    def _betas(cls, v: tuple[float, float]) -> tuple[float, float]:
        for b in v:
            if not 0.0 <= b < 1.0:
                raise ValueError("must be a pair of numbers in [0, 1)")
        return v

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not _DEVICE_RE.match(v):
            raise ValueError("allowed values are 'auto', 'cpu', 'cuda', 'cuda:N' (N an integer), 'mps'")
        return v

    @property
    def warmup_steps(self) -> int:
        """Number of linear warm-up steps: ``round(warmup * steps)``."""
        return int(round(self.warmup * self.steps))

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (YAML/JSON friendly)."""
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """Build from a mapping; unknown keys and bad values are one-line ConfigErrors."""
        return from_dict(cls, d)
