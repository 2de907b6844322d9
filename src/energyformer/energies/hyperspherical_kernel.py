"""Hyper-SET's symmetric bi-softmax as one Triton kernel each way (``attention.impl: kernel``).

:func:`bisoftmax_symmetric_kernel` computes what :func:`~energyformer.energies.hyperspherical_ops.
bisoftmax_symmetric` computes with V = U (one shared sphere, no mask): y = ±(P + Pᵀ) U with
P = softmax_row(scale U Uᵀ), for sequences of at most :data:`MAX_TOKENS` tokens (a whole sequence per
program: the Sudoku boards' 81 cells), with the kernels of ``hyperspherical_triton.py``. On CUDA they run
compiled; on CPU through Triton's interpreter (slow: for tests). It is an option, not a default, until a
GPU run has timed it against the PyTorch Function (``benchmarks/hyperset_gpu.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..core.precision import autocast_dtype
from .cem_kernel import _kernels, _pow2, triton_available

#: longest sequence one program holds (its N x N scores live in registers)
MAX_TOKENS = 128


def _launch(u: Tensor) -> dict:
    import triton.language as tl

    n, p = u.shape[-2:]
    bn = _pow2(n)
    return dict(BN=bn, PP=_pow2(p), PREC="ieee", ACC=tl.float64 if u.dtype == torch.float64 else tl.float32,
                UPCAST=u.device.type != "cuda" and u.dtype in (torch.bfloat16, torch.float16),
                num_warps=8 if bn >= 128 else 4)


class _SymmetricBiSoftmaxKernel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u: Tensor, scale: float, sign: float) -> Tensor:
        lead, (n, p) = u.shape[:-2], u.shape[-2:]
        uf = u.reshape(-1, n, p).contiguous()  # (B H, N, p)
        launch = _launch(uf)
        y = torch.empty_like(uf, dtype=torch.float32 if launch["UPCAST"] else uf.dtype)
        k = _kernels(uf.device.type != "cuda", "hyperspherical_triton.py")
        k._fwd[(uf.shape[0],)](uf, y, n, p, scale, sign, **launch)
        ctx.save_for_backward(uf)
        ctx.scale, ctx.sign, ctx.lead = scale, sign, lead
        return y.to(uf.dtype).view(*lead, n, p)  # the interpreter's float32 output rounded here (to nearest)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy: Tensor):
        (uf,) = ctx.saved_tensors
        n, p = uf.shape[-2:]
        dyf = dy.reshape(-1, n, p).to(uf.dtype).contiguous()
        launch = _launch(uf)
        du = torch.empty_like(uf, dtype=torch.float32 if launch["UPCAST"] else uf.dtype)
        k = _kernels(uf.device.type != "cuda", "hyperspherical_triton.py")
        k._bwd[(uf.shape[0],)](uf, dyf, du, n, p, ctx.scale, ctx.sign, **launch)
        return du.to(uf.dtype).view(*ctx.lead, n, p), None, None


def bisoftmax_symmetric_kernel(u: Tensor, scale: float, *, negate: bool = False) -> Tensor:
    """(softmax_row(S) + softmax_row(S)ᵀ) U with S = scale · U Uᵀ, no mask, N ≤ :data:`MAX_TOKENS`
    (−it with ``negate``); u: (..., N, p), the result in u's dtype (the autocast dtype under autocast,
    as the matmuls it replaces). Raises a one-line ValueError for what it does not cover."""
    if not triton_available():
        raise ValueError("attention.impl = 'kernel' needs the triton package (pip install triton)")
    n = u.shape[-2]
    if n > MAX_TOKENS:
        raise ValueError(f"attention.impl = 'kernel': sequences of at most {MAX_TOKENS} tokens, got {n} "
                         "(use impl 'auto', 'einsum' or 'fused')")
    dev = u.device.type
    u = u.to(autocast_dtype(u.dtype, dev))
    with torch.autocast(dev, enabled=False):
        return _SymmetricBiSoftmaxKernel.apply(u, float(scale), -1.0 if negate else 1.0)
