"""The dispatch log behind ``hyperset_ops.py`` and ``cem_ops.py``: what a CUDA training step would launch, counted
on fake tensors without a GPU (see ``hyperset_ops.py`` for the method). :class:`OpLog` records every kernel-launching
aten op (name, dtypes, shapes, bytes read + written, matmul FLOPs); :func:`fused_rms_norm` logs ``F.rms_norm`` as
the one-kernel pair a CUDA build runs; :func:`emulated_cuda_policy` makes CPU bf16 autocast follow CUDA's float32
list; :func:`with_fake_tensors` / :func:`cuda_autocast_on_fake_cuda` put a model on fake tensors."""

from __future__ import annotations

import contextlib
import warnings

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

aten = torch.ops.aten
try:  # the sphere norm's fused-kernel switch (older library code, counted for comparison, has none)
    from energyformer.energies import hyperspherical_ops as _sphere_ops
    from energyformer.energies.hyperspherical_ops import FUSED_NORM
except ImportError:
    _sphere_ops, FUSED_NORM = None, {}
try:  # where the sphere norm lives since it was split from hyperspherical_ops (older code: there)
    from energyformer.energies import sphere_norm as _norm_module
except ImportError:
    _norm_module = None
#: the modules whose ``host_read_stalls`` decides an accelerator's form (the sphere norm's and the bi-softmax's)
_STALL_MODULES = [m for m in (_sphere_ops, _norm_module) if m is not None and hasattr(m, "host_read_stalls")]
#: ops that only change metadata or allocate (no kernel launch on CUDA)
VIEWS = {"view", "_unsafe_view", "reshape", "transpose", "t", "permute", "expand", "unsqueeze", "squeeze",
         "slice", "select", "alias", "as_strided", "detach", "split", "split_with_sizes", "chunk", "unbind",
         "_reshape_alias", "lift_fresh", "unflatten", "flatten", "view_as", "expand_as", "narrow", "lift_fresh_copy",
         "_to_copy_noop", "is_same_size", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "diagonal",
         "movedim", "_local_scalar_dense", "device", "promote_types",
         "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}  # allocations: no kernel
MATMULS = {"mm", "bmm", "addmm", "baddbmm", "matmul", "linear", "einsum",
           "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
           "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_backward",
           "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_cudnn_attention_backward",
           "_efficient_attention_forward", "_efficient_attention_backward", "_flash_attention_forward",
           "_flash_attention_backward", "bisoftmax_symmetric_fwd", "bisoftmax_symmetric_bwd"}
#: the bi-softmax kernel's launches (as custom ops) and the N x N x p products each computes
KERNEL_OPS = {"bisoftmax_symmetric_fwd": 2, "bisoftmax_symmetric_bwd": 4}


def _short(t) -> str:
    return {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16", torch.float64: "f64",
            torch.bool: "bool", torch.int64: "i64", torch.int32: "i32"}.get(t, str(t))


def _flops(name: str, args, out) -> int:
    """2 m n k for the matmul ops (SDPA: 4 B H N² p forward, 2.5x that backward)."""
    if name == "mm":
        a, b = args[0], args[1]
        return 2 * a.shape[0] * a.shape[1] * b.shape[1]
    if name == "addmm":
        a, b = args[1], args[2]
        return 2 * a.shape[0] * a.shape[1] * b.shape[1]
    if name in ("bmm", "baddbmm"):
        a, b = (args[0], args[1]) if name == "bmm" else (args[1], args[2])
        return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
    if name in KERNEL_OPS:  # per (b, h): S = U Uᵀ and (P + Pᵀ) U forward; backward also dA = dy Uᵀ, dS U
        u = args[0]
        return KERNEL_OPS[name] * 2 * u.numel() * u.shape[-2]  # u: (…, N, p)
    if name.startswith("_scaled_dot_product") or name.startswith("_efficient") or name.startswith("_flash"):
        q, k = args[0], args[1]
        f = 4 * q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] * q.shape[3]
        return int(2.5 * f) if name.endswith("backward") else f
    return 0


