"""Property checks every energy must pass (DESIGN.md: "Tests prove for every energy that ``grad``
equals autograd of ``energy``, and that a small enough step lowers it").

``tests/core/test_energy_properties.py`` runs them over every registered energy and its
``examples()``; a researcher writing a new energy can call :func:`check_energy` directly.

* :func:`check_grad`: ``grad(x, state)`` equals autograd of ``Σ_i energy(x, state)_i`` (for an
  iterate-context energy, of ``Σ_i energy(x, reprepare(state, x))_i``: the total derivative).
* :func:`check_descent` (``exact`` energies): ``direction`` has a negative slope and a small step
  along it lowers the energy; with a single preconditioner P (``precond_exact``) it equals −P ∇E.
* :func:`check_reference` (``exact = False``): ``direction`` equals the energy's independent
  ``reference_direction``; an inexact energy without one fails (nothing is skipped).

Run them in float64: tolerances are set for it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .energy import Energy
from .precond import Preconditioner


def _state_at(energy: Energy, state: Any, x: Tensor) -> Any:
    return energy.reprepare(state, x) if energy.context_is_iterate else state


def total_energy(energy: Energy, state: Any, x: Tensor) -> Tensor:
    """Σ_i E_i(x), with the context re-prepared at ``x`` for iterate-context energies."""
    return energy.energy(x, _state_at(energy, state, x)).sum()


def check_grad(energy: Energy, state: Any, x: Tensor, rtol: float = 1e-9, atol: float = 1e-10) -> None:
    """Closed-form ``grad`` == autograd of the total energy."""
    g = energy.grad(x, _state_at(energy, state, x))
    xg = x.detach().clone().requires_grad_(True)
    (ga,) = torch.autograd.grad(total_energy(energy, state, xg), xg)
    if g.shape != x.shape:
        raise AssertionError(f"{type(energy).__name__}.grad has shape {tuple(g.shape)}, x {tuple(x.shape)}")
    torch.testing.assert_close(g, ga, rtol=rtol, atol=atol,
                               msg=lambda m: f"{type(energy).__name__}.grad != autograd of energy: {m}")


def check_descent(energy: Energy, state: Any, x: Tensor, precond: Preconditioner, step: float = 1e-4,
                  rtol: float = 1e-9, atol: float = 1e-10) -> None:
    """An exact energy's ``direction`` is a descent direction and a small step along it lowers E; where the
    energy says the direction is −P ∇E for one matrix P (``precond_exact``), it equals −P applied to autograd's
    gradient (P as its dense matrix): an energy that folds P into its weights is checked against the
    preconditioner itself, which a descent test alone does not do (a direction without P still descends)."""
    with torch.no_grad():
        st = _state_at(energy, state, x)
        d = energy.direction(x, st, precond)
    if energy.precond_exact(precond):
        xg = x.detach().clone().requires_grad_(True)
        (ga,) = torch.autograd.grad(total_energy(energy, state, xg), xg)
        want = -ga if precond.is_identity else -(ga @ precond.matrix().detach().to(ga.dtype).mT)
        torch.testing.assert_close(d, want, rtol=rtol, atol=atol,
                                   msg=lambda m: f"{type(energy).__name__}.direction != -P grad: {m}")
    with torch.no_grad():
        slope = float((energy.grad(x, st) * d).sum())  # first-order change per unit step
        e0 = float(total_energy(energy, state, x))
        e1 = float(total_energy(energy, state, x + step * d))
    if not slope < 0:
        raise AssertionError(f"{type(energy).__name__}.direction is not a descent direction (slope {slope})")
    if not e1 < e0:
        raise AssertionError(f"{type(energy).__name__}: a step of {step} along direction raised the "
                             f"energy from {e0} to {e1}")


def check_reference(energy: Energy, state: Any, x: Tensor, precond: Preconditioner,
                    rtol: float = 1e-9, atol: float = 1e-10) -> None:
    """An inexact energy's ``direction`` equals its ``reference_direction``."""
    with torch.no_grad():
        st = _state_at(energy, state, x)
        d = energy.direction(x, st, precond)
    ref = energy.reference_direction(x, st, precond)  # NotImplementedError when missing
    torch.testing.assert_close(
        d, ref.detach(), rtol=rtol, atol=atol,
        msg=lambda m: f"{type(energy).__name__}.direction != reference_direction: {m}")


def check_energy(energy: Energy, context: Tensor, x: Tensor, precond: Preconditioner) -> None:
    """All properties of one energy instance at one point (float64)."""
    state = energy.prepare(context)
    check_grad(energy, state, x)
    if energy.exact:
        check_descent(energy, state, x, precond)
    else:
        check_reference(energy, state, x, precond)
