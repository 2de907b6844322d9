"""CEM element-wise energy → weight-tied gated MLP (CEM seed §2.2, Eq. 7-11, 15, 17).

    ξ(x_i | h_i) = −γ_iᵀ φ(V x_i),   γ_i = W h_i,   φ = ∫SiLU        (Eq. 7, φ' = SiLU)
    ∇_x ξ       = −Vᵀ (γ_i ∘ SiLU(V x_i))                            (Eq. 8)

One gradient step from x = h is a gated MLP with W^d ᵀ = W^u = V and W^g = W (Eq. 11): two
D×D_v matrices instead of three, i.e. 2/3 of a SwiGLU MLP's parameters at the same hidden size.
Note the SiLU is applied to the *tied* projection V (the one also used on the way down); the linear
"gate" factor is γ = W h. The gate γ is computed once from the block input (``prepare``); only
V x is recomputed inside the recursion.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..core.energy import Energy, register_energy
from ..core.precision import autocast_off
from ..core.precond import Preconditioner
from ..utils.validate import check_int
from .special import silu_integral


@register_energy("cem_elementwise")
class ElementwiseEnergy(Energy):
    """ξ(x | h) = −(W h)ᵀ φ(V x) with φ = ∫SiLU.  Parameters: W, V ∈ R^{D_v×D}."""

    exact = True

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        check_int("dim", dim, min=1)
        check_int("hidden", hidden, min=1)
        self.dim, self.hidden = dim, hidden
        self.W = nn.Linear(dim, hidden, bias=False)  # gate projection (W^g)
        self.V = nn.Linear(dim, hidden, bias=False)  # tied up/down projection (W^u = W^dᵀ)

    @classmethod
    def examples(cls, dtype=torch.float64):
        g = torch.Generator().manual_seed(0)
        e = cls(12, 20).to(dtype)
        ctx = torch.randn(2, 5, 12, generator=g, dtype=dtype)
        x = torch.randn(2, 5, 12, generator=g, dtype=dtype) * 2  # wide range of V x (both signs)
        return [("D12_Dv20", e, ctx, x)]

    def prepare(self, context: Tensor, **kwargs) -> Tensor:
        return self.W(context)  # γ: (B, N, D_v), computed once per block call

    def energy(self, x: Tensor, gamma: Tensor) -> Tensor:
        return -(gamma * silu_integral(self.V(x))).sum(-1)  # (B, N)

    def grad(self, x: Tensor, gamma: Tensor) -> Tensor:
        return -F.linear(gamma * F.silu(self.V(x)), self.V.weight.t())  # −Vᵀ(γ ∘ SiLU(Vx)): (B, N, D)

    def direction(self, x: Tensor, gamma: Tensor, precond: Preconditioner) -> Tensor:
        """−P ∇_x ξ = P Vᵀ(γ ∘ SiLU(Vx)) (Eq. 8 preconditioned, Eq. 13) with P folded into the tied weight:
        (γ ∘ SiLU(Vx)) (V P) for the rows, P symmetric. V P is weight-only (D_v × D), where applying P to the
        (B, N, D) gradient read and wrote every token's vector several times; with P = I no negation either. The
        fold runs in the weights' dtype with autocast off (weight-only work: no casts of its operands, one
        rounding of V P to the matmul's dtype)."""
        if precond.heads is not None:  # a per-head bank has no single P to fold (not this energy's use)
            return super().direction(x, gamma, precond)
        w = self.V.weight
        if not precond.is_identity:
            with autocast_off(w.device.type):
                w = precond(w)                                 # V P: (D_v, D), P on V's rows
        return F.linear(gamma * F.silu(self.V(x)), w.t())      # (B, N, D)
