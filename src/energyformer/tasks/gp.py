"""Gaussian-process regression task (CEM seed Appendix E, Table 3): MSE training, train/test RMSE.

One run = one kernel, one seeded data set and one regressor (``model: {kind: regressor, ...}``), trained
by the library's one :class:`~energyformer.train.Trainer`. ``energyformer reproduce cem-gp`` runs
the grid of kernels x models x repetitions and writes the table.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from ..core.precision import at_least_float32
from ..data.gp import GPDataset, KernelConfig, make_gp_dataset
from ..utils.config import KindConfig, replace
from ..utils.fields import Seed
from .base import Task, TaskConfig, register_task


class GPTaskConfig(TaskConfig):
    """Regression of one GP draw in 10-d (seeded data; kernel options in task.kernel)."""

    kind: Literal["gp"] = "gp"
    kernel: KernelConfig = Field(default_factory=KernelConfig)
    """kernel family and hyper-parameters"""
    n_train: int = Field(4000, ge=1)
    """training points"""
    n_test: int = Field(1000, ge=1)
    """test points"""
    dim: int = Field(10, ge=1)
    """input dimension"""
    noise_std: float = Field(0.0, ge=0)
    """observation noise added to the GP draw"""
    data_seed: Seed = 0
    """seed of the inputs and the GP draw (the model's seed is train.seed)"""
    batch_size: int = Field(100, ge=1)
    """mini-batch size; each epoch is one random permutation of the training set"""


@functools.lru_cache(maxsize=4)
def _dataset(kernel_json: str, n_train: int, n_test: int, seed: int, dim: int, noise: float) -> GPDataset:
    kernel = KernelConfig.model_validate_json(kernel_json)
    return make_gp_dataset(kernel, n_train, n_test, seed=seed, dim=dim, noise_std=noise)


class GPBatcher:
    """Epochs of random permutations of the training set, ``ceil(n / batch)`` batches each.

    Resumes exactly: the state is the generator state, the current permutation and the position.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int):
        self.x, self.y = x, y
        self.n = len(x)
        if not 1 <= batch_size <= self.n:
            raise ValueError(f"GPBatcher: batch_size = {batch_size}: allowed 1..{self.n} (the training points)")
        self.bs = batch_size
        self.per_epoch = math.ceil(self.n / self.bs)
        self.gen = torch.Generator().manual_seed(int(seed))
        self.perm: torch.Tensor | None = None
        self.i = self.per_epoch  # start a new epoch at the first batch
        self.tokens_per_batch = self.bs

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.i >= self.per_epoch:
            self.perm = torch.randperm(self.n, generator=self.gen) if self.bs < self.n else None
            self.i = 0
        idx = slice(None) if self.perm is None else self.perm[self.i * self.bs:(self.i + 1) * self.bs]
        self.i += 1
        return self.x[idx], self.y[idx]

    def state_dict(self) -> dict[str, Any]:
        return {"gen": self.gen.get_state(), "perm": self.perm, "i": self.i}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.gen.set_state(state["gen"])
        self.perm, self.i = state["perm"], int(state["i"])


@torch.no_grad()
def rmse(model: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk: int = 4096, **options: Any) -> float:
    """Root-mean-square error of ``model(x, **options)`` against ``y`` (chunked; data moved to the model; the error
    in the prediction's dtype, at least float32: a float64 model's is not rounded to float32). The chunks' sums
    stay on the device and are read in one transfer at the end, then added in Python in chunk order: the same
    number as reading each chunk's sum (a read per chunk kept the host from queueing the next chunk)."""
    dev = next(model.parameters()).device
    sums = [(at_least_float32(model(x[i:i + chunk].to(dev), **options)) - y[i:i + chunk].to(dev)).pow(2).sum()
            for i in range(0, len(x), chunk)]
    se = sum(torch.stack(sums).tolist()) if sums else 0
    return math.sqrt(se / len(x))


@register_task("gp", GPTaskConfig)
class GPTask(Task):
    """GP regression: MSE loss; train and test RMSE on the data's own scale (Table 3 columns)."""

    model_kinds = ("regressor",)
    main_metric = "test_rmse"
    has_splits = False
    split_note = "train and test RMSE together"

    def __init__(self, cfg: GPTaskConfig, *, seed: int = 0, rank: int = 0):
        super().__init__(cfg, seed=seed, rank=rank)
        self.data = _dataset(cfg.kernel.model_dump_json(), cfg.n_train, cfg.n_test, cfg.data_seed, cfg.dim,
                             cfg.noise_std)
        self.train_data = GPBatcher(self.data.x_train, self.data.y_train, cfg.batch_size, seed + 1000 * rank)

    @classmethod
    def check_config(cls, task_cfg: GPTaskConfig, model_cfg: KindConfig) -> None:
        if task_cfg.batch_size > task_cfg.n_train:  # (it was cut to n_train without a word)
            raise ValueError(f"task.batch_size = {task_cfg.batch_size} exceeds task.n_train = {task_cfg.n_train}: "
                             f"a batch draws distinct training points; at most {task_cfg.n_train} (full batch)")

    def resolve_model_config(self, model_cfg: KindConfig) -> KindConfig:
        return model_cfg if model_cfg.in_dim == self.cfg.dim else replace(model_cfg, in_dim=self.cfg.dim)

    def build_model(self, model_cfg: KindConfig) -> nn.Module:
        from ..models.regressor import GPRegressor

        return GPRegressor(model_cfg)

    def loss(self, model: nn.Module, batch: tuple) -> tuple[torch.Tensor, dict[str, float]]:
        x, y = batch
        return F.mse_loss(model(x), y), {}

    def evaluate(self, model: nn.Module, split: str = "validation", **options: Any) -> dict[str, float]:
        """Train and test RMSE (``split`` is ignored: both are always reported); ``options``: the model's call
        options (``steps``)."""
        d = self.data
        return {"train_rmse": rmse(model, d.x_train, d.y_train, **options),
                "test_rmse": rmse(model, d.x_test, d.y_test, **options)}

    def eval_from_args(self, model, args, forward_options):
        what = f"GP {self.cfg.kernel.describe()} (data seed {self.cfg.data_seed})"
        return what, self.evaluate(model, **forward_options)
