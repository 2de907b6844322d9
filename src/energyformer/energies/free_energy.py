"""Energies of "Transformers as intrinsic optimizers" (seed 001 §2; equations lost in extraction,
taken from ``reconstructed.md`` §1.1, labels D1-D8).

A context token ``h_j`` and a query state ``z`` (the token being updated; causal: j ≤ i):

* (D1) elastic potential          ``E_j(z) = ½‖z − W h_j‖²``                 :class:`ElasticPotential`
* (D2) Helmholtz free energy      ``F(p; z) = Σ_j p_j E_j + T Σ_j p_j log p_j``  :func:`helmholtz`
* (D3, Lemma 1) its minimum over p is at ``p = softmax(−E/T)``, ``F*(z) = −T log Σ_j exp(−E_j/T)``
* (D4) ``∇F* = z − μ``, ``μ = Σ_j p_j W h_j``                        :class:`HelmholtzFreeEnergy` ('elastic')
* (D5, Theorem 1) on the hypersphere, ``F_s(z) = −T log Σ_j exp(zᵀW h_j / T)``, ``−∇F_s = μ``:
  one GD step is softmax attention + the residual                  :class:`HelmholtzFreeEnergy` ('sphere')
* (D6, Theorem 2) ``F_lin(z) = ½ Σ_j (zᵀW h_j)²``: one GD step is (unnormalised) linear attention
                                                                   :class:`SumOfSquaresEnergy`
* (D7, Theorem 3) multi-head: ``F_MH = (1/H) Σ_h F*_h`` with ``E^h_j = ½‖P_h z − W_h h_j‖²``; on the
  sphere one GD step is MHA with ``V^h = K^h`` and ``W_O^h = (η/H) P_hᵀ``   :class:`MultiHeadFreeEnergy`
* (D8, Lemma 2) ``∇²F_MH = (1/H) Σ_h P_hᵀ (I − C_h/T_h) P_h`` (used by the Newton heads,
  :mod:`energyformer.energies.newton`).

Every energy here is exact (its direction is ``−P ∇E``) and provides a closed-form gradient; the
library-wide property test checks both. Per-token energies are (B, N); the query side is ``x``
(B, N, D), the context ``h`` (B, Nk, D) is prepared once (keys ``W_h h_j``). ``causal`` hides keys
j > i (queries are the last Nq of Nk positions, so a KV cache works); a key-padding mask hides keys.

Temperatures are fixed per head here (default ``√d_h``, the standard attention scale;
reconstructed.md §1.3 [REC]). The elastic form adds the ``½‖q‖²`` term that the softmax drops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from ..core.attention import append_cache, masked_logsumexp, sdpa, visible
from ..core.constants import ExactConstant
from ..core.energy import Energy, register_energy
from ..utils.validate import check_choice, check_float, check_int

FORMS = ("elastic", "sphere")


# ----------------------------------------------------------------------------- shared helpers
# masks, SDPA dispatch and the KV cache: energyformer.core.attention (the attention kit)
def split_heads(t: Tensor, heads: int) -> Tensor:
    """(B, N, H·dh) -> (B, H, N, dh)."""
    return rearrange(t, "b n (h d) -> b h n d", h=heads)


def merge_heads(t: Tensor) -> Tensor:
    """(B, H, N, dh) -> (B, N, H·dh)."""
    return rearrange(t, "b h n d -> b n (h d)")


def helmholtz(p: Tensor, E: Tensor, T: float | Tensor) -> Tensor:
    """(D2) ``F(p) = Σ_j p_j E_j + T Σ_j p_j log p_j`` over the last axis (0 log 0 = 0)."""
    ent = torch.where(p > 0, p * torch.log(torch.where(p > 0, p, torch.ones_like(p))), torch.zeros_like(p))
    return (p * E).sum(-1) + T * ent.sum(-1)


def boltzmann(E: Tensor, T: float | Tensor) -> Tensor:
    """(D3, Lemma 1) the minimiser of :func:`helmholtz` over the simplex: ``softmax(−E/T)``."""
    return torch.softmax(-E / T, dim=-1)


def free_energy_heads(q: Tensor, k: Tensor, T: Tensor, form: str, vis: Tensor | None) -> tuple[Tensor, Tensor]:
    """Per-head free energy F*_h (B, H, Nq) and its gradient w.r.t. q (B, H, Nq, dh).

    elastic: ``F = ½‖q‖² − T lse_j((q·k_j − ½‖k_j‖²)/T)``, ``∂F/∂q = q − μ``;
    sphere:  ``F = −T lse_j(q·k_j / T)``,                  ``∂F/∂q = −μ``;  ``μ = Σ_j p_j k_j``.
    T: (H,) temperatures.
    """
    Tb = T[None, :, None, None].to(q.dtype)
    s = q @ k.transpose(-1, -2)  # (B, H, Nq, Nk)
    if form == "elastic":
        s = s - 0.5 * (k * k).sum(-1)[:, :, None, :]
    s = s / Tb
    lse = masked_logsumexp(s, vis)
    p = torch.exp(s - lse[..., None])
    if vis is not None:
        p = p.masked_fill(~vis, 0.0)
    mu = p @ k
    Fh = -Tb[..., 0] * lse
    if form == "elastic":
        return Fh + 0.5 * (q * q).sum(-1), q - mu
    return Fh, -mu


class _HeadsBase(Energy):
    """Query projection P (H·dh × D, = W_Q), key projection W (H·dh × D, = W_K), fixed temperatures."""

    exact = True

    def __init__(self, dim: int, heads: int, head_dim: int | None = None, temperature: float | None = None,
                 causal: bool = True):
        super().__init__()
        check_int("dim", dim, min=1)
        check_int("heads", heads, min=1)
        self.dim, self.heads = dim, heads
        self.head_dim = head_dim or dim // heads
        check_int("head_dim", self.head_dim, min=1)
        t = math.sqrt(self.head_dim) if temperature is None else temperature
        check_float("temperature", t, min=0.0, min_exclusive=True)
        self.fixed_temperature = ExactConstant([float(t)] * heads)  # (H,), exact in every dtype (issue 23)
        self.wq = nn.Linear(dim, heads * self.head_dim, bias=False)  # P_h stacked
        self.wk = nn.Linear(dim, heads * self.head_dim, bias=False)  # W_h stacked
        self.causal = bool(causal)

    @property
    def temperature(self) -> Tensor:
        """(H,) fixed temperatures T_h in the module's dtype."""
        return self.fixed_temperature()

    def prepare(self, context: Tensor, cache: dict | None = None, offset: int = 0,
                mask: Tensor | None = None, **kw) -> HeadsState:
        k = split_heads(self.wk(context), self.heads)  # (B, H, Nn, dh)
        kv, key_mask = append_cache(cache, mask, k=k)
        return HeadsState(h=context, k=kv["k"], key_mask=key_mask)

    def queries(self, x: Tensor) -> Tensor:
        return split_heads(self.wq(x), self.heads)  # (B, H, N, dh)

    def vis(self, x: Tensor, st: HeadsState) -> Tensor | None:
        return visible(x.shape[1], st.k.shape[2], self.causal, st.key_mask, x.device)

    def to_model(self, g_q: Tensor) -> Tensor:
        """Σ_h P_hᵀ g_h: (B, H, N, dh) -> (B, N, D)."""
        return merge_heads(g_q) @ self.wq.weight

    @classmethod
    def _example_inputs(cls, dtype, seed: int, d: int = 8, n: int = 5):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(2, n, d, generator=g, dtype=dtype), torch.randn(2, n, d, generator=g, dtype=dtype))


