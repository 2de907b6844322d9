"""Tile helpers of CEM's one-program-per-head kernels (``cem_triton_heads.py``; issue 21, docs/cem.md "one program per
head"): the accumulators held transposed (``KernelTiles.product_order``), the per-head buffers' addressing (the causal
row chunks' blocks, :func:`_chunk_at`), a program's (tile, batch row, head) in either launch order, the backward's
recomputation of one head's p and dP, and the forward's row statistics.

Loaded only by ``cem_triton_heads.py`` (beside it, in the process's Triton mode); its own tile helpers (scores, loads,
stores, the shared tiles) are ``cem_triton.py``'s, loaded the same way.
"""

import importlib.util
import sys
from pathlib import Path

import triton
import triton.language as tl


def sibling(file: str, owner: str):
    """The kernel file ``file`` beside this one, loaded once per ``owner`` (the loading module's name): a module of
    Triton functions another kernel file calls, in the process's Triton mode."""
    name = f"{owner}__{Path(file).stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(file))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


_t = sibling("cem_triton.py", __name__)
_mm, _tile, _scores, _pair_ptrs, _dp_x, _qk = _t._mm, _t._tile, _t._scores, _t._pair_ptrs, _t._dp_x, _t._qk


@triton.jit
def _add_pair(ptr, b, rows, cols, rmask, cmask, Nq, Nk, val):
    """atomically add val (BM, BN) into the tile at (rows, cols) of matrix b of a (B, Nq, Nk) tensor"""
    p, m = _pair_ptrs(ptr, b, rows, cols, rmask, cmask, Nq, Nk)
    tl.atomic_add(p, val, mask=m, sem="relaxed")


@triton.jit
def _acc_zeros(M: tl.constexpr, N: tl.constexpr, T: tl.constexpr, ACC: tl.constexpr):
    """an (M, N) accumulator of zeros, held transposed, (N, M), where T (``KernelTiles.product_order``: a product
    into it then has N rows, enough for Hopper's wgmma where M is not). One return per helper: Triton compares the
    types of every return statement, even in branches a constexpr rules out."""
    if T:
        acc = tl.zeros((N, M), ACC)
    else:
        acc = tl.zeros((M, N), ACC)
    return acc


@triton.jit
def _acc_mm(a, b, T: tl.constexpr, PREC: tl.constexpr, ACC: tl.constexpr, UPCAST: tl.constexpr):
    """a @ b, or where T its transpose, formed as bᵀ aᵀ (for an accumulator held transposed: :func:`_acc_zeros`)"""
    if T:
        out = _mm(tl.trans(b), tl.trans(a), PREC, ACC, UPCAST)
    else:
        out = _mm(a, b, PREC, ACC, UPCAST)
    return out


@triton.jit
def _acc_rows(acc, v, T: tl.constexpr):
    """the accumulator (held transposed where T) with its row i scaled by v[i]"""
    if T:
        out = acc * v[None, :]
    else:
        out = acc * v[:, None]
    return out


@triton.jit
def _acc_value(acc, T: tl.constexpr):
    """the accumulator's (M, N) value (transposed back where T)"""
    if T:
        out = tl.trans(acc)
    else:
        out = acc
    return out


@triton.jit
def _chunk_keys(c, Nq, Nk, offset, STEP, ALIGN):
    """keys of row chunk c of ``cem_products.row_chunks`` (rows c·STEP …): all Nk where ALIGN is 0 (one
    chunk), else the chunk's last row position rounded up to ALIGN, then offset added and rounded up again"""
    ke = Nk
    if ALIGN > 0:
        r1 = tl.minimum(Nq, c * STEP + STEP)
        ke = tl.minimum(Nk, tl.cdiv(offset + tl.cdiv(r1, ALIGN) * ALIGN, ALIGN) * ALIGN)
    return ke


@triton.jit
def _chunk_at(r0, Nq, Nk, offset, STEP, ALIGN, H: tl.constexpr):
    """(offset of its block in a batch row's part, first row, rows, keys) of the row chunk holding query row r0
    in the per-head buffers of per-head factors: per batch row, the chunks' blocks one after another, chunk c
    a (rows_c, H, ke_c) block (or, keys first, (ke_c, H, rows_c)); every tile lies in one chunk (aligned)"""
    c = r0 // STEP
    base = tl.full((1,), 0, tl.int64)
    for cc in range(0, c):
        base += (tl.minimum(Nq - cc * STEP, STEP) * H).to(tl.int64) * _chunk_keys(cc, Nq, Nk, offset, STEP, ALIGN)
    return base, c * STEP, tl.minimum(Nq - c * STEP, STEP), _chunk_keys(c, Nq, Nk, offset, STEP, ALIGN)


@triton.jit
def _head_pair_ptrs(ptr, b, hh, r0, rows, cols, rmask, cmask, Nq, Nk, offset, STEP, ALIGN, TOT, H: tl.constexpr,
                    KEYS_FIRST: tl.constexpr):
    """(pointers, mask) of head hh's (BM, BN) tile at (rows, cols) (r0: its first row) of batch row b in a
    per-head buffer of TOT elements per batch row, laid out by :func:`_chunk_at` (keys past the chunk's
    are hidden: masked); 64-bit offsets (B·H·N² passes 2³¹ at N 16k)"""
    base, c0, nr, ke = _chunk_at(r0, Nq, Nk, offset, STEP, ALIGN, H)
    i = rows[:, None] - c0
    j = cols[None, :]
    start = b.to(tl.int64) * TOT + base[:, None]
    if KEYS_FIRST:
        off = start + (j * H + hh).to(tl.int64) * nr + i
    else:
        off = start + (i * H + hh).to(tl.int64) * ke + j
    return ptr + off, rmask[:, None] & cmask[None, :] & (j < ke)


