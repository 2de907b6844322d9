"""Shared pieces of the plain attention sublayers: SDPA with causal / key-padding masks, RoPE, KV cache.

Masks (all attentions): ``causal`` hides keys j > i; the key-padding mask ``ctx.mask`` ((B, N) bool,
True = real token) hides padded keys. A query always sees itself, so no softmax row is empty (a
padded query's output is then defined, meaningless, and never read by a real token). Without a
padding mask the fused SDPA paths are used (``is_causal`` for square causal calls, no mask for a
single decoded token or for bidirectional attention); with one, a boolean mask is passed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..core.context import ForwardContext
from ..energies.interaction import append_key_mask


def visible_keys(nq: int, nk: int, causal: bool, key_mask: Tensor | None, device) -> Tensor | None | str:
    """SDPA mask for ``nq`` queries at the last positions of ``nk`` keys.

    Returns "causal" (use ``is_causal=True``), None (every key visible), or a bool mask of shape
    (Nq, Nk) or (B, 1, Nq, Nk) (True = visible).
    """
    offset = nk - nq
    if key_mask is None:
        if not causal or nq == 1:
            return None
        if nq == nk:
            return "causal"
    i = offset + torch.arange(nq, device=device)[:, None]  # (Nq, 1)
    j = torch.arange(nk, device=device)[None, :]            # (1, Nk)
    vis = (j <= i) if causal else torch.ones(nq, nk, dtype=torch.bool, device=device)
    if key_mask is None:
        return vis
    return ((vis[None] & key_mask[:, None, :]) | (i == j)[None])[:, None]  # (B, 1, Nq, Nk)


def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, key_mask: Tensor | None,
              dropout: float = 0.0, scale: float | None = None) -> Tensor:
    """SDPA over (B, H, N, Dh); queries are the last ``Nq`` of the ``Nk`` key positions."""
    mask = visible_keys(q.shape[2], k.shape[2], causal, key_mask, q.device)
    if isinstance(mask, str):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, scale=scale)


def append_kv_cache(
    ctx: ForwardContext | None, name: str, k: Tensor, v: Tensor,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Append this call's keys/values (B, H, n, Dh) and key mask (B, n) to the block's cache slot
    (one per iteration, :meth:`ForwardContext.cache_slot`); return all keys, values and key mask."""
    mask = None if ctx is None else ctx.mask
    slot = None if ctx is None else ctx.cache_slot(name)
    n_old = 0
    if slot is not None:
        if "k" in slot:
            n_old = slot["k"].shape[2]
            k, v = torch.cat([slot["k"], k], 2), torch.cat([slot["v"], v], 2)
        slot["k"], slot["v"] = k, v
    key_mask = append_key_mask(slot, mask, n_old, k.shape[2] - n_old, k.shape[0], k.device)
    return k, v, key_mask


def rope_cos_sin(positions: Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos/sin tables (N, head_dim/2) for rotary embeddings (Su et al. 2024)."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    ang = positions.float()[:, None] * inv[None, :]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (first half, second half) of the last axis of x: (B, H, N, Dh)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
