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

**Einsum path** (:func:`bisoftmax_einsum`): the N x N scores and both softmaxes, materialised: the
reference the tests compare with, and the natural form for the code-style option with separate
query/key/value norms (Q ≠ K). With Q = K it takes the column softmax as the transposed row softmax.

**Sphere norm** (:func:`sphere_rms_norm`, Eq. 8 and 11): the RMSNorm that puts the projections on their
sphere, with float32 statistics and its output in the input's dtype (also under autocast) and a hand-written
gradient: no float32 copy of the (B, N, 4d) feed-forward hidden as autocast makes for ``F.rms_norm``
(docs/hyperset.md, "Speed"). Its statistic ``r = (mean z² + eps)^(-1/2)`` squares before it sums, so in float32
statistics a row past ‖z‖ ≈ 1.8e19 gave r = rsqrt(inf) = 0 and a *finite* u = 0 (every Hyper-SET energy then a
constant, its update 0 or garbage: probe P). Every path therefore recomputes the rows outside the statistics'
exact range (:func:`_off_range`) in float64 on z / max|z| (:func:`_rescaled_rms_norm`), with its exact gradient —
on a CPU. On an accelerator that check cost a host read (or, under CUDA graphs and ``torch.compile``, that float64
recomputation of every row) in every norm call of every iteration; there instead (:func:`_loud`) a row at or past
overflow turns the whole output and its gradient into NaN, with no host read and no extra pass over z
(:func:`_overflow_flag`): a loud failure (the trainer stops on a non-finite loss), never the finite 0 of before.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensor
from torch.autograd.function import once_differentiable

from ..core.attention import masked_logsumexp, masked_softmax, sdpa
from ..core.precision import autocast_dtype, autocast_off, host_read_stalls, no_host_sync

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


#: dtypes whose sphere norm is :class:`_SphereRMSNorm` (float64, the reference precision, keeps ``F.rms_norm``)
FAST_NORM_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


class _SphereRMSNorm(torch.autograd.Function):
    """u = z · r, r = (mean(z²) + eps)^(-1/2) per row: r in float32, u in z's dtype (one rounding of the
    float32 product), gradient ∂L/∂z = r (g − z · r² mean(g z)).

    ``F.rms_norm`` without its float32 round trip: ``rms_norm`` is on CUDA autocast's float32 list, so a bf16
    z is first copied to float32 and u comes back float32 for every consumer to cast back (the norm itself is
    one ``_fused_rms_norm`` kernel on a CUDA build; the composite of CPU builds and fake tensors is five passes
    forward and about ten backward). Here: one norm reduction (float32 accumulation; no float32 copy of a bf16 z on
    CUDA) and one product forward; one reduction and two passes backward. For bf16, ``mean(g z)`` sums bf16
    products in float32: an error of the size of g's own rounding. Under ``torch.compile`` the same formulas
    without ``out=`` (Dynamo does not trace it; inductor fuses the passes itself). Rows whose r left float32's
    exact range (:func:`_off_range`: ‖z‖ ≳ 1.8e19 gave r = 0, u = 0) take :func:`_rescaled_rms_norm` and
    :func:`_rescaled_bwd` in float64, selected by ``where`` (the plain formulas may be NaN there)."""

    @staticmethod
    def forward(ctx, z: Tensor, eps: float) -> Tensor:
        with autocast_off(z.device.type):  # vector_norm is on autocast's float32 list
            loud = _loud(z, eps)
            u, r = _sphere_fwd(z, eps, loud)
            bad = None
            if not loud and (no_host_sync(z) or (_has_values(r) and _any_off_range(r, eps))):
                bad = _off_range(r)
                u = torch.where(bad, _rescaled_rms_norm(z, eps).to(u.dtype), u)
        ctx.save_for_backward(z, r, bad)
        ctx.eps = eps
        return u

    @staticmethod
    @once_differentiable
    def backward(ctx, g: Tensor):
        z, r, bad = ctx.saved_tensors
        with autocast_off(g.device.type):
            gz = _sphere_bwd(z, r, g)
            if bad is not None:
                gz = torch.where(bad, _rescaled_bwd(z, ctx.eps, g).to(gz.dtype), gz)
            return gz, None


