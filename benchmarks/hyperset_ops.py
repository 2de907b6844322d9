"""Hyper-SET vs the looped transformer: aten ops, their dtypes, bytes and FLOPs per iteration (issue 20).

What a GPU step would launch, counted without a GPU: the two Sudoku models of
``benchmarks/hyperset_gpu.py`` (the study's configs with d, heads, L overridden) run one training step
(forward + cross-entropy + backward; no optimiser) on fake tensors
(``torch._subclasses.FakeTensorMode``: shapes and dtypes only, no data, no kernels) under bf16 autocast
with CUDA's policy: autograd needs a real device type, so the step runs on fake *CPU* tensors with CPU
autocast whose float32 list is replaced by CUDA's while the step runs (:func:`emulated_cuda_policy`;
CPU's own list leaves softmax, exp, sum, rms_norm in bf16). ``--check`` compares a forward under this
emulation with CUDA's own autocast on fake CUDA tensors (switched on by hand, as ``torch.autocast('cuda')``
refuses without a device; autograd cannot run there): Hyper-SET's ops and dtypes agree exactly; the
transformer's SDPA differs only in its kernel (the CPU flash kernel vs the math fallback fake CUDA picks).
A ``TorchDispatchMode`` under autograd logs every aten op the step dispatches, forward and backward:
its name, input and output dtypes and shapes. So the op counts and dtypes are CUDA's, exact for the
eager path; timings are not measured here. One exception is made by hand: ``F.rms_norm`` (``nn.RMSNorm``,
the transformer's two pre-norms per iteration) is logged as the one-kernel ``_fused_rms_norm`` pair a CUDA
build dispatches it to (:class:`_FusedRMSNorm`), not as the five-pass composite that fake tensors and CPU
builds run (counted that way, the transformer's iteration was 86 kernels and 2.27 GB instead of 50 and
1.44 GB at the default size).

The row ``Hyper-SET`` counts the bi-softmax on its PyTorch path (``attention.impl: einsum``, which with one
shared sphere and no mask is ``bisoftmax_symmetric``). On CUDA ``impl: auto`` takes the Triton kernel
(``hyperspherical_kernel.py``): the row ``Hyper-SET on the kernel`` counts that path, each launch logged as
the PyTorch custom operator that wraps it under torch.compile (``energyformer::bisoftmax_symmetric_fwd`` /
``_bwd``: the same launch, with fake-tensor shapes), one op reading U (and dy) and writing y (dU), with the
products the kernel computes as its FLOPs, and the feed-forward's fused sphere norm + ReLU
(``hyperspherical_ffkernel``) as its two kernels (:class:`_FusedNormReLU`); what happens inside a kernel a
dispatch log cannot see.

Per iteration = the step at L iterations minus the step at L - 1 (everything outside the loop cancels).
Columns: ops that launch a kernel (views, reshapes and other metadata-only ops excluded), of which
matmuls (mm, bmm, addmm, SDPA, ...) and their dtypes, elementwise/reduction ops, bytes read + written
(the sum over kernel ops of input and output sizes: an unfused eager step's memory traffic, an upper
bound where a kernel reads an input twice from cache), matmul FLOPs (2 m n k), FLOPs per byte, and the
bytes autograd saves for the backward (activation memory; the peak of a training step is about this plus
the parameters, gradients and AdamW moments).
``--list`` prints every float32 matmul under bf16 autocast with its shapes, ``--ops`` the per-op table.

Usage:
    python benchmarks/hyperset_ops.py                        # d 768, 12 heads, L 24, batch 64
    python benchmarks/hyperset_ops.py --dim 128 --heads 4 --iterations 8 --batch 16 --list --ops
"""

from __future__ import annotations

import argparse
import contextlib
import io
import warnings
from collections import Counter
from pathlib import Path
import sys
from unittest import mock

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402  (sibling scripts)
from hyperset_gpu import CELLS, MODELS, size_args  # noqa: E402

from energyformer.experiment import load_run_config  # noqa: E402
from energyformer.tasks.sudoku import CLASSES, VOCAB  # noqa: E402

aten = torch.ops.aten
try:  # the sphere norm's fused-kernel switch (older library code, counted for comparison, has none)
    from energyformer.energies.hyperspherical_ops import FUSED_NORM
