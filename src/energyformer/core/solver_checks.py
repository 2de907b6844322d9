"""The property check a solver (step rule) must pass, for a researcher's own rule (``register_solver``): the package's
energy checks (:mod:`.checks`) hold the energy to its gradient, nothing held a rule to descending it. A plugin rule
that ascended was built, reported ``exact`` and trained without a word (probe AX).

:func:`check_solver` runs the rule on a strongly convex quadratic in float64 (:class:`_SPDQuadratic`) and asks

* **descent**, over ``3 × steps`` steps: the traced objective F (the energy plus the rule's own terms: a proximal or
  L1 term, ``Solver.extra_energy``) at the end is at most its value at the first iterate at every token (within
  rounding: a token already at its minimiser may stay there), and its mean falls (from the start to the first
  iterate, or from there to the end). The first iterate, not the random start: a projected rule's first step lands
  on its constraint set (a sphere, z ≥ 0), which may cost objective. Three times the steps: a rule that diverges
  late (a growing step) shows;
* **exactness**, where the rule says its step is ``−η P ∇F`` (``solver.exact``, i.e. ``rule_exact`` and a scalar
  step size): each of its first three steps equals ``−c_t P ∇F(x_t)`` for one ``c_t > 0``, P the solver's own
  preconditioner (moved off its initialisation so that a rule leaving P out shows), F with the rule's initial
  memory (a proximal anchor). A momentum or lagged rule that leaves ``rule_exact`` at True fails at step 2.

An inexact rule is held to descent only, not to where it converges.

Raises ``AssertionError`` naming the solver and the property that failed.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor

from .energy import Energy
from .solver import SOLVERS, Solver


class _SPDQuadratic(Energy):
    """E_i(x) = ½ (x_i − t_i)ᵀ A (x_i − t_i), A symmetric with eigenvalues in [0.5, 1.5] (seeded); context t."""

    token_local = True

    def __init__(self, dim: int, seed: int):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=torch.float64))
        lam = 0.5 + torch.rand(dim, generator=g, dtype=torch.float64)
        self.register_buffer("A", q @ torch.diag(lam) @ q.T)

    def energy(self, x: Tensor, target: Tensor) -> Tensor:
        r = x - target
        return 0.5 * ((r @ self.A) * r).sum(-1)

    def grad(self, x: Tensor, target: Tensor) -> Tensor:
        return (x - target) @ self.A


def _built(solver: Solver | str, dim: int, step_size: float) -> tuple[str, Solver]:
    if isinstance(solver, Solver):
        return f"solver {type(solver).__name__}", copy.deepcopy(solver).double()
    entry = SOLVERS.get(solver)
    return f"solver kind {solver!r}", entry.builder.from_config(entry.config(kind=solver), dim,
                                                                 step_size=step_size).double()


def _moved_off_init(solver: Solver, seed: int) -> None:
    """A learnable preconditioner's parameters get seeded noise: its diagonal softplus(√dim p) (1.31 at its
    initialisation p = 1/√dim) spread over about [0.9, 1.7], a low-rank part of about 0.1, so P stays positive
    definite and a step of 0.5 that descends with P = I still does (η λ_max(P A) ≲ 1.3 < 2)."""
    g = torch.Generator().manual_seed(seed + 7)
    P = solver.precond
    with torch.no_grad():
        for name, p in P.named_parameters():
            scale = 0.8 / P.dim ** 0.5 if name == "p" else 0.1
            p.add_(torch.rand(p.shape, generator=g, dtype=p.dtype).sub(0.5) * scale)


def check_solver(solver: Solver | str, *, dim: int = 8, steps: int = 20, step_size: float = 0.5,
                 seed: int = 0) -> None:
    """``solver``: an instance (your rule with its step size and preconditioner; a float64 copy is run, the instance
    is left as it is) or a registered kind name (built with ``step_size``). ``dim`` is taken from a non-identity
    preconditioner's width. See the module docstring for what is checked."""
    if steps < 2:
        raise ValueError(f"check_solver: steps = {steps}; must be >= 2 (descent is measured from the first iterate)")
    name, s = _built(solver, dim, step_size)
    if getattr(s.precond, "heads", None) is not None:
        raise ValueError(f"check_solver: {name} has a per-head preconditioner bank ({s.precond.heads} heads), which "
                         "acts inside an attention energy's heads; check the rule with a shared preconditioner")
    if not s.precond.is_identity:
        dim = s.precond.dim
        _moved_off_init(s, seed)
    energy = _SPDQuadratic(dim, seed)
    g = torch.Generator().manual_seed(seed + 1)
    target, x0 = (torch.randn(2, 5, dim, generator=g, dtype=torch.float64) for _ in range(2))
    total = min(3 * steps, getattr(s.step_size, "max_steps", 3 * steps))  # a per-step schedule has so many values
    if total < 2:
        raise ValueError(f"check_solver: {name}'s step size has {total} step(s) of values; at least 2 are needed")
    iterates: list[Tensor] = []
    try:
        with torch.no_grad():
            run = s.run(energy, x0, energy.prepare(target), total, trace=True, observer=iterates.append)
    except Exception as err:  # noqa: BLE001 - reported with the solver's name
        raise AssertionError(f"{name}: running {total} steps on a quadratic raised {type(err).__name__}: "
                             f"{str(err).splitlines()[0] if str(err) else ''}") from err
    if all(torch.equal(it, x0) for it in iterates):  # a network step size starts at 0 (probe BA)
        raise AssertionError(f"{name} never moved x in {total} steps on a convex quadratic: a step size of 0 (a "
                             "network step size starts at 0 until trained)? give check_solver a rule with a step")
    e = run.trace.energy
    e0, e1, end = e[0], e[1], e[-1]
    rose = end - e1 - 1e-9 * (e1.abs() + 1)
    if bool((rose > 0).any()) or not (float(end.mean()) < float(e1.mean()) or float(e1.mean()) < float(e0.mean())):
        raise AssertionError(f"{name} does not descend: over {total} steps on a convex quadratic the objective "
                             f"rose or stalled (by up to {float((end - e1).max()):.3g} at a token from its first "
                             f"iterate; mean {float(e0.mean()):.4g} at the start, {float(e1.mean()):.4g} after one "
                             f"step, {float(end.mean()):.4g} at the end)")
    if s.exact:
        memory = s.init_memory(x0, None, x0)
        for t in range(min(3, len(iterates) - 1)):
            _check_exact_step(name, s, energy, target, memory, iterates[t], iterates[t + 1] - iterates[t], t + 1)


