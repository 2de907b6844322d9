"""Flash-style Triton kernel for CEM attention's averages (``attn_path: kernel``; issue 21, docs/cem.md).

For one batch row, queries i (positions offset + i) and keys j, with q already scaled by 1/τ and the
shared-diagonal query ud = d∘u/τ (CEM seed Eq. 1, 12, App. B; see :mod:`.interaction_paths`):

    s_ijk = q_ik·k_jk + ud_i·h_j − m_k |i − j| + δ_k [j = i]        (hidden: −∞; self always visible)
    oq_ik = Σ_j p_ijk k_jk          (B, H, Nq, Dr)    keys are the values (W_V = W_K)
    hs_i  = Σ_k Σ_j p_ijk h_j = ((Σ_k P_k) H)_i      (B, Nq, D)   the gradient read-out's h-term / d
    lse_ik = log Σ_j e^{s_ijk}     (B, H, Nq)

Flash-style: one program per (query tile, batch row) walks the key tiles; no N×N tensor per head
exists in memory. The shared-diagonal tile ``ud hᵀ`` is formed **once** and reused by every head
(heads are a loop inside the program), and the h read-out multiplies the head-summed
probabilities by H once. By default (``KernelTiles.shared = 'materialize'``) the products the heads
share are batched matmuls around the kernels — G = ud Hᵀ and dHs Hᵀ as (B, Nq, Nk) tensors the
kernels read per tile; the kernels write Σ_k P_k and Σ_k dS_k per tile, and (Σ_k P_k) H, d(ud) and dh
are matmuls of those; with 'recompute' the kernels form them tile by tile. Forward in two passes
(pass 1: every head's running max and sum → lse; pass 2: normalised probabilities → oq and hs),
because Σ_k P_k needs every head's final normaliser. Backward (with dS_k = P_k ∘ (dP_k − Δ_k) + g_lse P_k,
dP_k = dOq_k K_kᵀ + dHs Hᵀ, the second term shared): a query-tile kernel (Δ_k = Σ_j p dP, then dq_k
and d(ud) = (Σ_k dS_k) H) and a key-tile kernel (dk_k = dS_kᵀ q_k + P_kᵀ dOq_k and
dh = (Σ_k dS_k)ᵀ ud + (Σ_k P_k)ᵀ dHs). Per-head running state lives in the output buffers, which each
program owns row-wise (no atomics) — ``KernelTiles.grid = 'rows'``. ``grid = 'heads'`` runs instead one
program per head (``cem_triton_heads.py``: FlashAttention's grid, accumulators in registers, the head sums
and dq added up atomically, backward without the query-tile pass b; docs/cem.md, "one program per head");
the default ``'auto'`` takes it wherever it applies (faster on an H100, see :class:`KernelTiles`). There, with
``KernelTiles.head_sums = 'gather'`` (what its default 'auto' takes with the head-summed read-out), a head's
forward is one pass and Σ_k P_k is summed over the heads in registers by a kernel with one program per (query
tile, batch row) and kept for the backward, instead of being added up atomically in both (docs/cem.md, "head
sums gathered"); without an h read-out the head's forward is one pass either way.

Scores, softmax and accumulators run in float32 (float64 for float64 inputs); bf16 inputs are
multiplied in bf16 with float32 accumulation; float32 products use IEEE (no TF32). On CPU the kernels
run through Triton's interpreter (``TRITON_INTERPRET=1``; triton fixes its mode at its first import, so
one process runs either the GPU or the interpreted kernels — see :func:`_kernels`): slow, for tests.

Also: per-head factors c_k (h_mode 'stack': hs = Σ_k c_k ∘ (P_k H), one D-wide product per head, for
a per-head preconditioner's diagonal) and extra per-head value columns x_k (ox_k = P_k x_k, for its
low-rank part). On one program per head (the default since 2026-11-27) the per-head D-wide products are
batched matmuls around the kernels: hs = [P_1 … P_H] [c_1 ∘ H; …; c_H ∘ H] (the heads joined in the
contraction), the per-head dHs (c_k ∘ H)ᵀ that the backward kernels read, and t = P_kᵀ dHs, from which
``_dv_h`` forms dh and dc in one pass. Covered: causal and bidirectional, key padding, ALiBi, self bias, queries at an
offset (chunked prefill and KV-cache decoding), a shared diagonal or none, both read-outs, every
preconditioner. Not covered (the energy raises, naming the option): a per-head diagonal, whose logits
differ per head.

Shared memory (issue 21): every D-wide product left in the kernels runs in chunks of ``block_d``
columns — ``ud Hᵀ`` and ``dHs Hᵀ`` accumulate over chunks, the read-out and the gradients d(ud), dh,
dc are added chunk by chunk into their zeroed buffers (which each program owns) — so neither shared
memory nor registers grow with D; the launch (tiles, warps, pipelining stages, head-loop unrolling,
materialised or recomputed shared products, the grid) is a :class:`KernelTiles`, first timed on an H100 on
2026-11-26 (docs/results/cem/gpu_h100/).
``cem_compile.py`` compiles the kernels for sm_90 without a GPU to measure shared memory, registers
and spills (docs/cem.md).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path

import torch
from einops import rearrange
from torch import Tensor

from energyformer.core.precision import autocast_off

from . import cem_products
# KernelTiles and the launch's arguments live in cem_launch; the launch config is imported from here too
from .cem_launch import (HMODES, KernelTiles, gathers, geometry, kernel_meta, launch_args,  # noqa: F401
                         launch_chunks, shared_store_dtype)
from .cem_products import (added, chunk_blocks, cols_mm, head_block_size, head_blocks, heads_pair_mm, heads_rows_mm,
                           mm_acc, pair_mm, rows_mm, zero_blocks)


#: whether the triton package is installed, looked up once at import (the kernel paths ask per call: without
#: triton imported yet ``find_spec`` searches the file system every time)
TRITON = importlib.util.find_spec("triton") is not None


def triton_available() -> bool:
    """Whether the triton package is installed (:data:`TRITON`). A plain read, so that torch.compile traces it
    as a constant: the ``functools.cache`` wrapper it had made Dynamo trace ``importlib.util.find_spec``, which
    torch before 2.13 cannot trace — a graph break inside every CEM and Hyper-SET block on CUDA, where the
    ``auto`` paths ask it (docs in ``train/compiling.py``)."""
    return TRITON


def _kernels(interpret: bool, file: str = "cem_triton.py"):
    """The kernel module ``file`` beside this one — ``cem_triton.py`` (``_fwd``, ``_bwd_q``, ``_bwd_kv``)
    or ``cem_triton_heads.py`` (``_fwd_h``, ``_bwd_d_h``, ``_bwd_kv_h``) — jitted for the GPU or for
    Triton's CPU interpreter. Triton fixes the mode of its own library when it is first imported,
    so one process has one mode: if triton is not imported yet, ``TRITON_INTERPRET`` is set here to
    what the first tensor's device needs; otherwise a mismatch is a clear error.

    Loaded once per (mode, file) for the process: a module loaded again would bring new JIT functions, which
    Triton compiles (or fetches from its disk cache) again on their first launch. (An LRU cache of four used to
    hold these, keyed by the call's spelling: four modules were in use on CUDA, so one more kernel file, or a
    call naming the default file, would have evicted one on every few launches.)"""
    return _load_kernels(bool(interpret), file)


@functools.cache
def _load_kernels(interpret: bool, file: str):
    if "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    import triton

    if bool(triton.knobs.runtime.interpret) != interpret:
        need = "CPU tensors need TRITON_INTERPRET=1" if interpret else "CUDA tensors need TRITON_INTERPRET unset"
        raise RuntimeError(f"attn_path = 'kernel': triton was imported with TRITON_INTERPRET="
                           f"{os.environ.get('TRITON_INTERPRET')!r}; {need} before triton's first import")
    name = f"{__package__}._{Path(file).stem}_{'interpreted' if interpret else 'compiled'}"
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(file))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _dummy(q: Tensor) -> Tensor:
    """The pointer the kernels get for an absent input or output (never read or written: a constexpr flag
    says it is absent), allocated without a fill (the NaN-poisoned tests prove it unread)."""
    return cem_products.scratch((1,), q, q.dtype)


def _heads_grid(tiles: int, bh: int, meta: dict) -> tuple[int, int]:
    """The one-program-per-head kernels' grid: (tiles, B·H), or (B·H, tiles) with heads inner (HI)"""
    return (bh, tiles) if meta.get("HI") else (tiles, bh)


