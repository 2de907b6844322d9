"""Triton kernels of Hyper-SET's symmetric bi-softmax for short sequences (``attention.impl: kernel``).

One program per (batch row × head) holds the whole (N, p) tile of U = sphere(W_hᵀ x) and the N x N
scores in registers (N ≤ 128, padded to a power of two), so a forward reads U once and writes y once,
and a backward reads U and dy once and writes dU once — against the 4 + 6 (B H, N, N) passes of
:class:`~energyformer.energies.hyperspherical_ops._SymmetricBiSoftmax`. The maths is that Function's
(its docstring has the formulas), with V = U:

    forward   P = softmax_row(scale U Uᵀ);  y = sign (P + Pᵀ) U
    backward  dA = sign dy Uᵀ;  dP = dA + dAᵀ;  dS = P ∘ (dP − rowsum(P ∘ dP));
              dU = sign (P + Pᵀ) dy + scale (dS + dSᵀ) U

Products accumulate in ``ACC`` (float32, float64 for float64 operands); the probabilities and dS are
rounded to the operand dtype before the products that read them (as the MMA needs). In Triton's CPU
interpreter (``UPCAST``) a float32 → bf16 conversion truncates instead of rounding to nearest (twice the
error, measured), so there the kernels keep ``ACC`` throughout and the launcher rounds the outputs. Padded rows of U
are zero and padded rows of P are set to zero, so Pᵀ adds nothing from them. Loaded through
``cem_kernel._kernels`` (compiled on CUDA, Triton's interpreter on CPU: tests only).
"""

import triton
import triton.language as tl


@triton.jit
def _mm(a, b, PREC: tl.constexpr, ACC: tl.constexpr, UPCAST: tl.constexpr):
    """a @ b accumulated in ACC; UPCAST (the CPU interpreter, whose 16-bit dot is wrong) multiplies in ACC."""
    if UPCAST:
        return tl.dot(a.to(ACC), b.to(ACC), input_precision=PREC, out_dtype=ACC)
    return tl.dot(a, b, input_precision=PREC, out_dtype=ACC)


@triton.jit
def _operand(t, like, UPCAST: tl.constexpr):
    """t in the operand dtype for a product (kept in its accumulation dtype in the interpreter, see above)"""
    if UPCAST:
        return t
    return t.to(like.dtype)


