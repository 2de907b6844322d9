"""Projected and proximal step rules: ISTA (CRATE's sparsification, Yu et al. 2023 Eq. 13) and
descent on the unit sphere (bare self-attention, seed 004 Eq. 3-4).

``ista``    z ← S_{ηλ}(z + η·direction(z)),  S(v) = ReLU(v − ηλ) (``nonnegative``) or the soft
            threshold sign(v)·ReLU(|v| − ηλ): a proximal gradient step on E(z) + λ‖z‖₁ (+ z ≥ 0)
            (Beck & Teboulle 2009). The traced objective includes λ‖z‖₁ (term ``l1``). With a diagonal
            preconditioner P the threshold is ηλP_ii (the proximal step in the metric P⁻¹, so the fixed point is
            still the minimiser of E + λ‖z‖₁; with ηλ alone it was that of E + λ Σ|z_i| / P_ii); a P with a
            low-rank part has no closed-form threshold and is refused.
``sphere``  x ← (x + η d) / ‖x + η d‖ with the energy's direction d (bare attention, η = 1:
            ``normalise(γ x_i + Σ_j α_ij J_ij x_j)``).

Neither is −η∇E of a smooth energy (``rule_exact = False``).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from ..utils.validate import ConfigError, check_float
from .precond import DiagLowRankPrecond
from .solver import Solver, SolverConfig, _scale, register_solver


def safe_norm(v: Tensor, dim: int = -1, keepdim: bool = False) -> Tensor:
    """‖v‖ along ``dim`` as ``s ‖v / s‖`` with ``s = max |v|``: no overflow of the squares above
    ~1.8e19 (float32) nor underflow below ~1e-19, so the norm of any finite v is finite and accurate
    (``torch.linalg.vector_norm`` squares first: inf at 2e19, 0 at 1e-20). Issue 23."""
    s = v.abs().amax(dim, keepdim=True)
    s = torch.where(s == 0, torch.ones_like(s), s)  # v = 0: norm 0
    n = s * (v / s).norm(dim=dim, keepdim=True)
    return n if keepdim else n.squeeze(dim)


def unit(v: Tensor, dim: int = -1) -> Tensor:
    """``v / ‖v‖`` at any scale of v (via :func:`safe_norm`); v = 0 stays 0, a non-finite v gives NaN."""
    s = v.abs().amax(dim, keepdim=True)
    u = v / torch.where(s == 0, torch.ones_like(s), s)  # max |u| = 1
    n = u.norm(dim=dim, keepdim=True)
    return u / torch.where(n == 0, torch.ones_like(n), n)  # NaN stays NaN for the whole vector


class ISTAConfig(SolverConfig):
    """ISTA: proximal gradient for E + λ‖z‖₁ (CRATE's sparsification step)."""

    kind: Literal["ista"] = "ista"
    lambd: float = Field(0.1, ge=0)
    """λ, the sparsity weight (CRATE code: 0.1)"""
    nonnegative: bool = True
    """non-negative codes (CRATE: ReLU) or the plain soft threshold"""


@register_solver("ista", ISTAConfig)
class ISTA(Solver):
    """Proximal gradient (ISTA) for E(z) + λ‖z‖₁ (+ z ≥ 0): z ← S_{ηλP}(z + η·direction(z)), P = I or diagonal.

    ``nonnegative`` (CRATE): S(v) = ReLU(v − ηλ); else the soft threshold sign(v)·ReLU(|v| − ηλ) (ηλ P_ii per
    coordinate with a diagonal P: the module docstring).
    The traced objective includes λ‖z‖₁ (term ``l1``).
    """

    rule_exact = False

    def __init__(self, precond=None, step_size: Any = 0.1, learn_step_size: bool = False, tol=None, *,
                 lambd: float = 0.1, nonnegative: bool = True, **kw: Any):
        super().__init__(precond, step_size, learn_step_size, tol, **kw)
        check_float("lambd", lambd, min=0.0)
        if isinstance(self.precond, DiagLowRankPrecond):
            raise ConfigError("solver ista with precond = diag_low_rank: the soft threshold is the proximal step of "
                              "λ‖z‖₁ only in a diagonal metric; allowed: identity, diagonal")
        self.lambd, self.nonnegative = float(lambd), bool(nonnegative)

    @classmethod
    def config_kwargs(cls, cfg: ISTAConfig) -> dict[str, Any]:
        return dict(lambd=cfg.lambd, nonnegative=cfg.nonnegative)

    def update(self, energy, x, u, state, memory, eta):
        v = x + _scale(eta, energy.direction(u, state, self.precond))  # z - η P ∇E
        t = _scale(eta, self.precond(torch.full_like(x, self.lambd)))  # η λ P_ii (P = I: η λ)
        new = F.relu(v - t) if self.nonnegative else torch.sign(v) * F.relu(v.abs() - t)
        return new - x, memory

    def extra_energy(self, x: Tensor, memory: Any) -> dict[str, Tensor]:
        return {"l1": self.lambd * x.abs().sum(-1)}  # (B, N)

    def extra_repr(self) -> str:
        return f"lambd={self.lambd}, nonnegative={self.nonnegative}, " + super().extra_repr()


class SphereConfig(SolverConfig):
    """Projected descent on the unit sphere (bare self-attention with renormalisation)."""

    kind: Literal["sphere"] = "sphere"


@register_solver("sphere", SphereConfig)
class SphereDescent(Solver):
    """Projected descent on the unit sphere: ``x_{t+1} = (x_t + η d_t) / ‖x_t + η d_t‖`` with the
    energy's direction d_t (for bare attention and η = 1: ``normalise(γ x_i + Σ_j α_ij J_ij x_j)``).
    Not a gradient step of any energy (``rule_exact = False``). The norm is scale-safe
    (:func:`unit`): a plain ‖y‖ overflows once |y| passes ~1.8e19 in float32 and every token silently
    became 0 (issue 23)."""

    rule_exact = False

    def update(self, energy, x, u, state, memory, eta):
        d = energy.direction(u, state, self.precond)
        y = x + _scale(eta, d)
        return unit(y) - x, memory  # scale-safe: y/‖y‖ at any finite scale (issue 23)
