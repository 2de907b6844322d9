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
build dispatches it to (``_op_log._FusedRMSNorm``), not as the five-pass composite that fake tensors and CPU
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
from collections import Counter
from pathlib import Path
import sys
from unittest import mock

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402  (sibling scripts)
from _op_log import (  # noqa: E402  (the dispatch log, shared with cem_ops.py)
    _RMS_NORM, MATMULS, OpLog, cuda_autocast_on_fake_cuda, emulated_cuda_policy, fused_rms_norm,
    with_fake_tensors,
)
from hyperset_gpu import CELLS, MODELS, size_args  # noqa: E402

from energyformer.experiment import load_run_config  # noqa: E402
from energyformer.tasks.sudoku import CLASSES, VOCAB  # noqa: E402

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


def fake_model(config: str, extra: list[str], args, iterations: int, training: bool, device: str):
    """The model with fake parameters and buffers on ``device`` (values never matter)."""
    model = build(config, extra, args, iterations)
    model.train(training)
    return with_fake_tensors(model, device, training)


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
