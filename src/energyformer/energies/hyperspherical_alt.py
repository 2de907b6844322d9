"""Alternative hyperspherical energies of Hyper-SET (seed 002, App. G.1, Tables 19-20).

The general forms (Eq. 19-20), with the sphere constraint as in Eq. 6 (``sphere=True``: the update
is the gradient at the normalised projections, ``exact = False``; see
:mod:`energyformer.energies.hyperspherical`)::

    E_ATTN = Σ_h Σ_i f(Σ_j K(z_i^h, z_j^h)),       E_FF = −Σ_i g(Σ_m h(d_mᵀ x_i))

| registered name               | choice                                  | per-token energy                    | update (projection space)          |
|-------------------------------|-----------------------------------------|-------------------------------------|------------------------------------|
| ``hyperset_sigmoid_attention``| f = β⁻¹x/2, K = σ(β xᵀy)                | ½β⁻¹ Σ_j σ(S_ij)                    | Σ_j σ'(S_ij) z_j                   |
| ``hyperset_linear_attention`` | f = β⁻¹x/2, K = ½(β Φ(x)ᵀΦ(y))²         | ¼β Σ_j (φ_iᵀφ_j)²                   | β Φ'(z_i) ⊙ (Σ_j φ_j φ_jᵀ) φ_i     |
| ``hyperset_softmax_ff``       | g = log, h = exp                        | −log Σ_m exp(u_m)                   | D softmax(u)                       |
| ``hyperset_gated_ff``         | g = ½x², h = Φ                          | −½ (Σ_m Φ(u_m))²                    | D [(Σ_m Φ(u_m)) Φ'(u)]             |

(S_ij = β z_iᵀ z_j, φ_i = Φ(z_i), u = sphere(Dᵀ x).) The updates are the total derivatives (every
token moves), as Table 19's last column; Φ is the sigmoid (the paper's choice) unless ``phi`` says
otherwise. Linear attention costs O(N p²): the p x p matrix Σ_j φ_j φ_jᵀ is formed once.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..core.energy import register_energy
from ..utils.validate import check_choice
from .hyperspherical import SphericalFFEnergy, SubspaceAttentionEnergy, SubspaceState, _attention_examples


def _phi(name: str, u: Tensor) -> tuple[Tensor, Tensor]:
    """Φ(u) and Φ'(u) for the element-wise transforms of Tables 19-20."""
    if name == "sigmoid":  # σ' = σ(u)σ(−u): no cancellation in 1 − σ(u) for large u (bf16: 1 − σ = 0)
        return torch.sigmoid(u), torch.sigmoid(u) * torch.sigmoid(-u)
    if name == "tanh":
        t = torch.tanh(u)
        return t, 1 - t * t
    if name == "softplus":
        return F.softplus(u), torch.sigmoid(u)
    raise ValueError(f"phi = {name!r}: allowed values are 'sigmoid', 'tanh', 'softplus'")


PHIS = ("sigmoid", "tanh", "softplus")


def _keys_mask(mask: Tensor | None, like: Tensor) -> Tensor | None:
    """Multiplicative (B|1, 1, Nq|1, Nk) mask in ``like``'s dtype from an SDPA bool mask."""
    return None if mask is None else mask.to(like.dtype)


@register_energy("hyperset_sigmoid_attention")
class SigmoidAttentionEnergy(SubspaceAttentionEnergy):
    """Sigmoid attention (Table 19): e_i = ½β⁻¹ Σ_j σ(β z_iᵀ z_j); update Σ_j σ(1−σ)(S_ij) z_j."""

    @classmethod
    def examples(cls, dtype=torch.float64):
        return _attention_examples(cls, dtype, [{"sphere": False}, {}, {"self_interaction": False}])

    def head_energy(self, q, k, mask):
        s = torch.einsum("bhid,bhjd->bhij", q, k) * self.beta
        e = torch.sigmoid(s)
        m = _keys_mask(mask, e)
        return 0.5 / self.beta * (e if m is None else e * m).sum(-1)

    def operator(self, st: SubspaceState) -> Tensor:
        s = torch.einsum("bhid,bhjd->bhij", st.q, st.k) * self.beta
        a = torch.sigmoid(s) * torch.sigmoid(-s)  # σ'(S) without the cancellation of σ(1 − σ)
        m = _keys_mask(st.mask, a)
        if m is not None:
            a = a * m
            if st.tokens is not None:  # padded queries: no column contribution
                a = a * st.tokens[:, None, :, None].to(a.dtype)
        return torch.einsum("bhij,bhjd->bhid", a, st.v)