def _sphere_fwd(z: Tensor, eps: float, loud: bool = False) -> tuple[Tensor, Tensor]:
    """(u, r) of :class:`_SphereRMSNorm` (autocast off); ``loud``: a row whose r is 0 (its squares overflowed, the
    only way r reaches 0 with an eps above the underflow floor; u was a finite 0) gets r = NaN, so its u and gradient
    are NaN (two ops on the small r; the flag of :func:`_checked_rms_norm`'s fused kernel, which sums on its own,
    needs a margin and a whole-tensor flag instead)."""
    r = torch.linalg.vector_norm(z, dim=-1, keepdim=True, dtype=torch.float32)  # (..., 1), then in place:
    r = r.square_().div_(z.shape[-1]).add_(eps).rsqrt_()  # (mean(z²) + eps)^(-1/2), four ops on the small r
    if loud:  # r = 0 exactly where mean z² overflowed (eps above the underflow floor): 0/0, that row NaN
        r = r.div_(r != 0)
    # float32 product rounded once to z's dtype, written contiguous (z may be a per-head view of a
    # projection: the attention's batched matmuls then read u without copying it first)
    if torch.compiler.is_compiling():  # Dynamo breaks the graph at out=; inductor fuses this anyway
        return (z * r).to(z.dtype), r
    return torch.mul(z, r, out=torch.empty(z.shape, dtype=z.dtype, device=z.device)), r


def _sphere_bwd(z: Tensor, r: Tensor, g: Tensor) -> Tensor:
    """∂L/∂z = r (g − z · r² mean(g z)) of :class:`_SphereRMSNorm` (autocast off)."""
    dot = torch.sum(g * z, dim=-1, keepdim=True, dtype=torch.float32)  # (..., 1)
    k = dot.mul_(r.square()).div_(z.shape[-1])  # r² mean(g z), in place on the small dot
    if torch.compiler.is_compiling():
        return ((g - z * k) * r).to(z.dtype)
    t = torch.addcmul(g, z, k, value=-1, out=torch.empty_like(z))  # g − k z, in z's layout (the
    return t.mul_(r)  # projection's backward reads it as is)