@dataclass
class HeadsState:
    h: Tensor                     # (B, Nk, D) context (normalised input)
    k: Tensor                     # (B, H, Nk, dh) keys (all cached + new)
    key_mask: Tensor | None = None  # (B, Nk) bool or None


# ----------------------------------------------------------------------------- D1
@register_energy("elastic_potential")
class ElasticPotential(_HeadsBase):
    """(D1) Mean elastic potential over the visible context, ``U_i(z) = mean_{j≤i} ½‖z − W h_j‖²``
    (the internal energy at uniform p: the T → ∞ limit of the free energy up to a constant).
    ``∇U = z − mean_j W h_j``. One head, W: D × D."""

    def __init__(self, dim: int, causal: bool = True):
        super().__init__(dim, 1, dim, None, causal)
        del self.wq
        self.wq = None

    def queries(self, x: Tensor) -> Tensor:
        return x[:, None]

    def _weights(self, x, st):
        vis = self.vis(x, st)
        nq, nk = x.shape[1], st.k.shape[2]
        w = torch.ones(1, 1, nq, nk, dtype=x.dtype, device=x.device) if vis is None else vis.to(x.dtype)
        return w / w.sum(-1, keepdim=True)

    def energy(self, x: Tensor, st: HeadsState) -> Tensor:
        d2 = ((x[:, None, :, None, :] - st.k[:, :, None, :, :]) ** 2).sum(-1)  # (B, 1, Nq, Nk)
        return (0.5 * self._weights(x, st) * d2).sum(-1)[:, 0]

    def grad(self, x: Tensor, st: HeadsState) -> Tensor:
        w = self._weights(x, st)
        return x - (w @ st.k)[:, 0]

    @classmethod
    def examples(cls, dtype=torch.float64):
        out = []
        for causal in (True, False):
            torch.manual_seed(1)
            e = cls(8, causal=causal).to(dtype)
            ctx, x = cls._example_inputs(dtype, 2)
            out.append((f"causal={causal}", e, ctx, x))
        return out


