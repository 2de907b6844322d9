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
from .cem_kernel import _kernels, triton_available
from .cem_launch import pow2

#: longest sequence one program holds (its N x N scores live in registers)
MAX_TOKENS = 128


def _launch(u: Tensor) -> dict:
    import triton.language as tl

    n, p = u.shape[-2:]
    bn = pow2(n)
    return dict(BN=bn, PP=pow2(p), PREC="ieee", ACC=tl.float64 if u.dtype == torch.float64 else tl.float32,
                UPCAST=u.device.type != "cuda" and u.dtype in (torch.bfloat16, torch.float16),
                num_warps=8 if bn >= 128 else 4)


def _rows_dense(t: Tensor) -> Tensor:
    """t (B, H, N, p) as the kernels read it: rows of p contiguous (any strides of B, H, N), else a copy."""
    return t if t.stride(-1) == 1 or t.shape[-1] == 1 else t.contiguous()


def _like(u: Tensor, launch: dict) -> Tensor:
    """An output with u's strides (the kernels write in u's layout), float32 in the interpreter."""
    return torch.empty_like(u, dtype=torch.float32 if launch["UPCAST"] else u.dtype)


def _run_fwd(u: Tensor, scale: float, sign: float) -> Tensor:
    """y = sign · (P + Pᵀ) U for u (B, H, N, p) with contiguous rows; y in u's dtype and layout."""
    _, H, n, p = u.shape
    launch = _launch(u)
    y = _like(u, launch)
    grid = (u.shape[0] * H,)
    _kernels(u.device.type != "cuda", "hyperspherical_triton.py")._fwd[grid](
        u, y, H, *u.stride()[:3], n, p, scale, sign, **launch)
    return y.to(u.dtype)  # the interpreter's float32 output rounded here (to nearest)


def _run_bwd(u: Tensor, dy: Tensor, scale: float, sign: float) -> Tensor:
    """dU for u, dy (B, H, N, p) with contiguous rows (each its own strides), one dtype; dU in u's dtype and
    layout."""
    _, H, n, p = u.shape
    launch = _launch(u)
    du = _like(u, launch)
    grid = (u.shape[0] * H,)
    _kernels(u.device.type != "cuda", "hyperspherical_triton.py")._bwd[grid](
        u, dy, du, H, *u.stride()[:3], *dy.stride()[:3], n, p, scale, sign, **launch)
    return du.to(u.dtype)


class _SymmetricBiSoftmaxKernel(torch.autograd.Function):
    """The eager wrapper (lighter on the host than the custom operators below: about 28 µs less per
    forward + backward, measured on a 2-core CPU)."""

    @staticmethod
    def forward(ctx, u: Tensor, scale: float, sign: float) -> Tensor:
        ctx.save_for_backward(u)
        ctx.scale, ctx.sign = scale, sign
        return _run_fwd(u, scale, sign)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy: Tensor):
        (u,) = ctx.saved_tensors
        return _run_bwd(u, _rows_dense(dy.to(u.dtype)), ctx.scale, ctx.sign), None, None


# The same launches as PyTorch custom operators (torch.library), taken while torch.compile traces: it keeps
# them in its graph as opaque calls, where it would break the graph at the launcher (an lru_cache,
# triton's environment lookups) if it traced into the autograd.Function.
@torch.library.custom_op("energyformer::bisoftmax_symmetric_fwd", mutates_args=())
def _fwd_op(u: Tensor, scale: float, sign: float) -> Tensor:
    return _run_fwd(u, scale, sign)


@_fwd_op.register_fake
def _(u: Tensor, scale: float, sign: float) -> Tensor:
    return torch.empty_like(u)


@torch.library.custom_op("energyformer::bisoftmax_symmetric_bwd", mutates_args=())
def _bwd_op(u: Tensor, dy: Tensor, scale: float, sign: float) -> Tensor:
    return _run_bwd(u, dy, scale, sign)


@_bwd_op.register_fake
def _(u: Tensor, dy: Tensor, scale: float, sign: float) -> Tensor:
    return torch.empty_like(u)


def _setup(ctx, inputs, output) -> None:
    u, scale, sign = inputs
    ctx.save_for_backward(u)
    ctx.scale, ctx.sign = scale, sign


def _backward(ctx, dy: Tensor):
    (u,) = ctx.saved_tensors
    return _bwd_op(u, _rows_dense(dy.to(u.dtype)), ctx.scale, ctx.sign), None, None


_fwd_op.register_autograd(_backward, setup_context=_setup)


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
    lead, p = u.shape[:-2], u.shape[-1]
    uf = u.to(autocast_dtype(u.dtype, dev))  # keeps u's layout
    # (B, H, N, p) in its own layout (the sphere of the projections is (B, N, H, p) in memory: no copy in or
    # out, and the read-out's "b h n p -> b n (h p)" stays a view); other ranks as one (1, ·, N, p) stack
    uf = _rows_dense(uf) if uf.dim() == 4 else uf.reshape(1, -1, n, p).contiguous()
    op = _fwd_op if torch.compiler.is_compiling() else _SymmetricBiSoftmaxKernel.apply
    # no autocast context: between the launches only empty_like and dtype-preserving casts run, which autocast
    # leaves alone (the context costs host time per call: docs/hyperset.md, "Speed")
    y = op(uf, float(scale), -1.0 if negate else 1.0)
    return y if u.dim() == 4 else y.view(*lead, n, p)
