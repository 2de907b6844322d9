"""Triton kernels of :mod:`energyformer.energies.cem_kernel` (read its docstring for the equations).

Imported only through ``cem_kernel._kernels``, which loads this file once per process (GPU or CPU
interpreter); importing energyformer never needs triton. Per-head running state lives in the output
buffers, which each program owns row-wise (query tiles) or column-wise (key tiles): no atomics.
Constexpr flags: HAS_G (shared diagonal), HMODE (h read-out: 0 none, 1 head-summed, 2 per-head
factors c_k), HAS_X (extra per-head value columns x, E wide), HAS_ALIBI, HAS_DELTA, HAS_KMASK; HU: the
head loop's unroll factor (``KernelTiles.head_unroll``; 1: a loop, the head a runtime index); MAT: the
products the heads share are materialised (``KernelTiles.shared``): G = ud Hᵀ and Gh = dHs Hᵀ are read
per tile from (B, Nq, Nk) buffers, and Σ_k P_k (PS) and Σ_k dS_k (DSS) are stored per tile for the
launcher's matmuls, instead of the D-chunked products in the kernels.

The three kernels (``_fwd``, ``_bwd_q``, ``_bwd_kv``) are written from the tile helpers above them:
``_scores`` (one head's s_ijk with ALiBi, self bias and masks), ``_shared`` (a tile every head shares),
``_online`` / ``_probs`` (the flash softmax), ``_recompute`` (backward's p and dP of one head). Triton
inlines them: ``scripts/triton_ptx.py`` compiles the kernels for a GPU target without a GPU and
compares their PTX with another revision's (unchanged by the change that introduced the helpers).
"""

import triton
import triton.language as tl


@triton.jit
def _mm(a, b, PREC: tl.constexpr, OUT: tl.constexpr, UPCAST: tl.constexpr):
    """a @ b accumulated in OUT; UPCAST (the CPU interpreter, whose bf16 dot is wrong) multiplies the
    16-bit operands in OUT instead — their products are exact there, as in the GPU's MMA."""
    if UPCAST:
        return tl.dot(a.to(OUT), b.to(OUT), input_precision=PREC, out_dtype=OUT)
    return tl.dot(a, b, input_precision=PREC, out_dtype=OUT)


@triton.jit
def _qk(a, b, KMAJ: tl.constexpr, PREC: tl.constexpr, OUT: tl.constexpr, UPCAST: tl.constexpr):
    """a bᵀ accumulated in OUT (rows of a × rows of b). KMAJ: formed as (b aᵀ)ᵀ, the tensor-core product's rows b's:
    Triton puts a product on Hopper's wgmma only where its rows fill a warpgroup's 64, so a tile with more keys than
    queries forms its query × key products keys first (``KernelTiles.product_order``; docs/cem.md, "Which products
    run on Hopper's tensor-core instruction"); the same products, summed in the same dtype."""
    if KMAJ:
        return tl.trans(_mm(b, tl.trans(a), PREC, OUT, UPCAST))
    return _mm(a, tl.trans(b), PREC, OUT, UPCAST)


@triton.jit
def _col(t, hcol, hh):
    """column hh of a (BM, HP) tensor"""
    return tl.sum(tl.where(hcol[None, :] == hh, t, 0.0), 1)


@triton.jit
def _tile_at(ptr, b, idx, n, W: tl.constexpr, c0, CW: tl.constexpr, ok):
    """columns c0 … c0 + CW − 1 of the rows idx of the (n, W) matrix number b of a contiguous tensor:
    (len(idx), CW), zero-padded"""
    ww = c0 + tl.arange(0, CW)
    return tl.load(ptr + (b * n + idx[:, None]) * W + ww[None, :], mask=ok[:, None] & (ww < W)[None, :], other=0.0)


@triton.jit
def _tile(ptr, b, idx, n, W: tl.constexpr, WP: tl.constexpr, ok):
    """rows idx of the (n, W) matrix number b of a contiguous tensor: (len(idx), WP), zero-padded"""
    return _tile_at(ptr, b, idx, n, W, 0, WP, ok)


@triton.jit
def _put_at(ptr, b, idx, n, W: tl.constexpr, c0, CW: tl.constexpr, ok, val, ADD: tl.constexpr):
    """store (or add) val (len(idx), CW) into the columns c0 … c0 + CW − 1 of the rows idx of matrix b"""
    ww = c0 + tl.arange(0, CW)
    p = ptr + (b * n + idx[:, None]) * W + ww[None, :]
    m = ok[:, None] & (ww < W)[None, :]
    if ADD:
        val += tl.load(p, mask=m, other=0.0)
    tl.store(p, val, mask=m)


