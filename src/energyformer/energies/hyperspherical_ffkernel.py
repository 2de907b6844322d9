"""Hyper-SET's feed-forward activation ReLU(RMSNorm(Dᵀx)) as one Triton kernel each way (Eq. 11 on the sphere).

:class:`~energyformer.energies.hyperspherical.ReLUFFEnergy` reads u = sphere(s), s = Dᵀx (B, N, M) with
M = 4d, only through a = ReLU(u): ``sphere_rms_norm`` then ``relu`` were two kernels forward (each reading and
writing the (B, N, M) tensor) and two backward (``threshold_backward``, the norm's backward).
:func:`sphere_norm_relu` does it in one pass each way (``hyperspherical_triton.py``: ``_norm_relu_fwd`` reads s,
writes a and the per-row r; ``_norm_relu_bwd`` reads s, da and r, writes ds) and keeps s and r for the backward
(a is kept by the read-out's matmul, as before: the saved bytes are the same) — the same maths:
r = (mean_m s_m² + eps)^(-1/2) and its gradient with statistics in float32, a and ds rounded once to s's dtype,
as the fused ``rms_norm`` pair and ``relu`` round them.

Taken by :func:`applies` — on CUDA (:data:`FUSED_NORM_RELU`), no learned gain, float32 or 16-bit rows of at most
:data:`MAX_COLUMNS`, triton installed, not while ``torch.compile`` traces (Inductor fuses the plain ops itself);
elsewhere the two ops run as before. On CPU the kernels run only through Triton's interpreter (tests), where a
float32 → 16-bit conversion truncates, so there they write float32 and the launcher rounds.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .cem_kernel import _kernels, triton_available
from .cem_launch import pow2

#: device types whose ReLUFFEnergy takes the fused kernel (a switch for A/B timings: benchmarks/hyperset_gpu.py)
FUSED_NORM_RELU = {"cuda": True}
#: widest row one program holds (4d at d 2,048)
MAX_COLUMNS = 8192
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def applies(s: Tensor, gain: Tensor | None) -> bool:
    """Whether ReLU(sphere(s)) takes the fused kernel (module docstring)."""
    return (FUSED_NORM_RELU.get(s.device.type, False) and gain is None and s.dtype in _DTYPES
            and s.shape[-1] <= MAX_COLUMNS and not torch.compiler.is_compiling() and triton_available())


def _rows(s: Tensor) -> Tensor:
    return s.reshape(-1, s.shape[-1]).contiguous()  # (rows, M); a view for the linear layer's output


def _launch(z: Tensor) -> dict:
    import triton.language as tl

    bm = pow2(z.shape[-1])
    return dict(BM=bm, ACC=tl.float64 if z.dtype == torch.float64 else tl.float32,
                num_warps=8 if bm >= 2048 else 4)


def _out(z: Tensor) -> Tensor:
    """An output like z (float32 in the interpreter for 16-bit rows: it truncates conversions; rounded after)."""
    up = z.device.type != "cuda" and z.dtype in (torch.bfloat16, torch.float16)
    return torch.empty_like(z, dtype=torch.float32 if up else z.dtype)


def _run_fwd(z: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """(a, r) for rows z (R, M) contiguous: a = ReLU(r z) in z's dtype, r (R,) in the accumulation dtype."""
    a = _out(z)
    r = torch.empty(z.shape[0], device=z.device, dtype=torch.float64 if z.dtype == torch.float64 else torch.float32)
    _kernels(z.device.type != "cuda", "hyperspherical_triton.py")._norm_relu_fwd[(z.shape[0],)](
        z, a, r, z.shape[1], eps, **_launch(z))
    return a.to(z.dtype), r


def _run_bwd(z: Tensor, da: Tensor, r: Tensor) -> Tensor:
    dz = _out(z)
    _kernels(z.device.type != "cuda", "hyperspherical_triton.py")._norm_relu_bwd[(z.shape[0],)](
        z, da, r, dz, z.shape[1], **_launch(z))
    return dz.to(z.dtype)


class _NormReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z: Tensor, eps: float) -> Tensor:
        a, r = _run_fwd(z, eps)
        ctx.save_for_backward(z, r)
        return a

    @staticmethod
    @once_differentiable
    def backward(ctx, da: Tensor):
        z, r = ctx.saved_tensors
        return _run_bwd(z, da.to(z.dtype).contiguous(), r), None


def sphere_norm_relu(s: Tensor, eps: float) -> Tensor:
    """ReLU(RMSNorm(s)) over the last axis, gain 1 (radius √M), in s's dtype also under autocast; one kernel each
    way. ``eps`` must be a normal float32 number (the kernel's scalar): a one-line ValueError otherwise."""
    if not triton_available():
        raise ValueError("sphere_norm_relu needs the triton package (pip install triton)")
    if s.shape[-1] > MAX_COLUMNS:
        raise ValueError(f"sphere_norm_relu: rows of at most {MAX_COLUMNS} columns, got {s.shape[-1]}")
    if eps != 0 and not torch.finfo(torch.float32).tiny <= abs(eps) <= torch.finfo(torch.float32).max:
        raise ValueError(f"sphere_norm_relu: eps = {eps!r} is no normal float32 number (the kernel's scalar)")
    # no autocast context needed: the launcher runs only allocations and dtype-preserving casts besides the kernels
    return _NormReLU.apply(_rows(s), float(eps)).view(s.shape)
