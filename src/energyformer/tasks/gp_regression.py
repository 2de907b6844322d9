"""GP regression with Plain / Gated / CEM-T{1,2,4,8} MLP regressors (CEM seed Appendix E, Table 3).

Model (all variants): ``x (B, 10) -> Linear(10, d) -> block on (B, 1, d) -> Linear(d, 1)``; the
latent state of the block has the model dimension ``d`` ("the latent state dimension is set equal to
the model dimension", Table 3 caption). Blocks, each with the residual included:

* ``plain``  pre-norm MLP ``x + W2 GELU(W1 RMSNorm(x) + b1) + b2``.
* ``gated``  pre-norm SwiGLU MLP ``x + Wd(SiLU(Wg n) ∘ Wu n)``, ``n = RMSNorm(x)`` (Eq. 6).
* ``cem``    :class:`energyformer.blocks.cem.CEMMLP` with T recursive steps (Eq. 15, 17; Algorithm 1).

Sizes (:data:`DEFAULT_SIZES`): ``d = 16``. The paper's counts say ``2 d h + rest ≈ 22.66K`` (CEM,
weights W, V) and ``3 d h + rest ≈ 33.94K`` (gated), i.e. ``d h ≈ 11.28K`` and a small rest;
``d = 16`` is the smallest power of two above the input dimension for which RMSNorm of the (biased)
embedding loses no information (an affine 10-dim subspace missing the origin meets each ray once),
giving ``h = 702`` (CEM), ``h = 703`` (gated) and ``h = 1023`` (plain). :func:`count_params` prints
the exact counts (22,673 / 33,953 / 33,984 with RMSNorm weights).

FLOPs convention (:func:`analytic_flops`): matrix multiplications only, 2 FLOPs per multiply-add,
counted for one forward pass of a batch of :data:`FLOPS_BATCH` = 100 samples; norms, activations,
biases and the residual adds are not counted. This equals what ``torch.utils.flop_counter``'s
``FlopCounterMode`` reports (:func:`measured_flops`). Per sample, CEM-T costs ``2dh`` (gate γ, once)
``+ 4dh T`` (V and Vᵀ per step) ``+ 2·10·d + 2d`` (embedding, read-out); the paper's FLOPs
(6.73M for T = 1 and +4.35M per extra step) are consistent with a batch of ≈ 97–100 such samples
(:func:`fit_flops_batch` fits it).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from energyformer.train.schedule import lr_factor
from energyformer.utils.validate import check_choice, check_float, check_int

BLOCKS = ("plain", "gated", "cem")
FLOPS_BATCH = 100
DEFAULT_DIM = 16
DEFAULT_SIZES = {"plain": 1023, "gated": 703, "cem": 702}


@dataclass
class RegressorConfig:
    """One regressor: block kind, model dim ``dim``, MLP hidden size, CEM steps / step size / preconditioner."""

    block: str = "cem"
    dim: int = DEFAULT_DIM
    hidden: int | None = None  # None -> DEFAULT_SIZES[block]
    steps: int = 1
    in_dim: int = 10
    step_size: float = 1.0
    precond: str = "identity"

    def __post_init__(self) -> None:
        check_choice("regressor.block", self.block, BLOCKS)
        check_int("regressor.dim", self.dim, min=1)
        if self.hidden is not None:
            check_int("regressor.hidden", self.hidden, min=1)
        check_int("regressor.steps", self.steps, min=1)
        if self.block != "cem" and self.steps != 1:
            raise ValueError(f"regressor.steps = {self.steps}: only the 'cem' block recurses; use 1 for {self.block!r}")
        check_int("regressor.in_dim", self.in_dim, min=1)
        check_float("regressor.step_size", self.step_size, min=0.0, min_exclusive=True)
        check_choice("regressor.precond", self.precond, ("identity", "diagonal", "diag_low_rank"))

    @property
    def h(self) -> int:
        return self.hidden if self.hidden is not None else DEFAULT_SIZES[self.block]


#: The six rows of Table 3, in order.
MODEL_SPECS: dict[str, RegressorConfig] = {
    "Plain": RegressorConfig(block="plain"),
    "Gated": RegressorConfig(block="gated"),
    **{f"CEM-T{t}": RegressorConfig(block="cem", steps=t) for t in (1, 2, 4, 8)},
}


def _rmsnorm(dim: int) -> nn.Module:
    return nn.RMSNorm(dim, eps=1e-6)


class PlainMLPBlock(nn.Module):
    """Pre-norm residual MLP ``x + W2 GELU(W1 RMSNorm(x))`` (biases on both projections)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm, self.up, self.down = _rmsnorm(dim), nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class GatedMLPBlock(nn.Module):
    """Pre-norm residual SwiGLU ``x + Wd(SiLU(Wg n) ∘ Wu n)``, n = RMSNorm(x) (seed Eq. 6, no biases)."""

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
    from energyformer.blocks.cem import CEMMLP, CEMMLPConfig

    return CEMMLP(cfg.dim, CEMMLPConfig(steps=cfg.steps, hidden=cfg.h, step_size=cfg.step_size,
                                        precond=cfg.precond))


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


