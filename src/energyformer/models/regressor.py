"""Vector regressors with one MLP-like block: Plain / Gated / CEM-T (CEM seed Appendix E, Table 3).

Model (all variants): ``x (B, in_dim) -> Linear(in_dim, d) -> block on (B, 1, d) -> Linear(d, 1)``; the
latent state of the block has the model dimension ``d`` ("the latent state dimension is set equal to
the model dimension", Table 3 caption). Blocks, each with the residual included:

* ``plain``  pre-norm MLP ``x + W2 GELU(W1 RMSNorm(x) + b1) + b2``.
* ``gated``  pre-norm SwiGLU MLP ``x + Wd(SiLU(Wg n) ∘ Wu n)``, ``n = RMSNorm(x)`` (Eq. 6).
* ``cem``    :class:`energyformer.blocks.cem.CEMMLP` with T recursive steps (Eq. 15, 17; Algorithm 1).

Sizes (:data:`DEFAULT_SIZES`): ``d = 16``. The paper's counts say ``2 d h + rest ≈ 22.66K`` (CEM,
weights W, V) and ``3 d h + rest ≈ 33.94K`` (gated), i.e. ``d h ≈ 11.28K`` and a small rest;
``d = 16`` is the smallest power of two above the input dimension for which RMSNorm of the (biased)
embedding loses no information (an affine 10-dim subspace missing the origin meets each ray once),
giving ``h = 702`` (CEM), ``h = 703`` (gated) and ``h = 1023`` (plain): 22,673 / 33,953 / 33,984
parameters with RMSNorm weights.

FLOPs convention (:func:`analytic_flops`): matrix multiplications only, 2 FLOPs per multiply-add,
counted for one forward pass of a batch of :data:`FLOPS_BATCH` = 100 samples; norms, activations,
biases and the residual adds are not counted. This equals what ``torch.utils.flop_counter``'s
``FlopCounterMode`` reports (:func:`measured_flops`). Per sample, CEM-T costs ``2dh`` (gate γ, once)
``+ 4dh T`` (V and Vᵀ per step) ``+ 2·10·d + 2d`` (embedding, read-out); the paper's FLOPs
(6.73M for T = 1 and +4.35M per extra step) are consistent with a batch of ≈ 97–100 such samples
(:func:`fit_flops_batch` fits it).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import Tensor, nn

from ..utils.config import KindConfig
from .registry import MODELS

FLOPS_BATCH = 100
DEFAULT_DIM = 16
DEFAULT_SIZES = {"plain": 1023, "gated": 703, "cem": 702}


class RegressorConfig(KindConfig):
    """A vector regressor: embedding, one Plain / Gated / CEM block, linear read-out."""

    kind: Literal["regressor"] = "regressor"
    block: Literal["plain", "gated", "cem"] = "cem"
    """plain (GELU MLP), gated (SwiGLU) or cem (CEM MLP with T steps)"""
    dim: int = Field(DEFAULT_DIM, ge=1)
    """model (= latent state) dimension d"""
    hidden: int | None = Field(None, ge=1)
    """MLP hidden size (None: the Table 3 size of the block kind)"""
    steps: int = Field(1, ge=1)
    """CEM recursive steps T (cem only)"""
    in_dim: int = Field(10, ge=1)
    """input dimension (set by the task)"""
    step_size: float = Field(1.0, gt=0)
    """CEM step size eta"""
    precond: Literal["identity", "diagonal", "diag_low_rank"] = "identity"
    """CEM preconditioner"""
    learn_step_size: bool = False
    """CEM: learn eta (softplus-parametrised, initialised at step_size)"""
    norm_in_loop: bool = True
    """CEM: RMSNorm the iterate before each step (Algorithm 1); False: exact gradient steps on E(x | h)"""

    @model_validator(mode="after")
    def _steps(self) -> RegressorConfig:
        if self.block != "cem" and self.steps != 1:
            raise ValueError(f"model.steps = {self.steps}: only the 'cem' block recurses; use 1 for "
                             f"{self.block!r}")
        return self

    @property
    def h(self) -> int:
        return self.hidden if self.hidden is not None else DEFAULT_SIZES[self.block]


def _rmsnorm(dim: int) -> nn.Module:
    return nn.RMSNorm(dim, eps=1e-6)


class PlainMLPBlock(nn.Module):
    """Pre-norm residual MLP ``x + W2 GELU(W1 RMSNorm(x))`` (biases on both projections)."""

    kind = "mlp"

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm, self.up, self.down = _rmsnorm(dim), nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class GatedMLPBlock(nn.Module):
    """Pre-norm residual SwiGLU ``x + Wd(SiLU(Wg n) ∘ Wu n)``, n = RMSNorm(x) (seed Eq. 6, no biases)."""

    kind = "mlp"

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = _rmsnorm(dim)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        n = self.norm(x)
        return x + self.down(F.silu(self.gate(n)) * self.up(n))


def make_block(cfg: RegressorConfig) -> nn.Module:
    """The block for ``cfg``: Plain, Gated, or the library's CEM MLP with ``cfg.steps`` steps (Eq. 17)."""
    if cfg.block == "plain":
        return PlainMLPBlock(cfg.dim, cfg.h)
    if cfg.block == "gated":
        return GatedMLPBlock(cfg.dim, cfg.h)
    from ..blocks.cem import CEMMLP, CEMMLPConfig

    return CEMMLP(cfg.dim, CEMMLPConfig(steps=cfg.steps, hidden=cfg.h, step_size=cfg.step_size,
                                        precond=cfg.precond, learn_step_size=cfg.learn_step_size,
                                        norm_in_loop=cfg.norm_in_loop))