@triton.jit
def _put(ptr, b, idx, n, W: tl.constexpr, WP: tl.constexpr, ok, val, ADD: tl.constexpr):
    """store (or add) val into the rows idx of matrix b (as :func:`_tile`)"""
    _put_at(ptr, b, idx, n, W, 0, WP, ok, val, ADD)


@triton.jit
def _scores(Q, K, SLOPES, DELTA, KMASK, hh, b, rows, cols, rmask, cmask, g, Nq, Nk, offset,
            H: tl.constexpr, R: tl.constexpr, RP: tl.constexpr, CAUSAL: tl.constexpr, HAS_G: tl.constexpr,
            HAS_ALIBI: tl.constexpr, HAS_DELTA: tl.constexpr, HAS_KMASK: tl.constexpr, PREC: tl.constexpr,
            UPCAST: tl.constexpr, KMAJ: tl.constexpr = False):
    """(s (BM, BN) with −inf where hidden, q_h (BM, RP), k_h (BN, RP)) of head hh; g: the shared tile; KMAJ: q_h k_hᵀ
    formed keys first (:func:`_qk`)."""
    qh = _tile(Q, b * H + hh, rows, Nq, R, RP, rmask)
    kh = _tile(K, b * H + hh, cols, Nk, R, RP, cmask)
    s = _qk(qh, kh, KMAJ, PREC, g.dtype, UPCAST)
    if HAS_G:
        s += g
    i = (offset + rows)[:, None]
    j = cols[None, :]
    if HAS_ALIBI:
        s -= tl.load(SLOPES + hh).to(s.dtype) * tl.abs(i - j).to(s.dtype)
    if HAS_DELTA:
        s += tl.where(i == j, tl.load(DELTA + hh).to(s.dtype), 0.0)
    vis = cmask[None, :] & rmask[:, None]
    if CAUSAL:
        vis = vis & (j <= i)
    if HAS_KMASK:
        km = tl.load(KMASK + b * Nk + cols, mask=cmask, other=0)
        vis = vis & ((km[None, :] != 0) | (i == j))
    return tl.where(vis, s, float("-inf")), qh, kh


@triton.jit
def _set_col(t, hcol, hh, v):
    """t (BM, HP) with column hh replaced by v (BM,)"""
    return tl.where(hcol[None, :] == hh, v[:, None], t)


@triton.jit
def _add_col(t, hcol, hh, v):
    """t (BM, HP) with v (BM,) added to column hh"""
    return t + tl.where(hcol[None, :] == hh, v[:, None], 0.0)


@triton.jit
def _factor(C, hh, dd, D: tl.constexpr):
    """row hh of the (H, D) per-head value factors c at the columns dd (DP,), zero-padded"""
    return tl.load(C + hh * D + dd, mask=dd < D, other=0.0)


@triton.jit
def _query_tile(Nq, BM: tl.constexpr):
    """this program's (query tile pid, batch row b, rows (BM,), their mask)"""
    pid = tl.program_id(0)
    b = tl.program_id(1)
    rows = pid * BM + tl.arange(0, BM)
    return pid, b, rows, rows < Nq


@triton.jit
def _key_end(pid, Nk, offset, BM: tl.constexpr, CAUSAL: tl.constexpr):
    """end of the keys query tile pid sees: causal, none after its last query (position offset + i)"""
    kend = Nk
    if CAUSAL:
        kend = tl.minimum(Nk, offset + pid * BM + BM)
    return kend


@triton.jit
def _head_rows(b, rows, rmask, hcol, Nq, H: tl.constexpr):
    """(pointers, mask) (BM, HP) of the rows' per-head entries of a (B, H, Nq) buffer (lse, m, l, Δ)"""
    return (b * H + hcol[None, :]) * Nq + rows[:, None], rmask[:, None] & (hcol < H)[None, :]


@triton.jit
def _row_state(M, L, DLT, hptr, hmask):
    """the rows' (m, l, Δ − g_lse) (BM, HP): running max and sum of the forward (p = e^{s − m}/l), and
    the backward's Δ buffer"""
    return (tl.load(M + hptr, mask=hmask, other=0.0), tl.load(L + hptr, mask=hmask, other=1.0),
            tl.load(DLT + hptr, mask=hmask, other=0.0))