@triton.jit
def _head_gh(GH, gh, b, hh, r0, rows, cols, rmask, cmask, Nq, Nk, offset, STEP, ALIGN, TOT, H: tl.constexpr,
             HMODE: tl.constexpr, ACC: tl.constexpr):
    """the h part of head hh's dP on one tile: the shared dHs Hᵀ tile gh, or with per-head factors (HMODE 2)
    head hh's (dHs ∘ c_k) Hᵀ tile of the per-head product GH (:func:`_head_pair_ptrs`)"""
    if HMODE == 2:
        p, m = _head_pair_ptrs(GH, b, hh, r0, rows, cols, rmask, cmask, Nq, Nk, offset, STEP, ALIGN, TOT, H, False)
        gh = tl.load(p, mask=m, other=0.0).to(ACC)
    return gh


@triton.jit
def _store_head_p(PS, p, b, hh, r0, rows, cols, rmask, cmask, Nq, Nk, offset, STEP, ALIGN, TOT,
                  H: tl.constexpr, KEYS_FIRST: tl.constexpr):
    """head hh's probabilities p (BM, BN) into its tile of a per-head buffer (:func:`_head_pair_ptrs`), in the
    buffer's dtype (the operands')"""
    pp, pm = _head_pair_ptrs(PS, b, hh, r0, rows, cols, rmask, cmask, Nq, Nk, offset, STEP, ALIGN, TOT, H, KEYS_FIRST)
    tl.store(pp, p.to(PS.dtype.element_ty), mask=pm)


@triton.jit
def _program(H: tl.constexpr, HI: tl.constexpr, LAST_FIRST: tl.constexpr):
    """(tile pid, batch row b, head hh, b·H + hh) of this program. The grid is (tiles, B·H), or with HI
    (``KernelTiles.grid = 'heads_inner'``) (B·H, tiles): programs launch in the order of axis 0 first, so
    there the heads of one (tile, batch row) start next to each other and share its tiles of the shared
    products while they are in cache; with LAST_FIRST (causal query tiles, whose work grows with the tile)
    the tiles then launch from the last, the longest, to the first"""
    if HI:
        bh = tl.program_id(0)
        pid = tl.program_id(1)
        if LAST_FIRST:
            pid = tl.num_programs(1) - 1 - pid
    else:
        pid = tl.program_id(0)
        bh = tl.program_id(1)
    return pid, bh // H, bh % H, bh


@triton.jit
def _recompute_h(Q, K, SLOPES, DELTA, KMASK, X, GOQ, GOX, hh, b, rows, cols, rmask, cmask, g, gh, m, l,
                 Nq, Nk, offset, H: tl.constexpr, R: tl.constexpr, E: tl.constexpr, RP: tl.constexpr,
                 EP: tl.constexpr, CAUSAL: tl.constexpr, HAS_G: tl.constexpr, HMODE: tl.constexpr,
                 HAS_X: tl.constexpr, HAS_ALIBI: tl.constexpr, HAS_DELTA: tl.constexpr, HAS_KMASK: tl.constexpr,
                 PREC: tl.constexpr, ACC: tl.constexpr, UPCAST: tl.constexpr, KMAJ: tl.constexpr):
    """Backward's (p, dP, q_h, k_h, dOq_h) of head hh on one tile, as ``cem_triton._recompute`` with the
    head's m, l as (BM,) vectors: p = e^{s − m}/l, dP = dOq_h K_hᵀ + Gh + dOx_h X_hᵀ (gh: the head's h part,
    :func:`_head_gh`); KMAJ: the scores and dOq_h K_hᵀ formed keys first (``cem_triton._qk``)."""
    s, qh, kh = _scores(Q, K, SLOPES, DELTA, KMASK, hh, b, rows, cols, rmask, cmask, g, Nq, Nk, offset,
                        H, R, RP, CAUSAL, HAS_G, HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, UPCAST, KMAJ)
    p = tl.exp(s - m[:, None]) / l[:, None]
    goq = _tile(GOQ, b * H + hh, rows, Nq, R, RP, rmask)
    dp = _qk(goq, kh, KMAJ, PREC, ACC, UPCAST)
    if HMODE != 0:
        dp += gh
    if HAS_X:
        dp += _dp_x(X, GOX, hh, b, rows, cols, rmask, cmask, Nq, Nk, H, E, EP, PREC, ACC, UPCAST)
    return p, dp, qh, kh, goq


@triton.jit
def _store_row_stats(LSE, M, L, bh, rows, rmask, Nq, m, l):
    """store a head's lse = m + log l and its final running max and sum (−∞ / 0 for a row with nothing visible:
    stored as 0 / 1, so that p = e^{s − m}/l is 0 there, see ``cem_triton._fwd``); returns the stored (m, l)"""
    tl.store(LSE + bh * Nq + rows, tl.where(l > 0, m + tl.log(tl.where(l > 0, l, 1.0)), float("-inf")), mask=rmask)
    m = tl.where(m == float("-inf"), 0.0, m)
    l = tl.where(l > 0, l, 1.0)
    tl.store(M + bh * Nq + rows, m, mask=rmask)
    tl.store(L + bh * Nq + rows, l, mask=rmask)
    return m, l
