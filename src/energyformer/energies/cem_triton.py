"""Triton kernels of :mod:`energyformer.energies.cem_kernel` (read its docstring for the equations).

Imported only through ``cem_kernel._kernels``, which loads this file once for the GPU and once, under
``TRITON_INTERPRET=1``, for Triton's CPU interpreter; importing energyformer never needs triton.
"""

import triton
import triton.language as tl


@triton.jit
def _scores(q_ptr, k_ptr, hh, b, rows, cols, rmask, cmask, g, slopes_ptr, delta_ptr, kmask_ptr,
            Nq, Nk, offset, H: tl.constexpr, R: tl.constexpr, RP: tl.constexpr, CAUSAL: tl.constexpr,
            HAS_G: tl.constexpr, HAS_ALIBI: tl.constexpr, HAS_DELTA: tl.constexpr,
            HAS_KMASK: tl.constexpr, PREC: tl.constexpr, UPCAST: tl.constexpr):
    """(s (BM, BN) with −inf where hidden, q_h (BM, RP), k_h (BN, RP)) of head hh."""
    rr = tl.arange(0, RP)
    qh = tl.load(q_ptr + ((b * H + hh) * Nq + rows[:, None]) * R + rr[None, :],
                 mask=rmask[:, None] & (rr < R)[None, :], other=0.0)
    kh = tl.load(k_ptr + ((b * H + hh) * Nk + cols[:, None]) * R + rr[None, :],
                 mask=cmask[:, None] & (rr < R)[None, :], other=0.0)
    s = _mm(qh, tl.trans(kh), PREC, g.dtype, UPCAST)
    if HAS_G:
        s += g
    i = (offset + rows)[:, None]
    j = cols[None, :]
    if HAS_ALIBI:
        m = tl.load(slopes_ptr + hh).to(s.dtype)
        s -= m * tl.abs(i - j).to(s.dtype)
    if HAS_DELTA:
        dl = tl.load(delta_ptr + hh).to(s.dtype)
        s += tl.where(i == j, dl, 0.0)
    vis = cmask[None, :] & rmask[:, None]
    if CAUSAL:
        vis = vis & (j <= i)
    if HAS_KMASK:
        km = tl.load(kmask_ptr + b * Nk + cols, mask=cmask, other=0)
        vis = vis & ((km[None, :] != 0) | (i == j))
    s = tl.where(vis, s, float("-inf"))
    return s, qh, kh

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
def _fwd(Q, K, UD, HM, SLOPES, DELTA, KMASK, OQ, HS, LSE, M, L, Nq, Nk, offset,
         H: tl.constexpr, R: tl.constexpr, D: tl.constexpr, RP: tl.constexpr, DP: tl.constexpr,
         HP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, CAUSAL: tl.constexpr,
         HAS_G: tl.constexpr, HAS_HS: tl.constexpr, HAS_ALIBI: tl.constexpr, HAS_DELTA: tl.constexpr,
         HAS_KMASK: tl.constexpr, PREC: tl.constexpr, ACC: tl.constexpr,
             UPCAST: tl.constexpr):
    pid = tl.program_id(0)
    b = tl.program_id(1)
    rows = pid * BM + tl.arange(0, BM)
    rmask = rows < Nq
    dd = tl.arange(0, DP)
    rr = tl.arange(0, RP)
    hcol = tl.arange(0, HP)
    dmask = dd < D
    if HAS_G:
        ud = tl.load(UD + (b * Nq + rows[:, None]) * D + dd[None, :], mask=rmask[:, None] & dmask[None, :],
                     other=0.0)
    kend = Nk
    if CAUSAL:
        kend = tl.minimum(Nk, offset + pid * BM + BM)
    # pass 1: running max and sum of every head -> lse
    m_all = tl.full((BM, HP), float("-inf"), ACC)
    l_all = tl.zeros((BM, HP), ACC)
    for start in range(0, kend, BN):
        cols = start + tl.arange(0, BN)
        cmask = cols < Nk
        g = tl.zeros((BM, BN), ACC)
        if HAS_G:  # the shared-diagonal tile, once for all heads
            hb = tl.load(HM + (b * Nk + cols[:, None]) * D + dd[None, :], mask=cmask[:, None] & dmask[None, :],
                         other=0.0)
            g = _mm(ud, tl.trans(hb), PREC, ACC, UPCAST)
        for hh in tl.static_range(H):
            s, qh, kh = _scores(Q, K, hh, b, rows, cols, rmask, cmask, g, SLOPES, DELTA, KMASK, Nq, Nk,
                                offset, H, R, RP, CAUSAL, HAS_G, HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, UPCAST)
            m_old = _col(m_all, hcol, hh)
            l_old = _col(l_all, hcol, hh)
            m_new = tl.maximum(m_old, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            l_new = l_old * tl.exp(m_old - m_safe) + tl.sum(tl.exp(s - m_safe[:, None]), 1)
            m_all = tl.where(hcol[None, :] == hh, m_new[:, None], m_all)
            l_all = tl.where(hcol[None, :] == hh, l_new[:, None], l_all)
    lse = tl.where(l_all > 0, m_all + tl.log(tl.where(l_all > 0, l_all, 1.0)), float("-inf"))  # (BM, HP)
    hptr = (b * H + hcol[None, :]) * Nq + rows[:, None]
    hmask2 = rmask[:, None] & (hcol < H)[None, :]
    tl.store(LSE + hptr, lse, mask=hmask2)
    # p = e^{s − m} / l, not e^{s − lse}: lse rounded at |s| ~ 1e4 would cost 5e-4 of p in float32
    m_all = tl.where(m_all == float("-inf"), 0.0, m_all)
    l_all = tl.where(l_all > 0, l_all, 1.0)
    tl.store(M + hptr, m_all, mask=hmask2)
    tl.store(L + hptr, l_all, mask=hmask2)
    # pass 2: normalised probabilities -> oq (per head, in OQ) and hs (head-summed, in registers)
    hs = tl.zeros((BM, DP), ACC)
    for start in range(0, kend, BN):
        cols = start + tl.arange(0, BN)
        cmask = cols < Nk
        g = tl.zeros((BM, BN), ACC)
        if HAS_G or HAS_HS:
            hb = tl.load(HM + (b * Nk + cols[:, None]) * D + dd[None, :], mask=cmask[:, None] & dmask[None, :],
                         other=0.0)
        if HAS_G:
            g = _mm(ud, tl.trans(hb), PREC, ACC, UPCAST)
        psum = tl.zeros((BM, BN), ACC)
        for hh in tl.static_range(H):
            s, qh, kh = _scores(Q, K, hh, b, rows, cols, rmask, cmask, g, SLOPES, DELTA, KMASK, Nq, Nk,
                                offset, H, R, RP, CAUSAL, HAS_G, HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, UPCAST)
            p = tl.exp(s - _col(m_all, hcol, hh)[:, None]) / _col(l_all, hcol, hh)[:, None]
            optr = OQ + ((b * H + hh) * Nq + rows[:, None]) * R + rr[None, :]
            omask = rmask[:, None] & (rr < R)[None, :]
            acc = tl.load(optr, mask=omask, other=0.0)
            acc += _mm(p.to(kh.dtype), kh, PREC, ACC, UPCAST)
            tl.store(optr, acc, mask=omask)
            if HAS_HS:
                psum += p
        if HAS_HS:
            hs += _mm(psum.to(hb.dtype), hb, PREC, ACC, UPCAST)
    if HAS_HS:
        tl.store(HS + (b * Nq + rows[:, None]) * D + dd[None, :], hs, mask=rmask[:, None] & dmask[None, :])

@triton.jit
def _bwd_q(Q, K, UD, HM, SLOPES, DELTA, KMASK, M, L, GOQ, GHS, DLT, DQ, DUD, DDIAG, Nq, Nk, offset,
           H: tl.constexpr, R: tl.constexpr, D: tl.constexpr, RP: tl.constexpr, DP: tl.constexpr,
           HP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, CAUSAL: tl.constexpr,
           HAS_G: tl.constexpr, HAS_HS: tl.constexpr, HAS_ALIBI: tl.constexpr, HAS_DELTA: tl.constexpr,
           HAS_KMASK: tl.constexpr, PREC: tl.constexpr, ACC: tl.constexpr,
             UPCAST: tl.constexpr):
    """Per query tile: Δ_k (its h part added to DLT, which holds dOq·oq − g_lse), dq_k, d(ud), diag dS."""
    pid = tl.program_id(0)
    b = tl.program_id(1)
    rows = pid * BM + tl.arange(0, BM)
    rmask = rows < Nq
    dd = tl.arange(0, DP)
    rr = tl.arange(0, RP)
    hcol = tl.arange(0, HP)
    dmask = dd < D
    hmask2 = rmask[:, None] & (hcol < H)[None, :]
    m_all = tl.load(M + (b * H + hcol[None, :]) * Nq + rows[:, None], mask=hmask2, other=0.0)
    l_all = tl.load(L + (b * H + hcol[None, :]) * Nq + rows[:, None], mask=hmask2, other=1.0)
    dlt = tl.load(DLT + (b * H + hcol[None, :]) * Nq + rows[:, None], mask=hmask2, other=0.0)
    if HAS_G:
        ud = tl.load(UD + (b * Nq + rows[:, None]) * D + dd[None, :], mask=rmask[:, None] & dmask[None, :],
                     other=0.0)
    if HAS_HS:
        ghs = tl.load(GHS + (b * Nq + rows[:, None]) * D + dd[None, :], mask=rmask[:, None] & dmask[None, :],
                      other=0.0)
    kend = Nk
    if CAUSAL:
        kend = tl.minimum(Nk, offset + pid * BM + BM)
    if HAS_HS:  # pass a: Δ_k += Σ_j p_ijk (dHs_i · h_j)
        for start in range(0, kend, BN):
            cols = start + tl.arange(0, BN)
            cmask = cols < Nk
            hb = tl.load(HM + (b * Nk + cols[:, None]) * D + dd[None, :], mask=cmask[:, None] & dmask[None, :],
                         other=0.0)
            g = tl.zeros((BM, BN), ACC)
            if HAS_G:
                g = _mm(ud, tl.trans(hb), PREC, ACC, UPCAST)
            gh = _mm(ghs, tl.trans(hb), PREC, ACC, UPCAST)
            for hh in tl.static_range(H):
                s, qh, kh = _scores(Q, K, hh, b, rows, cols, rmask, cmask, g, SLOPES, DELTA, KMASK, Nq, Nk,
                                    offset, H, R, RP, CAUSAL, HAS_G, HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, UPCAST)
                p = tl.exp(s - _col(m_all, hcol, hh)[:, None]) / _col(l_all, hcol, hh)[:, None]
                dlt += tl.where(hcol[None, :] == hh, tl.sum(p * gh, 1)[:, None], 0.0)
        tl.store(DLT + (b * H + hcol[None, :]) * Nq + rows[:, None], dlt, mask=hmask2)
    dud = tl.zeros((BM, DP), ACC)
    ddg = tl.zeros((BM, HP), ACC)
    for start in range(0, kend, BN):  # pass b
        cols = start + tl.arange(0, BN)
        cmask = cols < Nk
        g = tl.zeros((BM, BN), ACC)
        gh = tl.zeros((BM, BN), ACC)
        if HAS_G or HAS_HS:
            hb = tl.load(HM + (b * Nk + cols[:, None]) * D + dd[None, :], mask=cmask[:, None] & dmask[None, :],
                         other=0.0)
        if HAS_G:
            g = _mm(ud, tl.trans(hb), PREC, ACC, UPCAST)
        if HAS_HS:
            gh = _mm(ghs, tl.trans(hb), PREC, ACC, UPCAST)
        dssum = tl.zeros((BM, BN), ACC)
        for hh in tl.static_range(H):
            s, qh, kh = _scores(Q, K, hh, b, rows, cols, rmask, cmask, g, SLOPES, DELTA, KMASK, Nq, Nk,
                                offset, H, R, RP, CAUSAL, HAS_G, HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, UPCAST)
            p = tl.exp(s - _col(m_all, hcol, hh)[:, None]) / _col(l_all, hcol, hh)[:, None]
            omask = rmask[:, None] & (rr < R)[None, :]
            goq = tl.load(GOQ + ((b * H + hh) * Nq + rows[:, None]) * R + rr[None, :], mask=omask, other=0.0)
            dp = _mm(goq, tl.trans(kh), PREC, ACC, UPCAST) + gh
            ds = p * (dp - _col(dlt, hcol, hh)[:, None])
            dptr = DQ + ((b * H + hh) * Nq + rows[:, None]) * R + rr[None, :]
            acc = tl.load(dptr, mask=omask, other=0.0)
            acc += _mm(ds.to(kh.dtype), kh, PREC, ACC, UPCAST)
            tl.store(dptr, acc, mask=omask)
            if HAS_DELTA:
                on_diag = (offset + rows)[:, None] == cols[None, :]
                ddg += tl.where(hcol[None, :] == hh, tl.sum(tl.where(on_diag, ds, 0.0), 1)[:, None], 0.0)
            if HAS_G:
                dssum += ds
        if HAS_G:
            dud += _mm(dssum.to(hb.dtype), hb, PREC, ACC, UPCAST)
    if HAS_G:
        tl.store(DUD + (b * Nq + rows[:, None]) * D + dd[None, :], dud, mask=rmask[:, None] & dmask[None, :])
    if HAS_DELTA:
        tl.store(DDIAG + (b * H + hcol[None, :]) * Nq + rows[:, None], ddg, mask=hmask2)

@triton.jit
def _bwd_kv(Q, K, UD, HM, SLOPES, DELTA, KMASK, M, L, GOQ, GHS, DLT, DK, DH, Nq, Nk, offset,
            H: tl.constexpr, R: tl.constexpr, D: tl.constexpr, RP: tl.constexpr, DP: tl.constexpr,
            HP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, CAUSAL: tl.constexpr,
            HAS_G: tl.constexpr, HAS_HS: tl.constexpr, HAS_ALIBI: tl.constexpr, HAS_DELTA: tl.constexpr,
            HAS_KMASK: tl.constexpr, PREC: tl.constexpr, ACC: tl.constexpr,
             UPCAST: tl.constexpr):
    """Per key tile: dk_k = dS_kᵀ q_k + P_kᵀ dOq_k, dh = (Σ_k dS_k)ᵀ ud + (Σ_k P_k)ᵀ dHs."""
    pid = tl.program_id(0)
    b = tl.program_id(1)
    cols = pid * BN + tl.arange(0, BN)
    cmask = cols < Nk
    dd = tl.arange(0, DP)
    rr = tl.arange(0, RP)
    hcol = tl.arange(0, HP)
    dmask = dd < D
    if HAS_G or HAS_HS:
        hb = tl.load(HM + (b * Nk + cols[:, None]) * D + dd[None, :], mask=cmask[:, None] & dmask[None, :],
                     other=0.0)
    dh = tl.zeros((BN, DP), ACC)
    qstart = 0
    if CAUSAL:  # queries at positions >= this tile's first key
        qstart = tl.maximum(pid * BN - offset, 0) // BM * BM
    for r0 in range(qstart, Nq, BM):
        rows = r0 + tl.arange(0, BM)
        rmask = rows < Nq
        hmask2 = rmask[:, None] & (hcol < H)[None, :]
        m_all = tl.load(M + (b * H + hcol[None, :]) * Nq + rows[:, None], mask=hmask2, other=0.0)
        l_all = tl.load(L + (b * H + hcol[None, :]) * Nq + rows[:, None], mask=hmask2, other=1.0)
        dlt = tl.load(DLT + (b * H + hcol[None, :]) * Nq + rows[:, None], mask=hmask2, other=0.0)
        g = tl.zeros((BM, BN), ACC)
        gh = tl.zeros((BM, BN), ACC)
        if HAS_G:
            ud = tl.load(UD + (b * Nq + rows[:, None]) * D + dd[None, :], mask=rmask[:, None] & dmask[None, :],
                         other=0.0)
            g = _mm(ud, tl.trans(hb), PREC, ACC, UPCAST)
        if HAS_HS:
            ghs = tl.load(GHS + (b * Nq + rows[:, None]) * D + dd[None, :], mask=rmask[:, None] & dmask[None, :],
                          other=0.0)
            gh = _mm(ghs, tl.trans(hb), PREC, ACC, UPCAST)
        dssum = tl.zeros((BM, BN), ACC)
        psum = tl.zeros((BM, BN), ACC)
        for hh in tl.static_range(H):
            s, qh, kh = _scores(Q, K, hh, b, rows, cols, rmask, cmask, g, SLOPES, DELTA, KMASK, Nq, Nk,
                                offset, H, R, RP, CAUSAL, HAS_G, HAS_ALIBI, HAS_DELTA, HAS_KMASK, PREC, UPCAST)
            p = tl.exp(s - _col(m_all, hcol, hh)[:, None]) / _col(l_all, hcol, hh)[:, None]
            omask = rmask[:, None] & (rr < R)[None, :]
            goq = tl.load(GOQ + ((b * H + hh) * Nq + rows[:, None]) * R + rr[None, :], mask=omask, other=0.0)
            dp = _mm(goq, tl.trans(kh), PREC, ACC, UPCAST) + gh
            ds = p * (dp - _col(dlt, hcol, hh)[:, None])
            kmask2 = cmask[:, None] & (rr < R)[None, :]
            dptr = DK + ((b * H + hh) * Nk + cols[:, None]) * R + rr[None, :]
            acc = tl.load(dptr, mask=kmask2, other=0.0)
            acc += _mm(tl.trans(ds.to(qh.dtype)), qh, PREC, ACC, UPCAST)
            acc += _mm(tl.trans(p.to(goq.dtype)), goq, PREC, ACC, UPCAST)
            tl.store(dptr, acc, mask=kmask2)
            if HAS_G:
                dssum += ds
            if HAS_HS:
                psum += p
        if HAS_G:
            dh += _mm(tl.trans(dssum.to(ud.dtype)), ud, PREC, ACC, UPCAST)
        if HAS_HS:
            dh += _mm(tl.trans(psum.to(ghs.dtype)), ghs, PREC, ACC, UPCAST)
    if HAS_G or HAS_HS:
        tl.store(DH + (b * Nk + cols[:, None]) * D + dd[None, :], dh, mask=cmask[:, None] & dmask[None, :])
