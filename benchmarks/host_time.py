"""The host's share of an eager GPU training step, measured on CPU: CUDA's kernel paths with their launches stubbed.

An eager training step on a GPU is bound by the host when the Python, autograd and dispatch work per kernel
takes longer than the kernel (the H100 profiles of issues 20 and 21: Hyper-SET's and CEM's steps at the
papers' sizes, ``docs/results/*/gpu_h100/gpu_profile_*.md``). That host work does not need a GPU to be
measured: it is the same code with every tensor small. This script times one training step (forward +
loss + backward + AdamW, ``lm_throughput``'s steps) of each model at a size where the kernels cost next to
nothing (one CPU thread, a batch of one, a few features per head) and the models' Python and dispatch are
what is timed, with the **CUDA paths forced**:

* Hyper-SET: the bi-softmax on its Triton kernel (``attention.impl: kernel``, CUDA's ``auto``) and the
  feed-forward's fused norm + ReLU kernel (``hyperspherical_ffkernel``, CUDA only);
* CEM: the attention on the Triton kernel path (``attn_path: kernel``, CUDA's ``auto``), rows
  ``"<gpu_lm model>, kernel path"`` as in ``cem_ops.py``;

AdamW in its multi-tensor form (``foreach``, CUDA's default; CPU's is one parameter at a time, a dozen ops per
parameter that a GPU step does not launch), each Triton launch replaced by a no-op (``kernel[grid](...)``
returns at once; its outputs stay as allocated), so everything around the launches — the launchers' own Python,
allocations, casts, the autograd Functions, the solver loop — runs and is timed, while what the kernels would
compute is not (the numbers a stubbed step produces are meaningless; only its time is used). The baselines (the
looped transformer, Llama) run unchanged. Rows are interleaved, the starting model rotated every repeat
(``gpu_lm.timed_runs``); per repeat the ratio baseline time / model time is taken, reported as median [min,
max]: above 1 the model's host work is lighter than the baseline's.

What this leaves out, so the ratio is the host's side only, not a GPU prediction: the CUDA launch itself
(``cudaLaunchKernel``, a few µs per kernel op, proportional to the op counts of ``hyperset_ops.py`` /
``cem_ops.py``); the Triton launcher's own cost (argument binding, cache lookup, the driver launch: stubbed
here); CUDA's autocast policy (CPU's bf16 autocast casts fewer ops to float32: ``hyperset_ops.py --check``);
CPU-only work on the kernel paths (the launchers allocate float32 outputs and round them after the kernel on
CPU, where the interpreter would run: a few more ops than CUDA; it counts against the model). ``--profile
MODEL`` prints the model's Python functions by own time (cProfile) and its kernel ops per step by name:
where its host time goes.

Usage:
    python benchmarks/host_time.py --suite hyperset            # d 16, 2 heads, L 24, batch 1 x 81 cells
    python benchmarks/host_time.py --suite cem                 # D 64, 4 heads, 12 layers, N 64, batch 1
    python benchmarks/host_time.py --suite cem --profile "paper configuration (T=2, D+LR), kernel path"
    python benchmarks/host_time.py --suite all --out docs/results/host_time.md
    PYTHONPATH=/tmp/old/src python benchmarks/host_time.py   # this script on another commit's library (a
                                                             # git worktree): the header names both commits
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime
import io
import platform
import pstats
import sys
from collections import Counter
from pathlib import Path
from typing import Callable
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402  (siblings)
from _page import markdown_emitter  # noqa: E402
from cem_ops import KERNEL_SUFFIX as KERNEL, block_of  # noqa: E402  (its rows' names force the kernel path)
from gpu_lm import BASE as LLAMA, git_commit, models as lm_blocks, ratio, timed_runs  # noqa: E402  (siblings)
from _timing import median  # noqa: E402
from lm_throughput import CausalLM, make_train_step, model_config, ours_logits  # noqa: E402

from energyformer.tasks.sudoku import CLASSES, VOCAB  # noqa: E402
from energyformer.utils.cliargs import int_at_least  # noqa: E402

LOOPED = "looped transformer"
#: suite -> (baseline, the models timed by default)
SUITES = {
    "hyperset": (LOOPED, [LOOPED, "Hyper-SET" + KERNEL, "Hyper-SET, attention.impl einsum"]),
    "cem": (LLAMA, [LLAMA, "full CEM T=1 (auto path)" + KERNEL, "full CEM T=1, blocked path",
                    "paper configuration (T=2, D+LR)" + KERNEL,
                    "paper configuration, one program per head (64 × 32)" + KERNEL,
                    "paper configuration, blocked path"]),
}
#: the Sudoku models: name -> (study config, overrides); '…, kernel path' also switches the CUDA-only kernels on
SUDOKU = {
    LOOPED: ("hyperset/sudoku_transformer", []),
    "Hyper-SET" + KERNEL: ("hyperset/sudoku_hyperset", ["model.block.attention.impl=kernel"]),
    "Hyper-SET, attention.impl einsum": ("hyperset/sudoku_hyperset", ["model.block.attention.impl=einsum"]),
}
CELLS = 81


class _NoLaunch:
    """``kernel[grid](*args)`` that launches nothing."""

    def __getitem__(self, grid) -> Callable[..., None]:
        return lambda *args, **meta: None


class _NoKernels:
    """Stands for a kernel module of ``cem_kernel._kernels``: every kernel a :class:`_NoLaunch`, ``tl`` the real
    ``triton.language`` (the launchers read its dtypes)."""

    @property
    def tl(self):
        import triton.language as tl

        return tl

    def __getattr__(self, name: str) -> _NoLaunch:
        return _NoLaunch()


@contextlib.contextmanager
def stubbed_cuda_kernels():
    """While inside: every Triton launch of CEM and Hyper-SET is a no-op, and the feed-forward's fused norm +
    ReLU kernel (CUDA's) is taken on CPU too."""
    from energyformer.energies import cem_kernel, hyperspherical_ffkernel as ffk, hyperspherical_kernel as hk

    stub = _NoKernels()
    loader = lambda interpret, file="cem_triton.py": stub  # noqa: E731
    with mock.patch.object(cem_kernel, "_kernels", loader), mock.patch.object(hk, "_kernels", loader), \
            mock.patch.object(ffk, "_kernels", loader), mock.patch.dict(ffk.FUSED_NORM_RELU, {"cpu": True}):
        yield


def sudoku_step(name: str, args, precision: str) -> tuple[torch.nn.Module, Callable[[], None]]:
    from energyformer.experiment import load_run_config
    from energyformer.models import MODELS as REGISTRY

    config, extra = SUDOKU[name]
    cfg = load_run_config(config, [f"model.dim={args.dim}", f"model.heads={args.heads}",
                                   f"model.iterations={args.iterations}", *extra])
    torch.manual_seed(0)
    model = REGISTRY.build(cfg.model, vocab_size=VOCAB, n_out=CLASSES, causal=False)
    g = torch.Generator().manual_seed(0)
    boards = torch.randint(0, VOCAB, (args.batch, CELLS), generator=g)
    targets = torch.where(boards == 0, torch.randint(0, CLASSES, boards.shape, generator=g), -100)
    return model, make_train_step(model, ours_logits, boards, targets, precision=precision, foreach=True)


def lm_step(name: str, args, precision: str) -> tuple[torch.nn.Module, Callable[[], None]]:
    block = block_of(name, lm_blocks())
    torch.manual_seed(0)
    model = CausalLM(model_config(args.vocab, args.lm_dim, args.layers, args.lm_heads, args.mlp_hidden, args.seq,
                                  block))
    idx = torch.randint(0, args.vocab, (args.batch, args.seq), generator=torch.Generator().manual_seed(0))
    return model, make_train_step(model, ours_logits, idx, idx, precision=precision, foreach=True)


def step_of(suite: str) -> Callable:
    return sudoku_step if suite == "hyperset" else lm_step


def size_note(suite: str, args) -> str:
    if suite == "hyperset":
        return (f"d={args.dim} heads={args.heads} L={args.iterations} batch={args.batch} (x {CELLS} cells); "
                "Sudoku study configs")
    return (f"D={args.lm_dim} heads={args.lm_heads} layers={args.layers} SwiGLU {args.mlp_hidden} "
            f"vocab={args.vocab} N={args.seq} batch={args.batch}; gpu_lm.py's blocks")


class _OpCount(TorchDispatchMode):
    """Kernel-launching aten ops by name (views and allocations excluded, as ``_op_log.VIEWS``)."""

    def __init__(self):
        super().__init__()
        from _op_log import VIEWS

        self.views, self.ops = VIEWS, Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in self.views:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))


