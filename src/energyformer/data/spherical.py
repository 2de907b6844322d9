"""Spherical pixel embedding for bare self-attention on images (seed 004 "Complete pipeline";
reconstructed.md §2.1, [DER/REC]: the exact map was not recovered).

* Each channel value ``v ∈ {0..255}`` becomes an angle ``θ = π v / 255`` and the unit vector
  ``(cos θ, sin θ) ∈ S¹`` (a half circle, so 0 and 255 are not neighbours). Inverse:
  ``v = 255 θ / π`` with ``θ = atan2(e₂, e₁)`` projected to the nearest point of [0, π].
* Non-overlapping p×p patches are tokens (ViT order, :func:`energyformer.data.images.patchify`): a
  token holds ``C p²`` channel values, i.e. ``d = 2 C p²`` numbers, divided by ``√(C p²)`` so that
  ``‖x_i‖ = 1``.
* A fixed, non-trainable matrix F mixes each token, ``x_i <- F x_i`` (the slides' "F"). It could not be
  identified; [REC] a seeded random orthogonal d×d matrix (``mixing: orthogonal``, default), or none.
  Note: bare self-attention is equivariant under an orthogonal F (its dynamics on F x with J equal its
  dynamics on x with ``Fᵀ J F``, and pseudo-likelihood training commutes with that change of basis), so
  an orthogonal F changes how J looks, not what the model does (tested).
* Decoding applies Fᵀ, splits into channel pairs and takes atan2 (a pair's norm is ignored).

Corruption (denoising task): ``replace`` sets a fraction ρ of channel values to uniform random values
(uniform angles on the half circle); ``gaussian`` adds N(0, σ²) to every angle and clips it to [0, π].
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..utils.validate import check_choice, check_float, check_int
from .images import patchify, unpatchify

MIXINGS = ("orthogonal", "none")
NOISES = ("replace", "gaussian")


def pixels_to_circle(v: Tensor) -> Tensor:
    """Channel values in [0, 255] (any shape) -> unit vectors (..., 2) at angle π v / 255."""
    theta = v.to(torch.float64 if v.dtype == torch.float64 else torch.float32) * (math.pi / 255.0)
    return torch.stack([theta.cos(), theta.sin()], -1)


def circle_to_pixels(e: Tensor) -> Tensor:
    """Vectors (..., 2) -> channel values in [0, 255] (float): 255 θ / π, θ = atan2 projected onto [0, π]
    (angles in (−π/2, 0) go to 0, angles in (−π, −π/2] to π)."""
    theta = torch.atan2(e[..., 1], e[..., 0])
    theta = torch.where(theta >= 0, theta, torch.where(theta > -math.pi / 2, 0.0, math.pi))
    return (theta * (255.0 / math.pi)).clamp(0.0, 255.0)


def orthogonal_matrix(d: int, seed: int) -> Tensor:
    """A seeded random orthogonal d×d matrix (QR of a Gaussian matrix, signs fixed: Haar distributed)."""
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))).float()


class SphericalPatchEmbedding:
    """uint8 images (B, C, H, W) <-> unit-norm tokens (B, N, d), N = HW/p², d = 2 C p² (module docstring)."""

    def __init__(self, channels: int, height: int, width: int, patch: int, *, mixing: str = "orthogonal",
                 seed: int = 0):
        for name, v in (("channels", channels), ("height", height), ("width", width), ("patch", patch)):
            check_int(f"spherical embedding {name}", v, min=1)
        check_choice("spherical embedding mixing", mixing, MIXINGS)
        if height % patch or width % patch:
            raise ValueError(f"patch = {patch}: must divide the image size {height}x{width}")
        self.channels, self.height, self.width, self.patch = channels, height, width, patch
        self.values = channels * patch * patch  # channel values per token
        self.n_tokens = (height // patch) * (width // patch)
        self.dim = 2 * self.values
        self.mixing = mixing
        self.F = orthogonal_matrix(self.dim, seed) if mixing == "orthogonal" else torch.eye(self.dim)

    def _check(self, images: Tensor) -> None:
        want = (self.channels, self.height, self.width)
        if images.dim() != 4 or tuple(images.shape[1:]) != want:
            raise ValueError(f"images of shape {tuple(images.shape)}: expected (batch, {want[0]}, {want[1]}, "
                             f"{want[2]})")

    def encode(self, images: Tensor) -> Tensor:
        """Pixels (B, C, H, W) (uint8, or floats in [0, 255]) -> tokens (B, N, d), ‖x_i‖ = 1."""
        self._check(images)
        e = pixels_to_circle(patchify(images, self.patch))  # (B, N, C p², 2)
        x = e.flatten(2) / math.sqrt(self.values)
        return x @ self.F.to(x).T

    def decode(self, tokens: Tensor) -> Tensor:
        """Tokens (B, N, d) -> pixels (B, C, H, W) as floats in [0, 255]."""
        if tokens.dim() != 3 or tokens.shape[1:] != (self.n_tokens, self.dim):
            raise ValueError(f"tokens of shape {tuple(tokens.shape)}: expected (batch, {self.n_tokens}, "
                             f"{self.dim})")
        y = tokens @ self.F.to(tokens)  # Fᵀ x, row-vector form
        v = circle_to_pixels(y.reshape(*y.shape[:2], self.values, 2))
        return unpatchify(v, self.patch, self.height, self.width)


def corrupt(images: Tensor, level: float, kind: str = "replace", generator: torch.Generator | None = None) -> Tensor:
    """Corrupted copy of pixels (B, C, H, W) as floats in [0, 255] (module docstring)."""
    check_choice("noise", kind, NOISES)
    check_float("noise level", level, min=0.0)
    x = images.float()
    if kind == "replace":
        if level > 1:
            raise ValueError(f"noise level = {level}: the replaced fraction must lie in [0, 1]")
        hit = torch.rand(x.shape, generator=generator) < level
        return torch.where(hit, torch.rand(x.shape, generator=generator) * 255.0, x)
    theta = x * (math.pi / 255.0) + level * torch.randn(x.shape, generator=generator)
    return (theta.clamp(0.0, math.pi) * (255.0 / math.pi)).clamp(0.0, 255.0)


def overlap(x: Tensor, y: Tensor) -> Tensor:
    """q(x, y) = (1/N) Σ_i x_i · y_i for token states (..., N, d) -> (...,)."""
    return (x * y).sum(-1).mean(-1)
