"""Adapters: modules that give a block's energy different weights per iteration (DESIGN.md "no seams":
LoRA as a real module, litgpt's ``LoRALinear``; Hyper-SET App. G.2 depth-wise LoRA).

An adapter is called as ``adapter(energy, iteration) -> energy``: it returns a *view* of the energy
(a shallow copy sharing every parameter and submodule) whose projection carries this iteration's
low-rank delta, ``energy.delta`` (energies that support it add it to their projection weight, e.g.
:mod:`energyformer.energies.hyperspherical`). The shared energy module itself is never modified, so
nothing has to be reset after a call, and the same block can be evaluated at any iteration
(:class:`~energyformer.core.block.EnergyBlock` calls its adapter with ``ctx.iteration``).
"""

from __future__ import annotations

import copy
from typing import Literal

import torch
from pydantic import Field, model_validator
from torch import Tensor, nn

from ..utils.config import ConfigModel
from ..utils.validate import ConfigError


class LoRAConfig(ConfigModel):
    """Depth-wise LoRA (App. G.2): one low-rank delta of the shared projection per iteration."""

    rank: int = Field(0, ge=0)
    """r; 0 = off"""
    alpha: float | None = Field(None, gt=0)
    """scale numerator: ΔW = (alpha/r) B A (None: 4r, the paper's scaling factor 4)"""
    iterations: int | None = Field(None, ge=1)
    """number of per-iteration adapters (required when rank > 0; >= the training iterations)"""
    init_std: float = Field(0.02, gt=0)
    """std of the Gaussian init of A and B (paper and code: 0.02)"""
    beyond: Literal["error", "last", "none"] = "error"
    """iterations past the last adapter: error, reuse the last adapter, or no adapter"""

    @model_validator(mode="after")
    def _iterations_with_rank(self) -> LoRAConfig:
        """rank > 0 needs iterations, refused when the config loads (it was refused only when the model was built,
        after ``energyformer config`` had shown the config as valid)."""
        if self.rank > 0 and self.iterations is None:
            raise ValueError(f"iterations is not set: give the number of per-iteration adapters (at least the "
                             f"training iterations) when rank = {self.rank}; allowed: an integer >= 1, or rank: 0")
        return self


class DepthLoRA(nn.Module):
    """ΔW_t = (alpha/r) B_t A_t, t < iterations (App. G.2); ``delta(t)`` -> (d_out, d_in) or None;
    ``adapter(energy, t)`` -> the energy with ΔW_t on its projection (module docstring)."""

    def __init__(self, d_out: int, d_in: int, cfg: LoRAConfig, name: str = "lora"):
        super().__init__()
        if cfg.iterations is None:
            raise ConfigError(f"{name}.iterations is not set: give the number of per-iteration adapters "
                              f"(at least the training iterations) when {name}.rank = {cfg.rank}")
        r, n = cfg.rank, cfg.iterations
        self.rank, self.iterations, self.beyond, self.name = r, n, cfg.beyond, name
        self.scale = (cfg.alpha if cfg.alpha is not None else 4.0 * r) / r
        self.A = nn.Parameter(torch.randn(n, r, d_in) * cfg.init_std)
        self.B = nn.Parameter(torch.randn(n, d_out, r) * cfg.init_std)

    def delta(self, t: int) -> Tensor | None:
        if t >= self.iterations:
            if self.beyond == "none":
                return None
            if self.beyond == "error":
                key = f"model.block.{self.name}"
                raise ConfigError(f"{key}.iterations = {self.iterations}: iteration {t + 1} has no adapter and "
                                  f"{key}.beyond = 'error': run at most {self.iterations} iterations, or train "
                                  f"with {key}.beyond = 'last' (reuse the last adapter) or 'none' (none past them)")
            t = self.iterations - 1
        return self.scale * (self.B[t] @ self.A[t])

    def extra_repr(self) -> str:
        return f"rank={self.rank}, iterations={self.iterations}, scale={self.scale:g}, beyond={self.beyond!r}"

    def forward(self, energy: nn.Module, iteration: int) -> nn.Module:
        delta = self.delta(iteration)
        if delta is None:
            return energy
        view = copy.copy(energy)  # shares parameters, buffers and submodules; own attribute dict
        view.delta = delta
        return view
