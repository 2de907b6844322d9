"""Composite energies: a weighted sum of named energies (DESIGN.md core table; Energy Transformer's
``attn.energy + hopfield.energy``; EqT's ℒ = Σ λ_k ℒ_k).

    E(x | ctx) = Σ_k w_k E_k(x | ctx),   ∇E = Σ_k w_k ∇E_k,   direction = Σ_k w_k direction_k

Each term is prepared once per block call (its own state; a term whose context is the iterate is
re-prepared every step, the others are not). ``energy_terms`` returns the weighted per-term
energies, so a trace records each term and they sum to the total. The composite is exact when
every term is (directions are linear in P: Σ w_k (-P ∇E_k) = -P ∇E).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ..utils.validate import check_float
from .energy import Energy, register_energy
from .precond import Preconditioner


@register_energy("composite")
class CompositeEnergy(Energy):
    """E = Σ_k w_k E_k over named energies ``terms`` (weights default to 1)."""

    def __init__(self, terms: Mapping[str, Energy], weights: Mapping[str, float] | None = None):
        super().__init__()
        if not terms:
            raise ValueError("CompositeEnergy: terms must name at least one energy")
        for name, e in terms.items():
            if not isinstance(e, Energy):
                raise TypeError(f"CompositeEnergy: term {name!r} is a {type(e).__name__}, not an Energy")
        weights = dict(weights or {})
        unknown = [k for k in weights if k not in terms]
        if unknown:
            raise ValueError(f"CompositeEnergy: weights for unknown terms {unknown}; terms: {', '.join(terms)}")
        self.terms = nn.ModuleDict(dict(terms))
        self.weights = {k: float(weights.get(k, 1.0)) for k in terms}
        for k, w in self.weights.items():
            check_float(f"weights.{k}", w)

    @classmethod
    def examples(cls, dtype=torch.float64):
        from .quadratic import QuadraticEnergy

        (_, a, ctx, x), (_, b, _, _) = QuadraticEnergy.examples(dtype)
        return [("quadratic_diag+0.5*quadratic_full", cls({"diag": a, "full": b}, {"full": 0.5}), ctx, x)]

    @property
    def exact(self) -> bool:  # type: ignore[override]
        return all(e.exact for e in self.terms.values())

    @property
    def context_is_iterate(self) -> bool:  # type: ignore[override]
        return any(e.context_is_iterate for e in self.terms.values())

    def prepare(self, context: Tensor, **kwargs: Any) -> dict[str, Any]:
        return {k: e.prepare(context, **kwargs) for k, e in self.terms.items()}

    def reprepare(self, state: dict[str, Any], u: Tensor) -> dict[str, Any]:
        return {k: e.reprepare(state[k], u) if e.context_is_iterate else state[k]
                for k, e in self.terms.items()}

    def energy_terms(self, x: Tensor, state: dict[str, Any]) -> dict[str, Tensor]:
        return {k: self.weights[k] * e.energy(x, state[k]) for k, e in self.terms.items()}  # (B, N) each

    def energy(self, x: Tensor, state: dict[str, Any]) -> Tensor:
        return sum(self.energy_terms(x, state).values())

    def grad(self, x: Tensor, state: dict[str, Any]) -> Tensor:
        return sum(self.weights[k] * e.grad(x, state[k]) for k, e in self.terms.items())

    def direction(self, x: Tensor, state: dict[str, Any], precond: Preconditioner) -> Tensor:
        return sum(self.weights[k] * e.direction(x, state[k], precond) for k, e in self.terms.items())

    def reference_direction(self, x: Tensor, state: dict[str, Any], precond: Preconditioner) -> Tensor:
        """Σ_k w_k d_k with each term's reference (its exact direction ``-P ∇E_k`` when exact)."""
        return sum(self.weights[k] * (e.reference_direction(x, state[k], precond) if not e.exact
                                      else -precond(e.grad(x, state[k])))
                   for k, e in self.terms.items())

    def precond_exact(self, precond: Preconditioner) -> bool:
        return all(e.precond_exact(precond) for e in self.terms.values())

    def extra_repr(self) -> str:
        return "weights=" + ", ".join(f"{k}={w}" for k, w in self.weights.items())
