"""Energy Transformer (Hoover et al. 2023, "Energy Transformer", NeurIPS): one energy on layer-normalised
tokens, attention + Hopfield memory, descended by its gradient (§2, Eqs. 1-7).

Tokens x_C ∈ R^D (C = 1..N) are layer-normalised with a *scalar* gain (Eq. 1, :class:`EnergyLayerNorm`)

    g_C = γ (x_C - mean(x_C)) / sqrt(var(x_C) + ε) + δ

and the energy of g is the sum of two terms (Eq. 7)

    E^ATT = -(1/β) Σ_h Σ_C log Σ_{B ≠ C} exp(β k_hBᵀ q_hC),   q_hC = W^Q_h g_C, k_hB = W^K_h g_B ∈ R^Y   (Eq. 2)
    E^HN  = -½ Σ_C Σ_μ ReLU(ξ_μᵀ g_C)²                                                        (Eq. 6)

(:class:`ETAttentionEnergy`, :class:`~energyformer.energies.hopfield.HopfieldEnergy`;
:class:`EnergyTransformerEnergy` is their sum, traced per term). β = 1/√Y by default. The ET paper
excludes B = C from the inner sum; the Hyper-SET authors' ET keeps it (``self_interaction``).

**The attention gradient** has a query side and a key side (both q and k are functions of g; the
context is the iterate, ``context_is_iterate``). With A = row-softmax of S = β Q Kᵀ (over B):

    ∇_{g_D} E^ATT = -Σ_h [ W^Q_hᵀ (A K)_hD + W^K_hᵀ (Aᵀ Q)_hD ]

Both terms come from one materialised softmax: fused SDPA would give A K but not Aᵀ Q (a
column-weighted sum under row normalisers), which would need two more passes over the scores; at the
token counts of image models (N ≤ a few hundred) one explicit (B, H, N, N) softmax is the cheaper
choice. ``grad`` is the closed form; autograd of ``energy`` is the reference (tested).

**The dynamics** (§2, Eq. 7-8): τ dx/dt = -∂E/∂g, i.e. the update is the gradient with respect to g,
evaluated at g = LN(x), and applied to x. In the library this is an
:class:`~energyformer.core.EnergyBlock` with ``norm = EnergyLayerNorm`` *in the loop* and gradient
descent (``blocks/et.py``): each step is x ← x - α ∇_g E(LN(x)). That is not -α ∇_x E(LN(x)) (the
layer norm's Jacobian J is missing), so the block reports ``exact = False``; but J = ∂g/∂x is
symmetric positive semi-definite when the gain is a scalar, so dE/dt = -(∇_g E)ᵀ J ∇_g E ≤ 0: the
step is a descent direction of E(LN(x)) and a small enough step lowers it (ET's Lyapunov argument;
``tests/blocks/test_et.py`` checks both the update and the decrease). With a per-channel gain J is
not symmetric and the guarantee is lost, which is why ET uses a scalar γ.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from ..core.attention import key_padding_mask
from ..core.composite import CompositeEnergy
from ..core.energy import Energy, register_energy
from ..core.norm import NORMS, NormConfig
from ..utils.validate import check_float, check_int
from .hopfield import HopfieldEnergy


class EnergyLayerNorm(nn.Module):
    """ET's layer norm (Eq. 1): g = γ (x - mean) / sqrt(var + ε) + δ with a scalar gain γ and a
    per-channel bias δ. The scalar gain keeps ∂g/∂x symmetric PSD (the module docstring)."""

    param_roles = {"gamma": "norm", "delta": "norm"}

    def __init__(self, dim: int, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        check_int("dim", dim, min=1)
        self.eps = float(eps)
        self.gamma = nn.Parameter(torch.ones(()))
        self.delta = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: Tensor) -> Tensor:  # (..., D)
        g = self.gamma * F.layer_norm(x, x.shape[-1:], eps=self.eps)  # PyTorch's (fused) norm without its affine
        return g + self.delta if self.delta is not None else g

    def extra_repr(self) -> str:
        return f"eps={self.eps}, bias={self.delta is not None}"


class EnergyLayerNormConfig(NormConfig):
    """ET's layer norm (Eq. 1): scalar gain γ, per-channel bias δ (norm kind ``energy_layer``)."""

    kind: Literal["energy_layer"] = "energy_layer"
    eps: float = Field(1e-5, gt=0)
    """epsilon ε of Eq. 1 (1e-5, as torch's LayerNorm)"""
    bias: bool = True
    """the per-channel bias δ of Eq. 1 (false: none)"""