@register_energy("hyperset_linear_attention")
class LinearAttentionEnergy(SubspaceAttentionEnergy):
    """Linear attention (Table 19): e_i = ¼β Σ_j (Φ(z_i)ᵀΦ(z_j))²; update β Φ'(z_i) ⊙ G Φ(z_i), G = Σ_j Φ_j Φ_jᵀ.

    No N x N matrix: O(N p²). ``self_interaction=False`` is not offered (it would need the N x N
    diagonal correction the linear form avoids).
    """

    def __init__(self, dim: int, heads: int, head_dim: int | None = None, *, phi: str = "sigmoid", **kw: Any):
        if kw.get("self_interaction", True) is False:
            raise ValueError("self_interaction = False: not available for linear attention (use the "
                             "sigmoid or bi-softmax energy)")
        if kw.get("qkv_norm", "shared") != "shared":
            raise ValueError("qkv_norm = 'separate': only the bi-softmax energy offers it")
        super().__init__(dim, heads, head_dim, **kw)
        check_choice("phi", phi, PHIS)
        self.phi = phi

    @classmethod
    def examples(cls, dtype=torch.float64):
        return _attention_examples(cls, dtype, [{"sphere": False}, {}, {"gain": "learned", "phi": "tanh"}])

    def _gram(self, k: Tensor, tokens: Tensor | None) -> Tensor:
        fk = _phi(self.phi, k)[0]
        if tokens is not None:
            fk = fk * tokens[:, None, :, None].to(fk.dtype)
        return torch.einsum("bhjd,bhje->bhde", fk, fk)  # (B, H, p, p)

    def head_energy(self, q, k, mask):
        # mask here is the key-padding SDPA mask (B, 1, 1, N) or None
        tokens = None if mask is None else mask[:, 0, 0, :]
        fq = _phi(self.phi, q)[0]
        g = self._gram(k, tokens)
        return 0.25 * self.beta * torch.einsum("bhid,bhde,bhie->bhi", fq, g, fq)

    def operator(self, st: SubspaceState) -> Tensor:
        fq, dq = _phi(self.phi, st.q)
        g = self._gram(st.k, st.tokens)
        return self.beta * dq * torch.einsum("bhde,bhie->bhid", g, fq)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", phi={self.phi!r}"


@register_energy("hyperset_softmax_ff")
class SoftmaxFFEnergy(SphericalFFEnergy):
    """Softmax feed-forward (Table 20): e_i = −log Σ_m exp(u_m); update D softmax(u)."""

    @classmethod
    def examples(cls, dtype=torch.float64):
        return cls._examples(dtype, [{"sphere": False}, {}])

    def token_energy(self, u: Tensor) -> Tensor:
        return -torch.logsumexp(u, dim=-1)

    def activation(self, u: Tensor) -> Tensor:
        return torch.softmax(u, dim=-1)


@register_energy("hyperset_gated_ff")
class GatedFFEnergy(SphericalFFEnergy):
    """Gated feed-forward (Table 20): e_i = −½ (Σ_m Φ(u_m))²; update D [(Σ_m Φ(u_m)) Φ'(u)]."""

    def __init__(self, dim: int, hidden: int, *, phi: str = "sigmoid", **kw: Any):
        super().__init__(dim, hidden, **kw)
        check_choice("phi", phi, PHIS)
        self.phi = phi

    @classmethod
    def examples(cls, dtype=torch.float64):
        return cls._examples(dtype, [{"sphere": False}, {}, {"phi": "tanh"}])

    def token_energy(self, u: Tensor) -> Tensor:
        return -0.5 * _phi(self.phi, u)[0].sum(-1).pow(2)

    def activation(self, u: Tensor) -> Tensor:
        f, df = _phi(self.phi, u)
        return f.sum(-1, keepdim=True) * df