# ----------------------------------------------------------------------------- D3-D5 (single head)
@register_energy("helmholtz_free_energy")
class HelmholtzFreeEnergy(_HeadsBase):
    """(D3-D5) single-head Helmholtz free energy with elastic potential ``E_j = ½‖z − W h_j‖²``.

    ``form='elastic'`` (full space): ``F* = −T log Σ_j exp(−E_j/T)``, ``∇F* = z − μ`` (D4);
    ``form='sphere'`` (Theorem 1, ‖z‖ and ‖W h_j‖ constant): ``F_s = −T log Σ_j exp(zᵀW h_j/T)``,
    ``−∇F_s = μ``, so ``z − η∇F_s`` is softmax attention + residual with ``W_V = ηW`` (seed §2.1).
    """

    def __init__(self, dim: int, form: str = "elastic", temperature: float | None = None, causal: bool = True):
        check_choice("form", form, FORMS)
        super().__init__(dim, 1, dim, math.sqrt(dim) if temperature is None else temperature, causal)
        self.form = form
        self.wq = None  # z itself is the query (P = I)

    def queries(self, x: Tensor) -> Tensor:
        return x[:, None]

    def to_model(self, g_q: Tensor) -> Tensor:
        return g_q[:, 0]

    def energy(self, x: Tensor, st: HeadsState) -> Tensor:
        return free_energy_heads(self.queries(x), st.k, self.temperature, self.form, self.vis(x, st))[0][:, 0]

    def grad(self, x: Tensor, st: HeadsState) -> Tensor:
        return self.to_model(free_energy_heads(self.queries(x), st.k, self.temperature, self.form,
                                               self.vis(x, st))[1])

    @classmethod
    def examples(cls, dtype=torch.float64):
        out = []
        for form in FORMS:
            for causal in (True, False):
                torch.manual_seed(3)
                e = cls(8, form=form, temperature=0.7, causal=causal).to(dtype)
                with torch.no_grad():
                    e.wk.weight.normal_(0, 0.5)
                ctx, x = cls._example_inputs(dtype, 4)
                out.append((f"{form},causal={causal}", e, ctx, x))
        return out