except ImportError:
    FUSED_NORM = {}
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
    taking the path it takes where that kernel exists (``hyperspherical_ops.FUSED_NORM``: CUDA builds)."""
    def rms_norm(x, normalized_shape, weight=None, eps=None):
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        return _FusedRMSNorm.apply(x, shape, weight, eps, log)

    before = dict(FUSED_NORM)
    F.rms_norm = rms_norm
    FUSED_NORM.update(cpu=True, cuda=True)
    try:
        yield
    finally:
        F.rms_norm = _RMS_NORM
        FUSED_NORM.update(before)


#: the bi-softmax's PyTorch path, pinned: on (fake) CUDA tensors ``impl: auto`` takes the Triton kernel,
#: whose inside this counter cannot see, and the CPU emulation must count what the CUDA check counts
PYTORCH_PATH = "model.block.attention.impl=einsum"
#: the counted models: hyperset_gpu's, and Hyper-SET on the path CUDA's ``auto`` takes (:func:`kernel_as_ops`)
KERNEL_ROW = "Hyper-SET on the kernel"
MODELS = {**MODELS, KERNEL_ROW: ("hyperset/sudoku_hyperset", ["model.block.attention.impl=kernel"])}


class _FusedNormReLU(torch.autograd.Function):
    """The feed-forward's fused sphere norm + ReLU (``hyperspherical_ffkernel``, CUDA's path) logged as its two
    kernels: ``norm_relu_fwd`` reads s, writes a and the float32 per-row r; ``norm_relu_bwd`` reads s, da and r,
    writes ds (values from the plain ops, unlogged)."""

    @staticmethod
    def forward(ctx, s, eps, log):
        log.paused = True
        try:
            a = F.relu(_RMS_NORM(s, (s.shape[-1],), None, eps))
        finally:
            log.paused = False
        r = s.new_empty(s.shape[:-1], dtype=torch.float32)
        log.add("norm_relu_fwd", [s], [a, r])
        ctx.save_for_backward(s)
        ctx.eps, ctx.log = eps, log
        return a

    @staticmethod
    def backward(ctx, da):
        (s,) = ctx.saved_tensors
        ctx.log.paused = True
        try:
            with torch.enable_grad():
                ss = s.detach().requires_grad_(True)
                (ds,) = torch.autograd.grad(F.relu(_RMS_NORM(ss, (s.shape[-1],), None, ctx.eps)), ss, da)
        finally:
            ctx.log.paused = False
        ctx.log.add("norm_relu_bwd", [s, da, s.new_empty(s.shape[:-1], dtype=torch.float32)], [ds])
        return ds, None, None


@contextlib.contextmanager
def kernel_as_ops(log: OpLog, on: bool):
    """With ``on`` (the kernel row), CUDA's kernels logged while inside: the bi-softmax kernel's eager calls
    routed through its custom operators (the same launches, one op each in the dispatch log, with fake-tensor
    outputs, where the eager autograd.Function would launch Triton on fake tensors), and the feed-forward's
    fused norm + ReLU taken where CUDA takes it, as :class:`_FusedNormReLU`; without ``on`` (the PyTorch-path rows)
    the feed-forward's two plain ops, on fake CUDA tensors too."""
    try:  # older library code, counted for comparison, may have neither kernel (count it without the kernel row)
        from energyformer.energies import hyperspherical_kernel as hk
    except ImportError:
        hk = None
    try:
        from energyformer.energies import hyperspherical_ffkernel as ffk
    except ImportError:
        ffk = None
    if on and hk is None:
        raise SystemExit(f"{KERNEL_ROW!r}: this library code has no bi-softmax kernel; leave the row out (--models)")

    def norm_relu(s, eps):  # as the real one: in s's dtype, autocast off
        with torch.autocast(s.device.type, enabled=False):
            return _FusedNormReLU.apply(s, eps, log)

    with contextlib.ExitStack() as stack:
        if on:
            stack.enter_context(mock.patch.multiple(hk._SymmetricBiSoftmaxKernel, apply=staticmethod(hk._fwd_op)))
        if ffk is not None:
            ff = dict(FUSED_NORM_RELU={"cpu": True, "cuda": True}, sphere_norm_relu=norm_relu,
                      triton_available=lambda: True) if on else dict(FUSED_NORM_RELU={})
            stack.enter_context(mock.patch.multiple(ffk, **ff))
        yield


def build(config: str, extra: list[str], args, iterations: int) -> torch.nn.Module:
    from energyformer.models import MODELS as REGISTRY

    pinned = [PYTORCH_PATH] if config.endswith("_hyperset") and not any("attention.impl=" in e for e in extra) else []
    cfg = load_run_config(config, [f"model.dim={args.dim}", f"model.heads={args.heads}",
                                   f"model.iterations={iterations}", *pinned, *extra])
    torch.manual_seed(0)
    return REGISTRY.build(cfg.model, vocab_size=VOCAB, n_out=CLASSES, causal=False)


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


def fake_model(config: str, extra: list[str], args, iterations: int, training: bool, device: str):
    """The model with fake parameters and buffers on ``device`` (values never matter)."""
    model = build(config, extra, args, iterations)
    model.train(training)
    return with_fake_tensors(model, device, training)


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


