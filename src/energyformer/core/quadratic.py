"""A quadratic energy: the reference problem of the solver tests (closed forms for every rule).

    E_i(x) = ½ (x_i - c_i)ᵀ A (x_i - c_i),   c = context,   ∇E_i = A (x_i - c_i)

A is a fixed symmetric positive semi-definite matrix (a buffer): a diagonal from ``scales`` or a
full ``matrix``. Gradient descent, momentum, Nesterov and proximal steps on it are linear maps with
known spectra, which is what ``tests/core/test_solvers.py`` checks them against.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..utils.validate import check_int
from .energy import Energy, register_energy


@register_energy("quadratic")
class QuadraticEnergy(Energy):
    """E_i(x) = ½ (x_i − c_i)ᵀ A (x_i − c_i) with c = context (A symmetric PSD; default I)."""

    exact = True

    def __init__(self, dim: int, scales: Sequence[float] | Tensor | None = None,
                 matrix: Tensor | None = None):
        super().__init__()
        check_int("dim", dim, min=1)
        if scales is not None and matrix is not None:
            raise ValueError("QuadraticEnergy: give scales (diagonal A) or matrix (full A), not both")
        if matrix is None:
            s = torch.ones(dim) if scales is None else (
                scales.clone() if isinstance(scales, Tensor) else torch.tensor(scales, dtype=torch.float64))
            if s.shape != (dim,):
                raise ValueError(f"scales has shape {tuple(s.shape)}: expected ({dim},)")
            matrix = torch.diag(s)
        matrix = torch.as_tensor(matrix)
        if matrix.shape != (dim, dim):
            raise ValueError(f"matrix has shape {tuple(matrix.shape)}: expected ({dim}, {dim})")
        if not torch.allclose(matrix, matrix.T):
            raise ValueError("matrix must be symmetric (E is a quadratic form)")
        if float(torch.linalg.eigvalsh(matrix.double()).min()) < -1e-12:
            raise ValueError("matrix must be positive semi-definite (E bounded below)")
        self.dim = dim
        self.register_buffer("A", matrix.clone())

    @classmethod
    def examples(cls, dtype=torch.float64):
        g = torch.Generator().manual_seed(0)
        q = torch.linalg.qr(torch.randn(6, 6, generator=g, dtype=torch.float64))[0]
        full = q @ torch.diag(torch.linspace(0.1, 3.0, 6, dtype=torch.float64)) @ q.T
        out = []
        for label, e in (("diag", cls(6, scales=[0.5, 1.0, 1.5, 2.0, 2.5, 3.0])),
                         ("full", cls(6, matrix=0.5 * (full + full.T)))):
            ctx = torch.randn(2, 5, 6, generator=g, dtype=dtype)
            x = torch.randn(2, 5, 6, generator=g, dtype=dtype)
            out.append((label, e.to(dtype), ctx, x))
        return out

    def prepare(self, context: Tensor, **kwargs) -> Tensor:
        return context  # c: (B, N, D)

    def energy(self, x: Tensor, c: Tensor) -> Tensor:
        r = x - c
        return 0.5 * (r @ self.A.to(r.dtype) * r).sum(-1)  # (B, N)

    def grad(self, x: Tensor, c: Tensor) -> Tensor:
        return (x - c) @ self.A.to(x.dtype)  # A symmetric: (B, N, D)
