"""Untied attention heads of the intrinsic-optimizer family (seed 001 §2.1-2.3, §3.1): the update
*direction* of a standard layer, with the free energy it would descend if its weights were tied.

* :class:`MHAHeads` — GPT-2 multi-head attention (fused QKV with bias, output projection, attention
  and residual dropout): ``d = Dropout(W_O concat_h softmax(q_h k_hᵀ/√d_h) v_h)``. Its reported
  energy is the hypersphere multi-head free energy of its own query/key subspaces,
  ``F = (1/H) Σ_h −T log Σ_j exp(q_h·k_j/T)``, ``T = √d_h`` (D5/D7). The update equals ``−η∇F`` only
  when ``W_V^h = K^h`` and ``W_O^h = (η/H) W_Q^hᵀ`` (Theorem 3); with free W_V, W_O it is not a
  gradient step, so ``exact = False`` and ``reference_direction`` is a per-query loop.
* :class:`LinearAttentionHeads` — linear attention (seed Eq. 5) ``d = W_O Σ_j w_ij (φ(q)·φ(k_j)/τ) v_j``,
  whose energy is the sum of squares of its query/key subspaces (D6,
  :class:`~energyformer.energies.free_energy.SumOfSquaresEnergy`); exact only tied (the
  ``linear_attn`` kind with ``tied: true`` uses the sum-of-squares energy itself).
* :class:`GeluFFNField` — the GPT-2 FFN as an update direction (for momentum across FFN sublayers,
  seed §3.1 "applied to FFN too"). An FFN is not the gradient of an energy; it is not registered and
  its traced energy is NaN (undefined), never a made-up number.

Every module keeps the context's keys/values in ``prepare`` (once per block call) and reuses the
queries computed there when the update point is the prepared input itself (one step per layer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from ..core.attention import append_cache, sdpa, visible
from ..core.energy import Energy, register_energy
from ..utils.validate import check_choice, check_float, check_int
from .free_energy import (
    FEATURE_MAPS, HeadsState, SumOfSquaresEnergy, feature_map, free_energy_heads, merge_heads, split_heads,
)


@dataclass
class QKVState:
    h: Tensor                       # (B, Nn, D) normalised input of this call
    q: Tensor                       # (B, H, Nn, dh) queries of h
    k: Tensor                       # (B, H, Nk, dh) keys (cache + new)
    v: Tensor                       # (B, H, Nk, dh) values
    key_mask: Tensor | None = None  # (B, Nk) bool


def _apply(precond, d: Tensor) -> Tensor:
    return d if precond.is_identity else precond(d)


@register_energy("mha_heads")
class MHAHeads(Energy):
    """GPT-2 multi-head attention as an update direction (see module docstring)."""

    exact = False

    def __init__(self, dim: int, heads: int, dropout: float = 0.0, causal: bool = True):
        super().__init__()
        check_int("heads", heads, min=1)
        if dim % heads:
            raise ValueError(f"heads = {heads}: must divide dim = {dim}")
        check_float("dropout", dropout, min=0.0, max=1.0)
        self.dim, self.heads, self.head_dim = dim, heads, dim // heads
        self.dropout, self.causal = float(dropout), bool(causal)
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.resid_drop = nn.Dropout(dropout)

    # -- temperatures of the scores (H,); standard attention: √d_h
    def score_temperature(self, ref: Tensor) -> Tensor:
        return torch.full((self.heads,), math.sqrt(self.head_dim), dtype=ref.dtype, device=ref.device)

    def prepare(self, context: Tensor, cache: dict | None = None, offset: int = 0,
                mask: Tensor | None = None, **kw) -> QKVState:
        q, k, v = rearrange(self.project_qkv(context), "b n (t h d) -> t b h n d", t=3, h=self.heads)
        kv, key_mask = append_cache(cache, mask, k=k, v=v)
        return QKVState(context, q, kv["k"], kv["v"], key_mask)

    def project_qkv(self, t: Tensor) -> Tensor:
        """(B, N, D) -> (B, N, 3D): queries, keys and values of ``t`` (``c_attn``)."""
        return self.c_attn(t)

    def project_queries(self, u: Tensor) -> Tensor:
        """(B, N, D) -> (B, N, D): the queries of an iterate ``u`` (``c_attn``'s first D rows)."""
        return F.linear(u, self.c_attn.weight[: self.dim], self.c_attn.bias[: self.dim])

    def queries(self, u: Tensor, st: QKVState) -> Tensor:
        if u is st.h:
            return st.q
        return split_heads(self.project_queries(u), self.heads)

    def attend(self, q: Tensor, st: QKVState) -> Tensor:
        """Per-head output (B, H, N, dh) before the output projection."""
        return sdpa(q, st.k, st.v, self.causal, st.key_mask, self.dropout if self.training else 0.0)

    def direction(self, u: Tensor, st: QKVState, precond) -> Tensor:
        o = self.attend(self.queries(u, st), st)
        return _apply(precond, self.resid_drop(self.c_proj(merge_heads(o))))

    # -- the free energy of the query/key subspaces (hypersphere form)
    def _fe(self, u: Tensor, st: QKVState):
        q = self.queries(u, st)
        vis = visible(u.shape[1], st.k.shape[2], self.causal, st.key_mask, u.device)
        return free_energy_heads(q, st.k, self.score_temperature(q), "sphere", vis)

    def energy(self, u: Tensor, st: QKVState) -> Tensor:
        return self._fe(u, st)[0].mean(1)

    def grad(self, u: Tensor, st: QKVState) -> Tensor:
        g = self._fe(u, st)[1] / self.heads
        return merge_heads(g) @ self.c_attn.weight[: self.dim]

    # -- slow, obvious formula of the update (dropout off)
    def head_reference(self, q: Tensor, k: Tensor, v: Tensor, T: Tensor) -> Tensor:
        """One query of one head: q (dh,), visible keys/values (n, dh) -> (dh,)."""
        s = (k @ q) / T
        p = torch.exp(s - s.max())
        p = p / p.sum()
        return (p[:, None] * v).sum(0)

    def reference_direction(self, u: Tensor, st: QKVState, precond) -> Tensor:
        q = self.queries(u, st)
        T = self.score_temperature(q)
        vis = visible(u.shape[1], st.k.shape[2], self.causal, st.key_mask, u.device)
        out = torch.zeros_like(q)
        B, H, N, _ = q.shape
        for b in range(B):
            for h in range(H):
                for i in range(N):
                    js = torch.arange(st.k.shape[2]) if vis is None else vis[min(b, vis.shape[0] - 1), 0, i].nonzero()[:, 0]
                    out[b, h, i] = self.head_reference(q[b, h, i], st.k[b, h, js], st.v[b, h, js], T[h])
        return _apply(precond, self.c_proj(merge_heads(out)))

    @classmethod
    def examples(cls, dtype=torch.float64):
        out = []
        for causal in (True, False):
            torch.manual_seed(11)
            e = cls(8, 2, causal=causal).to(dtype)
            with torch.no_grad():
                e.c_attn.weight.normal_(0, 0.5)
                e.c_attn.bias.normal_(0, 0.1)
            g = torch.Generator().manual_seed(12)
            ctx, x = (torch.randn(2, 5, 8, generator=g, dtype=dtype) for _ in range(2))
            out.append((f"causal={causal}", e, ctx, x))
        return out


@register_energy("linear_attention_heads")
class LinearAttentionHeads(SumOfSquaresEnergy):
    """Untied linear attention (seed Eq. 5, §2.2): ``d = W_O concat_h Σ_j w_hij (φ(q_h)·φ(k_j)/τ) v_j``.

    ``w`` is 1 on visible pairs, or ``γ_h^{|i−j|}`` with ``decay`` (gated / retention form); ``φ`` is the
    identity or ``elu + 1`` (kernelised). The reported energy is the sum of squares of the same
    query/key subspaces; the update is not its gradient unless tied (and φ the identity), so
    ``exact = False``. Computed in the quadratic (parallel) form, O(N² d) like softmax attention.
    """

    exact = False

    def __init__(self, dim: int, heads: int, decay: bool = False, feature: str = "none",
                 causal: bool = True, head_dim: int | None = None):
        check_choice("feature_map", feature, FEATURE_MAPS)
        super().__init__(dim, heads, decay, feature, None, causal, head_dim)
        self.wv = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, dim, bias=False)

    def prepare(self, context, cache=None, offset=0, mask=None, **kw):
        k = split_heads(self.wk(context), self.heads)
        v = split_heads(self.wv(context), self.heads)
        kv, key_mask = append_cache(cache, mask, k=k, v=v)
        st = HeadsState(h=context, k=kv["k"], key_mask=key_mask)
        st.v = kv["v"]  # (B, H, Nk, dh) values
        return st

    def direction(self, x: Tensor, st, precond) -> Tensor:
        _, _, _, s, _ = self._scores(x, st)
        w = self.weights(x, st)
        a = s if w is None else w * s
        return _apply(precond, self.wo(merge_heads(a @ st.v)))

    def reference_direction(self, x: Tensor, st, precond) -> Tensor:
        q = self.queries(x)
        vis = self.vis(x, st)
        gam = torch.sigmoid(self.decay_logit) if self.decay_logit is not None else None
        T = self.temperature
        B, H, N, _ = q.shape
        nk = st.k.shape[2]
        out = torch.zeros_like(q)
        for b in range(B):
            for h in range(H):
                for i in range(N):
                    ii = nk - N + i
                    for j in range(nk):
                        if vis is not None and not vis[min(b, vis.shape[0] - 1), 0, i, j]:
                            continue
                        w = 1.0 if gam is None else gam[h] ** abs(ii - j)
                        e = (feature_map(q[b, h, i], self.feature) * feature_map(st.k[b, h, j], self.feature)).sum()
                        out[b, h, i] = out[b, h, i] + w * e / T[h] * st.v[b, h, j]
        return _apply(precond, self.wo(merge_heads(out)))

    @classmethod
    def examples(cls, dtype=torch.float64):
        out = []
        for decay in (False, True):
            for feat in FEATURE_MAPS:
                torch.manual_seed(13)
                e = cls(8, 2, decay=decay, feature=feat).to(dtype)
                with torch.no_grad():
                    for lin in (e.wq, e.wk, e.wv, e.wo):
                        lin.weight.normal_(0, 0.5)
                g = torch.Generator().manual_seed(14)
                ctx, x = (torch.randn(2, 5, 8, generator=g, dtype=dtype) for _ in range(2))
                out.append((f"decay={decay},phi={feat}", e, ctx, x))
        return out


class GeluFFNField(Energy):
    """The GPT-2 FFN ``Dropout(W_2 GELU(W_1 u + b_1) + b_2)`` as an update direction (not an energy).

    Used by the momentum / Nesterov FFN kinds (seed §3.1: the FFN output replaces the gradient in the
    same momentum recursion). ``energy`` is NaN: an FFN is not the gradient of any energy, and a
    trace must not show a number that means nothing. Not registered (nothing to property-test).
    """

    exact = False

    def __init__(self, dim: int, hidden: int, dropout: float = 0.0):
        super().__init__()
        self.fc = nn.Linear(dim, hidden)
        self.proj = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)

    def direction(self, u: Tensor, state, precond) -> Tensor:
        return _apply(precond, self.drop(self.proj(F.gelu(self.fc(u)))))

    def energy(self, u: Tensor, state) -> Tensor:
        return torch.full(u.shape[:2], float("nan"), dtype=u.dtype, device=u.device)

    def grad(self, u: Tensor, state) -> Tensor:
        raise NotImplementedError("a GELU FFN is not the gradient of an energy (GeluFFNField has no grad)")
