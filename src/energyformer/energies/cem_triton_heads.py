"""Triton kernels of :mod:`energyformer.energies.cem_kernel` with one program per head (``KernelTiles.grid =
'heads'``; issue 21, docs/cem.md "one program per head").

The kernels of ``cem_triton.py`` run one program per (query tile, batch row) and walk every head inside
it, so every head's running state (oq, dq, dk: H·R floats per owned row) is read and added back in
global memory at every key step, and the owned tile stays small (registers). Here the grid is FlashAttention's,
(tile, batch row × head): a head's accumulators live in registers for the whole key loop and the tiles
can be as large as a single-head flash kernel's. The heads still share what the algebra lets them share
(docs/cem.md, "what is shared across heads"), but through memory: the shared products are materialised
by the launcher (G = ud Hᵀ and Gh = dHs Hᵀ, (B, Nq, Nk) in the accumulation dtype, read per tile), and
the head sums Σ_k P_k (PS) and Σ_k dS_k (DSS) are **atomic adds** of every head's tile into
accumulation-dtype (B, Nq, Nk) buffers, as is dq = Σ_j dS_ij k_j from the key-tile programs (as in
FlashAttention 2's backward, there is no query-tile pass for dq). Atomic float adds land in any order:
results are exact to rounding but not bitwise repeatable from run to run.

Kernels (constexprs as in ``cem_triton.py``, and HI: the launch order of :func:`_program`; KMAJ, TQ, TK
(``KernelTiles.product_order``): every (queries × keys) product Q Kᵀ, dOq Kᵀ formed keys first, the query-row
accumulators oq and dq and the key-row accumulator dk held transposed, :func:`_acc_zeros` — refused on CUDA, where
compiled they broke ``_bwd_kv_h`` at the model's size: docs/results/cem/gpu_h100/product_order_5cde3b5.md; MAT must
hold wherever there is a shared or per-head product):

* ``_fwd_h``: pass 1 → m, l, lse of the head; pass 2 → oq, ox in registers (p = e^{s − m}/l, the same
  arithmetic as ``_fwd``) and p added into PS — or, where no probability leaves the program (no h read-out, or
  the head sums gathered: GATHER), one pass with FlashAttention's rescaling (:func:`_one_pass`) — or, with
  per-head factors (HMODE 2), stored per head into
  PS, a per-head buffer (per batch row each causal row chunk's (rows, H, keys) block: :func:`_chunk_at`),
  zeros where hidden (every entry of the blocks written), for the launcher's one matmul per chunk
  Σ_k c_k ∘ (P_k H) = [P_1 … P_H] [c_1 ∘ H; …; c_H ∘ H];
* ``_psum_h`` (GATHER, ``KernelTiles.head_sums = 'gather'``): one program per (query tile, run of key tiles, batch
  row) (``KernelTiles.psum_keys``) sums every head's p on each key tile in registers, G loaded once per tile, and
  stores Σ_k P_k once in the operand dtype on the row chunks' blocks (a one-head buffer, :func:`_head_pair_ptrs`),
  which the launcher keeps for the backward: no atomic adds of P in either direction;
* ``_dsum_h`` (GATHER 2, ``head_sums = 'gather_all'``, with a shared diagonal): in place of ``_bwd_d_h``, one
  program per (query tile, batch row) walks the heads twice: Δ of every head, then Σ_k dS_k summed in registers and
  stored once like ``_psum_h``'s Σ_k P_k: no atomic adds of dS in ``_bwd_kv_h``;
* ``_bwd_d_h``: Δ_k = Σ_j p dP per query tile (added to DLT, which holds −g_lse), from the very p and dP
  the key-tile kernel uses (see ``_bwd_q``);
* ``_bwd_kv_h``: per key tile, dk_k = dS_kᵀ q_k + P_kᵀ dOq_k and dx_k = P_kᵀ dOx_k in registers; dq_k,
  DSS and PS by atomic adds; the self-bias gradient diag dS_k stored by the one program whose key tile
  holds each query's own position. With per-head factors PS holds every head's P_k keys first (blocks
  (keys, H, rows)), every entry of the blocks written, for the launcher's one matmul per chunk P_kᵀ dHs
  (dh and dc_k, by ``_dv_h``).

With per-head factors the h part of dP_k, (dHs ∘ c_k) Hᵀ, differs per head: the launcher materialises it
per head as GH (blocks (rows, H, keys)) = dHs [c_1 ∘ H; …; c_H ∘ H]ᵀ, one matmul per chunk, and both backward
kernels read their head's tile. The per-head buffers' geometry (STEP, ALIGN, TOT: ``cem_launch.geometry``)
is an argument of all three kernels.

The tile helpers are loaded from beside this file in the process's Triton mode: the per-head ones (accumulators held
transposed, the per-head buffers' addressing, the launch order, the backward's recomputation) from
``cem_triton_heads_tiles.py``, the rest (scores with ALiBi, self bias and masks; the shared tiles; loads and stores)
from ``cem_triton.py``.
"""