def log_step(config: str, extra: list[str], args, iterations: int, precision: str, training: bool,
             device: str = "cpu", saved: dict | None = None) -> list[tuple]:
    """The op rows of one training step (forward + CE + backward) or one no-grad forward on fake tensors.

    ``device='cpu'``: CPU autocast with CUDA's float32 list (:func:`emulate_cuda_policy`), autograd works;
    ``'cuda'``: CUDA's own autocast on fake CUDA tensors, forward only (autograd needs a CUDA device).
    ``saved``: filled with {storage: bytes} of the tensors autograd saves for the backward (parameters left out:
    they are resident anyway; their autocast copies count), the activation memory of the step."""
    bf16 = precision == "bf16"
    policy = emulated_cuda_policy() if bf16 and device == "cpu" else contextlib.nullcontext()
    with policy, FakeTensorMode(allow_non_fake_inputs=False):
        model = fake_model(config, extra, args, iterations, training and device == "cpu", device)
        boards = torch.zeros(args.batch, CELLS, dtype=torch.long, device=device)
        targets = torch.zeros(args.batch, CELLS, dtype=torch.long, device=device)
        log = OpLog()
        amp = (cuda_autocast_on_fake_cuda() if device == "cuda" else torch.autocast("cpu", torch.bfloat16)) \
            if bf16 else contextlib.nullcontext()
        params = {id(p) for p in model.parameters()}
        store = {} if saved is None else saved

        held = []  # the saved tensors stay referenced, so no storage address is freed and reused while counting

        forward = [True]  # saves made by the backward itself (the logged kernels' recomputations) do not count

        def pack(t):  # one entry per allocation (views of one storage count once)
            if id(t) not in params and forward[0]:
                st = t.untyped_storage()
                store.setdefault(st._cdata, st.nbytes())
                held.append(t)
            return t

        kernels = any(e.endswith("attention.impl=kernel") for e in extra)  # the row of CUDA's auto path
        with torch.set_grad_enabled(training and device == "cpu"), log, fused_rms_norm(log), \
                kernel_as_ops(log, kernels), \
                torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with amp:
                logits = model(boards).logits  # (B, 81, 9)
                if training:
                    loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
            if training and device == "cpu":
                forward[0] = False
                loss.backward()
    return log.rows


def summarise(rows: list[tuple]) -> dict:
    mm = [r for r in rows if r[0] in MATMULS]
    return {"ops": len(rows), "matmul": len(mm), "matmul f32": sum(1 for r in mm if "f32" in r[2]),
            "other": len(rows) - len(mm), "bytes": sum(r[4] for r in rows), "flops": sum(r[5] for r in rows),
            "f32 outputs": sum(1 for r in rows if r[0] not in MATMULS and "f32" in r[2])}


def diff_rows(a: list[tuple], b: list[tuple]) -> tuple[Counter, Counter]:
    """(count, bytes) per (name, dtypes in, dtypes out) of one iteration: step(L) - step(L-1); keys carry the
    input shapes of the op's first occurrence (work done once per forward for all L iterations at once, such
    as the step-size table and the stack of its L gradient slices, cancels in the counts and leaves its
    per-iteration share of the bytes, which the listing then omits: it is in the table's totals)."""
    def key(r):  # a variadic op's dtypes as a set: an op over all L iterations (stack) keeps its key at L - 1
        return (r[0],) + tuple(d if len(d) <= 4 else tuple(dict.fromkeys(d)) for d in r[1:3])

    n, nb, shape = Counter(), Counter(), {}
    for r in a:
        n[key(r)] += 1
        nb[key(r)] += r[4]
        shape.setdefault(key(r), r[3])
    for r in b:
        n[key(r)] -= 1
        nb[key(r)] -= r[4]
    return Counter({k + (shape[k],): v for k, v in n.items() if v > 0}), \
        Counter({k + (shape[k],): v for k, v in nb.items() if k in shape})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    size_args(ap)
    ap.add_argument("--modes", default="training,inference")
    ap.add_argument("--models", default=f"looped transformer,Hyper-SET,{KERNEL_ROW}")
    ap.add_argument("--list", action="store_true", help="list the float32 matmuls of one bf16 iteration")
    ap.add_argument("--ops", action="store_true", help="per-op counts of one iteration")
    ap.add_argument("--check", action="store_true",
                    help="compare the emulated CUDA policy on CPU with CUDA's own on a bf16 forward, then exit")
    ap.add_argument("--out", type=Path, help="also write the output to this markdown file (a committed artifact)")
    args = ap.parse_args(argv)
    write_counts(args, argv, report, "Hyper-SET vs the looped transformer: kernels, bytes and FLOPs per iteration",
                 "benchmarks/hyperset_ops.py")