def _has_fused_norm(dispatch_key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key("aten::_fused_rms_norm", dispatch_key)


#: device types on which this build runs ``rms_norm`` as one fused kernel each way (aten's ``_fused_rms_norm``
#: with a kernel of its own for the device, e.g. CUDA builds; not the composite): looked up once at import
FUSED_NORM = {t: _has_fused_norm(k) for t, k in (("cuda", "CUDA"), ("mps", "MPS"), ("xpu", "XPU"), ("cpu", "CPU"))}


def _dense_order(z: Tensor) -> list[int] | None:
    """The permutation of z's leading axes that makes it contiguous, where z is not but that permutation (its
    last axis kept last, of stride 1) is; else None."""
    if z.dim() < 3 or z.is_contiguous() or z.stride(-1) != 1:
        return None
    order = [*sorted(range(z.dim() - 1), key=lambda d: -z.stride(d)), z.dim() - 1]
    want = 1
    for d in reversed(order):  # contiguous in that order: each stride the product of the sizes after it
        if z.shape[d] != 1 and z.stride(d) != want:
            return None
        want *= z.shape[d]
    return order


def sphere_rms_norm(z: Tensor, eps: float, weight: Tensor | None = None) -> Tensor:
    """RMSNorm over the last axis (radius √n with gain 1; Hyper-SET Eq. 8 and 11).

    Without a gain, in float32 or lower, on a device where ``rms_norm`` has a fused kernel
    (:data:`FUSED_NORM`: CUDA builds): ``F.rms_norm`` with autocast off, one kernel each way in z's dtype
    (float32 statistics inside). Elsewhere (CPU) without a gain and in float32 or lower,
    :class:`_SphereRMSNorm`: statistics in float32, the output in z's dtype also under autocast (where
    ``F.rms_norm`` would return float32 that the next matmul casts straight back) — for bf16 the float32 norm
    rounded once (what the next matmul read before), in float32 ``F.rms_norm`` up to the order of the sums.
    float64 (the reference precision) and learned gains: ``F.rms_norm``. The custom gradient is not
    differentiable again (``once_differentiable``). On every path rows whose statistic over- or underflowed
    (:func:`_off_range`; ‖z‖ = 1e20 in float32 gave u = 0) are recomputed in float64: exact at any finite scale.

    A z that is a permuted view of contiguous memory with the normalised axis last in memory — e.g. heads'
    projections (B, H, N, p) over a linear layer's (B, N, H p) output — is normalised in that memory order
    and returned as the same view of the result: the fused kernel would copy it to (B, H, N, p) first. (Hyper-SET's
    attention normalises the (B, N, H, p) output itself, before it splits off the heads: no permutation to find
    and undo per call, the same numbers.)"""
    order = _dense_order(z)
    if order is not None:
        back = sorted(range(z.dim()), key=order.__getitem__)
        return sphere_rms_norm(z.permute(order), eps, weight).permute(back)
    if weight is None and z.dtype in FAST_NORM_DTYPES:
        if FUSED_NORM.get(z.device.type, False):  # the fused pair in z's dtype (autocast would upcast)
            return _checked_rms_norm(z, eps, None, autocast=False)
        return _SphereRMSNorm.apply(z, float(eps))
    return _checked_rms_norm(z, eps, weight, autocast=True)


#: largest r = (mean z² + eps)^(-1/2) whose statistics (float32, or float64) are exact: below mean z² + eps =
#: tiny / eps the squares lost to underflow may count (only with such an eps; SPHERE_EPS 1e-24 is larger)
R_MAX = {dt: (torch.finfo(dt).tiny / torch.finfo(dt).eps) ** -0.5 for dt in (torch.float32, torch.float64)}


def _has_values(t: Tensor) -> bool:
    """Whether t's values can be read on the host: not a fake or meta tensor (shape-only runs, e.g. the op counts of
    benchmarks/hyperset_ops.py), where the range check is skipped (nothing to check, no op added to the count)."""
    return not isinstance(t, FakeTensor) and t.device.type != "meta"


def _any_off_range(r: Tensor, eps: float) -> bool:
    """Whether :func:`_off_range` flags any row: ``min r == 0``, and only where eps is below the underflow floor
    (``1 / R_MAX²``) ``max r > R_MAX`` too. One host sync (two with such an eps): free on a CPU, where the custom
    norm runs; a NaN r is not flagged (it stays NaN), nor an empty one."""
    if r.numel() == 0:
        return False
    return float(r.amin()) == 0.0 or (eps < R_MAX[r.dtype] ** -2 and float(r.amax()) > R_MAX[r.dtype])


def _off_range(r: Tensor) -> Tensor:
    """The rows (…, 1) whose statistic r = (mean z² + eps)^(-1/2) left its dtype's exact range: r = 0 where
    mean z² overflowed (‖z‖ ≳ 1.8e19 in float32, 1.3e154 in float64; u was a finite 0), r > :data:`R_MAX` where
    underflowed squares may count. A NaN r (a NaN or inf in z) is not flagged: it stays NaN."""
    return (r == 0) | (r > R_MAX[r.dtype])


def _loud(z: Tensor, eps: float) -> bool:
    """Whether the norm of z takes the loud form (module docstring): z on an accelerator
    (``core.precision.host_read_stalls``) and an eps above the underflow floor (below it the rows' underflow needs
    the exact check and its host read; no default eps is that small)."""
    stats = torch.float64 if z.dtype == torch.float64 else torch.float32
    return host_read_stalls(z) and eps >= R_MAX[stats] ** -2


def _overflow_flag(z: Tensor, dtype: torch.dtype) -> Tensor:
    """0-dim, ``dtype``: NaN where any row of z has mean z² past max/4 of its statistics' dtype (float32, or float64:
    at or near the overflow that made the fused kernel's r = 0 and u a finite 0; a margin, so that a row the kernel's
    own sum overflows is never missed), else 1. On the device, without a host read, in five ops: the rows' norms
    (the one pass over z; a norm whose sum overflowed is inf), their max, ``max ≤ √(p max/4)``, that bool in
    ``dtype``, and ok / ok (0/0 = NaN). A NaN z gives NaN anyway (its rows are NaN), so the flag may stay 1 there.
    (It was the rows' r and five more ops on them — 11 kernels per call, 6 more than now, counted by
    benchmarks/hyperset_ops.py.)"""
    stats = torch.float64 if z.dtype == torch.float64 else torch.float32
    limit = math.sqrt(z.shape[-1]) * math.sqrt(torch.finfo(stats).max) / 2  # ‖z‖ at mean z² = max/4 (no inf)
    n = torch.linalg.vector_norm(z, dim=-1, dtype=stats).amax()
    ok = (n <= limit).to(dtype)
    return ok.div_(ok)


def _checked_rms_norm(z: Tensor, eps: float, weight: Tensor | None, autocast: bool) -> Tensor:
    """``F.rms_norm`` (``autocast=False``: with autocast off), the rows :func:`_off_range` flags taken from
    :func:`_rescaled_rms_norm` (on an accelerator: the loud form, :func:`_loud`). It does not return its r: the
    norm of all of z (one reduction, one host sync) shows whether any row's squares can overflow; only then, or
    with an eps below the underflow floor, the rows' r are taken. Under ``torch.compile`` (CPU) no branch
    (``core.precision.no_host_sync``: always ``where``). Each branch sees the other's rows as ones, so neither
    backward forms a NaN there (0 · inf) that ``where``'s gradient would keep."""
    def plain(t: Tensor, w: Tensor | None = weight) -> Tensor:
        with contextlib.nullcontext() if autocast else autocast_off(t.device.type):
            return F.rms_norm(t, (t.shape[-1],), w, eps)

    stats = torch.float64 if z.dtype == torch.float64 else torch.float32
    if _loud(z, eps):  # the flag enters as the norm's gain (a 1 changes no bit): no pass over z beyond r's
        with torch.no_grad(), autocast_off(z.device.type):
            flag = _overflow_flag(z, z.dtype if weight is None else weight.dtype)
        return plain(z, flag.expand(z.shape[-1]) if weight is None else weight * flag)
    no_sync = no_host_sync(z)
    if not no_sync and (not _has_values(z) or z.numel() == 0):
        return plain(z)
    if not no_sync and eps >= R_MAX[stats] ** -2:
        with torch.no_grad(), autocast_off(z.device.type):  # ‖z‖ of all rows below √max / 2: no row's overflows
            whole = float(torch.linalg.vector_norm(z, dtype=stats))
        if whole < 0.5 * math.sqrt(torch.finfo(stats).max):
            return plain(z)
    with torch.no_grad(), autocast_off(z.device.type):
        r = torch.linalg.vector_norm(z, dim=-1, keepdim=True, dtype=stats)
        r = r.square_().div_(z.shape[-1]).add_(eps).rsqrt_()
    if not no_sync and not _any_off_range(r, eps):
        return plain(z)
    bad = _off_range(r)
    u = plain(z.masked_fill(bad, 1.0))
    return torch.where(bad, _rescaled_rms_norm(z.masked_fill(~bad, 1.0), eps, weight).to(u.dtype), u)


def _rescaled(z: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(z/s, ρ, s) in float64 with s = max(max |z|, 1) per row and ρ = (mean (z/s)² + eps/s²)^(-1/2), so that
    u = (z/s) ρ and r = ρ / s: no square overflows (z/s ≤ 1) nor, for float32 / bfloat16 / float16 z, underflows
    (≥ 2e-90 in float64). Autocast off."""
    z64 = z.double()
    s = z64.detach().abs().amax(-1, keepdim=True).clamp_min(1.0)
    zs = z64 / s
    return zs, torch.rsqrt(zs.square().mean(-1, keepdim=True) + eps / s.square()), s


def _rescaled_rms_norm(z: Tensor, eps: float, weight: Tensor | None = None) -> Tensor:
    """z (mean z² + eps)^(-1/2) [⊙ weight] in float64 as :func:`_rescaled`'s (z/s) ρ, s held constant: the same
    function of z (the norm is homogeneous), so autograd gives its exact gradient; the caller rounds it once."""
    with autocast_off(z.device.type):
        zs, rho, _ = _rescaled(z, eps)
        return zs * rho if weight is None else zs * rho * weight.double()


def _rescaled_bwd(z: Tensor, eps: float, g: Tensor) -> Tensor:
    """∂L/∂z = r (g − u mean(g u)) (:func:`_sphere_bwd`'s r (g − z r² mean(g z))) in float64 from
    :func:`_rescaled`: no r² under- or overflows. Autocast off."""
    zs, rho, s = _rescaled(z, eps)
    u, g64 = zs * rho, g.double()
    return (rho / s) * (g64 - u * (g64 * u).mean(-1, keepdim=True))


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