def count_ops(fn: Callable[[], None]) -> Counter:
    with _OpCount() as log:
        fn()
    return log.ops


def holds(suite: str, name: str) -> bool:
    """Whether ``name`` is a model of ``suite`` (the Sudoku models; gpu_lm.py's, with or without ', kernel path')."""
    if suite == "hyperset":
        return name in SUDOKU
    try:
        block_of(name, lm_blocks())
    except SystemExit:
        return False
    return True


def chosen(suites: list[str], models: str | None) -> dict[str, list[str]]:
    """suite -> its models to time: the defaults, or the baseline and those of ``--models`` it holds (a name no
    suite holds is an error naming the suites' models)."""
    if not models:
        return {s: SUITES[s][1] for s in suites}
    wanted = [n.strip() for n in models.split(";") if n.strip()]
    for n in wanted:
        if not any(holds(s, n) for s in suites):
            raise SystemExit(f"--models: {n!r} is no model of {' or '.join(suites)}; allowed: "
                             f"{'; '.join(SUDOKU) if 'hyperset' in suites else ''}"
                             f"{' / ' if len(suites) > 1 else ''}"
                             f"{'the models of gpu_lm.py, each also + ' + repr(KERNEL) if 'cem' in suites else ''}")
    return {s: [SUITES[s][0], *[n for n in wanted if n != SUITES[s][0] and holds(s, n)]] for s in suites}


