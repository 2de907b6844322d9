"""Descent rules (DESIGN.md "Solver").

``Solver.run(energy, x0, state, steps, point=..., trace=...)`` descends ``energy`` from ``x0`` and
returns a :class:`SolverResult`. ``point`` maps the iterate to where the gradient is evaluated:
identity for an exact gradient step, or e.g. RMSNorm as in CEM Algorithm 1 (then the update is
``-eta P ∇E(RMSNorm(x))`` applied to ``x``, which is *not* the gradient of ``E(RMSNorm(x))``; the
block reports ``exact = False``).

Solvers are looked up by name in :data:`SOLVERS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor, nn

from ..utils.validate import check_float
from .energy import Energy
from .precond import IdentityPrecond, Preconditioner
from .trace import Trace

SOLVERS: dict[str, type[Solver]] = {}


def register_solver(name: str):
    def deco(cls):
        SOLVERS[name] = cls
        cls.registry_name = name
        return cls

    return deco


@dataclass
class SolverResult:
    x: Tensor                  # final iterate, like x0
    trace: Trace | None = None  # per-step record when asked for
    steps: int = 0             # steps actually taken
    carry: Any = None          # state a solver hands to the next layer (e.g. momentum)


class Solver(nn.Module):
    """Base class: subclasses implement :meth:`run`."""

    registry_name = ""
    exact = True

    def run(
        self, energy: Energy, x: Tensor, state: Any, steps: int, *,
        point: Callable[[Tensor], Tensor] | None = None, trace: bool = False, carry: Any = None,
    ) -> SolverResult:
        raise NotImplementedError


@register_solver("gd")
class GradientDescent(Solver):
    """Preconditioned gradient descent with a fixed number of steps or a tolerance.

        u_t = point(x_t);   x_{t+1} = x_t + eta * direction(u_t)   (= x_t - eta P ∇E(u_t))

    CEM seed Eq. 16-17 / Algorithm 1. ``step_size`` is eta (a fixed hyper-parameter, or learned
    when ``learn_step_size``: eta = softplus(theta), initialised at ``step_size``). ``tol`` stops
    early once every token's step norm is below it (checked on the host, so it costs a sync per
    step; leave None for training).
    """

    def __init__(
        self, precond: Preconditioner | None = None, step_size: float = 1.0,
        learn_step_size: bool = False, tol: float | None = None,
    ):
        super().__init__()
        check_float("step_size", step_size, min=0.0, min_exclusive=True)
        if tol is not None:
            check_float("tol", tol, min=0.0, min_exclusive=True)
        self.precond = precond if precond is not None else IdentityPrecond(1)
        self.learn_step_size = learn_step_size
        if learn_step_size:  # inverse softplus so that softplus(theta) == step_size
            self.theta = nn.Parameter(torch.tensor(step_size + math.log(-math.expm1(-step_size))))
        self.step_size = float(step_size)
        self.tol = tol

    def eta(self) -> Tensor | float:
        return nn.functional.softplus(self.theta) if self.learn_step_size else self.step_size

    def run(self, energy, x, state, steps, *, point=None, trace=False, carry=None):
        point = point or (lambda z: z)
        rec = Trace() if trace else None
        eta = self.eta()
        taken = 0
        for _ in range(steps):
            u = point(x)
            if rec is not None:
                rec.add_energy(energy.energy(u, state))
            d = energy.direction(u, state, self.precond)
            dx = (eta.to(d.dtype) if isinstance(eta, Tensor) else eta) * d
            x = x + dx
            taken += 1
            if rec is not None:
                rec.add_step(dx)
            if self.tol is not None and bool(dx.detach().norm(dim=-1).max() < self.tol):
                break
        if rec is not None:
            rec.add_energy(energy.energy(point(x), state))
        return SolverResult(x=x, trace=rec, steps=taken, carry=carry)