def _objective_direction(s: Solver, energy: Energy, target: Tensor, memory: Any, x: Tensor) -> Tensor:
    """−P ∇F(x), F = E + the rule's own terms (``extra_energy``) at its initial memory."""
    xg = x.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        f = energy.energy(xg, energy.prepare(target)).sum()
        extra = s.extra_energy(xg, memory)
        for v in (extra or {}).values():
            f = f + v.sum()
        (grad,) = torch.autograd.grad(f, xg)
    return -s.precond(grad).detach()


def _check_exact_step(name: str, s: Solver, energy: Energy, target: Any, memory: Any, x: Tensor, dx: Tensor,
                      step: int) -> None:
    d = _objective_direction(s, energy, target, memory, x)
    c = float((dx * d).sum() / (d * d).sum())
    off = float((dx - c * d).norm() / dx.norm().clamp_min(1e-300))
    if not (c > 0 and off < 1e-8):
        raise AssertionError(f"{name} says its step is -eta P grad (solver.exact) but its step {step} is not: "
                             f"dx = c (-P grad) + r with c = {c:.3g} (must be > 0), |r| / |dx| = {off:.2g} "
                             f"(P the solver's preconditioner, {type(s.precond).__name__}); a rule that is not a "
                             "gradient step (momentum, a lagged gradient) sets rule_exact = False")


__all__ = ["check_solver"]
