"""CRATE's two energies (Yu et al. 2023, "White-Box Transformers via Sparse Rate Reduction", NeurIPS;
Hu et al. 2024, "An In-depth Investigation of Sparse Rate Reduction in Transformer-like Models",
NeurIPS, for CRATE-T).

**Compression: multi-head subspace self-attention (MSSA), Yu et al. §2.3 Eqs. 8-11.** CRATE descends
the coding rate of the tokens projected onto K subspaces U_k ∈ R^{D×p}; after its approximations the
step is z ← z + κ Σ_k U_k SSA(U_kᵀ z),  SSA(V) = V softmax(β VᵀV). We write that step as the
gradient of a per-token energy with the context h (the layer-normalised tokens) held fixed:

    E_i(x | h) = -(1/β) Σ_k log Σ_j exp(β (U_kᵀ x_i)ᵀ (U_kᵀ h_j))                    (:class:`SubspaceAttentionEnergy`)
    -∇_{x_i} E = Σ_k U_k Σ_j softmax_j(β (U_kᵀ x_i)ᵀ (U_kᵀ h_j)) U_kᵀ h_j

At x = h this is exactly CRATE's MSSA with the output tied to the subspaces, U (CRATE-T, Hu et al.
2024, ``output='tied'``): the update is -∇E (``exact``), computed with one fused
``scaled_dot_product_attention`` per call in bf16/fp16 and a materialised softmax in float32/float64
(queries U_kᵀx, keys = values = U_kᵀh; :meth:`SubspaceAttentionEnergy.ssa` says why).

The released Hyper-SET code's CRATE-T (``layers/components/attention.py``, ``F.linear(out, W)``)
maps the attention output back with Uᵀ read as a D x Kp matrix (possible only when Kp = D), i.e. with
the transpose of the operator the derivation gives: ``output='tied_code'``. That update is not a
gradient of E (``exact = False``) but it is the model behind the paper's CRATE-T numbers, and it
trains where the exact one does not: at our CPU scale (d = 224, MNIST, Adam 1e-3) the exact
``tied`` update, a symmetric PSD map U Uᵀ of an average of the tokens, pulls every token towards the
same point over 12 iterations and the loss stays at ln 10 for 100 steps, while ``tied_code`` falls to
1.88 (measured while adding it). The default stays the derivation (``tied``); the image reproduction
reports both.
CRATE itself (Yu et al., ``output='learned'``) replaces U by a learned output matrix W_O with a
bias, which is not the gradient of any energy of this form: ``exact = False``, and the property test
checks the update against an independent materialised formula (:meth:`reference_direction`). β = 1/√p.
The sign is attraction (compression): a token moves towards the tokens it already attends to; Hyper-SET's
E_ATTN is the repulsive counterpart.

**Sparsification: one ISTA step on a LASSO, Yu et al. §2.4 Eq. 13.** With a (square) dictionary D and
the signal x (the layer-normalised tokens) the smooth part of the LASSO is

    E_i(z | x) = ½ ||x_i - D z_i||²,   ∇_z E = Dᵀ(D z - x)                                 (:class:`LassoEnergy`)

and ISTA's proximal step z ← ReLU(z - η ∇E - η λ) (non-negative soft threshold) starting at z = x is
CRATE's feed-forward. The proximal step lives in the solver (``blocks/crate.py``: ``ISTA``); this
energy is exact (grad = autograd).

Both energies initialise their parameters as the reference code does (PyTorch ``nn.Linear`` defaults
for U and W_O, Kaiming-uniform for D) in :meth:`reset_energy_parameters`, which models call after
their own generic initialisation.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from einops import rearrange
from torch import Tensor, nn

from ..core.attention import key_padding_mask, masked_logsumexp, masked_softmax, sdpa
from ..core.energy import Energy, register_energy
from ..core.precond import Preconditioner
from ..utils.validate import check_choice, check_int

CRATE_OUTPUTS = ("tied", "learned", "tied_code")


@register_energy("crate_mssa")
class SubspaceAttentionEnergy(Energy):
    """E_i(x | h) = -(1/β) Σ_k LSE_j(β (U_kᵀ x_i)ᵀ(U_kᵀ h_j)); update U·SSA (tied, exact), W_O·SSA + b
    (learned) or the released code's (Uᵀ)ᵀ-as-D×Kp · SSA (tied_code; needs heads·head_dim = dim)."""

    param_roles = {"out_bias": "bias"}  # the learned output's additive bias: never decayed, as every bias

    def __init__(self, dim: int, heads: int, head_dim: int | None = None, output: str = "tied"):
        super().__init__()
        check_int("dim", dim, min=1)
        check_int("heads", heads, min=1)
        head_dim = head_dim if head_dim is not None else dim // heads
        check_int("head_dim", head_dim, min=1)
        check_choice("output", output, CRATE_OUTPUTS)
        if output == "tied_code" and heads * head_dim != dim:
            raise ValueError(f"output = 'tied_code' reads Uᵀ as a D x Kp matrix, so heads * head_dim "
                             f"({heads} * {head_dim}) must equal dim ({dim}); use 'tied' or 'learned'")
        self.dim, self.heads, self.head_dim, self.output = dim, heads, head_dim, output
        self.beta = 1.0 / math.sqrt(head_dim)
        inner = heads * head_dim
        self.basis = nn.Parameter(torch.empty(inner, dim))  # Uᵀ: rows of head k = U_kᵀ   (Kp, D)
        if output == "learned":
            self.out_weight = nn.Parameter(torch.empty(dim, inner))  # W_O (D, Kp)
            self.out_bias = nn.Parameter(torch.empty(dim))
        self.reset_energy_parameters()

    @property
    def exact(self) -> bool:  # type: ignore[override]
        return self.output == "tied"

    def reset_energy_parameters(self) -> None:
        """U, W_O, b_O as ``nn.Linear``'s defaults (the CRATE code): U(±1/√fan_in)."""
        with torch.no_grad():
            b = 1.0 / math.sqrt(self.dim)
            self.basis.uniform_(-b, b)
            if self.output == "learned":
                b = 1.0 / math.sqrt(self.basis.shape[0])
                self.out_weight.uniform_(-b, b)
                self.out_bias.uniform_(-b, b)

    @classmethod
    def examples(cls, dtype: torch.dtype = torch.float64):
        out = []
        for output in CRATE_OUTPUTS:
            torch.manual_seed(0)
            e = cls(8, 2, output=output).to(dtype)
            g = torch.Generator().manual_seed(3)
            ctx = torch.randn(2, 5, 8, generator=g, dtype=dtype)
            x = torch.randn(2, 5, 8, generator=g, dtype=dtype)
            out.append((output, e, ctx, x))
        return out

    def _heads(self, x: Tensor) -> Tensor:
        return rearrange(x @ self.basis.to(x.dtype).t(), "b n (h p) -> b h n p", h=self.heads)  # (B, K, N, p)

    def prepare(self, context: Tensor, *, mask: Tensor | None = None, **kwargs: Any) -> dict[str, Any]:
        key_mask = key_padding_mask(mask)  # (B, 1, 1, Nk) or None
        return {"v": self._heads(context), "mask": key_mask}

    def energy(self, x: Tensor, state: dict[str, Any]) -> Tensor:
        s = self.beta * (self._heads(x) @ state["v"].transpose(-1, -2))  # (B, K, N, Nk)
        return -masked_logsumexp(s, state["mask"]).sum(1) / self.beta  # (B, N)

    def ssa(self, x: Tensor, state: dict[str, Any]) -> Tensor:
        """Σ_j softmax_j(β q_iᵀ v_j) v_j per head, heads concatenated: (B, N, K p).

        In bf16/fp16 one fused SDPA call; in float32 (and float64) the softmax is materialised: q = k = v
        are tied subspace codes, so at large weights the logits reach the thousands, and the fused backward
        recomputes p = exp(s − lse) from a float32 log-sum-exp of that size — 1e-4 relative gradient error
        where the materialised softmax (row max subtracted exactly) keeps 5e-7 (the gradient scale fuzz,
        tests/core/test_scale_fuzz.py). CRATE is bidirectional over short sequences (17 image tokens, 81
        Sudoku cells), so the (B, K, N, N) scores are small."""
        v, q = state["v"], self._heads(x)
        if q.dtype in (torch.float16, torch.bfloat16):
            o = sdpa(q, v, v, False, None, scale=self.beta, mask=state["mask"])  # (B, K, N, p)
        else:
            o = masked_softmax(self.beta * (q @ v.transpose(-1, -2)), state["mask"]) @ v  # (B, K, N, p)
        return rearrange(o, "b h n p -> b n (h p)")

    def grad(self, x: Tensor, state: dict[str, Any]) -> Tensor:
        return -(self.ssa(x, state) @ self.basis.to(x.dtype))  # -U · SSA   (B, N, D)

    def direction(self, x: Tensor, state: dict[str, Any], precond: Preconditioner) -> Tensor:
        if self.output == "tied":
            return -precond(self.grad(x, state))
        if self.output == "tied_code":  # F.linear(SSA, W) with W = Uᵀ (Kp = D)   (B, N, D)
            return precond(self.ssa(x, state) @ self.basis.to(x.dtype).t())
        return precond(self.ssa(x, state) @ self.out_weight.to(x.dtype).t() + self.out_bias.to(x.dtype))

    def reference_direction(self, x: Tensor, state: dict[str, Any], precond: Preconditioner) -> Tensor:
        """CRATE's MSSA written out: W_O [Σ_j softmax_j(β (U_kᵀx_i)ᵀ(U_kᵀh_j)) U_kᵀh_j]_k + b (materialised)."""
        q, v = self._heads(x), state["v"]
        s = self.beta * torch.einsum("bkip,bkjp->bkij", q, v)
        o = torch.einsum("bkij,bkjp->bkip", masked_softmax(s, state["mask"]), v)
        w = (self.out_weight if self.output == "learned"
             else self.basis.t() if self.output == "tied" else self.basis)  # (D, Kp)
        out = torch.einsum("bkip,dkp->bid", o, w.reshape(self.dim, self.heads, self.head_dim).to(x.dtype))
        if self.output == "learned":
            out = out + self.out_bias.to(x.dtype)
        return precond(out)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, heads={self.heads}, head_dim={self.head_dim}, output={self.output!r}"