@triton.jit
def _offsets(bh, H, sb, sh, sn, N, P, BN: tl.constexpr, PP: tl.constexpr):
    """Offsets and mask of the (BN, PP) tile of matrix (b, h) = divmod(bh, H) of a (B, H, N, P) tensor with
    strides (sb, sh, sn, 1): any layout whose rows are contiguous, e.g. the (B, N, H, P) memory of the
    projection's output seen as (B, H, N, P), read and written without a copy."""
    rows = tl.arange(0, BN)
    cols = tl.arange(0, PP)
    ok = (rows[:, None] < N) & (cols[None, :] < P)
    base = (bh // H).to(tl.int64) * sb + (bh % H).to(tl.int64) * sh
    return base + rows[:, None] * sn + cols[None, :], ok


@triton.jit
def _load(ptr, bh, H, sb, sh, sn, N, P, BN: tl.constexpr, PP: tl.constexpr):
    """The tile of :func:`_offsets`, zero outside (N, P)."""
    off, ok = _offsets(bh, H, sb, sh, sn, N, P, BN, PP)
    return tl.load(ptr + off, mask=ok, other=0.0)


@triton.jit
def _store(ptr, bh, H, sb, sh, sn, N, P, val, BN: tl.constexpr, PP: tl.constexpr):
    off, ok = _offsets(bh, H, sb, sh, sn, N, P, BN, PP)
    tl.store(ptr + off, val, mask=ok)


@triton.jit
def _probs(u, N, scale, BN: tl.constexpr, PREC: tl.constexpr, ACC: tl.constexpr, UPCAST: tl.constexpr):
    """P = softmax_row(scale U Uᵀ) over the N real keys, (BN, BN) in ACC; padded rows are zero."""
    idx = tl.arange(0, BN)
    s = _mm(u, tl.trans(u), PREC, ACC, UPCAST) * scale
    s = tl.where(idx[None, :] < N, s, float("-inf"))
    e = tl.exp(s - tl.max(s, 1)[:, None])
    p = e / tl.sum(e, 1)[:, None]
    return tl.where(idx[:, None] < N, p, 0.0)


@triton.jit
def _fwd(U, Y, H, su_b, su_h, su_n, N, P, scale, sign, BN: tl.constexpr, PP: tl.constexpr, PREC: tl.constexpr,
         ACC: tl.constexpr, UPCAST: tl.constexpr):
    """y = sign (P + Pᵀ) U; Y has U's strides."""
    bh = tl.program_id(0)
    u = _load(U, bh, H, su_b, su_h, su_n, N, P, BN, PP)
    p = _probs(u, N, scale, BN, PREC, ACC, UPCAST)
    a = _operand(p + tl.trans(p), u, UPCAST)
    y = _mm(a, u, PREC, ACC, UPCAST) * sign
    _store(Y, bh, H, su_b, su_h, su_n, N, P, y.to(Y.dtype.element_ty), BN, PP)


@triton.jit
def _bwd(U, DY, DU, H, su_b, su_h, su_n, sd_b, sd_h, sd_n, N, P, scale, sign, BN: tl.constexpr,
         PP: tl.constexpr, PREC: tl.constexpr, ACC: tl.constexpr, UPCAST: tl.constexpr):
    """dU (with U's strides) from U and dy (strides sd_*)."""
    bh = tl.program_id(0)
    u = _load(U, bh, H, su_b, su_h, su_n, N, P, BN, PP)
    dy = _load(DY, bh, H, sd_b, sd_h, sd_n, N, P, BN, PP)
    p = _probs(u, N, scale, BN, PREC, ACC, UPCAST)
    a = _operand(p + tl.trans(p), u, UPCAST)
    du = _mm(a, dy, PREC, ACC, UPCAST) * sign                 # dV = A dy (A = Aᵀ)
    da = _mm(dy, tl.trans(u), PREC, ACC, UPCAST) * sign       # dA = sign dy Uᵀ
    dp = da + tl.trans(da)                                    # A = P + Pᵀ
    ds = p * (dp - tl.sum(p * dp, 1)[:, None])                # softmax backward
    ds = _operand(ds + tl.trans(ds), u, UPCAST)               # S = Sᵀ: both factors of U Uᵀ
    du += _mm(ds, u, PREC, ACC, UPCAST) * scale
    _store(DU, bh, H, su_b, su_h, su_n, N, P, du.to(DU.dtype.element_ty), BN, PP)


# ---- the feed-forward's sphere norm and ReLU in one pass each way (ReLUFFEnergy on CUDA)
#
#     forward   r = (mean_m z_m² + eps)^(-1/2);  u = r z;  y = max(u, 0)
#     backward  g = dy ∘ [u > 0];  dz = r (g − u mean_m(g ∘ u))
#
# one program per row of M (≤ BM) columns, statistics in ACC; r is saved (float32, or float64 for float64 rows)


@triton.jit
def _norm_relu_fwd(Z, Y, RSTD, M, eps, BM: tl.constexpr, ACC: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BM)
    ok = cols < M
    z = tl.load(Z + row * M + cols, mask=ok, other=0.0).to(ACC)
    # r = (mean z² + eps)^(-1/2) as r_s / s over z / s, s = max(max |z|, 1): no square overflows (a row past
    # ‖z‖ ~ 1.8e19 in float32 had r = 0, a finite zero output); rows with max |z| ≤ 1 compute as before, bit for bit
    s = tl.maximum(tl.max(tl.abs(z), 0), 1.0)
    zs = z / s
    r_s = 1.0 / tl.sqrt(tl.sum(zs * zs, 0) / M + eps / (s * s))
    tl.store(RSTD + row, r_s / s)
    tl.store(Y + row * M + cols, tl.maximum(zs * r_s, 0.0).to(Y.dtype.element_ty), mask=ok)


@triton.jit
def _norm_relu_bwd(Z, DY, RSTD, DZ, M, BM: tl.constexpr, ACC: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BM)
    ok = cols < M
    r = tl.load(RSTD + row).to(ACC)
    u = tl.load(Z + row * M + cols, mask=ok, other=0.0).to(ACC) * r
    g = tl.where(u > 0, tl.load(DY + row * M + cols, mask=ok, other=0.0).to(ACC), 0.0)
    dz = r * (g - u * (tl.sum(g * u, 0) / M))
    tl.store(DZ + row * M + cols, dz.to(DZ.dtype.element_ty), mask=ok)
