"""CEM's attention kernel as PyTorch custom operators: the path :func:`~.cem_kernel.cem_attention` takes
while ``torch.compile`` traces (``train.compile: true``).

Dynamo cannot trace into the eager wrapper (an ``autograd.Function`` around Triton launches found through
an ``lru_cache`` and triton's environment lookups) and breaks its graph there. As custom operators
(``energyformer::cem_attention_fwd`` / ``_bwd``, with their output shapes for fake tensors and the
forward's autograd formula) the same launches (:func:`~.cem_kernel._fwd_impl`, :func:`~.cem_kernel._bwd_impl`)
are opaque calls inside one graph. Eager calls keep the ``autograd.Function``, lighter on the host.

Operators take plain values only: the launch (:class:`~.cem_launch.KernelTiles`) goes in as its fifteen
fields, and an absent optional output (hs, ox) or gradient comes back as an empty (0,) tensor.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .cem_kernel import _bwd_impl, _fwd_impl
from .cem_launch import KernelTiles, gathers, launch_chunks
from .cem_products import head_block_size

#: KernelTiles' fields in the operators' argument order
TILE_FIELDS = ("block_m", "block_n", "block_d", "num_warps", "num_stages", "head_unroll", "shared", "grid",
               "causal_chunks", "head_sums", "shared_dtype", "kv_keys", "kv_queries", "kv_warps",
               "psum_keys", "product_order")


def _tiles(*fields) -> KernelTiles:
    """the launch from its fields, in TILE_FIELDS' order (already validated where the launch was made)"""
    return KernelTiles.model_construct(**dict(zip(TILE_FIELDS, fields, strict=True)))


def _none(t: Tensor) -> Tensor | None:
    return None if t.numel() == 0 else t


def _or_empty(t: Tensor | None, like: Tensor) -> Tensor:
    return like.new_empty(0) if t is None else t


@torch.library.custom_op("energyformer::cem_attention_fwd", mutates_args=())
def cem_attention_fwd(q: Tensor, k: Tensor, ud: Optional[Tensor], hm: Optional[Tensor], x: Optional[Tensor],
                      c: Optional[Tensor], delta: Optional[Tensor], slopes: Optional[Tensor], kmask: Optional[Tensor],
                      causal: bool, offset: int, hmode: str, block_m: int, block_n: int, block_d: int,
                      num_warps: int, num_stages: int, head_unroll: int, shared: str, grid: str,
                      causal_chunks: int, head_sums: str, shared_dtype: str, kv_keys: Optional[int],
                      kv_queries: Optional[int], kv_warps: Optional[int], psum_keys: int,
                      product_order: str) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(oq, hs or (0,), ox or (0,), lse, m, l, kept or (0,)) of the kernels' forward (kept: the gathered head
    sums the backward reads, ``KernelTiles.head_sums``)."""
    tiles = _tiles(block_m, block_n, block_d, num_warps, num_stages, head_unroll, shared, grid, causal_chunks,
                   head_sums, shared_dtype, kv_keys, kv_queries, kv_warps, psum_keys, product_order)
    oq, hs, ox, lse, m, l, kept = _fwd_impl(q, k, ud, hm, x, c, delta, slopes, kmask, causal, offset, hmode, tiles)
    return oq, _or_empty(hs, q), _or_empty(ox, q), lse, m, l, _or_empty(kept, q)


@cem_attention_fwd.register_fake
def _(q, k, ud, hm, x, c, delta, slopes, kmask, causal, offset, hmode, block_m, block_n, block_d, num_warps,
      num_stages, head_unroll, shared, grid, causal_chunks, head_sums, shared_dtype, kv_keys, kv_queries, kv_warps,
      psum_keys, product_order):
    B, H, nq, R = q.shape
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    lse = q.new_empty(B, H, nq, dtype=acc)
    hs = q.new_empty(B, nq, hm.shape[-1], dtype=acc) if hmode != "none" else q.new_empty(0)
    ox = q.new_empty(B, H, nq, x.shape[-1], dtype=acc) if x is not None else q.new_empty(0)
    tiles = _tiles(block_m, block_n, block_d, num_warps, num_stages, head_unroll, shared, grid, causal_chunks,
                   head_sums, shared_dtype, kv_keys, kv_queries, kv_warps, psum_keys, product_order)
    kept = q.new_empty(0)
    if gathers(tiles, hmode):
        kept = q.new_empty(B, head_block_size(1, launch_chunks(nq, k.shape[2], offset, causal, tiles)))
    return q.new_empty(B, H, nq, R, dtype=acc), hs, ox, lse, torch.empty_like(lse), torch.empty_like(lse), kept


@torch.library.custom_op("energyformer::cem_attention_bwd", mutates_args=())
def cem_attention_bwd(q: Tensor, k: Tensor, ud: Optional[Tensor], hm: Optional[Tensor], x: Optional[Tensor],
                      c: Optional[Tensor], delta: Optional[Tensor], slopes: Optional[Tensor], kmask: Optional[Tensor],
                      m: Tensor, l: Tensor, kept: Optional[Tensor], goq: Optional[Tensor], ghs: Optional[Tensor],
                      gox: Optional[Tensor], glse: Optional[Tensor], causal: bool, offset: int, hmode: str,
                      block_m: int, block_n: int, block_d: int, num_warps: int, num_stages: int, head_unroll: int,
                      shared: str, grid: str, causal_chunks: int, head_sums: str, shared_dtype: str,
                      kv_keys: Optional[int], kv_queries: Optional[int], kv_warps: Optional[int], psum_keys: int,
                      product_order: str) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(dq, dk, d(ud), dh, dx, dc, dδ), (0,) where the input is absent."""
    tiles = _tiles(block_m, block_n, block_d, num_warps, num_stages, head_unroll, shared, grid, causal_chunks,
                   head_sums, shared_dtype, kv_keys, kv_queries, kv_warps, psum_keys, product_order)
    grads = _bwd_impl(q, k, ud, hm, x, c, delta, slopes, kmask, m, l, kept, goq, ghs, gox, glse, causal, offset,
                      hmode, tiles)
    return tuple(_or_empty(g, q) for g in grads)


