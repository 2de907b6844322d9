"""The dtype a product runs in under autocast (shared by layers that step outside autocast on purpose), and the
at-least-float32 upcast of losses."""

from __future__ import annotations

import contextlib

import torch


def autocast_dtype(dtype: torch.dtype, device_type: str) -> torch.dtype:
    """The dtype autocast would run a matmul of ``dtype`` operands in on ``device_type``: the autocast dtype
    while autocast is on there, except for float64, which autocast leaves alone; otherwise ``dtype``."""
    if dtype != torch.float64 and torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return dtype


def at_least_float32(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32 when it is bf16/fp16, else as it is: a loss or a softmax over logits upcasts low precision
    but keeps float64 (``.float()`` computed a float64 model's loss in float32, so its gradients carried float32's
    1e-8 error)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def widest_float(device: torch.device | str) -> torch.dtype:
    """float64, the dtype of exact sums and tables, on every device that has it; float32 on Apple's MPS, which has
    no float64 (a ``.double()`` or a float64 tensor there is a TypeError)."""
    return torch.float32 if torch.device(device).type == "mps" else torch.float64


def autocast_off(device_type: str) -> contextlib.AbstractContextManager:
    """``torch.autocast(device_type, enabled=False)`` while autocast is on there, else a no-op context: entering
    the autocast context costs about as much host time as a small kernel, paid per call on hot paths."""
    if torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def linear_at_least_float32(t: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(t, weight, bias)`` in at least float32 with autocast off, so that under autocast the product and
    its backward run in float32 (the output in float32): for heads whose later arithmetic cancels terms of the
    projection's size, where bf16 operands or a bf16 incoming gradient carry bf16's relative error of those terms
    (energies/newton.py: NewtonHeads, LiteHeads)."""
    dt = torch.promote_types(t.dtype, torch.float32)
    with autocast_off(t.device.type):
        return torch.nn.functional.linear(t.to(dt), weight.to(dt), None if bias is None else bias.to(dt))


def no_host_sync(t: torch.Tensor) -> bool:
    """Whether a guard must not read ``t``'s values on the host: under ``torch.compile`` (a graph break) and while
    a CUDA stream is being captured into a graph (``torch.cuda.graph``, e.g. benchmarks/hyperset_gpu.py's graphed
    step, where a host read is an error). Such guards then select their rows with ``where`` instead of branching."""
    # (is_available first: a CPU build's tests emulate CUDA tensors, and its capture query does not exist)
    return torch.compiler.is_compiling() or (t.is_cuda and torch.cuda.is_available()
                                             and torch.cuda.is_current_stream_capturing())


def host_read_stalls(t: torch.Tensor) -> bool:
    """Whether reading ``t``'s values on the host stalls a queue of work: ``t`` on an accelerator (CUDA, XPU, MPS),
    whose kernels run asynchronously, so a host read waits for every kernel queued before it and leaves the device
    idle while the host then launches the next ones. On a CPU the work is done when the read comes: free. Guards
    on hot paths keep their host reads to devices where this is False (hyperspherical_ops, energies/sphere_norm.py)."""
    return t.device.type not in ("cpu", "meta")