class OpLog(TorchDispatchMode):
    """Records (name, input dtypes, output dtypes, shapes, bytes, flops) of every kernel-launching op."""

    def __init__(self):
        super().__init__()
        self.rows: list[tuple] = []
        self.paused = False

    def add(self, name: str, ins: list[torch.Tensor], outs: list[torch.Tensor]) -> None:
        """One row for a kernel that the log does not see as one op (:class:`_FusedRMSNorm`)."""
        nbytes = sum(t.numel() * t.element_size() for t in ins + outs)
        self.rows.append((name, tuple(_short(t.dtype) for t in ins), tuple(_short(t.dtype) for t in outs),
                          tuple(tuple(t.shape) for t in ins[:3]), nbytes, 0))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name in VIEWS or self.paused:
            return out
        ins = [a for a in tree_flatten((args, {k: v for k, v in kwargs.items() if k != "out"}))[0]
               if isinstance(a, torch.Tensor)]  # an out= tensor is written (counted as an output), not read
        outs = [a for a in tree_flatten(out)[0] if isinstance(a, torch.Tensor)]
        nbytes = sum(t.numel() * t.element_size() for t in ins + outs)
        self.rows.append((name, tuple(_short(t.dtype) for t in ins), tuple(_short(t.dtype) for t in outs),
                          tuple(tuple(t.shape) for t in ins[:3]), nbytes, _flops(name, list(args), out)))
        return out


_RMS_NORM = F.rms_norm


class _FusedRMSNorm(torch.autograd.Function):
    """``F.rms_norm`` logged as CUDA runs it: one ``_fused_rms_norm`` kernel forward (reads x and the gain,
    writes y and the float32 per-row rstd) and one ``_fused_rms_norm_backward`` (reads dy, x, rstd and the
    gain, writes dx and the gain's gradient). A CUDA build dispatches ``rms_norm`` to that kernel pair; on fake
    tensors, and on a CPU build, it decomposes into the five-pass composite (pow, mean, add, rsqrt, two
    muls; about ten ops backward), which would count the transformer's two RMSNorms per iteration about five
    times over (the values are the real function's; only the log is changed)."""

    @staticmethod
    def forward(ctx, x, shape, weight, eps, log):
        log.paused = True
        try:
            y = _RMS_NORM(x, shape, weight, eps)
        finally:
            log.paused = False
        rstd = x.new_empty(x.shape[:x.dim() - len(shape)], dtype=torch.float32)
        log.add("_fused_rms_norm", [x] + ([weight] if weight is not None else []), [y, rstd])
        ctx.save_for_backward(x, weight if weight is not None else x.new_empty(0))
        ctx.shape, ctx.eps, ctx.log, ctx.has_weight = shape, eps, log, weight is not None
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        weight = weight if ctx.has_weight else None
        log = ctx.log
        log.paused = True
        try:
            with torch.enable_grad():
                xs = x.detach().requires_grad_(True)
                ws = None if weight is None else weight.detach().requires_grad_(weight.requires_grad)
                y = _RMS_NORM(xs, ctx.shape, ws, ctx.eps)
                leaves = [xs] + ([ws] if ws is not None and ws.requires_grad else [])
                grads = torch.autograd.grad(y, leaves, dy)
        finally:
            log.paused = False
        rstd = x.new_empty(x.shape[:x.dim() - len(ctx.shape)], dtype=torch.float32)
        log.add("_fused_rms_norm_backward", [dy, x, rstd] + ([weight] if weight is not None else []), list(grads))
        dw = grads[1] if len(grads) > 1 else None
        return grads[0], None, dw, None, None


