"""Bi-softmax attention kernels of Hyper-SET (seed 002, Eq. 7 and 9; derivation in App. C.1).

With scores ``S = β Q Kᵀ`` (per head, shapes (B, H, N, p)), row normalisers ``r_i = LSE_j S_ij`` and
column normalisers ``c_j = LSE_i S_ij``, the bi-softmax operator is

    y_i = Σ_j [softmax_row(S)_ij + softmax_col(S)_ij] v_j = Σ_j exp(S_ij - r_i) v_j + Σ_j exp(S_ij - c_j) v_j.

When Q = K (one shared projection on one sphere, the paper's layer) S is symmetric, ``c = r`` and
``y`` is the total derivative of ``E = β⁻¹ Σ_i r_i`` with respect to the projections (App. C.1).

**Fused path** (:func:`bisoftmax_fused`): the row term is ordinary attention; the column term is
attention with the values rescaled by the column normalisers:

    Σ_j exp(S_ij - c_j) v_j = exp(r_i - m) · SDPA(Q, K, V ⊙ exp(m - c))_i,

since SDPA(Q, K, W)_i = Σ_j exp(S_ij - r_i) w_j (``m`` is a per-(batch, head) shift that keeps both
factors in range). So two fused ``scaled_dot_product_attention`` passes plus one log-sum-exp (two for
non-symmetric scores) give the operator without an N x N matrix, and the same log-sum-exp is the
energy E_ATTN. The log-sum-exp (:func:`chunked_lse`) runs over query chunks in at least float32,
with a hand-written backward that recomputes the chunks, so its memory is O(chunk x N), not O(N²).

**When the fused path is exact.** SDPA forms the row weights ``exp(S_ij - r_i)`` in its working
dtype, so the column weight ``exp(S_ij - c_j) = exp(S_ij - r_i) · exp(r_i - c_j)`` is lost whenever
``exp(S_ij - r_i)`` underflows while ``r_i - c_j`` is large: the key j silently drops out of query
i's column term (issue 23 measured 14% error in float32 with normalisers spanning 100-160, while every
``|r - m|, |c - m|`` was below the old per-side bound of 80). A dropped term is below
``tiny · exp(max r - min c)``, so the fused path is used only while the **whole span** of the
normalisers, ``max(r, c) - min(r, c)``, is at most :data:`SAFE_SPAN` = ``log(1/tiny) - log(1/eps) - 1``
of the dtype SDPA runs in (float32 70, bfloat16 81, float16 1.8, float64 671; under autocast the
autocast dtype counts too): then every dropped weight is below ``eps/e`` relative, and the factors
``exp(±(· - m))`` with ``m`` the midpoint stay finite. On the sphere of radius √p every score lies in
[-β p, β p], so the span is at most 2βp + log N. When the span is larger the fused path falls back to
the einsum path (one host sync per call decides; ``check_span=False`` skips the check); on an accelerator
and under compile or CUDA graphs, no host read: that head's output is NaN instead (:func:`_span_flag`).
**float16** (its span limit 1.8 is below almost any trained model's span, so on an accelerator nearly every head
came out NaN, on a CPU nearly every call fell back) runs the two SDPA passes in float32, y in v's dtype: the
float32 limit applies (:func:`_wide_passes`).

**Einsum path** (:func:`bisoftmax_einsum`): the N x N scores and both softmaxes, materialised: the
reference the tests compare with, and the natural form for the code-style option with separate
query/key/value norms (Q ≠ K). With Q = K it takes the column softmax as the transposed row softmax.

**Sphere norm** (:func:`sphere_rms_norm`, Eq. 8 and 11): in :mod:`~energyformer.energies.sphere_norm`
(re-exported here).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..core.attention import masked_logsumexp, masked_softmax, sdpa
from ..core.precision import autocast_dtype, autocast_off, host_read_stalls, no_host_sync
from .sphere_norm import FAST_NORM_DTYPES, FUSED_NORM, _has_values, sphere_rms_norm  # noqa: F401 (re-exported)

def _safe_span(dtype: torch.dtype) -> float:
    fi = torch.finfo(dtype)
    return math.log(1.0 / fi.tiny) - math.log(1.0 / fi.eps) - 1.0


#: largest span max(r, c) - min(r, c) of the log-normalisers the fused path accepts, per dtype of the
#: SDPA passes (module docstring): a row weight exp(S - r) that underflows may then only drop column
#: weights exp(S - c) below eps / e.
SAFE_SPAN = {dt: _safe_span(dt) for dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64)}


def fused_span_limit(v: Tensor) -> float:
    """:data:`SAFE_SPAN` of the dtype the SDPA passes run in: v's, or the autocast dtype when lower."""
    limit = SAFE_SPAN.get(v.dtype, SAFE_SPAN[torch.float16])
    if torch.is_autocast_enabled(v.device.type):
        limit = min(limit, SAFE_SPAN.get(torch.get_autocast_dtype(v.device.type), SAFE_SPAN[torch.float16]))
    return limit