def time_suite(suite: str, names: list[str], args, emit: Callable[[list[str]], None]) -> None:
    base = SUITES[suite][0]
    for precision in args.precisions.split(","):
        fns = {n: step_of(suite)(n, args, precision)[1] for n in names}
        times, _, _ = timed_runs(fns, args.warmup, args.repeats, torch.device("cpu"), {n: 0 for n in fns})
        ops = {n: sum(count_ops(fn).values()) for n, fn in fns.items()}  # a step after the timed ones
        lines = ["", f"### {suite}: {precision}{' autocast (CPU policy)' if precision == 'bf16' else ''}, training",
                 "", f"| model | host ms / step | {base} time / model time, median [min, max] | kernel ops / step "
                     "| µs / op |", "|---|---|---|---|---|"]
        for n in names:
            ms = median(times[n]) * 1e3
            lines.append(f"| {n} | {ms:.1f} | {ratio(times, n, base)} | {ops[n]:,} | {ms * 1e3 / ops[n]:.1f} |")
        emit(lines)


def profile(suite: str, name: str, args, steps: int = 3, top: int = 30) -> list[str]:
    """cProfile's top functions by own time over ``steps`` steps, and the kernel ops per step by name."""
    _, fn = step_of(suite)(name, args, args.precisions.split(",")[0])
    for _ in range(args.warmup):
        fn()
    ops = count_ops(fn)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        fn()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    body = [ln for ln in out.getvalue().splitlines() if ln.strip()]
    return ["", f"### profile of {name!r} ({steps} steps, {args.precisions.split(',')[0]})", "", "```", *body,
            "", f"kernel ops per step: {sum(ops.values()):,}; by name: " +
            ", ".join(f"{k} {v}" for k, v in ops.most_common()), "```"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=[*SUITES, "all"], default="all")
    ap.add_argument("--models", help="only these models of the suite (names separated by ';'; the baseline is "
                    "always timed)")
    ap.add_argument("--precisions", type=_page.precisions, default="bf16,fp32", help="bf16 (CPU autocast) and/or fp32")
    ap.add_argument("--repeats", type=int_at_least(1), default=15)
    ap.add_argument("--warmup", type=int_at_least(0), default=3)
    ap.add_argument("--profile", metavar="MODEL", help="instead of timing: cProfile one model of --suite")
    sudoku = ap.add_argument_group("hyperset suite (Sudoku models)")
    sudoku.add_argument("--dim", type=int_at_least(1), default=16)
    sudoku.add_argument("--heads", type=int_at_least(1), default=2)
    sudoku.add_argument("--iterations", type=int_at_least(1), default=24)
    ap.add_argument("--batch", type=int_at_least(1), default=1)
    lm = ap.add_argument_group("cem suite (gpu_lm.py's language models)")
    lm.add_argument("--lm-dim", type=int_at_least(1), default=64)
    lm.add_argument("--lm-heads", type=int_at_least(1), default=4)
    lm.add_argument("--layers", type=int_at_least(1), default=12)
    lm.add_argument("--mlp-hidden", type=int_at_least(1), default=128)
    lm.add_argument("--vocab", type=int_at_least(2), default=256)
    lm.add_argument("--seq", type=int_at_least(1), default=64)
    ap.add_argument("--threads", type=int_at_least(1), default=1)
    ap.add_argument("--out", type=Path, help="also write the output to this file (markdown)")
    args = ap.parse_args(argv)
    suites = list(SUITES) if args.suite == "all" else [args.suite]
    if args.profile and len(suites) != 1:
        raise SystemExit("--profile: name the model's --suite (hyperset or cem)")
    known = SUDOKU if suites == ["hyperset"] else None
    if args.profile and known is not None and args.profile not in known:
        raise SystemExit(f"--profile: {args.profile!r} is not a hyperset-suite model; allowed: {'; '.join(known)}")
    torch.set_num_threads(args.threads)
    emit = markdown_emitter(args.out, "Host time of an eager training step, CUDA kernel paths stubbed, on CPU "
                            "(`python benchmarks/host_time.py`)", header_lines=3)

    import energyformer

    library = git_commit(Path(energyformer.__file__).resolve().parent)  # the library that ran (PYTHONPATH may differ)
    emit([f"cpu: {platform.processor() or platform.machine()}; {args.threads} thread(s); torch {torch.__version__}; "
          f"energyformer at commit {library}, this script at {git_commit()}; "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
          f"{args.repeats} interleaved repeats after {args.warmup} warm-up steps per model; Triton launches stubbed "
          "(no-ops): the host's work only",
          "; ".join(f"{s}: {size_note(s, args)}" for s in suites)])
    with stubbed_cuda_kernels():
        if args.profile:
            emit(profile(suites[0], args.profile, args))
            return
        for s, names in chosen(suites, args.models).items():
            time_suite(s, names, args, emit)


if __name__ == "__main__":
    _page.run(main)