@contextlib.contextmanager
def fused_rms_norm(log: OpLog):
    """``F.rms_norm`` (so ``nn.RMSNorm``) as :class:`_FusedRMSNorm` while inside, and Hyper-SET's sphere norm
    taking the path it takes where that kernel exists (``hyperspherical_ops.FUSED_NORM``: CUDA builds), with its
    accelerator form of the overflow guard (``host_read_stalls`` of ``sphere_norm`` and ``hyperspherical_ops``)."""
    def rms_norm(x, normalized_shape, weight=None, eps=None):
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        return _FusedRMSNorm.apply(x, shape, weight, eps, log)

    before = dict(FUSED_NORM)
    F.rms_norm = rms_norm
    FUSED_NORM.update(cpu=True, cuda=True)
    # the norm's overflow guard as on an accelerator (its loud form, no host read): CUDA's ops on CPU tensors too
    stalls = [(m, m.host_read_stalls) for m in _STALL_MODULES]
    for m, _ in stalls:
        m.host_read_stalls = lambda t: True
    try:
        yield
    finally:
        F.rms_norm = _RMS_NORM
        FUSED_NORM.update(before)
        for m, fn in stalls:
            m.host_read_stalls = fn


#: CUDA autocast's float32 list (ops these models reach), overload names: CPU's own list is shorter
#: (CPU bf16 autocast leaves softmax, exp, sum, rms_norm ... in bf16), so they are re-registered on
#: AutocastCPU to behave as on CUDA (checked against a forward on fake CUDA tensors, ``--check``).
CUDA_FP32 = ["softmax.int", "log_softmax.int", "rms_norm.default", "layer_norm.default", "exp.default",
             "logsumexp.default", "sum.default", "sum.dim_IntList", "pow.Tensor_Scalar", "pow.Tensor_Tensor",
             "rsqrt.default", "norm.Scalar", "norm.ScalarOpt_dim", "linalg_vector_norm.default", "softplus.default",
             "cross_entropy_loss.default", "nll_loss_nd.default", "nll_loss.default", "log.default",
             "log1p.default", "expm1.default", "cumsum.default", "prod.default", "reciprocal.default"]


def _fp32_kernel(op):
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)

    def kernel(*args, **kwargs):
        up = lambda a: a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a  # noqa: E731
        with torch._C._ExcludeDispatchKeyGuard(keys):
            return op(*[up(a) for a in args], **{k: up(v) for k, v in kwargs.items()})

    return kernel


@contextlib.contextmanager
def emulated_cuda_policy():
    """CPU bf16 autocast following CUDA's float32 list while inside (the kernels are removed on exit)."""
    lib = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*[Oo]verrid")
            for name in CUDA_FP32:
                packet, overload = name.split(".")
                op = getattr(getattr(aten, packet), overload)
                lib.impl(packet if overload == "default" else name, _fp32_kernel(op), "AutocastCPU")
        yield
    finally:
        lib._destroy()


def with_fake_tensors(model: torch.nn.Module, device: str = "cpu", training: bool = True) -> torch.nn.Module:
    """``model`` with every parameter and buffer replaced by an empty tensor of its shape and dtype on
    ``device`` (inside a FakeTensorMode: fakes; values never matter); parameters keep ``requires_grad``
    while ``training``."""
    real = [(mod, slot, n, t, isinstance(t, torch.nn.Parameter) and t.requires_grad)
            for mod in model.modules() for slot in ("_parameters", "_buffers")
            for n, t in getattr(mod, slot).items() if t is not None]
    for mod, slot, n, t, grad in real:
        fake = torch.empty(t.shape, dtype=t.dtype, device=device)
        getattr(mod, slot)[n] = torch.nn.Parameter(fake, grad and training) if slot == "_parameters" else fake
    return model


@contextlib.contextmanager
def cuda_autocast_on_fake_cuda():
    """CUDA's autocast on fake CUDA tensors (public torch.autocast refuses without a device)."""
    torch._C.set_autocast_dtype("cuda", torch.bfloat16)
    torch._C.set_autocast_enabled("cuda", True)
    try:
        yield
    finally:
        torch._C.set_autocast_enabled("cuda", False)
        torch._C.clear_autocast_cache()
