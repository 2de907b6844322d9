"""Image denoising with bare self-attention (seed 004 "Results on real data", "transient memories";
reconstructed.md §2.1 "Denoising", [REC]: the protocol was not recovered).

Images of an offline set (``digits`` by default; ``mnist`` / ``fashion_mnist`` once ``make data`` has
prepared them) become unit-norm tokens by the spherical pixel embedding
(:class:`~energyformer.data.spherical.SphericalPatchEmbedding`). Bare self-attention is trained on the
pseudo-likelihood of the clean training images (closed-form gradient, no backpropagation through the
dynamics; default normaliser: von Mises–Fisher, ``objective: vmf``).

Evaluation corrupts images (a fraction ρ of channel values replaced by uniform random values, or
Gaussian noise on the angles), runs the dynamics for ``eval_steps`` steps and tracks, at every step t:

* ``overlap``: ``q(t) = (1/N) Σ_i x_i(t) · x_i^clean`` with the clean image;
* ``nearest``: the largest overlap with any of the (first ``nearest_train``) training images: does the
  state fall onto a stored memory?
* ``mse``: decoded-pixel mean squared error against the clean image (pixels on the [0, 1] scale).

The "transient memory" signature is an overlap that rises to a peak at a finite t and then decays;
``peak_overlap``/``peak_step`` report it, ``gain`` = peak − q(0). Metrics are given at
``report_steps``; :meth:`DenoiseTask.curves` returns the whole curves (the reproduction plots them).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field, model_validator
from torch import nn

from ..core.precision import at_least_float32
from ..data.batching import EpochBatcher, seeded_generator
from ..data.images import ImageDataConfig, ImageDataset
from ..data.spherical import SphericalPatchEmbedding, corrupt, overlap
from ..models import MODELS
from ..train.callbacks import ProjectionCallback
from ..train.checkpoint import unwrap_model
from ..utils.config import KindConfig, replace
from ..utils.fields import Seed
from ..utils.validate import ConfigError
from .base import Task, TaskConfig, check_batch_size, register_task


class DenoiseConfig(TaskConfig):
    """Denoising of spherically embedded images by bare self-attention (overlap over dynamics steps)."""

    kind: Literal["denoise"] = "denoise"
    images: ImageDataConfig = Field(default_factory=ImageDataConfig)
    """image set and split (digits by default)"""
    patch: int = Field(2, ge=1)
    """patch side p: N = HW/p² tokens of d = 2·C·p²"""
    mixing: Literal["orthogonal", "none"] = "orthogonal"
    """fixed mixing matrix F: seeded random orthogonal ([REC]) or none"""
    mixing_seed: Seed = 0
    """seed of F"""
    n_train: int | None = Field(None, ge=1)
    """training images used (None: the whole train split)"""
    batch_size: int = Field(64, ge=1)
    """images per training batch"""
    noise: Literal["replace", "gaussian"] = "replace"
    """corruption: replace a fraction of channel values, or Gaussian noise on the angles"""
    noise_level: float = Field(0.3, ge=0)
    """fraction replaced (replace) or angle std in radians (gaussian)"""
    eval_images: int = Field(256, ge=1)
    """images evaluated per split"""
    eval_steps: int = Field(20, ge=0)
    """dynamics steps tracked"""
    report_steps: list[int] = Field(default_factory=lambda: [0, 1, 2, 5, 10, 20])
    """steps at which metrics are reported (the curves hold every step)"""
    nearest_train: int | None = Field(5000, ge=1)
    """training images searched for the nearest memory (None: all)"""
    eval_seed: Seed = 0
    """seed of the corruption"""

    @model_validator(mode="after")
    def _replaced_fraction(self) -> DenoiseConfig:
        if self.noise == "replace" and self.noise_level > 1:
            raise ValueError(f"task.noise_level = {self.noise_level!r}: with noise 'replace' it is the fraction of "
                             "channel values replaced, in [0, 1]")
        return self


@register_task("denoise", DenoiseConfig)
class DenoiseTask(Task):
    """Denoising: overlap with the clean image and the nearest training image over steps, decoded MSE."""

    model_kinds = ("bare_sa",)
    main_metric = "peak_overlap"
    lower_is_better = False

    def __init__(self, cfg: DenoiseConfig, *, seed: int = 0, rank: int = 0):
        super().__init__(cfg, seed=seed, rank=rank)
        self.images: ImageDataset = cfg.images.load()
        C, H, W = self.images.image_shape
        if H % cfg.patch or W % cfg.patch:
            raise ConfigError(f"task.patch = {cfg.patch}: must divide the {cfg.images.name} image size {H}x{W}")
        bad = [s for s in cfg.report_steps if not 0 <= s <= cfg.eval_steps]
        if bad:
            raise ConfigError(f"task.report_steps = {cfg.report_steps}: {bad} outside [0, eval_steps = "
                              f"{cfg.eval_steps}]")
        self.embedding = SphericalPatchEmbedding(C, H, W, cfg.patch, mixing=cfg.mixing, seed=cfg.mixing_seed)
        train = self.images.train.images
        self.train_images = train if cfg.n_train is None else train[: cfg.n_train]
        emb = self.embedding

        def transform(batch, gen):
            return (emb.encode(batch[0]),)

        check_batch_size(cfg.batch_size, len(self.train_images), "training images", " (at most that many per batch)")
        self.train_data = EpochBatcher((self.train_images,), cfg.batch_size, seed=seed + 1000 * rank,
                                       transform=transform, name="denoise train batcher")
        self._memories: torch.Tensor | None = None

    # ------------------------------------------------------------------ model
    def resolve_model_config(self, model_cfg: KindConfig) -> KindConfig:
        e = self.embedding
        for key, want in (("n_tokens", e.n_tokens), ("dim", e.dim)):
            have = getattr(model_cfg, key)
            if have is not None and have != want:
                raise ConfigError(f"model.{key} = {have}: the embedded images have {want} (patch "
                                  f"{self.cfg.patch}); leave it unset")
        if getattr(model_cfg, "n_colours", None) is not None:
            raise ConfigError("model.n_colours is set: image tokens are continuous; leave it unset")
        if getattr(model_cfg, "objective", None) == "codebook":
            raise ConfigError("model.objective = 'codebook': it fits discrete tokens (the Potts task); image tokens "
                              "are continuous: use 'vmf' (the default), 'plain' or 'cd'")
        upd = {"n_tokens": e.n_tokens, "dim": e.dim, "objective": model_cfg.objective or "vmf"}
        return replace(model_cfg, **upd)

    def build_model(self, model_cfg: KindConfig) -> nn.Module:
        return MODELS.build(model_cfg)

    def callbacks(self, model: nn.Module) -> list:
        return [ProjectionCallback(name="frobenius")] if unwrap_model(model).cfg.frobenius else []

    def loss(self, model: nn.Module, batch: tuple) -> tuple[torch.Tensor, dict[str, float]]:
        (x,) = batch
        return model(x, local_loss=True)  # through the wrapper's forward: DDP all-reduces J's gradient

    # ------------------------------------------------------------------ evaluation
    def memories(self) -> torch.Tensor:
        """Embedded training images searched for the nearest memory, (M, N, d)."""
        if self._memories is None:
            n = self.cfg.nearest_train
            imgs = self.train_images if n is None else self.train_images[:n]
            self._memories = self.embedding.encode(imgs)
        return self._memories

    def eval_images(self, split: str) -> torch.Tensor:
        if split not in ("train", "validation", "test"):
            raise ValueError(f"split {split!r}: allowed values are 'train', 'validation', 'test'")
        imgs = self.train_images if split == "train" else self.images.split(split).images
        return imgs[: self.cfg.eval_images]

    @torch.no_grad()
    def curves(self, model: nn.Module, split: str = "test", steps: int | None = None,
               level: float | None = None) -> dict[str, Any]:
        """Per-step curves (length steps + 1) of overlap, nearest-memory overlap and MSE, plus the states'
        decoded images at every step for the first 8 images (for figures)."""
        cfg = self.cfg
        steps = cfg.eval_steps if steps is None else steps
        level = cfg.noise_level if level is None else level
        clean = self.eval_images(split)
        gen = seeded_generator("denoise-eval", cfg.eval_seed, split, level)
        noisy = corrupt(clean, level, cfg.noise, generator=gen)
        inner = unwrap_model(model)
        dev = next(inner.parameters()).device
        xc = self.embedding.encode(clean).to(dev)
        xs = inner.trajectory(self.embedding.encode(noisy).to(dev), steps)  # (T+1, B, N, d)
        # (M, N d) in the states' dtype, at least float32 (a float64 or bf16 model's states met float32 memories)
        mem = self.memories().to(dev, at_least_float32(xs).dtype).flatten(1)
        n_tok = xc.shape[1]
        ov = overlap(xs, xc[None]).mean(-1)  # (T+1,)
        near = torch.stack([(at_least_float32(x).flatten(1) @ mem.T).amax(-1).mean() / n_tok for x in xs])
        target = clean.float().to(dev) / 255.0
        mse = torch.stack([((self.embedding.decode(x) / 255.0 - target) ** 2).mean() for x in xs])
        pics = torch.stack([self.embedding.decode(x[:8]) for x in xs]).cpu()  # (T+1, 8, C, H, W)
        return {"overlap": ov.cpu().tolist(), "nearest": near.cpu().tolist(), "mse": mse.cpu().tolist(),
                "clean": clean[:8], "noisy": noisy[:8], "decoded": pics}

    def eval_from_args(self, model, args, forward_options):
        n = len(self.eval_images(args.split))
        return (f"{self.name} {args.split} split ({n} images, noise {self.cfg.noise} {self.cfg.noise_level:g})",
                self.evaluate(model, args.split, **forward_options))

    def evaluate(self, model: nn.Module, split: str = "validation", **options: Any) -> dict[str, float]:
        """Metrics at ``report_steps`` plus the overlap peak (``options`` may give ``iterations`` = steps)."""
        steps = options.get("iterations", self.cfg.eval_steps) * options.get("steps", 1)
        c = self.curves(model, split, steps)
        ov = c["overlap"]
        peak = max(range(len(ov)), key=ov.__getitem__)
        out = {"peak_overlap": ov[peak], "peak_step": float(peak), "gain": ov[peak] - ov[0],
               "final_overlap": ov[-1]}
        for t in self.cfg.report_steps:
            if t <= steps:
                out |= {f"overlap_t{t}": ov[t], f"nearest_t{t}": c["nearest"][t], f"mse_t{t}": c["mse"][t]}
        return out
