"""RoPE and the KV-cache slot of the plain attention sublayers (Llama, GPT baselines).

Masks, SDPA dispatch and the cache itself are the library's attention kit,
:mod:`energyformer.core.attention`; this module adds the rotary position embedding and the
:class:`~energyformer.core.context.ForwardContext` lookup of a block's cache slot.

The RoPE tables depend on the positions, the head size, θ, the dtype and the device only, so
:func:`rope_tables` builds them once per forward pass in ``ctx.memo`` and every layer (and iteration)
reads them: they were rebuilt in float64 in each layer, ~10 of its ~113 launches (probe AA, F2).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..core.attention import append_cache
from ..core.context import ForwardContext
from ..core.precision import widest_float


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
    adt = widest_float(positions.device)
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=adt) / head_dim)
    ang = positions.to(adt)[:, None] * inv[None, :]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def rope_tables(ctx: ForwardContext | None, n: int, head_dim: int, theta: float, dtype: torch.dtype,
                device: torch.device) -> tuple[Tensor, Tensor]:
    """:func:`rope_cos_sin` of positions ``ctx.offset`` … ``ctx.offset + n − 1``, built once per forward pass: kept
    in ``ctx.memo`` under everything the numbers depend on (the same tensors, so the same numbers, in every layer).
    The inference-mode flag is part of the key: a table made under ``inference_mode`` cannot be saved for a
    backward. No memo without a context, or while torch.compile traces (its CSE merges the repeats)."""
    offset = 0 if ctx is None else ctx.offset

    def build() -> tuple[Tensor, Tensor]:
        return rope_cos_sin(torch.arange(offset, offset + n, device=device), head_dim, theta, dtype)

    if ctx is None or torch.compiler.is_compiling():
        return build()
    key = ("rope", offset, n, head_dim, float(theta), dtype, device, torch.is_inference_mode_enabled())
    hit = ctx.memo.get(key)
    if hit is None:
        hit = ctx.memo[key] = build()
    return hit


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (first half, second half) of the last axis of x: (B, H, N, Dh)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
