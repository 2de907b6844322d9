"""Optimisers by kind (``train.optimizer``) over parameter groups by role (``train.roles``).

``train.optimizer.kind`` picks one registered optimiser; its keys are checked against that kind::

    optimizer: {kind: adamw, betas: [0.9, 0.95], eps: 1.0e-9, weight_decay: 0.1}
    optimizer: {kind: adam, weight_decay: 0.0}                 # torch.optim.Adam
    optimizer: {kind: sgd, momentum: 0.9, nesterov: true}      # torch.optim.SGD, dampening 0

What ``weight_decay`` means depends on the kind, so each kind keeps its own key and default:

* ``adamw``: decoupled decay, ``w <- w - lr * wd * w`` beside the Adam step (Loshchilov & Hutter).
* ``adam``: torch.optim.Adam's coupled L2 penalty, ``g <- g + wd * w`` *before* the moments (so the
  decay is rescaled by the adaptive denominator). The default 0 gives plain, L2-free Adam.
* ``sgd``: the same coupled L2 penalty, ``g <- g + wd * w`` before momentum; default 0.

In every kind it applies only to groups whose role is decayed (``train.no_decay_roles``). Each role
is one parameter group carrying ``role``, ``names`` (parameter names, used to match optimiser state
on resume), ``weight_decay`` and ``lr_multiplier`` (``train.lr_multipliers``; the schedule sets
``lr = base_lr * factor * lr_multiplier``). A new kind registers a config class and a builder
``build(cfg, groups, lr, device) -> torch.optim.Optimizer`` with :data:`OPTIMIZERS`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import torch
from pydantic import Field, ValidationInfo, field_validator
from torch import nn

from energyformer.utils.config import KindConfig, Registry

from .roles import DEFAULT_NO_DECAY_ROLES, names_by_role, warn_undeclared

if TYPE_CHECKING:
    from .config import TrainConfig

OPTIMIZERS = Registry("optimizer")


def _check_betas(v: tuple[float, float]) -> tuple[float, float]:
    if not all(0.0 <= b < 1.0 for b in v):
        raise ValueError("must be a pair of numbers in [0, 1)")
    return v


def _fused(flag: bool | None, device: torch.device) -> dict[str, Any]:
    """``fused=None``: the fused kernel on CUDA, torch's default elsewhere."""
    if flag is None:
        flag = device.type == "cuda"
    return {"fused": True} if flag else {}


class _AdamBase(KindConfig):
    """Options shared by the Adam kinds."""

    kind: str
    betas: tuple[float, float] = (0.9, 0.999)
    """Adam betas (beta1, beta2), each in [0, 1)"""
    eps: float = Field(1e-8, gt=0)
    """Adam epsilon"""
    fused: bool | None = None
    """fused kernel (None: on CUDA only)"""

    @field_validator("betas")
    @classmethod
    def _betas(cls, v: tuple[float, float]) -> tuple[float, float]:
        return _check_betas(v)


class AdamWConfig(_AdamBase):
    """AdamW: Adam with decoupled weight decay (torch.optim.AdamW)."""

    kind: Literal["adamw"] = "adamw"
    betas: tuple[float, float] = (0.9, 0.95)
    """Adam betas (beta1, beta2), each in [0, 1)"""
    eps: float = Field(1e-9, gt=0)
    """Adam epsilon"""
    weight_decay: float = Field(0.1, ge=0)
    """decoupled decay w <- w - lr*wd*w, on roles not in no_decay_roles"""


class AdamConfig(_AdamBase):
    """Adam (torch.optim.Adam); weight_decay is the coupled L2 penalty g + wd*w (default 0: L2-free)."""

    kind: Literal["adam"] = "adam"
    weight_decay: float = Field(0.0, ge=0)
    """coupled L2 penalty g <- g + wd*w before the moments (0: plain Adam)"""


class SGDConfig(KindConfig):
    """SGD with optional (Nesterov) momentum, dampening 0 (torch.optim.SGD)."""

    kind: Literal["sgd"] = "sgd"
    momentum: float = Field(0.0, ge=0, lt=1)
    """momentum coefficient mu: b <- mu*b + g (0: plain SGD)"""
    nesterov: bool = False
    """Nesterov momentum: step along g + mu*b (needs momentum > 0)"""
    weight_decay: float = Field(0.0, ge=0)
    """coupled L2 penalty g <- g + wd*w before momentum"""
    fused: bool | None = None
    """fused kernel (None: on CUDA only)"""

    @field_validator("nesterov")
    @classmethod
    def _nesterov_needs_momentum(cls, v: bool, info: ValidationInfo) -> bool:
        if v and info.data.get("momentum", 0.0) == 0:
            raise ValueError("needs momentum > 0 (Nesterov SGD with dampening 0)")
        return v


@OPTIMIZERS.register("adamw", AdamWConfig)
def build_adamw(cfg: AdamWConfig, groups: list[dict], lr: float, device: torch.device
                ) -> torch.optim.Optimizer:
    """torch.optim.AdamW over the role groups (each group's weight_decay already set)."""
    return torch.optim.AdamW(groups, lr=lr, betas=cfg.betas, eps=cfg.eps, **_fused(cfg.fused, device))


@OPTIMIZERS.register("adam", AdamConfig)
def build_adam(cfg: AdamConfig, groups: list[dict], lr: float, device: torch.device
               ) -> torch.optim.Optimizer:
    """torch.optim.Adam over the role groups (coupled L2 = each group's weight_decay)."""
    return torch.optim.Adam(groups, lr=lr, betas=cfg.betas, eps=cfg.eps, **_fused(cfg.fused, device))


@OPTIMIZERS.register("sgd", SGDConfig)
def build_sgd(cfg: SGDConfig, groups: list[dict], lr: float, device: torch.device
              ) -> torch.optim.Optimizer:
    """torch.optim.SGD over the role groups, dampening 0."""
    return torch.optim.SGD(groups, lr=lr, momentum=cfg.momentum, dampening=0.0,
                           nesterov=cfg.nesterov, **_fused(cfg.fused, device))


def param_groups(model: nn.Module, weight_decay: float,
                 no_decay_roles: Iterable[str] = DEFAULT_NO_DECAY_ROLES,
                 lr_multipliers: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
    """One group per role that has trainable parameters, in :data:`~energyformer.train.roles.ROLES` order.

    ``weight_decay`` is ``weight_decay`` for roles not in ``no_decay_roles``, else 0. Shared
    parameters appear once (under their first name). See :mod:`energyformer.train.roles`.
    """
    no_decay = set(no_decay_roles)
    mult = dict(lr_multipliers or {})
    params = dict(model.named_parameters())
    return [{"params": [params[n] for n in names], "names": list(names), "role": role,
             "weight_decay": 0.0 if role in no_decay else float(weight_decay),
             "lr_multiplier": float(mult.get(role, 1.0))}
            for role, names in names_by_role(model).items()]


def build_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """The ``cfg.optimizer`` kind over :func:`param_groups` of ``model`` at peak ``cfg.lr``."""
    groups = param_groups(model, cfg.optimizer.weight_decay, cfg.no_decay_roles, cfg.lr_multipliers)
    if not groups:
        raise ValueError("the model has no trainable parameters")
    warn_undeclared(model, cfg.optimizer.weight_decay > 0 and "weight" not in cfg.no_decay_roles)
    return OPTIMIZERS.build(cfg.optimizer, groups, cfg.lr, device)