# ----------------------------------------------------------------------------- D7
@register_energy("multihead_free_energy")
class MultiHeadFreeEnergy(_HeadsBase):
    """(D7, Theorem 3) ``F_MH(z) = (1/H) Σ_h F*_h(P_h z)`` with keys ``W_h h_j`` in H subspaces.

    ``∇F_MH = (1/H) Σ_h P_hᵀ (P_h z − μ_h)`` (elastic) or ``−(1/H) Σ_h P_hᵀ μ_h`` (sphere). A GD step
    ``z − η∇F_MH`` on the sphere is multi-head attention with tied ``V^h = K^h``, ``W_O^h = (η/H) P_hᵀ``.
    """

    def __init__(self, dim: int, heads: int, form: str = "sphere", temperature: float | None = None,
                 causal: bool = True, head_dim: int | None = None):
        check_choice("form", form, FORMS)
        super().__init__(dim, heads, head_dim, temperature, causal)
        self.form = form

    def energy(self, x: Tensor, st: HeadsState) -> Tensor:
        Fh, _ = free_energy_heads(self.queries(x), st.k, self.temperature, self.form, self.vis(x, st))
        return Fh.mean(1)

    def grad(self, x: Tensor, st: HeadsState) -> Tensor:
        _, g = free_energy_heads(self.queries(x), st.k, self.temperature, self.form, self.vis(x, st))
        return self.to_model(g / self.heads)

    def direction(self, x: Tensor, st: HeadsState, precond) -> Tensor:
        """−∇F_MH with the fused SDPA kernel (no N×N matrix): elastic logits are the inner product
        of ``[q, 1]`` with ``[k, −½‖k‖²]``; the temperature divides the query."""
        q = self.queries(x)
        k = st.k
        T = self.temperature[None, :, None, None].to(q.dtype)
        if self.form == "elastic":
            qa = torch.cat([q, torch.ones_like(q[..., :1])], -1) / T
            ka = torch.cat([k, -0.5 * (k * k).sum(-1, keepdim=True)], -1)
        else:
            qa, ka = q / T, k
        mu = sdpa(qa, ka, k, self.causal, st.key_mask, scale=1.0)
        d = self.to_model(((mu - q) if self.form == "elastic" else mu) / self.heads)
        return d if precond.is_identity else precond(d)

    @classmethod
    def examples(cls, dtype=torch.float64):
        out = []
        for form in FORMS:
            for causal in (True, False):
                torch.manual_seed(5)
                e = cls(8, 2, form=form, causal=causal).to(dtype)
                with torch.no_grad():
                    e.wq.weight.normal_(0, 0.7)
                    e.wk.weight.normal_(0, 0.7)
                ctx, x = cls._example_inputs(dtype, 6)
                out.append((f"{form},causal={causal}", e, ctx, x))
        return out


# ----------------------------------------------------------------------------- D6
def retnet_decays(heads: int) -> Tensor:
    """γ_h = 1 − 2^{−5−h} (RetNet's per-head decays; Sun et al. 2023)."""
    return 1.0 - 2.0 ** (-5.0 - torch.arange(heads, dtype=torch.float64))


def decay_weights(gamma: Tensor, nq: int, nk: int, vis: Tensor | None, dtype) -> Tensor:
    """w_hij = γ_h^{|i−j|} on visible pairs (gated / retention form of seed §2.2), 0 elsewhere:
    (1, H, Nq, Nk)."""
    i = (nk - nq) + torch.arange(nq, device=gamma.device)[:, None]
    j = torch.arange(nk, device=gamma.device)[None, :]
    dist = (i - j).abs().to(dtype)
    w = torch.exp(dist[None, None] * torch.log(gamma.to(dtype))[None, :, None, None])
    return w if vis is None else w * vis.to(dtype)