@NORMS.register("energy_layer", EnergyLayerNormConfig)
def build_energy_layer_norm(cfg: EnergyLayerNormConfig, dim: int) -> EnergyLayerNorm:
    """ET's scalar-gain layer norm (Eq. 1; its Jacobian is symmetric PSD)."""
    return EnergyLayerNorm(dim, cfg.eps, cfg.bias)


@register_energy("et_attention")
class ETAttentionEnergy(Energy):
    """E^ATT_C = -(1/β) Σ_h log Σ_{B(≠C)} exp(β k_hBᵀ q_hC), q = W^Q g, k = W^K g (ET Eq. 2).

    Per-token energy indexed by the query C; the context (keys) is the iterate itself. ``mask`` (a
    key-padding mask given to :meth:`prepare`) hides padded tokens as keys and drops them as queries: a padded
    token's E_C is 0, so its query does not pull on the real tokens' keys (the key side of the gradient), and
    a padded batch row equals the row truncated to its real tokens. W^Q, W^K ∈ R^{H×Y×D} are drawn
    from N(0, init_std²) (0.002: the ET code and the Hyper-SET authors' ET).
    """

    context_is_iterate = True

    def __init__(self, dim: int, heads: int, head_dim: int | None = None, beta: float | None = None,
                 self_interaction: bool = False, init_std: float = 0.002):
        super().__init__()
        check_int("dim", dim, min=1)
        check_int("heads", heads, min=1)
        head_dim = head_dim if head_dim is not None else dim // heads
        check_int("head_dim", head_dim, min=1)
        if beta is not None:
            check_float("beta", beta, min=0.0, min_exclusive=True)
        check_float("init_std", init_std, min=0.0, min_exclusive=True)
        self.dim, self.heads, self.head_dim = dim, heads, head_dim
        self.beta = float(beta) if beta is not None else 1.0 / math.sqrt(head_dim)
        self.self_interaction = bool(self_interaction)
        self.init_std = float(init_std)
        self.wq = nn.Parameter(torch.empty(heads, head_dim, dim))  # (H, Y, D)
        self.wk = nn.Parameter(torch.empty(heads, head_dim, dim))
        self.reset_energy_parameters()

    def reset_energy_parameters(self) -> None:
        with torch.no_grad():
            self.wq.normal_(0.0, self.init_std)
            self.wk.normal_(0.0, self.init_std)

    @classmethod
    def examples(cls, dtype: torch.dtype = torch.float64):
        out = []
        for label, kw in (("no_self", {}), ("with_self", {"self_interaction": True})):
            torch.manual_seed(0)
            e = cls(8, 2, beta=0.7, init_std=0.3, **kw).to(dtype)
            x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1), dtype=dtype)
            out.append((label, e, x, x))
        return out

    # --------------------------------------------------------------------- pieces
    def _proj(self, x: Tensor, w: Tensor) -> Tensor:
        return torch.einsum("bnd,hyd->bhny", x, w.to(x.dtype))  # (B, H, N, Y)

    def prepare(self, context: Tensor, *, mask: Tensor | None = None, **kwargs: Any) -> dict[str, Any]:
        return {"k": self._proj(context, self.wk), "mask": mask}

    def reprepare(self, state: dict[str, Any], u: Tensor) -> dict[str, Any]:
        return {"k": self._proj(u, self.wk), "mask": state["mask"]}

    def _scores(self, q: Tensor, k: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """(scores (B, H, Nq, Nk) with hidden keys at −inf, keyless (…, Nq, 1) or None): keyless marks the queries
        that see no key at all — without self-interaction a sequence of one token, or a row's only real token —
        whose rows are set to 0 (finite) here; their E_C is the empty interaction, 0 (:meth:`energy`)."""
        s = self.beta * (q @ k.transpose(-1, -2))  # (B, H, Nq, Nk)
        n_q, n_k = s.shape[-2:]
        hide = None
        if not self.self_interaction:
            hide = torch.eye(n_q, n_k, dtype=torch.bool, device=s.device)
        if mask is not None:
            pad = ~key_padding_mask(mask)  # (B, 1, 1, Nk)
            hide = pad if hide is None else (hide | pad)
        if hide is None:
            return s, None
        keyless = hide.all(-1, keepdim=True)
        return s.masked_fill(hide, float("-inf")).masked_fill(keyless, 0.0), keyless

    # --------------------------------------------------------------------- energy and gradient
    def energy(self, x: Tensor, state: dict[str, Any]) -> Tensor:
        """E_C per token (B, N); 0 for a padded query and for one that sees no key (no interaction: log of an
        empty sum would be −∞, an infinite energy and NaN gradients — a sequence of one token without
        self-interaction, or a padded row's only real token)."""
        q = self._proj(x, self.wq)
        s, keyless = self._scores(q, state["k"], state["mask"])
        lse = torch.logsumexp(s, dim=-1)  # (B, H, N)
        if keyless is not None:
            lse = torch.where(keyless[..., 0], 0.0, lse)
        e = -(lse.sum(1)) / self.beta  # (B, N)
        mask = state["mask"]
        return e if mask is None else torch.where(mask.to(torch.bool), e, 0.0)  # padded queries: E_C = 0

    def grad(self, x: Tensor, state: dict[str, Any]) -> Tensor:
        """Total derivative (query side + key side) at x, with ``state`` prepared at x."""
        q, k, mask = self._proj(x, self.wq), state["k"], state["mask"]
        s, keyless = self._scores(q, k, mask)
        a = torch.softmax(s, dim=-1)  # (B, H, N, N), rows = queries C
        if keyless is not None:  # a query that sees no key has no energy
            a = torch.where(keyless, 0.0, a)
        if mask is not None:  # padded queries have no energy
            a = torch.where(mask.to(torch.bool)[:, None, :, None], a, 0.0)
        dq = a @ k                                  # Σ_B A_CB k_B      (B, H, N, Y)
        dk = a.transpose(-1, -2) @ q                # Σ_C A_CB q_C      (B, H, N, Y)
        wq, wk = self.wq.to(x.dtype), self.wk.to(x.dtype)
        return -(torch.einsum("bhny,hyd->bnd", dq, wq) + torch.einsum("bhny,hyd->bnd", dk, wk))

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, heads={self.heads}, head_dim={self.head_dim}, beta={self.beta:.4g}, "
                f"self_interaction={self.self_interaction}")


