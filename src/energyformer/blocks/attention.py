"""RoPE and the KV-cache slot of the plain attention sublayers (Llama, GPT baselines).

Masks, SDPA dispatch and the cache itself are the library's attention kit,
:mod:`energyformer.core.attention`; this module adds the rotary position embedding and the
:class:`~energyformer.core.context.ForwardContext` lookup of a block's cache slot.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..core.attention import append_cache
from ..core.context import ForwardContext


def append_kv_cache(
    ctx: ForwardContext | None, name: str, k: Tensor, v: Tensor,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Append this call's keys/values (B, H, n, Dh) and key mask ``ctx.mask`` (B, n) to the block's
    cache slot (one per iteration, :meth:`ForwardContext.cache_slot`); return all keys, values and
    the key mask (B, Nk) or None."""
    slot = None if ctx is None else ctx.cache_slot(name)
    kv, key_mask = append_cache(slot, None if ctx is None else ctx.mask, k=k, v=v)
    return kv["k"], kv["v"], key_mask


def rope_cos_sin(positions: Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos/sin tables (N, head_dim/2) for rotary embeddings (Su et al. 2024), in ``dtype``. The angles and their
    cos/sin are formed in float64 (MPS, which has none, in float32), then rounded once to ``dtype``. Llama's
    reference code and transformers form them in float32, whose angle at position p is off by up to ~p·6e-8 rad
    (2e-4 at 4,096, 6e-3 at 10^5): a float32 model then drifted from float64 linearly with the position, past
    the scale fuzz's bound from position ~4k on (found by an outside probe at offsets 32k-1M). An exported stock
    ``LlamaForCausalLM`` keeps transformers' float32 angles: the two agree to that error."""
    adt = torch.float32 if positions.device.type == "mps" else torch.float64
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=adt) / head_dim)
    ang = positions.to(adt)[:, None] * inv[None, :]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (first half, second half) of the last axis of x: (B, H, N, Dh)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
