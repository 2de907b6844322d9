"""Plain baseline sublayers the energy blocks are compared against (CEM seed §4 uses Llama).

Every sublayer maps (B, N, D) -> (B, N, D) with the residual included and takes a
:class:`~energyformer.core.ForwardContext` (KV cache, position offset), so a baseline and an energy
block are interchangeable in a layer.

* :class:`LlamaAttention` — pre-RMSNorm, separate W_Q, W_K, W_V, W_O (no bias), RoPE, causal SDPA.
* :class:`SwiGLU`         — pre-RMSNorm, W_down(SiLU(W_gate h) ∘ W_up h)  (Shazeer 2020).
* :class:`GPTAttention`   — pre-LayerNorm, fused QKV with bias, output projection, dropout (GPT-2).
* :class:`GeluMLP`        — pre-LayerNorm, 4× GELU MLP with bias and dropout (GPT-2).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from ..core.block import ForwardContext
from ..utils.validate import check_int


def _causal_attention(q: Tensor, k: Tensor, v: Tensor, offset: int, dropout: float) -> Tensor:
    """SDPA over (B, H, N, Dh); queries start at position ``offset`` of the (cached) keys."""
    nq, nk = q.shape[2], k.shape[2]
    if nq == nk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)
    if nq == 1:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout)
    mask = torch.arange(nk, device=q.device)[None, :] <= (offset + torch.arange(nq, device=q.device))[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)



def rope_cos_sin(positions: Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos/sin tables (N, head_dim/2) for rotary embeddings (Su et al. 2024)."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    ang = positions.float()[:, None] * inv[None, :]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (first half, second half) of the last axis of x: (B, H, N, Dh)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def append_kv_cache(ctx: ForwardContext | None, name: str, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Append new keys/values (B, H, n, Dh) to this sublayer's cache slot; return the full ones."""
    slot = None if ctx is None else ctx.cache_slot(name)
    if slot is None:
        return k, v
    if "k" in slot:
        k, v = torch.cat([slot["k"], k], 2), torch.cat([slot["v"], v], 2)
    slot["k"], slot["v"] = k, v
    return k, v


class LlamaAttention(nn.Module):
    """Llama multi-head attention sublayer with RoPE (separate Q/K/V/O)."""

    kind = "attention"

    def __init__(self, dim: int, heads: int, rope_theta: float = 10000.0):
        super().__init__()
        check_int("heads", heads, min=1)
        if dim % heads or (dim // heads) % 2:
            raise ValueError(f"heads = {heads}: must divide dim = {dim} into an even head size")
        self.heads, self.head_dim, self.theta = heads, dim // heads, rope_theta
        self.norm = nn.RMSNorm(dim, eps=1e-6)
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.qualname = ""

    def forward(self, x: Tensor, ctx: ForwardContext | None = None) -> Tensor:
        h = self.norm(x)
        q, k, v = (rearrange(w(h), "b n (h d) -> b h n d", h=self.heads) for w in (self.wq, self.wk, self.wv))
        offset = 0 if ctx is None else ctx.offset
        pos = torch.arange(offset, offset + x.shape[1], device=x.device)
        cos, sin = rope_cos_sin(pos, self.head_dim, self.theta, q.dtype)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k, v = append_kv_cache(ctx, self.qualname, k, v)
        o = _causal_attention(q, k, v, k.shape[2] - q.shape[2], 0.0)
        return x + self.wo(rearrange(o, "b h n d -> b n (h d)"))


class SwiGLU(nn.Module):
    """Llama gated MLP sublayer: x + W_down(SiLU(W_gate h) ∘ W_up h), h = RMSNorm(x)."""

    kind = "mlp"

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=1e-6)
        self.w_gate = nn.Linear(dim, hidden, bias=False)
        self.w_up = nn.Linear(dim, hidden, bias=False)
        self.w_down = nn.Linear(hidden, dim, bias=False)
        self.qualname = ""

    def forward(self, x: Tensor, ctx: ForwardContext | None = None) -> Tensor:
        h = self.norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class GPTAttention(nn.Module):
    """GPT-2 attention sublayer (pre-LayerNorm, fused QKV with bias, dropout)."""

    kind = "attention"

    def __init__(self, dim: int, heads: int, dropout: float = 0.0):
        super().__init__()
        if dim % heads:
            raise ValueError(f"heads = {heads}: must divide dim = {dim}")
        self.heads, self.dropout = heads, dropout
        self.norm = nn.LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.resid_drop = nn.Dropout(dropout)
        self.qualname = ""

    def forward(self, x: Tensor, ctx: ForwardContext | None = None) -> Tensor:
        q, k, v = rearrange(self.c_attn(self.norm(x)), "b n (t h d) -> t b h n d", t=3, h=self.heads)
        k, v = append_kv_cache(ctx, self.qualname, k, v)
        o = _causal_attention(q, k, v, k.shape[2] - q.shape[2], self.dropout if self.training else 0.0)
        return x + self.resid_drop(self.c_proj(rearrange(o, "b h n d -> b n (h d)")))


class GeluMLP(nn.Module):
    """GPT-2 MLP sublayer: x + Dropout(W2 GELU(W1 LayerNorm(x)))."""

    kind = "mlp"

    def __init__(self, dim: int, hidden: int, dropout: float = 0.0):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, hidden)
        self.proj = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)
        self.qualname = ""

    def forward(self, x: Tensor, ctx: ForwardContext | None = None) -> Tensor:
        return x + self.drop(self.proj(F.gelu(self.fc(self.norm(x)))))