FEATURE_MAPS = ("none", "elu1")


def feature_map(t: Tensor, kind: str) -> Tensor:
    return t if kind == "none" else F.elu(t) + 1.0


@register_energy("sum_of_squares")
class SumOfSquaresEnergy(_HeadsBase):
    """(D6, Theorem 2) ``F(z) = (1/H) Σ_h ½ Σ_{j visible} w_hij (φ(P_h z)·φ(W_h h_j) / τ)²``.

    With ``φ`` the identity and ``w = 1`` one GD step ``z − η∇F`` is unnormalised linear attention
    with ``q = P_h z``, ``k_j = W_h h_j``, ``v_j = −(η/H) k_j`` mapped back by ``P_hᵀ`` (seed §2.2).
    Options carried by the energy: ``decay`` — ``w_hij = γ_h^{i−j}`` (a weighted sum of squares: the
    gated / retention form, learnable γ_h = sigmoid(θ_h) initialised at RetNet's 1 − 2^{−5−h});
    ``feature_map='elu1'`` — the kernel ``φ(t) = elu(t) + 1`` (Katharopoulos et al. 2020). With a
    feature map the exact gradient carries ``φ'(q)``; the plain kernelised linear-attention output
    (no ``φ'``) is then not a gradient step (see :class:`~energyformer.energies.intrinsic_heads.LinearAttentionHeads`).
    τ = √d_h by default.
    """

    param_roles = {"decay_logit": "step_size"}

    def __init__(self, dim: int, heads: int, decay: bool = False, feature: str = "none",
                 temperature: float | None = None, causal: bool = True, head_dim: int | None = None):
        check_choice("feature_map", feature, FEATURE_MAPS)
        super().__init__(dim, heads, head_dim, temperature, causal)
        self.feature = feature
        if decay:
            g = retnet_decays(heads)
            self.decay_logit = nn.Parameter(torch.log(g / (1 - g)).float())
        else:
            self.decay_logit = None

    def weights(self, x: Tensor, st: HeadsState) -> Tensor | None:
        vis = self.vis(x, st)
        if self.decay_logit is None:
            return None if vis is None else vis.to(x.dtype)
        return decay_weights(torch.sigmoid(self.decay_logit), x.shape[1], st.k.shape[2], vis, x.dtype)

    def _scores(self, x, st):
        q = self.queries(x)
        fq, fk = feature_map(q, self.feature), feature_map(st.k, self.feature)
        T = self.temperature[None, :, None, None].to(x.dtype)
        return q, fq, fk, (fq @ fk.transpose(-1, -2)) / T, T

    def energy(self, x: Tensor, st: HeadsState) -> Tensor:
        _, _, _, s, _ = self._scores(x, st)
        w = self.weights(x, st)
        e2 = 0.5 * s * s if w is None else 0.5 * w * s * s
        return e2.sum(-1).mean(1)

    def grad(self, x: Tensor, st: HeadsState) -> Tensor:
        q, fq, fk, s, T = self._scores(x, st)
        w = self.weights(x, st)
        a = s if w is None else w * s
        g = (a @ fk) / T  # ∂F/∂φ(q)
        if self.feature == "elu1":
            g = g * torch.where(q > 0, torch.ones_like(q), torch.exp(q))  # φ'(q)
        return self.to_model(g / self.heads)

    @classmethod
    def examples(cls, dtype=torch.float64):
        out = []
        for decay in (False, True):
            for feat in FEATURE_MAPS:
                for causal in (True, False):
                    torch.manual_seed(7)
                    e = cls(8, 2, decay=decay, feature=feat, causal=causal).to(dtype)
                    with torch.no_grad():
                        e.wq.weight.normal_(0, 0.5)
                        e.wk.weight.normal_(0, 0.5)
                    ctx, x = cls._example_inputs(dtype, 8)
                    out.append((f"decay={decay},phi={feat},causal={causal}", e, ctx, x))
        return out
