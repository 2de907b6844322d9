"""Hopfield-network memory energy of the Energy Transformer (Hoover et al. 2023, "Energy Transformer",
NeurIPS; §2 "Hopfield Network module", Eq. 6 with the ReLU² Lagrangian).

For each (layer-normalised) token g_i ∈ R^D and M stored memories ξ_μ ∈ R^D (the rows of Ξ ∈ R^{M×D}):

    E^HN_i(g) = -½ Σ_μ ReLU(ξ_μᵀ g_i)²                              (per token; no interaction)
    ∇_{g_i} E^HN = -Ξᵀ ReLU(Ξ g_i)                                    (closed form)

A token is pulled towards the memories it already overlaps with positively (the "attractive
half-spaces" of Hyper-SET's E_FF, Eq. 5, without the sphere). The update -∇E = Ξᵀ ReLU(Ξ g) is a
two-layer ReLU MLP whose down projection is the transpose of the up projection. The energy is
bounded below only together with the layer norm that keeps |g| fixed (ET applies it; so does this
library's ET block). ``exact``: the closed-form gradient equals autograd (tested).

Memories are initialised as PyTorch's default ``nn.Linear(D, M)`` weight, U(-1/√D, 1/√D) (the
initialisation of the Hyper-SET authors' ET), by :meth:`reset_energy_parameters` — so a model's
generic N(0, 0.02²) initialisation of Linear layers does not change the energy's scale.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..core.energy import Energy, register_energy
from ..utils.validate import check_int


@register_energy("hopfield")
class HopfieldEnergy(Energy):
    """E_i = -½ Σ_μ ReLU(ξ_μᵀ x_i)², Ξ ∈ R^{M×D} learned; grad = -Ξᵀ ReLU(Ξ x)."""

    def __init__(self, dim: int, memories: int):
        super().__init__()
        check_int("dim", dim, min=1)
        check_int("memories", memories, min=1)
        self.dim, self.memories = dim, memories
        self.xi = nn.Parameter(torch.empty(memories, dim))  # (M, D)
        self.reset_energy_parameters()

    def reset_energy_parameters(self) -> None:
        """Ξ ~ U(-1/√D, 1/√D) (``nn.Linear``'s default, the Hyper-SET authors' ET)."""
        bound = 1.0 / math.sqrt(self.dim)
        with torch.no_grad():
            self.xi.uniform_(-bound, bound)

    @classmethod
    def examples(cls, dtype: torch.dtype = torch.float64):
        g = torch.Generator().manual_seed(0)
        torch.manual_seed(0)
        e = cls(6, 10).to(dtype)
        x = torch.randn(2, 5, 6, generator=g, dtype=dtype)
        return [("D6_M10", e, x, x)]

    def prepare(self, context: Tensor, **kwargs: Any) -> None:
        return None  # per-token energy: no context

    def energy(self, x: Tensor, state: Any) -> Tensor:
        h = x @ self.xi.to(x.dtype).t()  # (B, N, M)
        return -0.5 * F.relu(h).pow(2).sum(-1)  # (B, N)

    def grad(self, x: Tensor, state: Any) -> Tensor:
        xi = self.xi.to(x.dtype)
        return -(F.relu(x @ xi.t()) @ xi)  # (B, N, D)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, memories={self.memories}"
