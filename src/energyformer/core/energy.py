"""The ``Energy`` abstraction (DESIGN.md "The one idea").

An energy assigns each token state ``x_i`` a scalar ``E_i(x_i | context)``. A block descends it:

    prepare(context) -> state      work done ONCE, outside the descent loop (keys, values, gates, norms)
    energy(x, state) -> (B, N)     per-token energy (for traces and tests)
    grad(x, state)   -> like x     gradient of sum(energy) w.r.t. x; subclasses give a closed form
    direction(x, state, P) -> like x   the update direction the block uses; default ``-P grad``

``exact`` says whether ``grad`` is exactly the gradient of ``energy`` and ``direction`` is exactly
``-P grad``. Energies whose update is *not* a gradient of the energy they report (e.g. per-token
partial gradients) set ``exact = False`` and document why. Every energy in the library is checked
by the property test ``tests/core/test_energy_properties.py``: closed-form ``grad`` equals autograd
of ``energy`` in float64, and a small step along ``direction`` lowers the energy.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .precond import Preconditioner

#: Registry of energy classes by name (``energyformer list energies``).
ENERGIES: dict[str, type[Energy]] = {}


def register_energy(name: str):
    """Class decorator adding an Energy subclass to :data:`ENERGIES`."""

    def deco(cls):
        if name in ENERGIES:
            raise ValueError(f"energy {name!r} is already registered")
        ENERGIES[name] = cls
        cls.registry_name = name
        return cls

    return deco


class Energy(nn.Module):
    """Base class of every energy. Subclasses implement ``energy`` and, ideally, a closed-form ``grad``."""

    exact: bool = True
    registry_name: str = ""

    @classmethod
    def examples(cls, dtype: torch.dtype = torch.float64) -> list[tuple[str, Energy, Tensor, Tensor]]:
        """Small seeded instances ``(label, energy, context, x)`` covering the energy's options.

        The library-wide property test iterates over every registered energy and its examples, so a
        new energy is checked as soon as it is registered; one without examples fails that test.
        """
        raise NotImplementedError(f"{cls.__name__} must provide examples() for the property tests")

    def prepare(self, context: Tensor, **kwargs: Any) -> Any:
        """Work done once per block call (outside the loop). Default: the context itself."""
        return context

    def energy(self, x: Tensor, state: Any) -> Tensor:
        """Per-token energy, shape (B, N)."""
        raise NotImplementedError

    def grad(self, x: Tensor, state: Any) -> Tensor:
        """∇_x Σ_i E_i. Default: autograd of :meth:`energy` (differentiable w.r.t. parameters when
        grad mode is on, so a block built on an energy-only subclass still trains)."""
        create = torch.is_grad_enabled()
        with torch.enable_grad():
            xg = x if x.requires_grad else x.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(self.energy(xg, state).sum(), xg, create_graph=create)
        return g

    def direction(self, x: Tensor, state: Any, precond: Preconditioner) -> Tensor:
        """Update direction ``-P ∇E``; subclasses may fuse P into their weights."""
        return -precond(self.grad(x, state))

    def precond_exact(self, precond: Preconditioner) -> bool:
        """Whether ``direction`` with this preconditioner is ``-P ∇E`` for one PD matrix P."""
        return precond.heads is None
