"""Proximal gradient descent (equilibrium transformer, EqT Alg. 1; reconstructed.md §3).

    x_{t+1} = x_t - alpha P (∇E(u_t) + (x_t - a) / gamma),    u_t = point(x_t)

a gradient step on E(x) + ||x - a||² / (2 gamma): the anchor ``a`` (EqT: the proposal f of a
standard block, with h^(0) = f) defaults to the block's starting point x0. The traced objective
includes the proximal term (trace term ``'proximal'``), so a descent check applies to what is
descended. On a quadratic E = ½ (x - c)ᵀ A (x - c) the error contracts per step by exactly
``max_λ |1 - alpha (λ + 1/gamma)|`` over the eigenvalues λ of P A with P = I (reconstructed.md §3
"Checks"; ``tests/core/test_solvers.py``).

``alpha`` is the solver's step size (EqT default 0.1); ``gamma`` a float attribute a training
callback may anneal (EqT: from 10 to 1). A per-head preconditioner bank cannot act on the proximal
term and is rejected.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field
from torch import Tensor

from ..utils.validate import ConfigError, check_float
from .solver import Solver, SolverConfig, _scale, register_solver


class ProximalConfig(SolverConfig):
    """Proximal gradient descent with anchor = the block's starting point."""

    kind: Literal["proximal"] = "proximal"
    gamma: float = Field(1.0, gt=0)
    """Proximal scale gamma > 0 (EqT: 1 after annealing)."""


@register_solver("proximal", ProximalConfig)
class ProximalGradient(Solver):
    """x <- x - alpha P (∇E(point(x)) + (x - anchor) / gamma); anchor defaults to x0."""

    def __init__(self, precond=None, step_size=0.1, learn_step_size=False, tol=None, *,
                 gamma: float = 1.0, **kw: Any):
        super().__init__(precond, step_size, learn_step_size, tol, **kw)
        check_float("gamma", gamma, min=0.0, min_exclusive=True)
        if self.precond.heads is not None:
            raise ConfigError("precond_per_head = True: a per-head preconditioner bank cannot act on "
                              "the proximal term; use a shared preconditioner with the proximal solver")
        self.gamma = float(gamma)

    @classmethod
    def config_kwargs(cls, cfg: ProximalConfig) -> dict[str, Any]:
        return dict(gamma=cfg.gamma)

    def init_memory(self, x0: Tensor, carry: Any, anchor: Tensor) -> Tensor:
        if anchor.shape != x0.shape:
            raise ValueError(f"anchor has shape {tuple(anchor.shape)}, the iterate {tuple(x0.shape)}")
        return anchor  # constant over the run

    def update(self, energy, x, u, state, anchor, eta):
        d = energy.direction(u, state, self.precond)  # -P ∇E(u)
        r = (x - anchor) / self.gamma
        if not self.precond.is_identity:
            r = self.precond(r)
        return _scale(eta, d - r), anchor

    def extra_energy(self, x: Tensor, anchor: Tensor) -> dict[str, Tensor]:
        return {"proximal": (x - anchor).pow(2).sum(-1) / (2.0 * self.gamma)}  # (B, N)

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}, " + super().extra_repr()