@triton.jit
def _pair_ptrs(ptr, b, rows, cols, rmask, cmask, Nq, Nk):
    """(pointers, mask) of the (BM, BN) tile at (rows, cols) of matrix b of a contiguous (B, Nq, Nk) tensor"""
    return ptr + (b * Nq + rows[:, None]) * Nk + cols[None, :], rmask[:, None] & cmask[None, :]


@triton.jit
def _pair_tile(ptr, b, rows, cols, rmask, cmask, Nq, Nk):
    """the (BM, BN) tile at (rows, cols) of matrix b of a contiguous (B, Nq, Nk) tensor, zero-padded"""
    p, m = _pair_ptrs(ptr, b, rows, cols, rmask, cmask, Nq, Nk)
    return tl.load(p, mask=m, other=0.0)


@triton.jit
def _put_pair_tile(ptr, b, rows, cols, rmask, cmask, Nq, Nk, val):
    """store val (BM, BN) at (rows, cols) of matrix b of a contiguous (B, Nq, Nk) tensor"""
    p, m = _pair_ptrs(ptr, b, rows, cols, rmask, cmask, Nq, Nk)
    tl.store(p, val, mask=m)


@triton.jit
def _shared(UD, GHS, HM, G, GH, b, rows, cols, rmask, cmask, Nq, Nk, USE_G: tl.constexpr, USE_GH: tl.constexpr,
            MAT: tl.constexpr, D: tl.constexpr, BD: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
            PREC: tl.constexpr, ACC: tl.constexpr, UPCAST: tl.constexpr):
    """(G, Gh) (BM, BN), tiles every head shares, once per (query tile, key tile): the shared-diagonal
    logits G = ud Hᵀ where USE_G and the read-out's Gh = dHs Hᵀ (the h part of every head's dP_k) where
    USE_GH, else zeros; docs/cem.md, "what is shared across heads". MAT: loaded from the (B, Nq, Nk)
    products G, GH (accumulation dtype) the launcher made with one batched matmul each. Else computed
    here, the sums over D in chunks of BD columns (one (BM, BD) and one (BN, BD) tile at a time), so
    neither shared memory nor registers grow with D (issue 21: D-wide tiles did not fit a GPU's shared
    memory at D = 768)."""
    g = tl.zeros((BM, BN), ACC)
    gh = tl.zeros((BM, BN), ACC)
    if MAT:
        if USE_G:
            g = _pair_tile(G, b, rows, cols, rmask, cmask, Nq, Nk).to(ACC)
        if USE_GH:
            gh = _pair_tile(GH, b, rows, cols, rmask, cmask, Nq, Nk).to(ACC)
    elif USE_G or USE_GH:
        for d0 in range(0, D, BD):
            hb = _tile_at(HM, b, cols, Nk, D, d0, BD, cmask)  # (BN, BD)
            if USE_G:
                g += _mm(_tile_at(UD, b, rows, Nq, D, d0, BD, rmask), tl.trans(hb), PREC, ACC, UPCAST)
            if USE_GH:
                gh += _mm(_tile_at(GHS, b, rows, Nq, D, d0, BD, rmask), tl.trans(hb), PREC, ACC, UPCAST)
    return g, gh


@triton.jit
def _add_wh(OUT, HM, C, hh, b, rows, cols, rmask, cmask, Nq, Nk, w, FACTOR: tl.constexpr, D: tl.constexpr,
            BD: tl.constexpr, PREC: tl.constexpr, ACC: tl.constexpr, UPCAST: tl.constexpr):
    """OUT[b, rows] += w H[b, cols] (∘ c_hh where FACTOR), w (BM, BN): an h read-out ((Σ_k P_k) H or
    c_k ∘ (P_k H)) or d(ud) = (Σ_k dS_k) H, one BD-column chunk of the (B, Nq, D) buffer at a time (it
    starts at zero; this program owns its rows)."""
    for d0 in range(0, D, BD):
        hb = _tile_at(HM, b, cols, Nk, D, d0, BD, cmask)  # (BN, BD)
        v = _mm(w.to(hb.dtype), hb, PREC, ACC, UPCAST)  # (BM, BD)
        if FACTOR:
            v = v * _factor(C, hh, d0 + tl.arange(0, BD), D).to(ACC)[None, :]
        _put_at(OUT, b, rows, Nq, D, d0, BD, rmask, v, True)


