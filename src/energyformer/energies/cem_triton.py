"""Triton kernels of :mod:`energyformer.energies.cem_kernel` (read its docstring for the equations).

Imported only through ``cem_kernel._kernels``, which loads this file once per process (GPU or CPU
interpreter); importing energyformer never needs triton. Per-head running state lives in the output
buffers, which each program owns row-wise (query tiles) or column-wise (key tiles): no atomics.
Constexpr flags: HAS_G (shared diagonal), HMODE (h read-out: 0 none, 1 head-summed, 2 per-head
factors c_k), HAS_X (extra per-head value columns x, E wide), HAS_ALIBI, HAS_DELTA, HAS_KMASK.
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
def _col(t, hcol, hh):
    """column hh of a (BM, HP) tensor"""
    return tl.sum(tl.where(hcol[None, :] == hh, t, 0.0), 1)


@triton.jit
def _tile(ptr, b, idx, n, W: tl.constexpr, WP: tl.constexpr, ok):
    """rows idx of the (n, W) matrix number b of a contiguous tensor: (len(idx), WP), zero-padded"""
    ww = tl.arange(0, WP)
    return tl.load(ptr + (b * n + idx[:, None]) * W + ww[None, :], mask=ok[:, None] & (ww < W)[None, :], other=0.0)


@triton.jit
def _put(ptr, b, idx, n, W: tl.constexpr, WP: tl.constexpr, ok, val, ADD: tl.constexpr):
    """store (or add) val into the rows idx of matrix b (as :func:`_tile`)"""
    ww = tl.arange(0, WP)
    p = ptr + (b * n + idx[:, None]) * W + ww[None, :]
    m = ok[:, None] & (ww < W)[None, :]
    if ADD:
        val += tl.load(p, mask=m, other=0.0)
    tl.store(p, val, mask=m)


@triton.jit
def _scores(Q, K, SLOPES, DELTA, KMASK, hh, b, rows, cols, rmask, cmask, g, Nq, Nk, offset,
            H: tl.constexpr, R: tl.constexpr, RP: tl.constexpr, CAUSAL: tl.constexpr, HAS_G: tl.constexpr,
            HAS_ALIBI: tl.constexpr, HAS_DELTA: tl.constexpr, HAS_KMASK: tl.constexpr, PREC: tl.constexpr,
            UPCAST: tl.constexpr):
    """(s (BM, BN) with −inf where hidden, q_h (BM, RP), k_h (BN, RP)) of head hh; g: the shared tile."""
    qh = _tile(Q, b * H + hh, rows, Nq, R, RP, rmask)
    kh = _tile(K, b * H + hh, cols, Nk, R, RP, cmask)
    s = _mm(qh, tl.trans(kh), PREC, g.dtype, UPCAST)
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
def _fwd(Q, K, UD, HM, X, C, SLOPES, DELTA, KMASK, OQ, HS, OX, LSE, M, L, Nq, Nk, offset,
         H: tl.constexpr, R: tl.constexpr, D: tl.constexpr, E: tl.constexpr, RP: tl.constexpr,
         DP: tl.constexpr, EP: tl.constexpr, HP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
         CAUSAL: tl.constexpr, HAS_G: tl.constexpr, HMODE: tl.constexpr, HAS_X: tl.constexpr,
         HAS_ALIBI: tl.constexpr, HAS_DELTA: tl.constexpr, HAS_KMASK: tl.constexpr, PREC: tl.constexpr,
         ACC: tl.constexpr, UPCAST: tl.constexpr):
    """Per (query tile, batch row): pass 1 → lse, m, l; pass 2 → oq, hs (or hterm), ox."""
    pid = tl.program_id(0)
    b = tl.program_id(1)
    rows = pid * BM + tl.arange(0, BM)
    rmask = rows < Nq
    dd = tl.arange(0, DP)
    hcol = tl.arange(0, HP)
    if HAS_G:
        ud = _tile(UD, b, rows, Nq, D, DP, rmask)
    kend = Nk
    if CAUSAL:
        kend = tl.minimum(Nk, offset + pid * BM + BM)
    m_all = tl.full((BM, HP), float("-inf"), ACC)
    l_all = tl.zeros((BM, HP), ACC)
    for start in range(0, kend, BN):  # pass 1: every head's running max and sum
        cols = start + tl.arange(0, BN)
        cmask = cols < Nk
        g = tl.zeros((BM, BN), ACC)
        if HAS_G:  # the shared-diagonal tile, once for all heads
            hb = _tile(HM, b, cols, Nk, D, DP, cmask)
            g = _mm(ud, tl.trans(hb), PREC, ACC, UPCAST)
        for hh in tl.static_range(H):
            s, qh, kh = _scores(Q, K, SLOPES, DELTA, KMASK, hh, b, rows, cols, rmask, cmask, g, Nq, Nk, offset,
                                H, R, RP, CAUSAL, HAS_G, HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, UPCAST)
            m_old = _col(m_all, hcol, hh)
            m_new = tl.maximum(m_old, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            l_new = _col(l_all, hcol, hh) * tl.exp(m_old - m_safe) + tl.sum(tl.exp(s - m_safe[:, None]), 1)
            m_all = tl.where(hcol[None, :] == hh, m_new[:, None], m_all)
            l_all = tl.where(hcol[None, :] == hh, l_new[:, None], l_all)
    hptr = (b * H + hcol[None, :]) * Nq + rows[:, None]
    hmask2 = rmask[:, None] & (hcol < H)[None, :]
    tl.store(LSE + hptr, tl.where(l_all > 0, m_all + tl.log(tl.where(l_all > 0, l_all, 1.0)), float("-inf")),
             mask=hmask2)
    # p = e^{s − m} / l, not e^{s − lse}: lse rounded at |s| ~ 1e4 would cost 5e-4 of p in float32
    m_all = tl.where(m_all == float("-inf"), 0.0, m_all)
    l_all = tl.where(l_all > 0, l_all, 1.0)
    tl.store(M + hptr, m_all, mask=hmask2)
    tl.store(L + hptr, l_all, mask=hmask2)
    hs = tl.zeros((BM, DP), ACC)
    for start in range(0, kend, BN):  # pass 2: normalised probabilities
        cols = start + tl.arange(0, BN)
        cmask = cols < Nk
        g = tl.zeros((BM, BN), ACC)
        if HAS_G or HMODE > 0:
            hb = _tile(HM, b, cols, Nk, D, DP, cmask)
        if HAS_G:
            g = _mm(ud, tl.trans(hb), PREC, ACC, UPCAST)
        psum = tl.zeros((BM, BN), ACC)
        for hh in tl.static_range(H):
            s, qh, kh = _scores(Q, K, SLOPES, DELTA, KMASK, hh, b, rows, cols, rmask, cmask, g, Nq, Nk, offset,
                                H, R, RP, CAUSAL, HAS_G, HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, UPCAST)
            p = tl.exp(s - _col(m_all, hcol, hh)[:, None]) / _col(l_all, hcol, hh)[:, None]
            _put(OQ, b * H + hh, rows, Nq, R, RP, rmask, _mm(p.to(kh.dtype), kh, PREC, ACC, UPCAST), True)
            if HAS_X:
                xh = _tile(X, b * H + hh, cols, Nk, E, EP, cmask)
                _put(OX, b * H + hh, rows, Nq, E, EP, rmask, _mm(p.to(xh.dtype), xh, PREC, ACC, UPCAST), True)
            if HMODE == 1:
                psum += p
            if HMODE == 2:  # per-head factors: Σ_k c_k ∘ (P_k H), one D-wide product per head
                ch = tl.load(C + hh * D + dd, mask=dd < D, other=0.0).to(ACC)
                hs += _mm(p.to(hb.dtype), hb, PREC, ACC, UPCAST) * ch[None, :]
        if HMODE == 1:  # head-summed: (Σ_k P_k) H, one product
            hs += _mm(psum.to(hb.dtype), hb, PREC, ACC, UPCAST)
    if HMODE > 0:
        _put(HS, b, rows, Nq, D, DP, rmask, hs, False)


@triton.jit
def _dp(goq, kh, gh, ghs, C, X, GOX, hh, b, rows, cols, rmask, cmask, hb, Nq, Nk,
        H: tl.constexpr, D: tl.constexpr, E: tl.constexpr, DP: tl.constexpr, EP: tl.constexpr,
        HMODE: tl.constexpr, HAS_X: tl.constexpr, PREC: tl.constexpr, ACC: tl.constexpr, UPCAST: tl.constexpr):
    """dP_k = dOq_k K_kᵀ + (dHs, or dHs∘c_k) Hᵀ + dOx_k X_kᵀ (BM, BN); gh: the shared dHs Hᵀ tile."""
    dp = _mm(goq, tl.trans(kh), PREC, ACC, UPCAST)
    if HMODE == 1:
        dp += gh
    if HMODE == 2:
        dd = tl.arange(0, DP)
        ch = tl.load(C + hh * D + dd, mask=dd < D, other=0.0)
        dp += _mm((ghs.to(ACC) * ch[None, :].to(ACC)).to(hb.dtype), tl.trans(hb), PREC, ACC, UPCAST)
    if HAS_X:
        xh = _tile(X, b * H + hh, cols, Nk, E, EP, cmask)
        gox = _tile(GOX, b * H + hh, rows, Nq, E, EP, rmask)
        dp += _mm(gox, tl.trans(xh), PREC, ACC, UPCAST)
    return dp


@triton.jit
def _bwd_q(Q, K, UD, HM, X, C, SLOPES, DELTA, KMASK, M, L, GOQ, GHS, GOX, DLT, DQ, DUD, DDIAG, Nq, Nk, offset,
           H: tl.constexpr, R: tl.constexpr, D: tl.constexpr, E: tl.constexpr, RP: tl.constexpr,
           DP: tl.constexpr, EP: tl.constexpr, HP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
           CAUSAL: tl.constexpr, HAS_G: tl.constexpr, HMODE: tl.constexpr, HAS_X: tl.constexpr,
           HAS_ALIBI: tl.constexpr, HAS_DELTA: tl.constexpr, HAS_KMASK: tl.constexpr, PREC: tl.constexpr,
           ACC: tl.constexpr, UPCAST: tl.constexpr):
    """Per query tile: Δ_k (added to DLT, which holds −g_lse), dq_k, d(ud), diag dS (self-bias gradient)."""
    pid = tl.program_id(0)
    b = tl.program_id(1)
    rows = pid * BM + tl.arange(0, BM)
    rmask = rows < Nq
    hcol = tl.arange(0, HP)
    hptr = (b * H + hcol[None, :]) * Nq + rows[:, None]
    hmask2 = rmask[:, None] & (hcol < H)[None, :]
    m_all = tl.load(M + hptr, mask=hmask2, other=0.0)
    l_all = tl.load(L + hptr, mask=hmask2, other=1.0)
    dlt = tl.load(DLT + hptr, mask=hmask2, other=0.0)
    ud = tl.zeros((BM, DP), ACC)
    ghs = tl.zeros((BM, DP), ACC)
    if HAS_G:
        ud = _tile(UD, b, rows, Nq, D, DP, rmask)
    if HMODE > 0:
        ghs = _tile(GHS, b, rows, Nq, D, DP, rmask)
    kend = Nk
    if CAUSAL:
        kend = tl.minimum(Nk, offset + pid * BM + BM)
    # pass a: Δ_k = Σ_j p_ijk dP_ijk with the very dP of pass b and of the key-tile kernel (not
    # dOq·oq: rounded differently, it would leave dS = p(dP − Δ) ≠ 0 where p is one-hot)
    for start in range(0, kend, BN):
        cols = start + tl.arange(0, BN)
        cmask = cols < Nk
        g = tl.zeros((BM, BN), ACC)
        gh = tl.zeros((BM, BN), ACC)
        hb = tl.zeros((BN, DP), ACC)
        if HAS_G or HMODE > 0:
            hb = _tile(HM, b, cols, Nk, D, DP, cmask)
        if HAS_G:
            g = _mm(ud, tl.trans(hb), PREC, ACC, UPCAST)
        if HMODE == 1:
            gh = _mm(ghs, tl.trans(hb), PREC, ACC, UPCAST)
        for hh in tl.static_range(H):
            s, qh, kh = _scores(Q, K, SLOPES, DELTA, KMASK, hh, b, rows, cols, rmask, cmask, g, Nq, Nk, offset,
                                H, R, RP, CAUSAL, HAS_G, HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, UPCAST)
            p = tl.exp(s - _col(m_all, hcol, hh)[:, None]) / _col(l_all, hcol, hh)[:, None]
            goq = _tile(GOQ, b * H + hh, rows, Nq, R, RP, rmask)
            dp = _dp(goq, kh, gh, ghs, C, X, GOX, hh, b, rows, cols, rmask, cmask, hb, Nq, Nk,
                     H, D, E, DP, EP, HMODE, HAS_X, PREC, ACC, UPCAST)
            dlt += tl.where(hcol[None, :] == hh, tl.sum(p * dp, 1)[:, None], 0.0)
    tl.store(DLT + hptr, dlt, mask=hmask2)
    dud = tl.zeros((BM, DP), ACC)
    ddg = tl.zeros((BM, HP), ACC)
    for start in range(0, kend, BN):  # pass b
        cols = start + tl.arange(0, BN)
        cmask = cols < Nk
        g = tl.zeros((BM, BN), ACC)
        gh = tl.zeros((BM, BN), ACC)
        hb = tl.zeros((BN, DP), ACC)
        if HAS_G or HMODE > 0:
            hb = _tile(HM, b, cols, Nk, D, DP, cmask)
        if HAS_G:
            g = _mm(ud, tl.trans(hb), PREC, ACC, UPCAST)
        if HMODE == 1:
            gh = _mm(ghs, tl.trans(hb), PREC, ACC, UPCAST)
        dssum = tl.zeros((BM, BN), ACC)
        for hh in tl.static_range(H):
            s, qh, kh = _scores(Q, K, SLOPES, DELTA, KMASK, hh, b, rows, cols, rmask, cmask, g, Nq, Nk, offset,
                                H, R, RP, CAUSAL, HAS_G, HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, UPCAST)
            p = tl.exp(s - _col(m_all, hcol, hh)[:, None]) / _col(l_all, hcol, hh)[:, None]
            goq = _tile(GOQ, b * H + hh, rows, Nq, R, RP, rmask)
            dp = _dp(goq, kh, gh, ghs, C, X, GOX, hh, b, rows, cols, rmask, cmask, hb, Nq, Nk,
                     H, D, E, DP, EP, HMODE, HAS_X, PREC, ACC, UPCAST)
            ds = p * (dp - _col(dlt, hcol, hh)[:, None])
            _put(DQ, b * H + hh, rows, Nq, R, RP, rmask, _mm(ds.to(kh.dtype), kh, PREC, ACC, UPCAST), True)
            if HAS_DELTA:
                on_diag = (offset + rows)[:, None] == cols[None, :]
                ddg += tl.where(hcol[None, :] == hh, tl.sum(tl.where(on_diag, ds, 0.0), 1)[:, None], 0.0)
            if HAS_G:
                dssum += ds
        if HAS_G:  # d(ud) = (Σ_k dS_k) H, one product
            dud += _mm(dssum.to(hb.dtype), hb, PREC, ACC, UPCAST)
    if HAS_G:
        _put(DUD, b, rows, Nq, D, DP, rmask, dud, False)
    if HAS_DELTA:
        tl.store(DDIAG + hptr, ddg, mask=hmask2)


@triton.jit
def _bwd_kv(Q, K, UD, HM, X, C, SLOPES, DELTA, KMASK, M, L, GOQ, GHS, GOX, DLT, DK, DH, DX, DC, Nq, Nk, offset,
            H: tl.constexpr, R: tl.constexpr, D: tl.constexpr, E: tl.constexpr, RP: tl.constexpr,
            DP: tl.constexpr, EP: tl.constexpr, HP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
            CAUSAL: tl.constexpr, HAS_G: tl.constexpr, HMODE: tl.constexpr, HAS_X: tl.constexpr,
            HAS_ALIBI: tl.constexpr, HAS_DELTA: tl.constexpr, HAS_KMASK: tl.constexpr, PREC: tl.constexpr,
            ACC: tl.constexpr, UPCAST: tl.constexpr):
    """Per key tile: dk_k = dS_kᵀ q_k + P_kᵀ dOq_k, dx_k = P_kᵀ dOx_k, dh = (Σ_k dS_k)ᵀ ud + (Σ_k P_k)ᵀ dHs
    (per-head factors: Σ_k (P_kᵀ dHs) ∘ c_k) and this tile's part of dc_k = Σ_j h_j ∘ (P_kᵀ dHs)_j."""
    pid = tl.program_id(0)
    b = tl.program_id(1)
    nt = tl.num_programs(0)
    cols = pid * BN + tl.arange(0, BN)
    cmask = cols < Nk
    dd = tl.arange(0, DP)
    hcol = tl.arange(0, HP)
    hb = tl.zeros((BN, DP), ACC)
    if HAS_G or HMODE > 0:
        hb = _tile(HM, b, cols, Nk, D, DP, cmask)
    dh = tl.zeros((BN, DP), ACC)
    dc = tl.zeros((HP, DP), ACC)
    qstart = 0
    if CAUSAL:  # queries at positions >= this tile's first key
        qstart = tl.maximum(pid * BN - offset, 0) // BM * BM
    for r0 in range(qstart, Nq, BM):
        rows = r0 + tl.arange(0, BM)
        rmask = rows < Nq
        hptr = (b * H + hcol[None, :]) * Nq + rows[:, None]
        hmask2 = rmask[:, None] & (hcol < H)[None, :]
        m_all = tl.load(M + hptr, mask=hmask2, other=0.0)
        l_all = tl.load(L + hptr, mask=hmask2, other=1.0)
        dlt = tl.load(DLT + hptr, mask=hmask2, other=0.0)
        g = tl.zeros((BM, BN), ACC)
        gh = tl.zeros((BM, BN), ACC)
        ud = tl.zeros((BM, DP), ACC)
        ghs = tl.zeros((BM, DP), ACC)
        if HAS_G:
            ud = _tile(UD, b, rows, Nq, D, DP, rmask)
            g = _mm(ud, tl.trans(hb), PREC, ACC, UPCAST)
        if HMODE > 0:
            ghs = _tile(GHS, b, rows, Nq, D, DP, rmask)
        if HMODE == 1:
            gh = _mm(ghs, tl.trans(hb), PREC, ACC, UPCAST)
        dssum = tl.zeros((BM, BN), ACC)
        psum = tl.zeros((BM, BN), ACC)
        for hh in tl.static_range(H):
            s, qh, kh = _scores(Q, K, SLOPES, DELTA, KMASK, hh, b, rows, cols, rmask, cmask, g, Nq, Nk, offset,
                                H, R, RP, CAUSAL, HAS_G, HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, UPCAST)
            p = tl.exp(s - _col(m_all, hcol, hh)[:, None]) / _col(l_all, hcol, hh)[:, None]
            goq = _tile(GOQ, b * H + hh, rows, Nq, R, RP, rmask)
            dp = _dp(goq, kh, gh, ghs, C, X, GOX, hh, b, rows, cols, rmask, cmask, hb, Nq, Nk,
                     H, D, E, DP, EP, HMODE, HAS_X, PREC, ACC, UPCAST)
            ds = p * (dp - _col(dlt, hcol, hh)[:, None])
            dk = _mm(tl.trans(ds.to(qh.dtype)), qh, PREC, ACC, UPCAST) \
                + _mm(tl.trans(p.to(goq.dtype)), goq, PREC, ACC, UPCAST)
            _put(DK, b * H + hh, cols, Nk, R, RP, cmask, dk, True)
            if HAS_X:
                gox = _tile(GOX, b * H + hh, rows, Nq, E, EP, rmask)
                _put(DX, b * H + hh, cols, Nk, E, EP, cmask, _mm(tl.trans(p.to(gox.dtype)), gox, PREC, ACC, UPCAST),
                     True)
            if HAS_G:
                dssum += ds
            if HMODE == 1:
                psum += p
            if HMODE == 2:
                t = _mm(tl.trans(p.to(ghs.dtype)), ghs, PREC, ACC, UPCAST)  # (BN, DP) P_kᵀ dHs
                ch = tl.load(C + hh * D + dd, mask=dd < D, other=0.0).to(ACC)
                dh += t * ch[None, :]
                dc += tl.where(hcol[:, None] == hh, tl.sum(t * hb.to(ACC), 0)[None, :], 0.0)
        if HAS_G:
            dh += _mm(tl.trans(dssum.to(ud.dtype)), ud, PREC, ACC, UPCAST)
        if HMODE == 1:
            dh += _mm(tl.trans(psum.to(ghs.dtype)), ghs, PREC, ACC, UPCAST)
    if HAS_G or HMODE > 0:
        _put(DH, b, cols, Nk, D, DP, cmask, dh, False)
    if HMODE == 2:  # DC: (B, tiles, H, D), summed by the caller
        tl.store(DC + ((b * nt + pid) * H + hcol[:, None]) * D + dd[None, :], dc,
                 mask=(hcol < H)[:, None] & (dd < D)[None, :])
