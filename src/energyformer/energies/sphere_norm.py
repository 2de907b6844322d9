"""Hyper-SET's sphere norm: the RMSNorm that puts the projections on their sphere of radius √p (seed 002, Eq. 8 and
11), split from :mod:`~energyformer.energies.hyperspherical_ops` (which re-exports :func:`sphere_rms_norm`).

**The norm** (:func:`sphere_rms_norm`), with float32 statistics and its output in the input's dtype (also under
autocast) and a hand-written gradient: no float32 copy of the (B, N, 4d) feed-forward hidden as autocast makes for
``F.rms_norm`` (docs/hyperset.md, "Speed"). Its statistic ``r = (mean z² + eps)^(-1/2)`` squares before it sums,
so in float32 statistics a row past ‖z‖ ≈ 1.8e19 gave r = rsqrt(inf) = 0 and a *finite* u = 0 (every Hyper-SET
energy then a constant, its update 0 or garbage: probe P). Every path therefore recomputes the rows outside the
statistics' exact range (:func:`_off_range`) in float64 on z / max|z| (:func:`_rescaled_rms_norm`), with its
exact gradient — on a CPU. On an accelerator that check cost a host read (or, under CUDA graphs and
``torch.compile``, that float64 recomputation of every row) in every norm call of every iteration; there instead
(:func:`_loud`) an overflowed row turns the output and its gradient into NaN with no host read
(:func:`_overflow_flag`: one more read of z for the rows' norms, five small kernels beside the fused norm, counted
by ``benchmarks/hyperset_ops.py``): a loud failure (the trainer stops on a non-finite loss), never the finite 0
of before.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensor
from torch.autograd.function import once_differentiable

from ..core.precision import autocast_off, host_read_stalls, no_host_sync


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
    """∂L/∂z = r (g − z · r² mean(g z)) of :class:`_SphereRMSNorm` (autocast off). In float16 the products g z are
    formed in float32: past 65504 they were inf and the row's gradient NaN where the true one was ~1 (probe AU; bf16
    has float32's range)."""
    if z.dtype == torch.float16:
        dot = torch.sum(g.float() * z.float(), dim=-1, keepdim=True)  # (..., 1)
    else:
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