@MODELS.register("regressor", RegressorConfig)
class GPRegressor(nn.Module):
    """``Linear(in_dim, d) -> block (one token, (B, 1, d)) -> Linear(d, 1)``; forward (B, in_dim) -> (B,)."""

    def __init__(self, cfg: RegressorConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Linear(cfg.in_dim, cfg.dim)
        self.block = make_block(cfg)
        self.readout = nn.Linear(cfg.dim, 1)

    def forward(self, x: Tensor) -> Tensor:
        z = self.embed(x)[:, None, :]  # (B, 1, d): one token per sample
        return self.readout(self.block(z))[:, 0, 0]  # (B,)


def analytic_flops(cfg: RegressorConfig, batch: int = FLOPS_BATCH) -> int:
    """Matmul FLOPs (2 per multiply-add) of one forward pass on ``batch`` samples (module docstring)."""
    d, h = cfg.dim, cfg.h
    io = 2 * cfg.in_dim * d + 2 * d  # embedding + read-out
    if cfg.block == "plain":
        core = 4 * d * h
    elif cfg.block == "gated":
        core = 6 * d * h
    else:
        core = 2 * d * h + 4 * d * h * cfg.steps  # gamma = W h once; V, V^T per step
    return batch * (core + io)


def measured_flops(model: nn.Module, batch: int = FLOPS_BATCH) -> int:
    """FLOPs of ``model`` on a random batch as counted by ``torch.utils.flop_counter.FlopCounterMode``."""
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.randn(batch, model.cfg.in_dim)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(x)
    return int(counter.get_total_flops())


def fit_flops_batch(per_sample: dict[str, float], paper_flops: dict[str, float]) -> float:
    """Batch size B minimising the relative squared error of ``B * per_sample[m]`` vs ``paper_flops[m]``."""
    names = [m for m in per_sample if m in paper_flops]
    if not names:
        raise ValueError("fit_flops_batch: no model appears in both per_sample and paper_flops")
    num = sum(per_sample[m] / paper_flops[m] for m in names)
    den = sum((per_sample[m] / paper_flops[m]) ** 2 for m in names)
    return num / den