@triton.jit
def _rescale(s, m_old):
    """One key tile of scores s (BM, BN) against a running max m (BM,), flash-style: (m' = max(m, max_j s_j),
    e^{m − m'}: the factor for what was summed so far, e^{s − m'} (BM, BN), at most 1); a row with nothing visible
    yet keeps m' = −∞ and gets zeros (m' taken as 0 in the exponents)."""
    m_new = tl.maximum(m_old, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    return m_new, tl.exp(m_old - m_safe), tl.exp(s - m_safe[:, None])


@triton.jit
def _online_row(s, m_old, l_old):
    """One key tile of scores s (BM, BN) into one head's running max and sum (BM,), flash-style:
    m' = max(m, max_j s_j), l' = l e^{m − m'} + Σ_j e^{s_j − m'} (a row with nothing visible keeps −∞, 0)."""
    m_new, alpha, pt = _rescale(s, m_old)
    return m_new, l_old * alpha + tl.sum(pt, 1)


@triton.jit
def _online(s, m_all, l_all, hcol, hh):
    """:func:`_online_row` for head hh of the running max and sum of every head (BM, HP)"""
    m_new, l_new = _online_row(s, _col(m_all, hcol, hh), _col(l_all, hcol, hh))
    return _set_col(m_all, hcol, hh, m_new), _set_col(l_all, hcol, hh, l_new)


@triton.jit
def _probs(s, m_all, l_all, hcol, hh):
    """p_ijk = e^{s_ijk − m_ik} / l_ik (BM, BN) of head hh, with the forward's final max and sum"""
    return tl.exp(s - _col(m_all, hcol, hh)[:, None]) / _col(l_all, hcol, hh)[:, None]


@triton.jit
def _dp_x(X, GOX, hh, b, rows, cols, rmask, cmask, Nq, Nk, H: tl.constexpr, E: tl.constexpr, EP: tl.constexpr,
          PREC: tl.constexpr, ACC: tl.constexpr, UPCAST: tl.constexpr):
    """dOx_h X_hᵀ (BM, BN): head hh's extra value columns' part of dP"""
    xh = _tile(X, b * H + hh, cols, Nk, E, EP, cmask)
    gox = _tile(GOX, b * H + hh, rows, Nq, E, EP, rmask)
    return _mm(gox, tl.trans(xh), PREC, ACC, UPCAST)


@triton.jit
def _recompute(Q, K, SLOPES, DELTA, KMASK, C, X, GOQ, GOX, GHS, HM, hh, b, rows, cols, rmask, cmask, g, gh,
               m_all, l_all, hcol, Nq, Nk, offset,
               H: tl.constexpr, R: tl.constexpr, D: tl.constexpr, E: tl.constexpr, RP: tl.constexpr,
               BD: tl.constexpr, EP: tl.constexpr, CAUSAL: tl.constexpr, HAS_G: tl.constexpr, HMODE: tl.constexpr,
               HAS_X: tl.constexpr, HAS_ALIBI: tl.constexpr, HAS_DELTA: tl.constexpr, HAS_KMASK: tl.constexpr,
               PREC: tl.constexpr, ACC: tl.constexpr, UPCAST: tl.constexpr):
    """Backward's recomputation for head hh on one (query tile, key tile): (p (BM, BN), dP (BM, BN),
    q_h (BM, RP), k_h (BN, RP), dOq_h (BM, RP)) with dP_k = dOq_k K_kᵀ + (dHs, or dHs∘c_k) Hᵀ + dOx_k X_kᵀ;
    gh: the shared dHs Hᵀ tile. Every backward pass takes p and dP from here, so Δ_k = Σ_j p dP and
    dS_k = p (dP − Δ_k) see the very same numbers."""
    s, qh, kh = _scores(Q, K, SLOPES, DELTA, KMASK, hh, b, rows, cols, rmask, cmask, g, Nq, Nk, offset,
                        H, R, RP, CAUSAL, HAS_G, HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, UPCAST)
    p = _probs(s, m_all, l_all, hcol, hh)
    goq = _tile(GOQ, b * H + hh, rows, Nq, R, RP, rmask)
    dp = _mm(goq, tl.trans(kh), PREC, ACC, UPCAST)
    if HMODE == 1:
        dp += gh
    if HMODE == 2:  # (dHs ∘ c_k) Hᵀ, over D in BD-column chunks
        for d0 in range(0, D, BD):
            hb = _tile_at(HM, b, cols, Nk, D, d0, BD, cmask)    # (BN, BD)
            ghs = _tile_at(GHS, b, rows, Nq, D, d0, BD, rmask)  # (BM, BD)
            ch = _factor(C, hh, d0 + tl.arange(0, BD), D)
            dp += _mm((ghs.to(ACC) * ch[None, :].to(ACC)).to(hb.dtype), tl.trans(hb), PREC, ACC, UPCAST)
    if HAS_X:
        dp += _dp_x(X, GOX, hh, b, rows, cols, rmask, cmask, Nq, Nk, H, E, EP, PREC, ACC, UPCAST)
    return p, dp, qh, kh, goq


@triton.jit
def _fwd(Q, K, UD, HM, X, C, SLOPES, DELTA, KMASK, G, PS, OQ, HS, OX, LSE, M, L, Nq, Nk, offset,
         H: tl.constexpr, R: tl.constexpr, D: tl.constexpr, E: tl.constexpr, RP: tl.constexpr,
         BD: tl.constexpr, EP: tl.constexpr, HP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
         HU: tl.constexpr, MAT: tl.constexpr,
         CAUSAL: tl.constexpr, HAS_G: tl.constexpr, HMODE: tl.constexpr, HAS_X: tl.constexpr,
         HAS_ALIBI: tl.constexpr, HAS_DELTA: tl.constexpr, HAS_KMASK: tl.constexpr, PREC: tl.constexpr,
         ACC: tl.constexpr, UPCAST: tl.constexpr):
    """Per (query tile, batch row): pass 1 → lse, m, l; pass 2 → oq, hs (or hterm), ox (HS, OQ, OX
    start at zero: each key tile adds to them; MAT with the head-summed read-out: Σ_k P_k into PS
    instead of hs)."""
    pid, b, rows, rmask = _query_tile(Nq, BM)
    hcol = tl.arange(0, HP)
    kend = _key_end(pid, Nk, offset, BM, CAUSAL)
    m_all = tl.full((BM, HP), float("-inf"), ACC)
    l_all = tl.zeros((BM, HP), ACC)
    for start in range(0, kend, BN):  # pass 1: every head's running max and sum
        tl.debug_barrier()  # keeps every head's q tile in the loop, out of shared memory (see _bwd_q)
        cols = start + tl.arange(0, BN)
        cmask = cols < Nk
        # the shared-diagonal tile, once for all heads
        g, _ = _shared(UD, UD, HM, G, G, b, rows, cols, rmask, cmask, Nq, Nk, HAS_G, False, MAT, D, BD, BM, BN,
                       PREC, ACC, UPCAST)
        for hh in tl.range(0, H, loop_unroll_factor=HU):
            s, qh, kh = _scores(Q, K, SLOPES, DELTA, KMASK, hh, b, rows, cols, rmask, cmask, g, Nq, Nk, offset,
                                H, R, RP, CAUSAL, HAS_G, HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, UPCAST)
            m_all, l_all = _online(s, m_all, l_all, hcol, hh)
    hptr, hmask2 = _head_rows(b, rows, rmask, hcol, Nq, H)
    tl.store(LSE + hptr, tl.where(l_all > 0, m_all + tl.log(tl.where(l_all > 0, l_all, 1.0)), float("-inf")),
             mask=hmask2)
    # p = e^{s − m} / l, not e^{s − lse}: lse rounded at |s| ~ 1e4 would cost 5e-4 of p in float32
    m_all = tl.where(m_all == float("-inf"), 0.0, m_all)
    l_all = tl.where(l_all > 0, l_all, 1.0)
    tl.store(M + hptr, m_all, mask=hmask2)
    tl.store(L + hptr, l_all, mask=hmask2)
    for start in range(0, kend, BN):  # pass 2: normalised probabilities
        cols = start + tl.arange(0, BN)
        cmask = cols < Nk
        g, _ = _shared(UD, UD, HM, G, G, b, rows, cols, rmask, cmask, Nq, Nk, HAS_G, False, MAT, D, BD, BM, BN,
                       PREC, ACC, UPCAST)
        psum = tl.zeros((BM, BN), ACC)
        for hh in tl.range(0, H, loop_unroll_factor=HU):
            s, qh, kh = _scores(Q, K, SLOPES, DELTA, KMASK, hh, b, rows, cols, rmask, cmask, g, Nq, Nk, offset,
                                H, R, RP, CAUSAL, HAS_G, HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, UPCAST)
            p = _probs(s, m_all, l_all, hcol, hh)
            _put(OQ, b * H + hh, rows, Nq, R, RP, rmask, _mm(p.to(kh.dtype), kh, PREC, ACC, UPCAST), True)
            if HAS_X:
                xh = _tile(X, b * H + hh, cols, Nk, E, EP, cmask)
                _put(OX, b * H + hh, rows, Nq, E, EP, rmask, _mm(p.to(xh.dtype), xh, PREC, ACC, UPCAST), True)
            if HMODE == 1:
                psum += p
            if HMODE == 2:  # per-head factors: Σ_k c_k ∘ (P_k H), one D-wide product per head
                _add_wh(HS, HM, C, hh, b, rows, cols, rmask, cmask, Nq, Nk, p, True, D, BD, PREC, ACC, UPCAST)
        if HMODE == 1 and MAT:  # head-summed: Σ_k P_k stored; (Σ_k P_k) H is one matmul in the launcher
            _put_pair_tile(PS, b, rows, cols, rmask, cmask, Nq, Nk, psum.to(PS.dtype.element_ty))
        elif HMODE == 1:  # head-summed: (Σ_k P_k) H, one product
            _add_wh(HS, HM, C, 0, b, rows, cols, rmask, cmask, Nq, Nk, psum, False, D, BD, PREC, ACC, UPCAST)


@triton.jit
def _bwd_q(Q, K, UD, HM, X, C, SLOPES, DELTA, KMASK, G, GH, M, L, GOQ, GHS, GOX, DLT, PS, DSS, DQ, DUD, DDIAG,
           Nq, Nk, offset,
           H: tl.constexpr, R: tl.constexpr, D: tl.constexpr, E: tl.constexpr, RP: tl.constexpr,
           BD: tl.constexpr, EP: tl.constexpr, HP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
           HU: tl.constexpr, MAT: tl.constexpr,
           CAUSAL: tl.constexpr, HAS_G: tl.constexpr, HMODE: tl.constexpr, HAS_X: tl.constexpr,
           HAS_ALIBI: tl.constexpr, HAS_DELTA: tl.constexpr, HAS_KMASK: tl.constexpr, PREC: tl.constexpr,
           ACC: tl.constexpr, UPCAST: tl.constexpr):
    """Per query tile: Δ_k (added to DLT, which holds −g_lse), dq_k, d(ud), diag dS (self-bias gradient);
    DQ and DUD start at zero. MAT: d(ud) is left to the launcher, which gets Σ_k dS_k (DSS) and Σ_k P_k
    (PS) tile by tile instead."""
    pid, b, rows, rmask = _query_tile(Nq, BM)
    hcol = tl.arange(0, HP)
    hptr, hmask2 = _head_rows(b, rows, rmask, hcol, Nq, H)
    m_all, l_all, dlt = _row_state(M, L, DLT, hptr, hmask2)
    kend = _key_end(pid, Nk, offset, BM, CAUSAL)
    # pass a: Δ_k = Σ_j p_ijk dP_ijk with the very dP of pass b and of the key-tile kernel (not
    # dOq·oq: rounded differently, it would leave dS = p(dP − Δ) ≠ 0 where p is one-hot)
    for start in range(0, kend, BN):
        # A loop without stores lets Triton's loop-invariant code motion hoist every head's q and dOq
        # tiles out of it into shared memory: 2·H·BM·R·2 B, D-wide again (48 KiB at GPT-2 small, 130 KiB
        # at H·R = 2,048, so 32-query tiles would not fit). The barrier (a side effect) keeps them in the
        # loop, reloaded per key tile from cache as in pass b: shared memory no longer grows with H (issue 21).
        tl.debug_barrier()
        cols = start + tl.arange(0, BN)
        cmask = cols < Nk
        g, gh = _shared(UD, GHS, HM, G, GH, b, rows, cols, rmask, cmask, Nq, Nk, HAS_G, HMODE == 1, MAT, D, BD,
                        BM, BN, PREC, ACC, UPCAST)
        for hh in tl.range(0, H, loop_unroll_factor=HU):
            p, dp, qh, kh, goq = _recompute(Q, K, SLOPES, DELTA, KMASK, C, X, GOQ, GOX, GHS, HM, hh, b, rows, cols,
                                            rmask, cmask, g, gh, m_all, l_all, hcol, Nq, Nk, offset,
                                            H, R, D, E, RP, BD, EP, CAUSAL, HAS_G, HMODE, HAS_X, HAS_ALIBI,
                                            HAS_DELTA, HAS_KMASK, PREC, ACC, UPCAST)
            dlt = _add_col(dlt, hcol, hh, tl.sum(p * dp, 1))
    tl.store(DLT + hptr, dlt, mask=hmask2)
    ddg = tl.zeros((BM, HP), ACC)
    for start in range(0, kend, BN):  # pass b
        cols = start + tl.arange(0, BN)
        cmask = cols < Nk
        g, gh = _shared(UD, GHS, HM, G, GH, b, rows, cols, rmask, cmask, Nq, Nk, HAS_G, HMODE == 1, MAT, D, BD,
                        BM, BN, PREC, ACC, UPCAST)
        dssum = tl.zeros((BM, BN), ACC)
        psum = tl.zeros((BM, BN), ACC)
        for hh in tl.range(0, H, loop_unroll_factor=HU):
            p, dp, qh, kh, goq = _recompute(Q, K, SLOPES, DELTA, KMASK, C, X, GOQ, GOX, GHS, HM, hh, b, rows, cols,
                                            rmask, cmask, g, gh, m_all, l_all, hcol, Nq, Nk, offset,
                                            H, R, D, E, RP, BD, EP, CAUSAL, HAS_G, HMODE, HAS_X, HAS_ALIBI,
                                            HAS_DELTA, HAS_KMASK, PREC, ACC, UPCAST)
            ds = p * (dp - _col(dlt, hcol, hh)[:, None])  # dS_k = P_k ∘ (dP_k − Δ_k)
            if MAT and HMODE == 1:
                psum += p
            _put(DQ, b * H + hh, rows, Nq, R, RP, rmask, _mm(ds.to(kh.dtype), kh, PREC, ACC, UPCAST), True)
            if HAS_DELTA:
                on_diag = (offset + rows)[:, None] == cols[None, :]
                ddg = _add_col(ddg, hcol, hh, tl.sum(tl.where(on_diag, ds, 0.0), 1))
            if HAS_G:
                dssum += ds
        if MAT:  # Σ_k dS_k and Σ_k P_k stored: d(ud) and dh are matmuls in the launcher
            if HAS_G:
                _put_pair_tile(DSS, b, rows, cols, rmask, cmask, Nq, Nk, dssum.to(DSS.dtype.element_ty))
            if HMODE == 1:
                _put_pair_tile(PS, b, rows, cols, rmask, cmask, Nq, Nk, psum.to(PS.dtype.element_ty))
        elif HAS_G:  # d(ud) = (Σ_k dS_k) H, one product
            _add_wh(DUD, HM, C, 0, b, rows, cols, rmask, cmask, Nq, Nk, dssum, False, D, BD, PREC, ACC, UPCAST)
    if HAS_DELTA:
        tl.store(DDIAG + hptr, ddg, mask=hmask2)


@triton.jit
def _bwd_kv(Q, K, UD, HM, X, C, SLOPES, DELTA, KMASK, G, GH, M, L, GOQ, GHS, GOX, DLT, DK, DH, DX, DC, Nq, Nk,
            offset,
            H: tl.constexpr, R: tl.constexpr, D: tl.constexpr, E: tl.constexpr, RP: tl.constexpr,
            BD: tl.constexpr, EP: tl.constexpr, HP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
            HU: tl.constexpr, MAT: tl.constexpr,
            CAUSAL: tl.constexpr, HAS_G: tl.constexpr, HMODE: tl.constexpr, HAS_X: tl.constexpr,
            HAS_ALIBI: tl.constexpr, HAS_DELTA: tl.constexpr, HAS_KMASK: tl.constexpr, PREC: tl.constexpr,
            ACC: tl.constexpr, UPCAST: tl.constexpr):
    """Per key tile: dk_k = dS_kᵀ q_k + P_kᵀ dOq_k, dx_k = P_kᵀ dOx_k, dh = (Σ_k dS_k)ᵀ ud + (Σ_k P_k)ᵀ dHs
    (per-head factors: Σ_k (P_kᵀ dHs) ∘ c_k; MAT: not here, from the sums ``_bwd_q`` stored) and this
    tile's part of dc_k = Σ_j h_j ∘ (P_kᵀ dHs)_j. DK, DH, DX, DC start at zero; the D-wide ones are
    updated in BD-column chunks."""
    pid = tl.program_id(0)
    b = tl.program_id(1)
    nt = tl.num_programs(0)
    cols = pid * BN + tl.arange(0, BN)
    cmask = cols < Nk
    hcol = tl.arange(0, HP)
    qstart = 0
    if CAUSAL:  # queries at positions >= this tile's first key
        qstart = tl.maximum(pid * BN - offset, 0) // BM * BM
    for r0 in range(qstart, Nq, BM):
        rows = r0 + tl.arange(0, BM)
        rmask = rows < Nq
        hptr, hmask2 = _head_rows(b, rows, rmask, hcol, Nq, H)
        m_all, l_all, dlt = _row_state(M, L, DLT, hptr, hmask2)
        g, gh = _shared(UD, GHS, HM, G, GH, b, rows, cols, rmask, cmask, Nq, Nk, HAS_G, HMODE == 1, MAT, D, BD,
                        BM, BN, PREC, ACC, UPCAST)
        dssum = tl.zeros((BM, BN), ACC)
        psum = tl.zeros((BM, BN), ACC)
        for hh in tl.range(0, H, loop_unroll_factor=HU):
            p, dp, qh, kh, goq = _recompute(Q, K, SLOPES, DELTA, KMASK, C, X, GOQ, GOX, GHS, HM, hh, b, rows, cols,
                                            rmask, cmask, g, gh, m_all, l_all, hcol, Nq, Nk, offset,
                                            H, R, D, E, RP, BD, EP, CAUSAL, HAS_G, HMODE, HAS_X, HAS_ALIBI,
                                            HAS_DELTA, HAS_KMASK, PREC, ACC, UPCAST)
            ds = p * (dp - _col(dlt, hcol, hh)[:, None])  # dS_k = P_k ∘ (dP_k − Δ_k)
            dk = _mm(tl.trans(ds.to(qh.dtype)), qh, PREC, ACC, UPCAST) \
                + _mm(tl.trans(p.to(goq.dtype)), goq, PREC, ACC, UPCAST)
            _put(DK, b * H + hh, cols, Nk, R, RP, cmask, dk, True)
            if HAS_X:
                gox = _tile(GOX, b * H + hh, rows, Nq, E, EP, rmask)
                _put(DX, b * H + hh, cols, Nk, E, EP, cmask, _mm(tl.trans(p.to(gox.dtype)), gox, PREC, ACC, UPCAST),
                     True)
            if HAS_G and not MAT:
                dssum += ds
            if HMODE == 1 and not MAT:
                psum += p
            if HMODE == 2:  # dh += (P_kᵀ dHs) ∘ c_k and dc_k += Σ_j h_j ∘ (P_kᵀ dHs)_j, chunk by chunk
                for d0 in range(0, D, BD):
                    dd = d0 + tl.arange(0, BD)
                    ghs = _tile_at(GHS, b, rows, Nq, D, d0, BD, rmask)            # (BM, BD)
                    t = _mm(tl.trans(p.to(ghs.dtype)), ghs, PREC, ACC, UPCAST)  # (BN, BD) P_kᵀ dHs
                    _put_at(DH, b, cols, Nk, D, d0, BD, cmask, t * _factor(C, hh, dd, D).to(ACC)[None, :], True)
                    hb = _tile_at(HM, b, cols, Nk, D, d0, BD, cmask)              # (BN, BD)
                    pdc = DC + ((b * nt + pid) * H + hh) * D + dd  # DC: (B, tiles, H, D), summed by the caller
                    tl.store(pdc, tl.load(pdc, mask=dd < D, other=0.0) + tl.sum(t * hb.to(ACC), 0), mask=dd < D)
        if (HAS_G or HMODE == 1) and not MAT:  # dh += (Σ_k dS_k)ᵀ ud + (Σ_k P_k)ᵀ dHs, chunk by chunk
            for d0 in range(0, D, BD):
                v = tl.zeros((BN, BD), ACC)
                if HAS_G:
                    ud = _tile_at(UD, b, rows, Nq, D, d0, BD, rmask)  # (BM, BD)
                    v += _mm(tl.trans(dssum.to(ud.dtype)), ud, PREC, ACC, UPCAST)
                if HMODE == 1:
                    ghs = _tile_at(GHS, b, rows, Nq, D, d0, BD, rmask)
                    v += _mm(tl.trans(psum.to(ghs.dtype)), ghs, PREC, ACC, UPCAST)
                _put_at(DH, b, cols, Nk, D, d0, BD, cmask, v, True)