import importlib.util
import sys
from pathlib import Path

import triton
import triton.language as tl


def _helpers():
    """``cem_triton_heads_tiles.py`` beside this file (this file's tile helpers, which load ``cem_triton.py``'s),
    loaded once per name of this module."""
    name = f"{__name__}__heads_tiles"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("cem_triton_heads_tiles.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


_h = _helpers()
_t = _h._t  # cem_triton.py, as the helpers loaded it
_mm, _tile, _put, _scores, _shared, _key_end = _t._mm, _t._tile, _t._put, _t._scores, _t._shared, _t._key_end
_pair_ptrs, _online_row, _dp_x, _qk = _t._pair_ptrs, _t._online_row, _t._dp_x, _t._qk
_col, _add_col, _rescale = _t._col, _t._add_col, _t._rescale
_add_pair, _acc_zeros, _acc_mm, _acc_rows, _acc_value = (_h._add_pair, _h._acc_zeros, _h._acc_mm, _h._acc_rows,
                                                         _h._acc_value)
_chunk_at, _head_pair_ptrs, _head_gh, _store_head_p = _h._chunk_at, _h._head_pair_ptrs, _h._head_gh, _h._store_head_p
_program, _recompute_h, _store_row_stats = _h._program, _h._recompute_h, _h._store_row_stats
_chunk_keys = _h._chunk_keys


@triton.jit
def _one_pass(Q, K, UD, HM, X, SLOPES, DELTA, KMASK, G, OQ, OX, LSE, M, L, pid, b, hh, bh, rows, rmask, kend,
              Nq, Nk, offset, H: tl.constexpr, R: tl.constexpr, D: tl.constexpr, E: tl.constexpr, RP: tl.constexpr,
              BD: tl.constexpr, EP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, MAT: tl.constexpr,
              CAUSAL: tl.constexpr, HAS_G: tl.constexpr, HAS_X: tl.constexpr, HAS_ALIBI: tl.constexpr,
              HAS_DELTA: tl.constexpr, HAS_KMASK: tl.constexpr, PREC: tl.constexpr, ACC: tl.constexpr,
              UPCAST: tl.constexpr, KMAJ: tl.constexpr, TQ: tl.constexpr):
    """``_fwd_h`` in one pass over the keys (FlashAttention's forward), where no normalised probability has to
    leave the program: oq, ox accumulated with the running max m and rescaled by e^{m − m'} when it grows, divided
    by the final sum l at the end; stores lse and the final m, l (as the two-pass form: the backward's
    p = e^{s − m}/l). Two per-head products instead of three."""
    m = tl.full((BM,), float("-inf"), ACC)
    l = tl.zeros((BM,), ACC)
    oq = _acc_zeros(BM, RP, TQ, ACC)
    ox = tl.zeros((BM, EP), ACC)
    for start in range(0, kend, BN):
        cols = start + tl.arange(0, BN)
        cmask = cols < Nk
        g, _ = _shared(UD, UD, HM, G, G, b, rows, cols, rmask, cmask, Nq, Nk, HAS_G, False, MAT, D, BD, BM, BN,
                       PREC, ACC, UPCAST)
        s, qh, kh = _scores(Q, K, SLOPES, DELTA, KMASK, hh, b, rows, cols, rmask, cmask, g, Nq, Nk, offset,
                            H, R, RP, CAUSAL, HAS_G, HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, UPCAST, KMAJ)
        m_new, alpha, pt = _rescale(s, m)  # pt = e^{s − m'} (BM, BN), at most 1
        l = l * alpha + tl.sum(pt, 1)
        oq = _acc_rows(oq, alpha, TQ) + _acc_mm(pt.to(kh.dtype), kh, TQ, PREC, ACC, UPCAST)
        if HAS_X:
            xh = _tile(X, bh, cols, Nk, E, EP, cmask)
            ox = ox * alpha[:, None] + _mm(pt.to(xh.dtype), xh, PREC, ACC, UPCAST)
        m = m_new
    m, l = _store_row_stats(LSE, M, L, bh, rows, rmask, Nq, m, l)
    _put(OQ, bh, rows, Nq, R, RP, rmask, _acc_value(oq, TQ) / l[:, None], False)
    if HAS_X:
        _put(OX, bh, rows, Nq, E, EP, rmask, ox / l[:, None], False)


@triton.jit
def _fwd_h(Q, K, UD, HM, X, C, SLOPES, DELTA, KMASK, G, PS, OQ, HS, OX, LSE, M, L, Nq, Nk, offset, STEP, ALIGN, TOT,
           H: tl.constexpr, R: tl.constexpr, D: tl.constexpr, E: tl.constexpr, RP: tl.constexpr,
           BD: tl.constexpr, EP: tl.constexpr, HP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
           HU: tl.constexpr, MAT: tl.constexpr, HI: tl.constexpr, GATHER: tl.constexpr,
           CAUSAL: tl.constexpr, HAS_G: tl.constexpr, HMODE: tl.constexpr, HAS_X: tl.constexpr,
           HAS_ALIBI: tl.constexpr, HAS_DELTA: tl.constexpr, HAS_KMASK: tl.constexpr, PREC: tl.constexpr,
           ACC: tl.constexpr, UPCAST: tl.constexpr, KMAJ: tl.constexpr, TQ: tl.constexpr):
    """Per (query tile, batch row × head): pass 1 → lse, m, l of the head; pass 2 → oq, ox (stored once)
    and, with the head-summed read-out, p added into PS (accumulation dtype, zeroed by the launcher). Where
    no probability leaves the program (no h read-out, or GATHER: ``_psum_h`` forms Σ_k P_k), one pass:
    :func:`_one_pass`."""
    pid, b, hh, bh = _program(H, HI, CAUSAL)
    rows = pid * BM + tl.arange(0, BM)
    rmask = rows < Nq
    kend = _key_end(pid, Nk, offset, BM, CAUSAL)
    if HMODE == 0 or (HMODE == 1 and GATHER > 0):
        _one_pass(Q, K, UD, HM, X, SLOPES, DELTA, KMASK, G, OQ, OX, LSE, M, L, pid, b, hh, bh, rows, rmask, kend,
                  Nq, Nk, offset, H, R, D, E, RP, BD, EP, BM, BN, MAT, CAUSAL, HAS_G, HAS_X, HAS_ALIBI, HAS_DELTA,
                  HAS_KMASK, PREC, ACC, UPCAST, KMAJ, TQ)
    else:
        m = tl.full((BM,), float("-inf"), ACC)
        l = tl.zeros((BM,), ACC)
        for start in range(0, kend, BN):  # pass 1: the head's running max and sum
            cols = start + tl.arange(0, BN)
            cmask = cols < Nk
            g, _ = _shared(UD, UD, HM, G, G, b, rows, cols, rmask, cmask, Nq, Nk, HAS_G, False, MAT, D, BD, BM, BN,
                           PREC, ACC, UPCAST)
            s, qh, kh = _scores(Q, K, SLOPES, DELTA, KMASK, hh, b, rows, cols, rmask, cmask, g, Nq, Nk, offset,
                                H, R, RP, CAUSAL, HAS_G, HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, UPCAST, KMAJ)
            m, l = _online_row(s, m, l)
        m, l = _store_row_stats(LSE, M, L, bh, rows, rmask, Nq, m, l)  # p = e^{s − m} / l (see _fwd)
        oq = _acc_zeros(BM, RP, TQ, ACC)
        ox = tl.zeros((BM, EP), ACC)
        for start in range(0, kend, BN):  # pass 2: normalised probabilities
            cols = start + tl.arange(0, BN)
            cmask = cols < Nk
            g, _ = _shared(UD, UD, HM, G, G, b, rows, cols, rmask, cmask, Nq, Nk, HAS_G, False, MAT, D, BD, BM, BN,
                           PREC, ACC, UPCAST)
            s, qh, kh = _scores(Q, K, SLOPES, DELTA, KMASK, hh, b, rows, cols, rmask, cmask, g, Nq, Nk, offset,
                                H, R, RP, CAUSAL, HAS_G, HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, UPCAST, KMAJ)
            p = tl.exp(s - m[:, None]) / l[:, None]
            oq += _acc_mm(p.to(kh.dtype), kh, TQ, PREC, ACC, UPCAST)
            if HAS_X:
                xh = _tile(X, bh, cols, Nk, E, EP, cmask)
                ox += _mm(p.to(xh.dtype), xh, PREC, ACC, UPCAST)
            if HMODE == 1:  # Σ_k P_k over the heads' programs; (Σ_k P_k) H is one matmul in the launcher
                _add_pair(PS, b, rows, cols, rmask, cmask, Nq, Nk, p)
            if HMODE == 2:  # P_k itself; Σ_k c_k ∘ (P_k H) is one matmul in the launcher
                _store_head_p(PS, p, b, hh, pid * BM, rows, cols, rmask, cmask, Nq, Nk, offset, STEP, ALIGN, TOT, H,
                              False)
        if HMODE == 2:  # the chunk's keys past this tile's last visible one: zeros (the launcher reads the block)
            _zeros_past(PS, b, hh, pid, rows, rmask, kend, Nq, Nk, offset, STEP, ALIGN, TOT, H, BM, BN, ACC)
        _put(OQ, bh, rows, Nq, R, RP, rmask, _acc_value(oq, TQ), False)
        if HAS_X:
            _put(OX, bh, rows, Nq, E, EP, rmask, ox, False)


@triton.jit
def _head_ml(M, L, b, hh, rows, rmask, Nq, H: tl.constexpr):
    """head hh's final running max and sum (BM,) of the rows (``_fwd_h``'s: p = e^{s − m}/l)"""
    return (tl.load(M + (b * H + hh) * Nq + rows, mask=rmask, other=0.0),
            tl.load(L + (b * H + hh) * Nq + rows, mask=rmask, other=1.0))


@triton.jit
def _zeros_past(PS, b, hh, pid, rows, rmask, kend, Nq, Nk, offset, STEP, ALIGN, TOT, H: tl.constexpr,
                BM: tl.constexpr, BN: tl.constexpr, ACC: tl.constexpr):
    """zeros into head hh's entries of query tile pid's rows in a per-head (or one-head, H = 1) buffer on its row
    chunk's keys past the tile's last visible one (``kend``): with the tiles the kernel stored, every entry of the
    block is written and the launcher's matmul reads no unset value (no fill)"""
    _zeros_between(PS, b, hh, pid, rows, rmask, tl.cdiv(kend, BN) * BN,
                   _chunk_keys(pid * BM // STEP, Nq, Nk, offset, STEP, ALIGN), Nq, Nk, offset, STEP, ALIGN, TOT, H,
                   BM, BN, ACC)


@triton.jit
def _zeros_between(PS, b, hh, pid, rows, rmask, lo, hi, Nq, Nk, offset, STEP, ALIGN, TOT, H: tl.constexpr,
                   BM: tl.constexpr, BN: tl.constexpr, ACC: tl.constexpr):
    """zeros into head hh's entries of query tile pid's rows on the key tiles starting at lo, lo + BN, … below hi
    (:func:`_zeros_past`; ``_psum_h``'s runs: their share of those keys)"""
    for start in range(lo, hi, BN):
        cols = start + tl.arange(0, BN)
        _store_head_p(PS, tl.zeros((BM, BN), ACC), b, hh, pid * BM, rows, cols, rmask, cols < Nk, Nq, Nk, offset,
                      STEP, ALIGN, TOT, H, False)


@triton.jit
def _psum_h(Q, K, SLOPES, DELTA, KMASK, G, M, L, PS, Nq, Nk, offset, STEP, ALIGN, TOT,
            H: tl.constexpr, R: tl.constexpr, RP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
            KT: tl.constexpr, CAUSAL: tl.constexpr, HAS_G: tl.constexpr, HAS_ALIBI: tl.constexpr,
            HAS_DELTA: tl.constexpr, HAS_KMASK: tl.constexpr, PREC: tl.constexpr, ACC: tl.constexpr,
            UPCAST: tl.constexpr, KMAJ: tl.constexpr):
    """Σ_k P_k gathered (``KernelTiles.head_sums = 'gather'``): per (query tile, run of KT key tiles, batch row)
    (KT 0: every key; ``KernelTiles.psum_keys``), every key tile of the run the query tile sees once, the shared
    tile G loaded once and every head's p = e^{s − m}/l (``_fwd_h``'s final m, l) summed in registers; stored
    once, in PS's dtype (the operands'), into the row chunk's block of a one-head buffer (:func:`_head_pair_ptrs`
    with H = 1: per batch row each chunk's (rows, keys) block, one after another), zeros on the run's keys of the
    block past the tile's last visible one — every entry of the blocks written, no atomics and no fill. No tile
    depends on another (m, l are final), so the runs split the key loop among programs: the same arithmetic per
    entry, a shorter longest program. One per-head product (the scores) per head, as ``_fwd_h``'s second pass
    had."""
    pid = tl.program_id(0)
    kc = tl.program_id(1)
    b = tl.program_id(2)
    rows = pid * BM + tl.arange(0, BM)
    rmask = rows < Nq
    kend = _key_end(pid, Nk, offset, BM, CAUSAL)
    ke = _chunk_keys(pid * BM // STEP, Nq, Nk, offset, STEP, ALIGN)  # the block's keys (>= kend)
    lo = 0
    hi = ke
    if KT > 0:
        lo = kc * KT * BN
        hi = tl.minimum(lo + KT * BN, ke)
    for start in range(lo, tl.minimum(hi, kend), BN):
        cols = start + tl.arange(0, BN)
        cmask = cols < Nk
        g, _ = _shared(G, G, G, G, G, b, rows, cols, rmask, cmask, Nq, Nk, HAS_G, False, True, 1, 16, BM, BN, PREC,
                       ACC, UPCAST)  # materialised: the D-chunk arguments are unused
        ps = tl.zeros((BM, BN), ACC)
        for hh in range(0, H):
            s, qh, kh = _scores(Q, K, SLOPES, DELTA, KMASK, hh, b, rows, cols, rmask, cmask, g, Nq, Nk, offset,
                                H, R, RP, CAUSAL, HAS_G, HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, UPCAST, KMAJ)
            m, l = _head_ml(M, L, b, hh, rows, rmask, Nq, H)
            ps += tl.exp(s - m[:, None]) / l[:, None]
        _store_head_p(PS, ps, b, 0, pid * BM, rows, cols, rmask, cmask, Nq, Nk, offset, STEP, ALIGN, TOT, 1, False)
    # the run's share of the block's keys past the tile's last visible one
    _zeros_between(PS, b, 0, pid, rows, rmask, tl.maximum(lo, tl.cdiv(kend, BN) * BN), hi, Nq, Nk, offset, STEP,
                   ALIGN, TOT, 1, BM, BN, ACC)


@triton.jit
def _tile_p_dp(Q, K, X, SLOPES, DELTA, KMASK, M, L, GOQ, GOX, b, rows, cols, rmask, cmask, g, gh, hh, Nq, Nk, offset,
               H: tl.constexpr, R: tl.constexpr, E: tl.constexpr, RP: tl.constexpr, EP: tl.constexpr,
               CAUSAL: tl.constexpr, HAS_G: tl.constexpr, HAS_X: tl.constexpr, HAS_ALIBI: tl.constexpr,
               HAS_DELTA: tl.constexpr, HAS_KMASK: tl.constexpr, PREC: tl.constexpr, ACC: tl.constexpr,
               UPCAST: tl.constexpr, KMAJ: tl.constexpr):
    """(p, dP) (BM, BN) of head hh on one tile with the head-summed read-out: :func:`_recompute_h` with the shared
    tiles g, gh (``_shared``'s, loaded once per key tile by the caller) and the head's m, l"""
    m, l = _head_ml(M, L, b, hh, rows, rmask, Nq, H)
    p, dp, qh, kh, goq = _recompute_h(Q, K, SLOPES, DELTA, KMASK, X, GOQ, GOX, hh, b, rows, cols, rmask, cmask, g, gh,
                                      m, l, Nq, Nk, offset, H, R, E, RP, EP, CAUSAL, HAS_G, 1, HAS_X, HAS_ALIBI,
                                      HAS_DELTA, HAS_KMASK, PREC, ACC, UPCAST, KMAJ)
    return p, dp


@triton.jit
def _dsum_h(Q, K, X, SLOPES, DELTA, KMASK, G, GH, M, L, GOQ, GOX, DLT, DSS, Nq, Nk, offset, STEP, ALIGN, TOT,
            H: tl.constexpr, R: tl.constexpr, E: tl.constexpr, RP: tl.constexpr, EP: tl.constexpr,
            HP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, CAUSAL: tl.constexpr, HAS_G: tl.constexpr,
            HAS_X: tl.constexpr, HAS_ALIBI: tl.constexpr, HAS_DELTA: tl.constexpr, HAS_KMASK: tl.constexpr,
            PREC: tl.constexpr, ACC: tl.constexpr, UPCAST: tl.constexpr, KMAJ: tl.constexpr):
    """Σ_k dS_k gathered (``KernelTiles.head_sums = 'gather_all'``, the head-summed read-out with a shared
    diagonal), in place of ``_bwd_d_h``: per (query tile, batch row), every head walked inside, G and Gh loaded
    once per key tile for all heads. Pass A: every head's Δ_k = Σ_j p dP, a (BM, HP) tile in registers, added to
    DLT (which holds −g_lse) and stored; pass B: dS_k = p (dP − Δ_k) summed over the heads in registers and
    stored once, in DSS's dtype (the operands'), into the row chunk's block of a one-head buffer as ``_psum_h``
    stores Σ_k P_k (zeros past a tile's last visible key): no atomic adds of dS. p and dP are
    :func:`_recompute_h`'s, the very numbers ``_bwd_kv_h`` uses. Four per-head products where ``_bwd_d_h`` had
    two."""
    pid = tl.program_id(0)
    b = tl.program_id(1)
    rows = pid * BM + tl.arange(0, BM)
    rmask = rows < Nq
    hcol = tl.arange(0, HP)
    kend = _key_end(pid, Nk, offset, BM, CAUSAL)
    dptr = (b * H + hcol[None, :]) * Nq + rows[:, None]
    dmask = rmask[:, None] & (hcol < H)[None, :]
    dlt = tl.load(DLT + dptr, mask=dmask, other=0.0)  # (BM, HP)
    for start in range(0, kend, BN):  # pass A: Δ of every head
        cols = start + tl.arange(0, BN)
        cmask = cols < Nk
        g, gh = _shared(G, G, G, G, GH, b, rows, cols, rmask, cmask, Nq, Nk, HAS_G, True, True, 1, 16, BM, BN, PREC,
                        ACC, UPCAST)  # once for every head below
        for hh in range(0, H):
            p, dp = _tile_p_dp(Q, K, X, SLOPES, DELTA, KMASK, M, L, GOQ, GOX, b, rows, cols, rmask, cmask, g, gh, hh,
                               Nq, Nk, offset, H, R, E, RP, EP, CAUSAL, HAS_G, HAS_X, HAS_ALIBI, HAS_DELTA,
                               HAS_KMASK, PREC, ACC, UPCAST, KMAJ)
            dlt = _add_col(dlt, hcol, hh, tl.sum(p * dp, 1))
    tl.store(DLT + dptr, dlt, mask=dmask)
    for start in range(0, kend, BN):  # pass B: Σ_k dS_k
        cols = start + tl.arange(0, BN)
        cmask = cols < Nk
        g, gh = _shared(G, G, G, G, GH, b, rows, cols, rmask, cmask, Nq, Nk, HAS_G, True, True, 1, 16, BM, BN, PREC,
                        ACC, UPCAST)  # once for every head below
        dss = tl.zeros((BM, BN), ACC)
        for hh in range(0, H):
            p, dp = _tile_p_dp(Q, K, X, SLOPES, DELTA, KMASK, M, L, GOQ, GOX, b, rows, cols, rmask, cmask, g, gh, hh,
                               Nq, Nk, offset, H, R, E, RP, EP, CAUSAL, HAS_G, HAS_X, HAS_ALIBI, HAS_DELTA,
                               HAS_KMASK, PREC, ACC, UPCAST, KMAJ)
            dss += p * (dp - _col(dlt, hcol, hh)[:, None])
        _store_head_p(DSS, dss, b, 0, pid * BM, rows, cols, rmask, cmask, Nq, Nk, offset, STEP, ALIGN, TOT, 1, False)
    _zeros_past(DSS, b, 0, pid, rows, rmask, kend, Nq, Nk, offset, STEP, ALIGN, TOT, 1, BM, BN, ACC)


@triton.jit
def _bwd_d_h(Q, K, UD, HM, X, C, SLOPES, DELTA, KMASK, G, GH, M, L, GOQ, GHS, GOX, DLT, Nq, Nk, offset, STEP,
             ALIGN, TOT,
             H: tl.constexpr, R: tl.constexpr, D: tl.constexpr, E: tl.constexpr, RP: tl.constexpr,
             BD: tl.constexpr, EP: tl.constexpr, HP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
             HU: tl.constexpr, MAT: tl.constexpr, HI: tl.constexpr, GATHER: tl.constexpr,
             CAUSAL: tl.constexpr, HAS_G: tl.constexpr, HMODE: tl.constexpr, HAS_X: tl.constexpr,
             HAS_ALIBI: tl.constexpr, HAS_DELTA: tl.constexpr, HAS_KMASK: tl.constexpr, PREC: tl.constexpr,
             ACC: tl.constexpr, UPCAST: tl.constexpr, KMAJ: tl.constexpr):
    """Per (query tile, batch row × head): Δ_k = Σ_j p dP added to DLT (which holds −g_lse); the very p
    and dP of ``_bwd_kv_h`` (not dOq·oq, see ``cem_triton._bwd_q``)."""
    pid, b, hh, bh = _program(H, HI, CAUSAL)
    rows = pid * BM + tl.arange(0, BM)
    rmask = rows < Nq
    m = tl.load(M + bh * Nq + rows, mask=rmask, other=0.0)
    l = tl.load(L + bh * Nq + rows, mask=rmask, other=1.0)
    dlt = tl.load(DLT + bh * Nq + rows, mask=rmask, other=0.0)
    for start in range(0, _key_end(pid, Nk, offset, BM, CAUSAL), BN):
        cols = start + tl.arange(0, BN)
        cmask = cols < Nk
        g, gh = _shared(UD, GHS, HM, G, GH, b, rows, cols, rmask, cmask, Nq, Nk, HAS_G, HMODE == 1, MAT, D, BD,
                        BM, BN, PREC, ACC, UPCAST)
        gh = _head_gh(GH, gh, b, hh, pid * BM, rows, cols, rmask, cmask, Nq, Nk, offset, STEP, ALIGN, TOT, H, HMODE,
                      ACC)
        p, dp, qh, kh, goq = _recompute_h(Q, K, SLOPES, DELTA, KMASK, X, GOQ, GOX, hh, b, rows, cols, rmask, cmask,
                                          g, gh, m, l, Nq, Nk, offset, H, R, E, RP, EP, CAUSAL, HAS_G, HMODE, HAS_X,
                                          HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, ACC, UPCAST, KMAJ)
        dlt += tl.sum(p * dp, 1)
    tl.store(DLT + bh * Nq + rows, dlt, mask=rmask)


@triton.jit
def _bwd_kv_h(Q, K, UD, HM, X, C, SLOPES, DELTA, KMASK, G, GH, M, L, GOQ, GHS, GOX, DLT, PS, DSS, DQ, DK, DX,
              DDIAG, Nq, Nk, offset, STEP, ALIGN, TOT,
              H: tl.constexpr, R: tl.constexpr, D: tl.constexpr, E: tl.constexpr, RP: tl.constexpr,
              BD: tl.constexpr, EP: tl.constexpr, HP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
              HU: tl.constexpr, MAT: tl.constexpr, HI: tl.constexpr, GATHER: tl.constexpr,
              CAUSAL: tl.constexpr, HAS_G: tl.constexpr, HMODE: tl.constexpr, HAS_X: tl.constexpr,
              HAS_ALIBI: tl.constexpr, HAS_DELTA: tl.constexpr, HAS_KMASK: tl.constexpr, PREC: tl.constexpr,
              ACC: tl.constexpr, UPCAST: tl.constexpr, KMAJ: tl.constexpr, TQ: tl.constexpr,
              TK: tl.constexpr):
    """Per (key tile, batch row × head), over the query tiles that see it: dk, dx (registers, stored once);
    dq_k += dS_k K_k, DSS += dS_k, PS += P_k (atomic adds; DQ, DSS, PS zeroed by the launcher; with GATHER no
    PS: the launcher kept the forward's); the
    self-bias gradient Σ_j [j = i] dS_ijk into DDIAG (B, H, Nq), written by the program whose tile holds
    key position offset + i."""
    pid, b, hh, bh = _program(H, HI, False)  # key tiles: the first is the longest
    cols = pid * BN + tl.arange(0, BN)
    cmask = cols < Nk
    dk = _acc_zeros(BN, RP, TK, ACC)
    dx = tl.zeros((BN, EP), ACC)
    qstart = 0
    if CAUSAL:  # queries at positions >= this tile's first key
        qstart = tl.maximum(pid * BN - offset, 0) // BM * BM
    if HMODE == 2:  # the queries before them: zeros in P_k, so the launcher reads whole columns
        for r0 in range(0, qstart, BM):
            rows = r0 + tl.arange(0, BM)
            _store_head_p(PS, tl.zeros((BM, BN), ACC), b, hh, r0, rows, cols, rows < Nq, cmask, Nq, Nk, offset, STEP,
                          ALIGN, TOT, H, True)
    for r0 in range(qstart, Nq, BM):
        rows = r0 + tl.arange(0, BM)
        rmask = rows < Nq
        m = tl.load(M + bh * Nq + rows, mask=rmask, other=0.0)
        l = tl.load(L + bh * Nq + rows, mask=rmask, other=1.0)
        dlt = tl.load(DLT + bh * Nq + rows, mask=rmask, other=0.0)
        g, gh = _shared(UD, GHS, HM, G, GH, b, rows, cols, rmask, cmask, Nq, Nk, HAS_G, HMODE == 1, MAT, D, BD,
                        BM, BN, PREC, ACC, UPCAST)
        gh = _head_gh(GH, gh, b, hh, r0, rows, cols, rmask, cmask, Nq, Nk, offset, STEP, ALIGN, TOT, H, HMODE, ACC)
        p, dp, qh, kh, goq = _recompute_h(Q, K, SLOPES, DELTA, KMASK, X, GOQ, GOX, hh, b, rows, cols, rmask, cmask,
                                          g, gh, m, l, Nq, Nk, offset, H, R, E, RP, EP, CAUSAL, HAS_G, HMODE, HAS_X,
                                          HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, ACC, UPCAST, KMAJ)
        ds = p * (dp - dlt[:, None])  # dS_k = P_k ∘ (dP_k − Δ_k)
        dk += (_acc_mm(tl.trans(ds.to(qh.dtype)), qh, TK, PREC, ACC, UPCAST)
               + _acc_mm(tl.trans(p.to(goq.dtype)), goq, TK, PREC, ACC, UPCAST))
        if HAS_X:
            gox = _tile(GOX, bh, rows, Nq, E, EP, rmask)
            dx += _mm(tl.trans(p.to(gox.dtype)), gox, PREC, ACC, UPCAST)
        rr = tl.arange(0, RP)
        # dq_k += dS_k K_k: (BM, RP), or its transpose where TQ (pointers, product, mask in the order of the form
        # before TQ, whose PTX this keeps where TQ is off)
        dq_at = _acc_value(DQ + (bh * Nq + rows[:, None]) * R + rr[None, :], TQ)
        dq = _acc_mm(ds.to(kh.dtype), kh, TQ, PREC, ACC, UPCAST)
        tl.atomic_add(dq_at, dq, mask=_acc_value(rmask[:, None] & (rr < R)[None, :], TQ), sem="relaxed")
        if HAS_G and not (HMODE == 1 and GATHER == 2):  # (GATHER 2: _dsum_h forms Σ_k dS_k)
            _add_pair(DSS, b, rows, cols, rmask, cmask, Nq, Nk, ds)
        if HMODE == 1 and GATHER == 0:  # (GATHER: the forward's Σ_k P_k, kept)
            _add_pair(PS, b, rows, cols, rmask, cmask, Nq, Nk, p)
        if HMODE == 2:  # P_k keys first; P_kᵀ dHs (dh, dc_k) is one matmul in the launcher
            _store_head_p(PS, p, b, hh, r0, rows, cols, rmask, cmask, Nq, Nk, offset, STEP, ALIGN, TOT, H, True)
        if HAS_DELTA:  # the queries whose own position lies in this key tile
            own = rmask & (offset + rows >= pid * BN) & (offset + rows < pid * BN + BN)
            on_diag = (offset + rows)[:, None] == cols[None, :]
            tl.store(DDIAG + bh * Nq + rows, tl.sum(tl.where(on_diag, ds, 0.0), 1), mask=own)
    _put(DK, bh, cols, Nk, R, RP, cmask, _acc_value(dk, TK), False)
    if HAS_X:
        _put(DX, bh, cols, Nk, E, EP, cmask, dx, False)


@triton.jit
def _dv_h(T, HM, C, DH, DC, NR, KE, Nk, H: tl.constexpr, D: tl.constexpr, BJ: tl.constexpr, BD: tl.constexpr,
          ACC: tl.constexpr):
    """Per-head factors' value gradients from t = P_kᵀ dHs of every head over one row chunk, (B·KE, H, D) rows
    (b, j) for its KE keys, read once: dh_j += Σ_k c_k ∘ t_jk (DH, (B, Nk, D), holds dh's other terms; each
    program owns a block of BJ rows and BD columns) and dc_k += Σ_j h_j ∘ t_jk (atomic adds into DC, (H, D),
    zeroed by the launcher) — the backward of the values c_k ∘ h_j that the forward's matmuls multiplied
    (``cem_products.head_values``); the launcher runs it once per row chunk."""
    r = tl.program_id(0) * BJ + tl.arange(0, BJ)
    dd = tl.program_id(1) * BD + tl.arange(0, BD)
    dm = dd < D
    m2 = (r < NR)[:, None] & dm[None, :]
    r64 = r.to(tl.int64)
    row = (r64 // KE) * Nk + r64 % KE  # (b, j) in DH and HM
    h = tl.load(HM + row[:, None] * D + dd[None, :], mask=m2, other=0.0).to(ACC)
    dh = tl.zeros((BJ, BD), ACC)
    for k in range(H):
        t = tl.load(T + (r64[:, None] * H + k) * D + dd[None, :], mask=m2, other=0.0).to(ACC)
        dh += t * tl.load(C + k * D + dd, mask=dm, other=0.0).to(ACC)[None, :]
        tl.atomic_add(DC + k * D + dd, tl.sum(t * h, 0), mask=dm, sem="relaxed")
    p = DH + row[:, None] * D + dd[None, :]
    tl.store(p, tl.load(p, mask=m2, other=0.0) + dh, mask=m2)
