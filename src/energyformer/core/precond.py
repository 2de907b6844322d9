"""Learned positive-definite preconditioners (CEM seed Eq. 13, App. A.2, App. D.4).

    P = diag(softplus(d)) + U V^T + V U^T,    d = sqrt(D) * p,  p_0 = 1/sqrt(D),  U_0 ~ N(0, 0.02^2),  V_0 = 0

``d`` starts at 1 (so the diagonal starts at softplus(1) ~ 1.31) and ``U V^T + V U^T`` at zero, as
in seed App. D.4. A preconditioner may be a *bank* of ``heads`` independent matrices (CEM
attention's per-head P_k, Eq. 14); then inputs carry a head axis just before the feature axis.

Positive-definiteness: the diagonal part is PD; the symmetric low-rank part ``UV^T + VU^T`` is
indefinite in general, so P is PD only while it stays small relative to the diagonal. The seed
states PD by construction; we report the smallest eigenvalue (``min_eigenvalue``) rather than
assume it, and the tests check it at initialisation.

Inside :meth:`Preconditioner.per_call` (one block call: a solver run of T steps) the weight-only factors of
``forward`` (softplus of the diagonal, ``[U, V]``) are built once per grad mode and dtype and reused by every
step, as :meth:`~energyformer.energies.interaction.InteractionEnergy._step_plan` does for a per-head bank; they
were rebuilt at each step (probe AA, F8). Outside it each call builds its own (no state between calls: a graph
kept across forward passes would be freed by the first backward).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from ..utils.config import KindConfig, Registry
from ..utils.validate import check_choice, check_int

#: preconditioner kind -> (config class, builder(cfg, dim, heads, name) -> Preconditioner)
PRECONDITIONERS = Registry("preconditioner")


class Preconditioner(nn.Module):
    """Base class: ``forward(g)`` applies P to vectors ``g`` of shape (..., [heads,] dim). P is symmetric (every
    kind here is): energies fold it into a weight from either side (``fold``: P W; a row-wise ``forward``: W P)."""

    is_identity = False

    def __init__(self, dim: int, heads: int | None = None):
        super().__init__()
        self.dim = dim
        self.heads = heads
        self._memo: dict | None = None  # the weight-only factors of the current per_call() scope

    @contextlib.contextmanager
    def per_call(self) -> Iterator[None]:
        """Scope of one block call (re-entrant): weight-only factors are built once in it (module docstring)."""
        outer = getattr(self, "_memo", None)
        if outer is None:
            self._memo = {}
        try:
            yield
        finally:
            if outer is None:
                self._memo = None

    def _factor(self, name: str, dtype: torch.dtype, build: Callable[[], Tensor]) -> Tensor:
        """``build().to(dtype)``, once per (name, dtype, grad mode) inside :meth:`per_call`. The grad mode is part
        of the key: a factor built under no_grad (a truncated or implicit backward's untracked steps) has no graph.
        While torch.compile traces it is built at every call (its CSE merges the repeats)."""
        memo = getattr(self, "_memo", None)
        if memo is None or torch.compiler.is_compiling():
            return build().to(dtype)
        key = (name, dtype, torch.is_grad_enabled())
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = build().to(dtype)
        return hit

    def _lead(self) -> tuple[int, ...]:
        return () if self.heads is None else (self.heads,)

    def fold(self, w: Tensor) -> Tensor:
        """P @ w for a weight ``w`` of shape ([heads,] dim, r) — weight-only work done once per call."""
        if self.heads is None:
            return self.forward(w.transpose(-1, -2)).transpose(-1, -2)
        return self.forward(w.permute(2, 0, 1)).permute(1, 2, 0)  # columns as (r, H, D) vectors

    def matrix(self) -> Tensor:
        """Dense ([heads,] dim, dim) matrix (for tests and analysis)."""
        eye = torch.eye(self.dim, device=self._device(), dtype=self._dtype())
        eye = eye.expand(*self._lead(), self.dim, self.dim)
        return self.fold(eye)

    def min_eigenvalue(self) -> float:
        """Smallest eigenvalue over the bank (P is symmetric)."""
        return float(torch.linalg.eigvalsh(self.matrix().detach().double()).min())

    def _device(self):
        return next(iter(self.parameters()), torch.empty(0)).device

    def _dtype(self):
        return next(iter(self.parameters()), torch.empty(0)).dtype


class IdentityPrecond(Preconditioner):
    """P = I (plain gradient descent)."""

    is_identity = True

    def forward(self, g: Tensor) -> Tensor:
        return g


class DiagonalPrecond(Preconditioner):
    """P = diag(softplus(sqrt(D) p)), p initialised to 1/sqrt(D) (seed App. D.4)."""

    def __init__(self, dim: int, heads: int | None = None):
        super().__init__(dim, heads)
        self.p = nn.Parameter(torch.full((*self._lead(), dim), 1.0 / math.sqrt(dim)))

    def diag(self) -> Tensor:
        return F.softplus(math.sqrt(self.dim) * self.p)

    def forward(self, g: Tensor) -> Tensor:
        return g * self._factor("diag", g.dtype, self.diag)


class DiagLowRankPrecond(DiagonalPrecond):
    """P = diag(softplus(d)) + U V^T + V U^T with rank R (seed Eq. 13); U ~ N(0, 0.02), V = 0."""

    def __init__(self, dim: int, rank: int, heads: int | None = None):
        super().__init__(dim, heads)
        self.rank = rank
        self.U = nn.Parameter(torch.randn(*self._lead(), dim, rank) * 0.02)
        self.V = nn.Parameter(torch.zeros(*self._lead(), dim, rank))

    def forward(self, g: Tensor) -> Tensor:  # g: (..., [H,] D)
        """P g = softplus(d) ∘ g + U (Vᵀ g) + V (Uᵀ g) as two products with A = [U, V] ([H,] D, 2R):
        c = Aᵀ g = [Uᵀ g ; Vᵀ g], its halves swapped, times A (one product each way instead of four), and
        the diagonal added in the same pass (addcmul)."""
        a = self._factor("uv", g.dtype, lambda: torch.cat([self.U, self.V], -1))  # ([H,] D, 2R)
        if self.heads is None:
            c = g @ a                                     # (..., 2R)
            low = c.roll(self.rank, -1) @ a.mT            # [Vᵀg ; Uᵀg] · [U, V]ᵀ: (..., D)
        else:
            c = torch.einsum("...hd,hdr->...hr", g, a)
            low = torch.einsum("...hr,hdr->...hd", c.roll(self.rank, -1), a)
        return torch.addcmul(low, g, self._factor("diag", g.dtype, self.diag))


class IdentityPrecondConfig(KindConfig):
    """P = I (plain gradient descent)."""

    kind: Literal["identity"] = "identity"


class DiagonalPrecondConfig(KindConfig):
    """P = diag(softplus(√D p)) (seed App. D.4)."""

    kind: Literal["diagonal"] = "diagonal"


class DiagLowRankPrecondConfig(KindConfig):
    """P = diag(softplus(d)) + U Vᵀ + V Uᵀ of rank R (seed Eq. 13)."""

    kind: Literal["diag_low_rank"] = "diag_low_rank"
    rank: int = Field(4, ge=1)
    """R, the rank of the low-rank part (< dim)"""


@PRECONDITIONERS.register("identity", IdentityPrecondConfig)
def _identity(cfg: IdentityPrecondConfig, dim: int, heads: int | None, name: str) -> Preconditioner:
    """P = I (plain gradient descent)."""
    return IdentityPrecond(dim, heads)


@PRECONDITIONERS.register("diagonal", DiagonalPrecondConfig)
def _diagonal(cfg: DiagonalPrecondConfig, dim: int, heads: int | None, name: str) -> Preconditioner:
    """P = diag(softplus(√D p)), p₀ = 1/√D (seed App. D.4)."""
    return DiagonalPrecond(dim, heads)


@PRECONDITIONERS.register("diag_low_rank", DiagLowRankPrecondConfig)
def _diag_low_rank(cfg: DiagLowRankPrecondConfig, dim: int, heads: int | None, name: str) -> Preconditioner:
    """P = diag(softplus(d)) + U Vᵀ + V Uᵀ, U₀ ~ N(0, 0.02²), V₀ = 0 (seed Eq. 13)."""
    check_int(f"{name}_rank", cfg.rank, min=1, max=dim - 1)
    return DiagLowRankPrecond(dim, cfg.rank, heads)


def make_preconditioner(
    kind: str, dim: int, rank: int = 4, heads: int | None = None, name: str = "precond"
) -> Preconditioner:
    """Build a preconditioner by kind (a :data:`PRECONDITIONERS` lookup): 'identity' | 'diagonal' |
    'diag_low_rank' (``rank`` R)."""
    check_choice(name, kind, PRECONDITIONERS.names())
    entry = PRECONDITIONERS.get(kind)
    if "rank" in entry.config.model_fields:
        check_int(f"{name}_rank", rank, min=1, max=dim - 1)
        return entry.builder(entry.config(rank=rank), dim, heads, name)
    return entry.builder(entry.config(), dim, heads, name)