def _fwd_impl(q, k, ud, hm, x, c, delta, slopes, kmask, causal: bool, offset: int, hmode: str,
              tiles: KernelTiles) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor, Tensor, Tensor, Tensor | None]:
    """(oq, hs or None, ox or None, lse, m, l, kept or None): the forward launches (m, l: every head's running
    max and sum, p = e^{s − m} / l, which the backward reads; kept: the gathered Σ_k P_k, (B, one-head buffer) in
    the operand dtype, for the backward — :func:`gathers`)."""
    B, H, nq, R = q.shape
    nk = k.shape[2]
    acc_dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    dummy = _dummy(q)
    meta = launch_args(_kernels(q.device.type != "cuda").tl, q, hm, x, causal, ud is not None, hmode,
                        slopes is not None, delta is not None, kmask is not None, tiles)
    grid = tiles.per_head_programs(hmode)  # one program per head (cem_triton_heads.py)
    kern = _kernels(q.device.type != "cuda", "cem_triton_heads.py" if grid else "cem_triton.py")
    new = functools.partial(torch.zeros, device=q.device, dtype=acc_dt)
    oq = (torch.empty if grid else new)(B, H, nq, R, device=q.device, dtype=acc_dt)
    hs = new(B, nq, meta["D"]) if hmode != "none" and not meta["MAT"] else dummy
    ox = (torch.empty if grid else new)(B, H, nq, meta["E"], device=q.device, dtype=acc_dt) \
        if x is not None else dummy
    lse = torch.empty(B, H, nq, device=q.device, dtype=acc_dt)
    m, l = torch.empty_like(lse), torch.empty_like(lse)  # running max and sum (p = e^{s − m} / l)
    ins = [t if t is not None else dummy for t in (q, k, ud, hm, x, c, slopes, delta, kmask)]
    chunks = launch_chunks(nq, nk, offset, causal, tiles)  # blocks of the shared products
    sdt = shared_store_dtype(tiles, q.dtype, acc_dt, hmode)
    g = pair_mm(ud, hm.mT, acc_dt, chunks, sdt) if meta["MAT"] and ud is not None else dummy  # (B, Nq, Nk)
    # Σ_k P_k: (B, Nq, Nk), stored per tile (loop) or added up atomically in the accumulation dtype (grid);
    # per-head factors (grid): every head's P_k in the operand dtype, per chunk a (B, rows, H, keys) block
    ps = dummy
    gather = gathers(tiles, hmode)
    if gather:  # Σ_k P_k on the chunks' blocks, one after another, every entry written by _psum_h: no fill
        ps = cem_products.scratch((B, head_block_size(1, chunks)), q, q.dtype)
    elif meta["MAT"] and hmode == "sum":
        ps = zero_blocks((B, nq, nk), q, acc_dt if grid else q.dtype, chunks)
    elif meta["MAT"] and hmode == "stack":  # every block entry written by _fwd_h (zeros where hidden): no fill
        ps = cem_products.scratch((B, head_block_size(H, chunks)), q, q.dtype)
    name = "_fwd_h" if grid else "_fwd"
    n_qt = -(-nq // meta["BM"])
    launch = getattr(kern, name)[_heads_grid(n_qt, B * H, meta) if grid else (n_qt, B)]
    geom = geometry(chunks, H, nq, causal, tiles) if grid else ()  # the per-head buffers' layout
    launch(*ins, g, ps, oq, hs, ox, lse, m, l, nq, nk, offset, *geom, **kernel_meta(meta, name))
    if gather:  # every head's p summed per tile in registers, stored once (needs every head's final m, l)
        step, align, _ = geom  # its buffer holds one "head"
        runs = -(-nk // (meta["KT"] * meta["BN"])) if meta["KT"] else 1  # runs of KT key tiles per query tile
        kern._psum_h[(n_qt, runs, B)](q, k, ins[6], ins[7], ins[8], g, m, l, ps, nq, nk, offset, step, align,
                                      head_block_size(1, chunks), **kernel_meta(meta, "_psum_h"))
    del g
    if gather:
        hs = rows_mm(gathered_blocks(ps, chunks), hm, acc_dt, chunks)  # (Σ_k P_k) H: (B, Nq, D)
    elif meta["MAT"] and hmode == "sum":
        hs = rows_mm(chunk_blocks(ps, chunks, q.dtype), hm, acc_dt, chunks)  # (Σ_k P_k) H: (B, Nq, D)
    elif meta["MAT"] and hmode == "stack":  # Σ_k c_k ∘ (P_k H) = [P_1 … P_H] [c_1 ∘ H; …; c_H ∘ H], (B, Nq, D)
        hs = heads_rows_mm(ps, hm, c.to(acc_dt), q.dtype, acc_dt, chunks)
    return oq, (hs if hmode != "none" else None), (ox if x is not None else None), lse, m, l, (ps if gather else None)


def gathered_blocks(ps: Tensor, chunks) -> list[Tensor]:
    """The chunks' (B, rows, keys) blocks of a gathered Σ_k P_k (:func:`gathers`; views)"""
    return [blk.flatten(2) for blk in head_blocks(ps, 1, chunks)]


def _bwd_impl(q, k, ud, hm, x, c, delta, slopes, kmask, m, l, kept, goq, ghs, gox, glse, causal: bool, offset: int,
              hmode: str, tiles: KernelTiles) -> tuple:
    """(dq, dk, d(ud), dh, dx, dc, dδ), None where the input is None; an output's gradient may be None. kept: the
    forward's gathered Σ_k P_k (:func:`gathers`) or None."""
    B, H, nq, R = q.shape
    nk = k.shape[2]
    acc_dt = m.dtype
    if gathers(tiles, hmode) != (kept is not None):  # the key-tile kernel would skip Σ P with nothing to replace it
        got = "one" if kept is not None else "none"
        raise RuntimeError(f"cem_attention backward: head_sums = {tiles.head_sums!r} with h_mode {hmode!r} needs the "
                           f"forward's gathered Σ_k P_k exactly when it gathers (got {got})")
    meta = launch_args(_kernels(q.device.type != "cuda").tl, q, hm, x, causal, ud is not None, hmode,
                        slopes is not None, delta is not None, kmask is not None, tiles)
    grid = tiles.per_head_programs(hmode)
    chunks = launch_chunks(nq, nk, offset, causal, tiles)
    new = functools.partial(torch.zeros, device=q.device, dtype=acc_dt)
    dummy = _dummy(q)
    goq = new(B, H, nq, R) if goq is None else goq
    if x is not None:
        gox = (new(B, H, nq, meta["E"]) if gox is None else gox).to(q.dtype).contiguous()
    dlt = new(B, H, nq) if glse is None else -glse.to(acc_dt)  # (B, H, Nq); the kernel adds Σ_j p dP
    if hmode != "none":
        ghs = (new(B, nq, meta["D"]) if ghs is None else ghs).to(q.dtype).contiguous()
    # one program per head stores dk, dx (every key row: one program per key tile) and the self-bias gradient
    # (every query row: the program whose key tile holds its position) without reading them: no fill first
    stored = (lambda *shape: cem_products.scratch(shape, q, acc_dt)) if grid else new
    dq, dk = new(q.shape), stored(*k.shape)
    mat, hsum, hstack = meta["MAT"], hmode == "sum", meta["MAT"] and hmode == "stack"
    dud = new(ud.shape) if ud is not None and not mat else dummy  # materialised: a matmul below
    dh = new(hm.shape) if hm is not None and not grid else None  # one program per head writes no dh
    dx = stored(*x.shape) if x is not None else dummy
    ddiag = stored(B, H, nq) if delta is not None else dummy
    meta_kv = kernel_meta(meta, "_bwd_kv_h" if grid else "_bwd_kv")
    n_kt = -(-nk // meta_kv["BN"])
    dc = new(B, n_kt, H, meta["D"]) if hmode == "stack" and not hstack else dummy  # the loop kernels' parts
    # materialised shared products (B, Nq, Nk): G = ud Hᵀ, Gh = dHs Hᵀ; the head sums Σ dS, Σ P (stored
    # per tile in the operand dtype, or added up atomically in the accumulation dtype by the grid kernels)
    pair = functools.partial(zero_blocks, (B, nq, nk), q, acc_dt if grid else q.dtype, chunks)
    sdt = shared_store_dtype(tiles, q.dtype, acc_dt, hmode)
    g = pair_mm(ud, hm.mT, acc_dt, chunks, sdt) if mat and ud is not None else dummy
    gh = pair_mm(ghs, hm.mT, acc_dt, chunks, sdt) if mat and hsum else dummy
    gather_ds = tiles.head_sums_for(hmode) == "gather_all" and ud is not None  # Σ dS by _dsum_h
    if gather_ds:  # every entry of the blocks written by _dsum_h (zeros where hidden): no fill
        dss = cem_products.scratch((B, head_block_size(1, chunks)), q, q.dtype)
    else:
        dss = pair() if mat and ud is not None else dummy
    ps = pair() if mat and hsum and kept is None else dummy  # gathered: the forward's, kept
    if hstack:  # per head, per chunk (B, rows, H, keys): (dHs ∘ c_k) Hᵀ = dHs (c_k ∘ H)ᵀ, one matmul; and every
        # head's P_k keys first (B, keys, H, rows), every block entry written by _bwd_kv_h (zeros where hidden)
        gh = heads_pair_mm(ghs, hm, c.to(acc_dt), q.dtype, acc_dt, chunks, sdt)
        ps = cem_products.scratch((B, head_block_size(H, chunks)), q, q.dtype)
    ins = [t if t is not None else dummy for t in (q, k, ud, hm, x, c, slopes, delta, kmask)] + [g, gh]
    ins += [m, l, goq.to(q.dtype).contiguous(), ghs if hmode != "none" else dummy,
            gox if x is not None else dummy, dlt.contiguous()]
    if grid:  # Δ per query tile, then every gradient per key tile (dq, Σ dS, Σ P by atomic adds)
        kern = _kernels(q.device.type != "cuda", "cem_triton_heads.py")
        geom = geometry(chunks, H, nq, causal, tiles)
        if gather_ds:  # Δ of every head and Σ_k dS_k, one program per (query tile, batch row)
            xx, sl, dl, km, gg, ggh, mm, ll, go, _, gx, dd = ins[4], *ins[6:9], *ins[9:17]  # dd: DLT, read next
            kern._dsum_h[(-(-nq // meta["BM"]), B)](q, k, xx, sl, dl, km, gg, ggh, mm, ll, go, gx, dd, dss, nq, nk,
                                                    offset, geom[0], geom[1], head_block_size(1, chunks),
                                                    **kernel_meta(meta, "_dsum_h"))
        else:
            kern._bwd_d_h[_heads_grid(-(-nq // meta["BM"]), B * H, meta)](*ins, nq, nk, offset, *geom,
                                                                           **kernel_meta(meta, "_bwd_d_h"))
        kern._bwd_kv_h[_heads_grid(n_kt, B * H, meta)](*ins, ps, dss, dq, dk, dx, ddiag, nq, nk, offset, *geom,
                                                       **meta_kv)
    else:
        kern = _kernels(q.device.type != "cuda")
        kern._bwd_q[(-(-nq // meta["BM"]), B)](*ins, ps, dss, dq, dud, ddiag, nq, nk, offset,
                                               **kernel_meta(meta, "_bwd_q"))
        kern._bwd_kv[(n_kt, B)](*ins, dk, dh if dh is not None else dummy, dx, dc, nq, nk, offset, **meta_kv)
    del g, gh
    if mat and ud is not None:  # d(ud) = (Σ_k dS_k) H;  dh = (Σ_k dS_k)ᵀ ud + (Σ_k P_k)ᵀ dHs
        # the blocks cast once, read twice (gathered: already in the operand dtype)
        dss = gathered_blocks(dss, chunks) if gather_ds else chunk_blocks(dss, chunks, q.dtype)
        dud = rows_mm(dss, hm, acc_dt, chunks)
        dh = added(dh, cols_mm(dss, ud, acc_dt, chunks, nk))
    if mat and hsum:
        psb = gathered_blocks(kept, chunks) if kept is not None else chunk_blocks(ps, chunks, q.dtype)
        dh = added(dh, cols_mm(psb, ghs, acc_dt, chunks, nk))
    if hstack:  # per row chunk t_k = P_kᵀ dHs (B, ke, H, D), one matmul; _dv_h: dh += Σ_k c_k ∘ t_k, dc_k += Σ h ∘ t_k
        dh = new(hm.shape) if dh is None else dh
        dc = new(1, 1, H, meta["D"])  # (1, 1, H, D): summed below as the loop kernels' parts are
        mdv = kernel_meta(meta, "_dv_h")
        for (r0, r1, ke), blk in zip(chunks, head_blocks(ps, H, chunks, keys_first=True)):
            # t (B, ke·H, D), one chunk's at a time (freed after the launch); the block is a view
            kern._dv_h[(-(-B * ke // mdv["BJ"]), -(-meta["D"] // mdv["BD"]))](
                mm_acc(blk.reshape(B, ke * H, r1 - r0), ghs[:, r0:r1], acc_dt), hm, c, dh, dc, B * ke, ke, nk, **mdv)
        del ps
    if hm is not None and dh is None:
        dh = new(hm.shape)

    def back(g, t):
        return None if t is None else g.to(t.dtype)

    return (back(dq, q), back(dk, k), back(dud, ud), back(dh, hm), back(dx, x),
            None if c is None else dc.sum((0, 1)).to(c.dtype),
            None if delta is None else ddiag.sum((0, 2)).to(delta.dtype))


class _CEMAttention(torch.autograd.Function):
    """(oq, hs, ox, lse) of :func:`cem_attention` with the kernels' own backward (the eager wrapper; under
    torch.compile the same launches are custom operators, ``cem_kernel_ops.py``)."""

    @staticmethod
    def forward(ctx, q, k, ud, hm, x, c, delta, slopes, kmask, causal, offset, hmode, tiles):
        oq, hs, ox, lse, m, l, kept = _fwd_impl(q, k, ud, hm, x, c, delta, slopes, kmask, causal, offset, hmode,
                                                tiles)
        # not the outputs: saving oq would keep a float32 (B, H, Nq, Dr) per call alive
        ctx.save_for_backward(q, k, ud, hm, x, c, delta, slopes, kmask, m, l, kept)
        ctx.args = causal, offset, hmode, tiles
        return oq, hs, ox, lse

    @staticmethod
    def backward(ctx, goq, ghs, gox, glse):
        return (*_bwd_impl(*ctx.saved_tensors, goq, ghs, gox, glse, *ctx.args), None, None, None, None, None, None)


def cem_attention(q: Tensor, k: Tensor, ud: Tensor | None, hm: Tensor | None, *, slopes: Tensor | None,
                  delta: Tensor | None, key_mask: Tensor | None, causal: bool, offset: int,
                  h_mode: str = "none", c: Tensor | None = None, x: Tensor | None = None,
                  tiles: KernelTiles | None = None, **launch) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor]:
    """(oq (B, H, Nq, Dr), hs (B, Nq, D) or None, ox (B, H, Nq, E) or None, lse (B, H, Nq)).

    q: (B, H, Nq, Dr) = W_Q u / τ; k: (B, H, Nk, Dr) keys (= values); ud: (B, Nq, D) = d∘u/τ or None
    (no diagonal); hm: (B, Nk, D) normalised context (needed with ud or an h read-out); slopes, delta:
    (H,) ALiBi slopes and self bias or None; key_mask: (B, Nk) bool (True = real) or None.
    h_mode: 'none'; 'sum': hs = (Σ_k P_k) H; 'stack': hs = Σ_k c_k ∘ (P_k H) with c: (H, D).
    x: (B, H, Nk, E) extra per-head value columns (ox = P_k x_k) or None. Differentiable in q, k, ud,
    hm, x, c and delta (slopes are fixed). float64, float32, bfloat16 or float16 operands (one dtype).
    ``launch``: :class:`KernelTiles` fields by name (block_m, block_n, …; the others at its defaults), resolved
    for ``h_mode`` by :meth:`KernelTiles.launch` (a bad value or an unknown name is a ConfigError naming it); or
    ``tiles``, an already validated and resolved launch, which replaces them (what the energy passes: no
    validation per call, and nothing that torch.compile cannot trace)."""
    if tiles is None:
        tiles = KernelTiles(**launch).launch(h_mode)
    dt = q.dtype
    if dt not in (torch.float64, torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"cem_attention: dtype {dt} is not supported (float64, float32, bfloat16, float16)")
    if h_mode not in HMODES or (h_mode == "stack") != (c is not None):
        raise ValueError(f"cem_attention: h_mode = {h_mode!r} (allowed: {sorted(HMODES)}; c exactly with 'stack')")
    acc_dt = torch.float64 if dt == torch.float64 else torch.float32
    q, k = q.contiguous(), k.to(dt).contiguous()
    ud = None if ud is None else ud.to(dt).contiguous()
    hm = None if hm is None or (ud is None and h_mode == "none") else hm.to(dt).contiguous()
    x = None if x is None else x.to(dt).contiguous()
    c = None if c is None else c.contiguous()
    slopes = None if slopes is None else slopes.to(device=q.device, dtype=acc_dt).contiguous()
    delta = None if delta is None else delta.to(acc_dt).contiguous()
    kmask = None if key_mask is None else key_mask.to(device=q.device, dtype=torch.int8).contiguous()
    if torch.compiler.is_compiling():  # custom operators, which Dynamo keeps in its graph (cem_kernel_ops.py)
        from .cem_kernel_ops import cem_attention_op

        return cem_attention_op(q, k, ud, hm, x, c, delta, slopes, kmask, bool(causal), int(offset), h_mode, tiles)
    return _CEMAttention.apply(q, k, ud, hm, x, c, delta, slopes, kmask, bool(causal), int(offset), h_mode,
                               tiles)


# ------------------------------------------------------------------------------ the energy's path
def attend_kernel(e, u: Tensor, st, bs, plan, need_logz: bool):
    """The attention averages (:class:`~.interaction_paths.Averages`) of queries u (B, Nq, D) through
    :func:`cem_attention`; ``bs`` is the state's :class:`~.interaction_paths.BlockedState` (keys and
    h in the product dtype). Read-out plans: no h term, the head-summed one (c = d: hs ∘ d after the
    kernel), per-head factors c_k ('stack', inside the kernel), and a per-head preconditioner's
    low-rank projections x_k = [d_k∘V_k, d_k∘U_k]ᵀ h as extra value columns."""
    from .interaction_paths import Averages

    H = e.heads
    # projections outside the no-autocast region (as the blocked path): bf16 under bf16 autocast
    q = rearrange(e.wq(u) * (1.0 / e.tau), "b n (h r) -> b h n r", h=H).to(bs.cdt)  # (B, H, Nq, Dr)
    ud = None if e.d is None else (u * (e.d / e.tau)).to(bs.cdt)                     # (B, Nq, D)
    mode = plan.h_mode or "none"
    x = None
    if plan.lr is not None:  # Σ_j p_ijk [V_kᵀ(d_k∘h_j) ; U_kᵀ(d_k∘h_j)]: (B, H, Nk, 2R), once per call
        x = bs.once(("kernel-x", *plan.key), lambda: torch.einsum("bnd,hdr->bhnr", bs.h, plan.lr.to(bs.cdt)))
    with autocast_off(u.device.type):
        oq, hs, ox, lse = cem_attention(
            q, bs.k, ud, bs.h, slopes=e.slopes if e.alibi else None, delta=e.self_bias,
            key_mask=st.key_mask, causal=e.causal, offset=st.offset, h_mode=mode,
            c=plan.c.to(torch.promote_types(bs.cdt, torch.float32)) if mode == "stack" else None, x=x,
            tiles=e.attn_launch[mode])
        # 'sum': d ∘ ((Σ_k P_k) H): (B, Nq, D), in the product dtype like the blocked path's, so that the
        # product keeps a 16-bit hs for d's gradient under bf16 autocast, not the kernel's float32 one
        hterm = hs.to(bs.cdt) * plan.c.to(bs.cdt) if mode == "sum" else hs
    return Averages(oq=oq, hterm=hterm, lowrank=ox, logz=lse if need_logz else None)