@register_energy("energy_transformer")
class EnergyTransformerEnergy(CompositeEnergy):
    """E = E^ATT + E^HN (ET Eq. 7) on layer-normalised tokens; terms 'attention' and 'hopfield'.

    ``memories = 0`` leaves the attention energy alone (an ablation).
    """

    def __init__(self, dim: int, heads: int, head_dim: int | None = None, memories: int | None = None,
                 beta: float | None = None, self_interaction: bool = False, init_std: float = 0.002):
        memories = 4 * dim if memories is None else memories
        check_int("memories", memories, min=0)
        terms: dict[str, Energy] = {"attention": ETAttentionEnergy(dim, heads, head_dim, beta, self_interaction,
                                                                   init_std)}
        if memories:
            terms["hopfield"] = HopfieldEnergy(dim, memories)
        super().__init__(terms)

    @classmethod
    def examples(cls, dtype: torch.dtype = torch.float64):
        torch.manual_seed(0)
        e = cls(8, 2, memories=12, beta=0.7, init_std=0.3).to(dtype)
        x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(2), dtype=dtype)
        return [("D8_H2_M12", e, x, x)]

    @property
    def attention(self) -> ETAttentionEnergy:
        return self.terms["attention"]

    @property
    def hopfield(self) -> HopfieldEnergy | None:
        return self.terms["hopfield"] if "hopfield" in self.terms else None