def count_params(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


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


@dataclass
class TrainConfig:
    """Adam with linear warm-up and a cosine decay to ``final_lr_frac * lr`` over a fixed number of epochs."""

    epochs: int = 300
    batch_size: int | None = None  # None -> full batch
    lr: float = 2e-3
    weight_decay: float = 0.0
    warmup_frac: float = 0.05
    final_lr_frac: float = 0.1
    grad_clip: float | None = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        check_int("train.epochs", self.epochs, min=1)
        if self.batch_size is not None:
            check_int("train.batch_size", self.batch_size, min=1)
        check_float("train.lr", self.lr, min=0.0, min_exclusive=True)
        check_float("train.weight_decay", self.weight_decay, min=0.0)
        check_float("train.warmup_frac", self.warmup_frac, min=0.0, max=1.0)
        check_float("train.final_lr_frac", self.final_lr_frac, min=0.0, max=1.0)
        if self.grad_clip is not None:
            check_float("train.grad_clip", self.grad_clip, min=0.0, min_exclusive=True)


@dataclass
class TrainResult:
    """Final train / test RMSE (on the data's own scale), wall time and the per-epoch train loss curve."""

    train_rmse: float
    test_rmse: float
    seconds: float
    n_params: int
    curve: list[float] = field(default_factory=list)


@torch.no_grad()
def rmse(model: nn.Module, x: Tensor, y: Tensor, chunk: int = 4096) -> float:
    """Root-mean-square error of ``model(x)`` against ``y`` (evaluation mode, chunked)."""
    was = model.training
    model.eval()
    se = sum(float((model(x[i:i + chunk]) - y[i:i + chunk]).pow(2).sum()) for i in range(0, len(x), chunk))
    model.train(was)
    return math.sqrt(se / len(x))


def train_regressor(model: nn.Module, data, cfg: TrainConfig) -> TrainResult:
    """Fit ``model`` to ``data.x_train, data.y_train`` with MSE; return train/test RMSE (Table 3 columns)."""
    gen = torch.Generator().manual_seed(cfg.seed)
    xtr, ytr = data.x_train, data.y_train
    n = len(xtr)
    bs = n if cfg.batch_size is None else min(cfg.batch_size, n)
    per_epoch = math.ceil(n / bs)
    total = cfg.epochs * per_epoch
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, total, int(round(cfg.warmup_frac * total)), cfg.final_lr_frac))
    curve: list[float] = []
    t0 = time.perf_counter()
    model.train()
    for _ in range(cfg.epochs):
        perm = torch.randperm(n, generator=gen) if bs < n else None
        ep_loss = 0.0
        for i in range(per_epoch):
            idx = slice(None) if perm is None else perm[i * bs:(i + 1) * bs]
            loss = F.mse_loss(model(xtr[idx]), ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            sched.step()
            ep_loss += float(loss.detach()) / per_epoch
        curve.append(ep_loss)
    seconds = time.perf_counter() - t0
    return TrainResult(rmse(model, xtr, ytr), rmse(model, data.x_test, data.y_test), seconds,
                       count_params(model), curve)


def build_regressor(cfg: RegressorConfig, seed: int) -> GPRegressor:
    """A freshly initialised regressor; ``seed`` fixes the initial weights."""
    torch.manual_seed(seed)
    return GPRegressor(cfg)
