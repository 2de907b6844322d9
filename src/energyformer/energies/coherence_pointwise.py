"""EqT coherence energies that read the token state h_t alone (equilibrium transformer, seed 003
§2.2.2, §3.3.3-3.3.4; reconstructed.md §3).

* :class:`ConfidenceEnergy` ``coherence_conf`` (Eq. 14), with p_θ the model's own output head:

      ℒ_conf(h_t) = H[p_θ(·|h_t)] − log p_θ(x̂ | h_t),     x̂ = argmax p_θ(·|h_t)

  With ``entropy=False`` it is the predictive-error term ℒ_pred = −log p_θ(x̂|h) of §2.2.2 (Eq. 4).
  x̂ is piecewise constant in h, so the gradient (autograd) treats it as fixed (exact almost
  everywhere).
* :class:`MemoryEnergy` ``coherence_mem`` (Eq. 15-16): a bank Z of M vectors (a buffer, not trained
  by gradients) and

      ℒ_mem(h_t) = −log Σ_i r_i exp(hᵀ z_i / (τ ‖h‖ ‖z_i‖)),

  updated after each training step by the EMA of Eq. 16, z_i ← β z_i + (1 − β) h*_t for
  i = argmax_j h*_tᵀ z_j (several tokens hitting one slot: their mean). The relevance r_i ∈ {0, 1}
  ("a lightweight retrieval network or BM25", not specified) is a flag: ``'all'`` (r ≡ 1) or
  ``'topk'`` (the k slots most cosine-similar to the proposal f_t, chosen once per block call).
* :class:`ConsistencyEnergy` ``coherence_consist`` (§2.2.2, the alternative energy):

      ℒ_consist(h_t) = ‖h_t − F̃_φ(F_θ(h_t))‖²   (computed from the residual branches: no h − h cancels)

  F_θ is a position-wise forward map of the model (by default the MLP sublayer of the refined
  layer; attention is left out so that ℒ_t reads h_t only and refinement stays causal) and F̃_φ a
  learned inverse u + W_2 GELU(W_1 LN(u)).

All three are exact (the update is −∇ℒ, gradients by autograd) and per token (ℒ_t depends on h_t
only). Shared modules (the head and final norm, F_θ) are used, not owned
(:class:`~energyformer.energies.coherence.SharedModules`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..core.energy import Energy, register_energy
from ..core.precision import host_read_stalls, no_host_sync
from ..core.projected import safe_norm
from ..utils.validate import check_choice, check_float, check_int
from .coherence import CoherenceContext, SharedModules, _examples_context

RELEVANCE = ("all", "topk")


@register_energy("coherence_conf")
class ConfidenceEnergy(SharedModules, Energy):
    """ℒ_conf = H[p] − log p_x̂ with p = softmax(head(norm(h))) (EqT Eq. 14); ``entropy=False``: ℒ_pred."""

    exact = True

    def __init__(self, dim: int, n_out: int, *, head: nn.Module | None = None, norm: nn.Module | None = None,
                 entropy: bool = True):
        super().__init__()
        check_int("coherence_conf.dim", dim, min=1)
        check_int("coherence_conf.n_out", n_out, min=2)
        self.entropy = bool(entropy)
        self._hold("head", head, lambda: nn.Linear(dim, n_out, bias=False))
        self._hold("norm", norm, lambda: nn.LayerNorm(dim))

    @classmethod
    def examples(cls, dtype=torch.float64):
        out = []
        for label, ent in (("conf", True), ("pred", False)):
            torch.manual_seed(0)
            e = cls(8, 3, entropy=ent).to(dtype)
            with torch.no_grad():
                e.own_head.weight.mul_(20)  # confident and unconfident tokens both occur
            ctx, x = _examples_context(dtype)
            out.append((label, e, ctx, x))
        return out

    def prepare(self, context: CoherenceContext | None = None, **kwargs: Any) -> None:
        return None

    def energy(self, h: Tensor, state: Any) -> Tensor:
        logits = self._held("head")(self._held("norm")(h))          # (B, N, C)
        logp = F.log_softmax(logits.float() if logits.dtype == torch.bfloat16 else logits, -1)
        nll_top = -logp.max(-1).values                              # −log p(x̂), x̂ = argmax
        if not self.entropy:
            return nll_top.to(h.dtype)
        return (-(logp.exp() * logp).sum(-1) + nll_top).to(h.dtype)  # (B, N)


@register_energy("coherence_mem")
class MemoryEnergy(Energy):
    """ℒ_mem = −log Σ_i r_i exp(cos(h, z_i)/τ) over an EMA memory bank Z (EqT Eq. 15-16)."""

    exact = True

    def __init__(self, dim: int, *, size: int = 256, tau: float = 0.1, relevance: str = "all",
                 topk: int = 16, ema: float = 0.99):
        super().__init__()
        check_int("coherence_mem.size", size, min=1)
        check_float("coherence_mem.tau", tau, min=0.0, min_exclusive=True)
        check_choice("coherence_mem.relevance", relevance, RELEVANCE)
        check_int("coherence_mem.topk", topk, min=1, max=size if relevance == "topk" else None)  # unused by 'all'
        check_float("coherence_mem.ema", ema, min=0.0, max=1.0)
        self.tau, self.relevance, self.topk, self.ema = float(tau), relevance, topk, float(ema)
        self.register_buffer("bank", F.normalize(torch.randn(size, dim), dim=-1))  # Z: (M, D)

    @classmethod
    def examples(cls, dtype=torch.float64):
        out = []
        for label, rel in (("all", "all"), ("topk", "topk")):
            torch.manual_seed(0)
            e = cls(8, size=6, tau=0.5, relevance=rel, topk=2).to(dtype)
            ctx, x = _examples_context(dtype)
            out.append((label, e, ctx, x))
        return out

    def _cos(self, h: Tensor) -> Tensor:
        return _normalize(h) @ _normalize(self.bank.to(h.dtype)).t()  # (B, N, M)

    def prepare(self, context: CoherenceContext, **kwargs: Any) -> Tensor | None:
        if self.relevance == "all":
            return None
        if context.proposal is None:
            raise ValueError("coherence_mem.relevance = 'topk' needs the proposal f in the context")
        with torch.no_grad():
            idx = self._cos(context.proposal).topk(self.topk, -1).indices    # (B, N, k)
        mask = torch.full(idx.shape[:2] + (self.bank.shape[0],), float("-inf"), device=idx.device)
        return mask.scatter(-1, idx, 0.0)                                    # log r: (B, N, M)

    def energy(self, h: Tensor, log_r: Tensor | None) -> Tensor:
        s = self._cos(h) / self.tau
        if log_r is not None:
            s = s + log_r.to(s.dtype)
        return -torch.logsumexp(s, -1)                                       # (B, N)

    @torch.no_grad()
    def update(self, h_star: Tensor, mask: Tensor | None = None) -> None:
        """EMA write of Eq. 16: z_i ← ema·z_i + (1 − ema)·mean{h*_t : argmax_j h*_tᵀ z_j = i}."""
        h = h_star.detach().reshape(-1, h_star.shape[-1]).to(self.bank.dtype)
        if mask is not None:
            h = h[mask.reshape(-1)]
        if h.numel() == 0:
            return
        slot = (h @ self.bank.t()).argmax(-1)                                # (T,)
        total = torch.zeros_like(self.bank).index_add_(0, slot, h)
        hits = torch.bincount(slot, minlength=self.bank.shape[0]).to(h.dtype)
        hit = hits > 0
        self.bank[hit] = self.ema * self.bank[hit] + (1 - self.ema) * total[hit] / hits[hit, None]


def _normalize(v: Tensor, eps: float = 1e-6) -> Tensor:
    """``F.normalize(v, dim=-1, eps=eps)`` = v / max(‖v‖, eps) whose norm does not overflow: ‖v‖ squares first,
    so past ~1.8e19 in float32 it was inf and every cosine 0 (ℒ_mem a constant, its gradient 0: probe P). Rows
    whose plain norm is inf take :func:`~energyformer.core.projected.safe_norm` (max-abs scaled); the check is one
    host sync on a (…, 1) flag, none under ``torch.compile`` (always ``where`` there). On an accelerator
    (``core.precision.host_read_stalls``: a host read stalls its queue, and CUDA-graph capture forbids it) such rows
    are NaN instead: loud, a tiny op on the norms, no host read. Underflow needs no care: a norm below ~1e-19 is
    below eps anyway."""
    n = torch.linalg.vector_norm(v, dim=-1, keepdim=True)
    big = torch.isinf(n)
    if host_read_stalls(v):
        return v / torch.where(big, math.nan, n.clamp_min(eps))
    if no_host_sync(v) or bool(big.any()):
        n = torch.where(big, safe_norm(v, keepdim=True), n)
    return v / n.clamp_min(eps)


@register_energy("coherence_consist")
class ConsistencyEnergy(SharedModules, Energy):
    """ℒ_consist = ‖h − F̃(F(h))‖² with F a shared position-wise forward map (EqT §2.2.2)."""

    exact = True

    def __init__(self, dim: int, *, forward_map: nn.Module | None = None, hidden: int | None = None):
        super().__init__()
        check_int("coherence_consist.dim", dim, min=1)
        hidden = dim if hidden is None else hidden
        self._hold("forward_map", forward_map, lambda: _ResidualMLP(dim, hidden))
        self.inverse = _ResidualMLP(dim, hidden)                             # F̃_φ

    @classmethod
    def examples(cls, dtype=torch.float64):
        torch.manual_seed(0)
        e = cls(8, hidden=12).to(dtype)
        ctx, x = _examples_context(dtype)
        return [("own_F", e, ctx, x)]

    def prepare(self, context: CoherenceContext | None = None, **kwargs: Any) -> None:
        return None

    def energy(self, h: Tensor, state: Any) -> Tensor:
        """‖r₁ + b̃(h + r₁)‖² with r₁ = F(h) − h and b̃ F̃'s branch (F̃(u) = u + b̃(u)), i.e.
        h − F̃(F(h)) = −(r₁ + b̃(F(h))) without forming it. ``h − F̃(F(h))`` rounded h + r₁ + r₂ at the size of h
        and subtracted h, so in float32 its error was u·‖h‖, not u·‖r‖ (relative 1e-3 in ℒ and 0.5 in ∇ℒ at
        ‖h‖ ~ 1e4 with branches of 0.01, where the loss drives F̃ to invert F: probe P). r₁ is F's ``branch(h)``
        where F has one (the own residual MLP, and ``consist_map: mlp``'s swiglu / gelu / relu sublayers); a map
        without one (an energy-descent MLP kind: cem, hyperset, ...) gives F(h) − h, which keeps the rounding of
        F(h) at the size of h."""
        fmap = self._held("forward_map")
        r1 = fmap.branch(h) if hasattr(fmap, "branch") else fmap(h) - h
        return (r1 + self.inverse.branch(h + r1)).pow(2).sum(-1)             # (B, N)


class _ResidualMLP(nn.Module):
    """u + b(u), b(u) = W_2 GELU(W_1 LN(u)) (also accepts and ignores a forward context, like a sublayer)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def branch(self, u: Tensor) -> Tensor:
        """b(u) alone, the residual added to u (``ConsistencyEnergy`` sums branches instead of subtracting u)."""
        return self.fc2(F.gelu(self.fc1(self.ln(u))))

    def forward(self, u: Tensor, ctx: Any = None) -> Tensor:
        return u + self.branch(u)