@cem_attention_bwd.register_fake
def _(q, k, ud, hm, x, c, delta, slopes, kmask, m, l, kept, goq, ghs, gox, glse, causal, offset, hmode, block_m,
      block_n, block_d, num_warps, num_stages, head_unroll, shared, grid, causal_chunks, head_sums,
      shared_dtype, kv_keys, kv_queries, kv_warps,
      psum_keys, product_order):
    return tuple(q.new_empty(0) if t is None else torch.empty_like(t) for t in (q, k, ud, hm, x, c, delta))


def _setup(ctx, inputs, output) -> None:
    q, k, ud, hm, x, c, delta, slopes, kmask = inputs[:9]
    _, hs, ox, _, m, l, kept = output
    ctx.save_for_backward(q, k, ud, hm, x, c, delta, slopes, kmask, m, l, _none(kept))
    ctx.scalars = inputs[9:]
    ctx.has_hs, ctx.has_ox = hs.numel() > 0, ox.numel() > 0


def _backward(ctx, goq, ghs, gox, glse, gm, gl, gkept):
    grads = cem_attention_bwd(*ctx.saved_tensors, goq, ghs if ctx.has_hs else None, gox if ctx.has_ox else None,
                              glse, *ctx.scalars)
    return (*(_none(g) for g in grads), None, None) + (None,) * len(ctx.scalars)


cem_attention_fwd.register_autograd(_backward, setup_context=_setup)


def cem_attention_op(q, k, ud, hm, x, c, delta, slopes, kmask, causal: bool, offset: int, hmode: str,
                     tiles: KernelTiles) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor]:
    """(oq, hs or None, ox or None, lse) through the custom operators (what the eager Function returns)."""
    oq, hs, ox, lse, _, _, _ = cem_attention_fwd(q, k, ud, hm, x, c, delta, slopes, kmask, causal, offset, hmode,
                                              *(getattr(tiles, f) for f in TILE_FIELDS))
    return oq, _none(hs), _none(ox), lse