@register_energy("crate_lasso")
class LassoEnergy(Energy):
    """E_i(z | x) = ½ ||x_i - D z_i||² (the smooth part of CRATE's LASSO), D ∈ R^{D×D}; grad = Dᵀ(Dz - x)."""

    def __init__(self, dim: int):
        super().__init__()
        check_int("dim", dim, min=1)
        self.dim = dim
        self.dictionary = nn.Parameter(torch.empty(dim, dim))  # D
        self.reset_energy_parameters()

    def reset_energy_parameters(self) -> None:
        """D ~ Kaiming-uniform (the CRATE code's ``init.kaiming_uniform_``): U(±√(6/D))."""
        with torch.no_grad():
            nn.init.kaiming_uniform_(self.dictionary)

    @classmethod
    def examples(cls, dtype: torch.dtype = torch.float64):
        torch.manual_seed(0)
        e = cls(6).to(dtype)
        g = torch.Generator().manual_seed(4)
        ctx = torch.randn(2, 5, 6, generator=g, dtype=dtype)
        return [("D6", e, ctx, torch.randn(2, 5, 6, generator=g, dtype=dtype))]

    def prepare(self, context: Tensor, **kwargs: Any) -> Tensor:
        return context  # the signal x

    def energy(self, z: Tensor, x: Tensor) -> Tensor:
        return 0.5 * (x - z @ self.dictionary.to(z.dtype).t()).pow(2).sum(-1)  # (B, N)

    def grad(self, z: Tensor, x: Tensor) -> Tensor:
        d = self.dictionary.to(z.dtype)
        return (z @ d.t() - x) @ d  # Dᵀ(Dz - x), row form   (B, N, D)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