def _wide_passes(v: Tensor) -> bool:
    """Whether the fused passes run in float32 instead: where the SDPA passes would run in float16 (v's dtype, or
    autocast's), whose :data:`SAFE_SPAN` 1.8 a trained head passes (on the sphere with self-interaction every r_i
    lies in [βp, βp + log N]: spans up to 4.4 at N 81, up to 2βp + log N without); not for bfloat16 (81) and
    float32 (70). Float32 passes cost more than float16's, which fell back to the materialised scores past the
    limit on a CPU and made the head NaN on an accelerator."""
    return fused_span_limit(v) < SAFE_SPAN[torch.float32]


def _chunk_rows(n_rows: int, n_cols: int, batch: int, budget: int) -> int:
    return max(1, min(n_rows, budget // max(1, batch * n_cols)))


def _work_dtype(t: Tensor) -> torch.dtype:
    return torch.promote_types(t.dtype, torch.float32)


class _ChunkedLSE(torch.autograd.Function):
    """lse_i = LSE_j (scale q_i·k_j [+ mask]) over query chunks; backward recomputes the chunks.

    Not the attention kit's ``masked_logsumexp``: the scores are materialised one query chunk at a
    time (O(chunk x N) memory, forward and backward), which a whole-matrix helper cannot do; the mask
    is the kit's (:func:`~energyformer.core.attention.key_padding_mask` or a full visibility mask)."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, scale: float, mask: Tensor | None, budget: int) -> Tensor:
        wd = _work_dtype(q)
        qw, kw = q.to(wd), k.to(wd)
        B, H, N, _ = q.shape
        c = _chunk_rows(N, k.shape[2], B * H, budget)
        outs = []
        for s in range(0, N, c):
            sc = torch.matmul(qw[:, :, s:s + c], kw.transpose(-1, -2)) * scale  # (B, H, c, Nk)
            outs.append(masked_logsumexp(sc, None if mask is None else
                                         (mask[:, :, s:s + c] if mask.shape[2] > 1 else mask)))
        lse = torch.cat(outs, dim=2)  # (B, H, N) in the work dtype
        ctx.save_for_backward(q, k, lse, mask if mask is not None else torch.empty(0))
        ctx.scale, ctx.chunk, ctx.has_mask = scale, c, mask is not None
        return lse

    @staticmethod
    def backward(ctx, g: Tensor):
        q, k, lse, mask = ctx.saved_tensors
        mask = mask if ctx.has_mask else None
        wd = lse.dtype
        qw, kw, g = q.to(wd), k.to(wd), g.to(wd)
        N, c, scale = q.shape[2], ctx.chunk, ctx.scale
        dqs, dk = [], torch.zeros_like(kw)
        for s in range(0, N, c):
            sc = torch.matmul(qw[:, :, s:s + c], kw.transpose(-1, -2)) * scale
            if mask is not None:  # a query that sees no key has lse 0 (masked_logsumexp): its p is 0 here
                sc = sc.masked_fill(~(mask[:, :, s:s + c] if mask.shape[2] > 1 else mask), float("-inf"))
            p = torch.exp(sc - lse[:, :, s:s + c, None]) * g[:, :, s:s + c, None]  # (B, H, c, Nk)
            dqs.append(torch.matmul(p, kw) * scale)
            dk = dk + torch.matmul(p.transpose(-1, -2), qw[:, :, s:s + c]) * scale
        return torch.cat(dqs, dim=2).to(q.dtype), dk.to(k.dtype), None, None, None


def chunked_lse(q: Tensor, k: Tensor, scale: float, mask: Tensor | None = None,
                budget: int = 1 << 22) -> Tensor:
    """(B, H, N) log-sum-exp over keys of ``scale · q kᵀ`` in at least float32, O(budget) memory.

    ``mask``: bool, True = visible, broadcastable to (B, H, Nq, Nk) with a size-1 query axis
    (key padding, (B, 1, 1, Nk)) or a full query axis ((B|1, 1, Nq, Nk)). ``budget`` bounds the
    elements of one chunk of scores.
    """
    return _ChunkedLSE.apply(q, k, float(scale), mask, int(budget))


def column_mask(mask: Tensor | None) -> Tensor | None:
    """The visibility of the column normalisers: ``mask & maskᵀ`` (a key-padding mask (B, 1, 1, N) as it is).

    Key j's column softmax runs over the queries i that see j *and* that j sees. With key padding and
    ``self_interaction=False`` (mask = real keys ∧ i ≠ j) a padded query sees the real keys but none sees it:
    it must not enter their column normalisers, and for S = Sᵀ the normaliser is then j's own row
    normaliser r_j, the column term of ∇E_ATTN (the mask as given counted padded queries in; tested)."""
    if mask is None or mask.shape[-2] == 1:
        return mask
    return mask & mask.transpose(-1, -2)


def _span_flag(hi: Tensor, lo: Tensor, limit: float) -> Tensor:
    """(B, H, 1): 1 where the span hi − lo is at most ``limit``, else NaN (also a NaN or inf span), on the device:
    :func:`bisoftmax_fused`'s span check where a host read stalls (accelerators), breaks or fails (compile, CUDA
    graphs) or has no value (fake tensors). m · flag makes that head's y and gradient NaN, loud where the host check
    took the einsum path (which ``where`` would materialise: the N x N this path avoids); a 1 changes no bit."""
    with torch.no_grad():
        ok = ((hi - lo) <= limit).to(hi.dtype)  # NaN <= limit is False
        return ok.div_(ok)  # 1, or 0/0 = NaN


def bisoftmax_fused(q: Tensor, k: Tensor, v: Tensor, scale: float, mask: Tensor | None = None, *,
                    symmetric: bool = True, lse: Tensor | None = None, check_span: bool = True,
                    budget: int = 1 << 22) -> tuple[Tensor, Tensor]:
    """Bi-softmax attention without the N x N matrix (module docstring). Returns (y, r).

    q, k, v: (B, H, N, p); mask: bool, True = visible, (B|1, 1, 1, N) key padding or
    (B|1, 1, N, N). ``symmetric`` promises q == k (then c = r: one log-sum-exp); ``lse``: the row
    normalisers r if already known. ``y`` (B, H, N, p) in v's dtype, ``r`` (B, H, N) in at least
    float32. Rows of padded queries are defined but not meaningful (padded tokens never move).
    """
    if _wide_passes(v):  # float16 passes: float32 passes instead, y in v's dtype (module docstring)
        with autocast_off(v.device.type):
            y, r = bisoftmax_fused(q.float(), k.float(), v.float(), scale, mask, symmetric=symmetric, lse=lse,
                                   check_span=check_span, budget=budget)
        return y.to(v.dtype), r
    r = chunked_lse(q, k, scale, mask, budget) if lse is None else lse
    if r.numel() == 0:  # an empty batch (or no heads, no tokens): no normaliser to shift by
        return bisoftmax_einsum(q, k, v, scale, mask), r
    c = r if symmetric else chunked_lse(k, q, scale, column_mask(mask), budget)  # mask & maskᵀ is its own swap
    hi = torch.maximum(r.amax(-1, keepdim=True), c.amax(-1, keepdim=True))  # (B, H, 1)
    lo = torch.minimum(r.amin(-1, keepdim=True), c.amin(-1, keepdim=True))
    # (B, H, 1) shift: the midpoint of all normalisers, detached: y does not depend on it (exp(m − c) · exp(r − m)),
    # and its gradient, zero in exact arithmetic, was rounding noise sent to every token (also to padded ones)
    m = (0.5 * (hi + lo)).detach()
    if check_span and (host_read_stalls(v) or no_host_sync(v) or not _has_values(v)):
        m = m * _span_flag(hi, lo, fused_span_limit(v))  # no host read: a span past the limit makes y NaN
    elif check_span:
        with torch.no_grad():  # one host sync (free on a CPU): the whole span, not |r - m| and |c - m| apart
            span = float((hi - lo).amax())
        if not math.isfinite(span) or span > fused_span_limit(v):
            return bisoftmax_einsum(q, k, v, scale, mask), r
    w = (v.to(r.dtype) * torch.exp(m - c)[..., None]).to(v.dtype)  # V ⊙ exp(m - c)
    row = sdpa(q, k, v, False, None, scale=scale, mask=mask)  # (B, H, N, p): the attention kit's SDPA
    col = sdpa(q, k, w, False, None, scale=scale, mask=mask) * torch.exp(r - m)[..., None].to(v.dtype)
    return row + col, r


#: largest head dimension p for which :class:`_SymmetricBiSoftmax` on CPU folds its three transposed sums into
#: products (its docstring), and the fewest (B H) N² scores it does so at: faster at p 16 over 64 x 81² scores
#: (docs/hyperset.md, "Speed"), not at p 32 nor for a small, cached 2 x 81²; p 0 switches it off (an A/B switch)
GEMM_SYMMETRISE_MAX_P = {"cpu": 16}
GEMM_SYMMETRISE_MIN_SCORES = 1 << 18


def gemm_symmetrise(u: Tensor) -> bool:
    """Whether :class:`_SymmetricBiSoftmax` symmetrises by products for operands u (…, N, p)."""
    n, p = u.shape[-2:]
    return p <= GEMM_SYMMETRISE_MAX_P.get(u.device.type, 0) and u.numel() // p * n >= GEMM_SYMMETRISE_MIN_SCORES


class _SymmetricBiSoftmax(torch.autograd.Function):
    """y = sign · (P + Pᵀ) V with P = softmax_row(scale · U Uᵀ) (Q = K = U; V = U when ``v`` is None).

    The symmetric, unmasked bi-softmax in the operand dtype with hand-written backward (``sign`` and
    ``scale`` ride in the matmuls' alpha, so neither costs a pass over the N x N or the output):

        forward   S = scale U Uᵀ;  P = softmax(S) (float32 inside, stored in the operand dtype);
                  A = P + Pᵀ;  y = sign A V
        backward  dA = sign dy Vᵀ;  dV = sign A dy (A = Aᵀ);  dP = dA + dAᵀ (A = P + Pᵀ);
                  dS = P ∘ (dP − rowsum(P ∘ dP)) (float32 inside);  dU = scale (dS + dSᵀ) U (+ dV when V = U)

    Under bf16 autocast this replaces the einsum path's float32 copy of the scores, its float32 softmax and
    softmax backward, the float32 P + Pᵀ and its cast back, and the two scale multiplies: 4 kernels
    forward and 6 backward over (B H, N, N) bf16 (``benchmarks/hyperset_ops.py``). Rounding: S, P, A, dA,
    dP and dS are rounded to the operand dtype once each (the einsum path rounds S, A, dA and dS, and
    keeps P, dP in float32); the softmax and its backward accumulate in float32 either way.

    **Symmetrising by products** (on CPU for heads of at most :data:`GEMM_SYMMETRISE_MAX_P` dimensions): the
    three transposed sums P + Pᵀ, dA + dAᵀ and dS + dSᵀ read one operand across rows, which on a CPU runs
    several times slower than a contiguous sum once the (B H, N, N) tensors are out of cache. There each is
    folded into the products instead — y = sign (P V + Pᵀ V), dP = dA + sign V dyᵀ, dV = sign (P dy + Pᵀ dy),
    dU = dV + scale (dS U + dSᵀ U), the transposes read by the matmul library as they are — for N² p more
    multiply-adds each, which pays while p is small (measured: ``docs/hyperset.md``, "Speed"); A is then not
    kept for the backward. The same sums in another order: float64 equal to rounding, float32 / bf16 within
    the same error of float64 (tested)."""

    @staticmethod
    def forward(ctx, u: Tensor, v: Tensor | None, scale: float, sign: float) -> Tensor:
        lead = u.shape[:-2]
        uf = u.reshape(-1, *u.shape[-2:])  # (B H, N, p)
        vf = uf if v is None else v.reshape(-1, *v.shape[-2:])
        unused = uf.new_empty(())  # baddbmm's input at beta 0 (never read): the products scaled by alpha
        s = torch.baddbmm(unused, uf, uf.mT, beta=0.0, alpha=scale)  # (B H, N, N)
        p = torch.softmax(s, dim=-1)  # float32 accumulation inside, the operand dtype out
        ctx.gemm = gemm_symmetrise(uf)
        if ctx.gemm:  # y = sign (P V + Pᵀ V)
            y = torch.baddbmm(unused, p, vf, beta=0.0, alpha=sign).baddbmm_(p.mT, vf, alpha=sign)  # (B H, N, p)
            ctx.save_for_backward(uf, vf, p)
        else:
            a = p + p.mT
            y = torch.baddbmm(unused, a, vf, beta=0.0, alpha=sign)  # (B H, N, p)
            ctx.save_for_backward(uf, vf, p, a)
        ctx.scale, ctx.sign, ctx.tied, ctx.lead = scale, sign, v is None, lead
        return y.view(*lead, *y.shape[-2:])

    @staticmethod
    @once_differentiable
    def backward(ctx, dy: Tensor):
        uf, vf, p = ctx.saved_tensors[:3]
        dyf = dy.reshape(-1, *dy.shape[-2:]).to(vf.dtype)
        unused = p.new_empty(())  # baddbmm's input at beta 0 (never read): the products scaled by alpha
        sign, scale = ctx.sign, ctx.scale
        da = torch.baddbmm(unused, dyf, vf.mT, beta=0.0, alpha=sign)  # dA (B H, N, N)
        if ctx.gemm:  # the transposed sums as products (class docstring)
            dp = da.baddbmm_(vf, dyf.mT, alpha=sign)                                             # dA + dAᵀ
            dv = torch.baddbmm(unused, p, dyf, beta=0.0, alpha=sign).baddbmm_(p.mT, dyf, alpha=sign)  # A dy
        else:
            dp = da + da.mT                                                 # A = P + Pᵀ
            dv = torch.baddbmm(unused, ctx.saved_tensors[3], dyf, beta=0.0, alpha=sign)  # Aᵀ dy = A dy
        ds = torch._softmax_backward_data(dp, p, -1, p.dtype)
        # dU = [dV (V = U) +] scale (dS + dSᵀ) U: S = Sᵀ, both factors of U Uᵀ
        base, beta = (dv, 1.0) if ctx.tied else (unused, 0.0)
        if ctx.gemm:
            du = torch.baddbmm(base, ds, uf, beta=beta, alpha=scale).baddbmm_(ds.mT, uf, alpha=scale)
        else:
            du = torch.baddbmm(base, ds + ds.mT, uf, beta=beta, alpha=scale)
        du = du.view(*ctx.lead, *du.shape[-2:])
        return (du, None, None, None) if ctx.tied else (du, dv.view(*ctx.lead, *dv.shape[-2:]), None, None)


def bisoftmax_symmetric(u: Tensor, scale: float, v: Tensor | None = None, *, negate: bool = False) -> Tensor:
    """(softmax_row(S) + softmax_row(S)ᵀ) V with S = scale · U Uᵀ, no mask (Q = K = U; V = U by default):
    the einsum path's symmetric case in fewer passes (:class:`_SymmetricBiSoftmax`), ``negate`` returning
    −y at no cost. u, v: (..., N, p); the result in their dtype, or in the autocast dtype under autocast (as
    the einsum path's matmuls)."""
    dev = u.device.type
    dt = autocast_dtype(u.dtype, dev)
    u, v = u.to(dt), None if v is None else v.to(dt)
    with autocast_off(dev):
        return _SymmetricBiSoftmax.apply(u, v, float(scale), -1.0 if negate else 1.0)


def bisoftmax_einsum(q: Tensor, k: Tensor, v: Tensor, scale: float, mask: Tensor | None = None, *,
                     symmetric: bool | None = None) -> Tensor:
    """Reference: y = (softmax_row(S) + softmax_col(S)) V with S = scale · Q Kᵀ materialised.

    The column softmax normalises over the queries i of each key j (``dim=-2``), as the released
    code does. With a key-padding mask both softmaxes run over real tokens only (padded query rows
    get no column term); a full mask (B|1, 1, N, N) applies to the row softmax as given and to the
    column softmax as ``mask & maskᵀ`` (:func:`column_mask`).

    When S is symmetric (``symmetric``; None: ``q is k``, the shared sphere) and the mask is absent or key
    padding, the column softmax is the transposed row softmax, softmax_col(S) = softmax_row(S)ᵀ (c = r,
    Eq. 7): one softmax (and one softmax backward) instead of two, and under autocast one float32 copy of
    the scores instead of two. ``symmetric=False`` always computes both (the reference of the tests).
    """
    s = torch.einsum("bhid,bhjd->bhij", q, k) * scale  # (B, H, N, N)
    if (q is k if symmetric is None else symmetric) and (mask is None or mask.shape[-2] == 1):
        row = torch.softmax(s, dim=-1) if mask is None else masked_softmax(s, mask)
        col = row.transpose(-1, -2)  # (B, H, N, N): column weights of key j = row weights of query j
        if mask is not None:  # between real tokens only (padded queries: no column term)
            col = col.masked_fill(~(mask & mask.transpose(-1, -2)), 0.0)
    elif mask is None:
        row, col = torch.softmax(s, dim=-1), torch.softmax(s, dim=-2)
    else:
        vis = mask & mask.transpose(-1, -2)  # column_mask's rule, materialised (B|1, 1, N, N) for key padding too
        row = masked_softmax(s, mask)
        # the column softmax normalises over queries (dim -2): the kit's row softmax of Sᵀ under visᵀ = vis
        # (a key no query sees gets zero weights, with a zero gradient)
        col = masked_softmax(s.mT, vis).mT
    return torch.einsum("bhij,bhjd->bhid", row + col, v)