def write_counts(args: argparse.Namespace, argv: list[str] | None, report_fn, title: str, script: str) -> None:
    """Run ``report_fn(args)``; with ``args.out`` also write its output to that markdown file under a header
    naming the command (without ``--out``) and the commits of the counted library and of the counter."""
    if args.out is None:
        return report_fn(args)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        report_fn(args)
    flags = " ".join(a for a in (argv if argv is not None else sys.argv[1:]) if not a.startswith("--out")
                     and a != str(args.out))
    import energyformer

    from gpu_lm import git_commit as commit  # a sibling script

    text = (f"# {title} (`python {script}{' ' + flags if flags else ''}`)\n\n"
            "Counted on fake tensors under CUDA's bf16 autocast policy (no GPU, nothing timed; the script's "
            f"docstring says how). Models: energyformer at commit {commit(Path(energyformer.__file__).parent)}; "
            f"counter: this script at commit {commit(Path(__file__).resolve().parent)}.\n\n{buf.getvalue()}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text, end="")


def report(args: argparse.Namespace) -> None:
    """Print the per-iteration tables (and ``--list`` / ``--ops`` / ``--check``) for parsed ``args``."""
    if args.check:
        for name in args.models.split(","):
            config, extra = MODELS[name]
            key = lambda r: (r[0], r[1], r[2])  # noqa: E731
            cpu = Counter(map(key, log_step(config, extra, args, args.iterations, "bf16", False, "cpu")))
            cuda = Counter(map(key, log_step(config, extra, args, args.iterations, "bf16", False, "cuda")))
            print(f"{name}: {sum(cuda.values())} ops on fake CUDA; only there: {dict(cuda - cpu)}; "
                  f"only in the CPU emulation: {dict(cpu - cuda)}")
        return
    L = args.iterations
    print(f"d={args.dim} heads={args.heads} L={L} batch={args.batch} x {CELLS} tokens; CUDA autocast policy "
          f"on fake CUDA tensors; per iteration = step(L) - step(L-1)")
    for precision in args.precisions.split(","):
        for mode in args.modes.split(","):
            training = mode == "training"
            print(f"\n### {precision}{' autocast' if precision == 'bf16' else ''}, {mode}: one iteration\n")
            print("| model | kernel ops | matmuls (f32) | other ops (f32 out) | MB moved | matmul GFLOP | "
                  "FLOP/byte | MB saved for backward | whole step: ops, MB moved, MB saved |")
            print("|---|---|---|---|---|---|---|---|---|")
            details = {}
            for name in args.models.split(","):
                config, extra = MODELS[name]
                kept, kept0 = {}, {}
                full = log_step(config, extra, args, L, precision, training, saved=kept)
                less = log_step(config, extra, args, L - 1, precision, training, saved=kept0)
                s, s0 = summarise(full), summarise(less)
                s["saved"], s0["saved"] = sum(kept.values()), sum(kept0.values())
                it = {k: s[k] - s0[k] for k in s}
                print(f"| {name} | {it['ops']} | {it['matmul']} ({it['matmul f32']}) | {it['other']} "
                      f"({it['f32 outputs']}) | {it['bytes'] / 1e6:,.1f} | {it['flops'] / 1e9:,.2f} | "
                      f"{it['flops'] / max(1, it['bytes']):.1f} | {it['saved'] / 1e6:,.1f} | "
                      f"{s['ops']}, {s['bytes'] / 1e6:,.0f}, {s['saved'] / 1e6:,.0f} |")
                details[name] = (full, less)
            for name, (full, less) in details.items():
                per, per_bytes = diff_rows(full, less)
                if args.list and precision == "bf16":
                    f32 = [(k, n) for k, n in per.items() if k[0] in MATMULS and "f32" in k[2]]
                    print(f"\n{name}: float32 matmuls of one iteration: {len(f32) or 'none'}")
                    for k, n in f32:
                        print(f"  {n} x {k[0]} {'/'.join(k[1])} -> {'/'.join(k[2])} {k[3]}")
                if args.ops:
                    print(f"\n{name}: ops of one iteration, by bytes moved (count x op (dtypes in -> out) "
                          f"input shapes of its first call: MB)")
                    for k, n in sorted(per.items(), key=lambda kv: (-per_bytes[kv[0]], kv[0])):
                        print(f"  {n:3d} x {k[0]} ({'/'.join(k[1])} -> {'/'.join(k[2])}) {list(k[3])}: "
                              f"{per_bytes[k] / 1e6:.1f}")


if __name__ == "__main__":
    _page.run(main)
