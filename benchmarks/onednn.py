"""Route float32 ``F.linear`` on CPU through oneDNN instead of MKL (an opt-in switch, measured).

PyTorch's CPU build sends float32 ``nn.Linear`` to MKL's sgemm. On some CPUs MKL does not pick its
fastest kernels: on this project's AMD EPYC (Zen 5, AVX-512) a single-thread (2048×256)·(256×704)
product ran at ~88 GFLOP/s through MKL and ~160-200 GFLOP/s through oneDNN's
``mkldnn._linear_pointwise``, with float32 accuracy (it is not a reduced-precision mode).
``benchmarks/lm_throughput.py --sections 4`` measures whole training steps with and without it; only
that benchmark uses it, so it lives beside it (not in the library).

    from onednn import onednn_linear   # benchmarks/ on sys.path (see lm_throughput._onednn)
    with onednn_linear():          # or onednn_linear(True) / set_onednn_linear(True) globally
        loss = model(x, y).loss
        loss.backward()

Scope: float32 (not autocast: under bf16 autocast ``F.linear`` already runs in oneDNN), CPU tensors,
2-D weights; everything else is left to PyTorch. The backward pass uses oneDNN too (dX = dY W and
dW = dYᵀ X; the transposed operands are copied once per call, bias gradient = Σ dY). Double
backward is not supported (``once_differentiable``). Off by default.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.overrides import TorchFunctionMode

__all__ = ["available", "onednn_linear", "set_onednn_linear", "OneDNNLinearMode"]


def available() -> bool:
    """Whether this PyTorch build has oneDNN's linear kernel."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _lp(a: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    return torch.ops.mkldnn._linear_pointwise(a, w, b, "none", [], "")  # a @ wᵀ (+ b)


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        ctx.save_for_backward(x, w)
        ctx.has_bias = b is not None
        return _lp(x, w, b)

    @staticmethod
    @once_differentiable
    def backward(ctx, gy: Tensor):
        x, w = ctx.saved_tensors
        gx = gw = gb = None
        gy2 = gy.reshape(-1, gy.shape[-1])
        if ctx.needs_input_grad[0]:
            gx = _lp(gy, w.t().contiguous())                                   # dY W
        if ctx.needs_input_grad[1]:
            gw = _lp(gy2.t().contiguous(), x.reshape(-1, x.shape[-1]).t().contiguous())  # dYᵀ X
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = gy2.sum(0)
        return gx, gw, gb


def _eligible(x, w, b) -> bool:
    if not (isinstance(x, Tensor) and isinstance(w, Tensor)) or w.dim() != 2 or x.dim() < 1:
        return False
    if x.device.type != "cpu" or torch.is_autocast_enabled("cpu"):
        return False
    ok = x.dtype == torch.float32 and w.dtype == torch.float32
    return ok and (b is None or (isinstance(b, Tensor) and b.dtype == torch.float32))


class OneDNNLinearMode(TorchFunctionMode):
    """Torch-function mode that sends eligible ``F.linear`` calls (module docstring) to oneDNN."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            x, w = args[0], args[1] if len(args) > 1 else kwargs.get("weight")
            b = args[2] if len(args) > 2 else kwargs.get("bias")
            if _eligible(x, w, b):
                return _Linear.apply(x, w, b)
        return func(*args, **kwargs)


@contextlib.contextmanager
def onednn_linear(enabled: bool = True):
    """Context manager: float32 CPU ``F.linear`` through oneDNN while active (no-op if not ``enabled``
    or unavailable)."""
    if not enabled or not available():
        yield
        return
    with OneDNNLinearMode():
        yield


_GLOBAL: OneDNNLinearMode | None = None


def set_onednn_linear(enabled: bool) -> None:
    """Turn the routing on or off for the whole process (e.g. at the start of a training script)."""
    global _GLOBAL
    if enabled and _GLOBAL is None and available():
        _GLOBAL = OneDNNLinearMode()
        _GLOBAL.__enter__()
    elif not enabled and _GLOBAL is not None:
        _GLOBAL.__exit__(None, None, None)
        _GLOBAL = None
