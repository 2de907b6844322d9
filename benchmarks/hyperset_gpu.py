"""Hyper-SET vs the looped transformer: Sudoku training tokens/s and peak step memory (issue 20).

The two models are built from the Sudoku study's own configs (``hyperset/sudoku_hyperset`` and
``hyperset/sudoku_transformer``) with the GPU scale's model overrides (the paper's Table 8: d 768,
12 heads, L 24 iterations of one layer, learned positions) plus, as further rows, Hyper-SET with
``step_size.state_norm: true``, with ``attention.impl: einsum`` (the bi-softmax's PyTorch path; the
default ``auto`` takes the Triton kernel on CUDA, the einsum path on CPU), with the feed-forward's sphere
norm and ReLU as two ops (CUDA takes one fused kernel each way, ``hyperspherical_ffkernel``) and with the
PyTorch path's bi-softmax symmetrised by transposed sums (CPU folds them into its products for small heads,
``hyperspherical_ops.gemm_symmetrise``). One training
step = forward over a (B, 81) board batch + cross-entropy on the blanks + backward + AdamW, bf16 autocast
and/or fp32, the models' calls interleaved (the starting model rotates every repeat; ``gpu_lm.timed_runs``, the steps
of ``lm_throughput``). The table gives tokens/s (81 tokens per board), the per-repeat ratio to the
transformer as median [min, max], and (CUDA) peak step memory as ``gpu_lm`` defines it. The boards are
random tokens: the cost of a step does not depend on them.

Usage (GPU; write the output under docs/results/hyperset/):
    python benchmarks/hyperset_gpu.py --out docs/results/hyperset/gpu_throughput.md
    python benchmarks/hyperset_gpu.py --tiny        # CPU smoke run (d 32, L 2, batch 2)
    python benchmarks/hyperset_gpu.py --compile     # the same with torch.compile (train.compile)
    python benchmarks/hyperset_gpu.py --compile reduce-overhead   # + CUDA graph trees (train.compile's mode)
    python benchmarks/hyperset_gpu.py --render-only docs/results/hyperset/gpu_h100   # its README.md: issue 20's
                                                    # target and verdict from the gpu_throughput*.md there
    python benchmarks/hyperset_gpu.py --cuda-graph  # + every model with its training step one CUDA graph
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import sys
from pathlib import Path
from typing import Callable
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402  (sibling scripts)
from _page import markdown_emitter  # noqa: E402
from gpu_lm import (  # noqa: E402
    GRAPHED, compile_arg, compile_note, compiled, git_commit, keep_going_arg, ratio, select, state_bytes,
    timed_runs,
)
from _timing import median  # noqa: E402
from lm_throughput import (  # noqa: E402
    make_graphed_train_step, make_infer_step, make_train_step, ours_logits, pick_device,
)

from energyformer.experiment import load_run_config  # noqa: E402
from energyformer.tasks.sudoku import CLASSES, VOCAB  # noqa: E402

BASE = "looped transformer"
TWO_OP_FF = "Hyper-SET, feed-forward norm and ReLU as two ops"
SUMS = "Hyper-SET, bi-softmax symmetrised by transposed sums"
MODELS = {
    BASE: ("hyperset/sudoku_transformer", []),
    "Hyper-SET": ("hyperset/sudoku_hyperset", []),
    "Hyper-SET, state_norm": ("hyperset/sudoku_hyperset", ["model.block.attention.step_size.state_norm=true"]),
    "Hyper-SET, attention.impl einsum": ("hyperset/sudoku_hyperset", ["model.block.attention.impl=einsum"]),
    TWO_OP_FF: ("hyperset/sudoku_hyperset", []),
    SUMS: ("hyperset/sudoku_hyperset", []),
}
#: rows whose switch exists on CPU only (on CUDA the row is the default model again): left out of a CUDA run's
#: default rows, still run when named in --models
CPU_ONLY = {SUMS}
CELLS = 81


def two_op_ff():
    """The feed-forward's sphere norm and ReLU as two ops while inside (``hyperspherical_ffkernel.FUSED_NORM_RELU``
    off: the fused kernel's A/B row; the model is the default Hyper-SET)."""
    from energyformer.energies import hyperspherical_ffkernel as ffk

    return mock.patch.multiple(ffk, FUSED_NORM_RELU={})


def transposed_sums():
    """The PyTorch path's symmetric bi-softmax with its three transposed sums, not folded into its products
    (``hyperspherical_ops.GEMM_SYMMETRISE_MAX_P`` 0: the form before, and CUDA's; the model is the default)."""
    from energyformer.energies import hyperspherical_ops as ops

    return mock.patch.dict(ops.GEMM_SYMMETRISE_MAX_P, {"cpu": 0})


#: rows that are the default model with a library switch turned while their step runs (A/B rows)
SWITCHED = {TWO_OP_FF: two_op_ff, SUMS: transposed_sums}


def in_context(fn: Callable[[], None], ctx) -> Callable[[], None]:
    def call() -> None:
        with ctx():
            fn()

    return call


def build(config: str, extra: list[str], args, device: torch.device) -> torch.nn.Module:
    from energyformer.models import MODELS as REGISTRY

    cfg = load_run_config(config, [f"model.dim={args.dim}", f"model.heads={args.heads}",
                                   f"model.iterations={args.iterations}", *extra])
    torch.manual_seed(0)
    return REGISTRY.build(cfg.model, vocab_size=VOCAB, n_out=CLASSES, causal=False).to(device)


def run(args, emit: Callable[[list[str]], None]) -> None:
    device = pick_device()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    emit([f"device: {device.type} ({name}); torch {torch.__version__}; commit {git_commit()}; "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
          f"d={args.dim} heads={args.heads} L={args.iterations} batch={args.batch} (x {CELLS} tokens); "
          f"{args.repeats} interleaved repeats after {args.warmup} warm-up per model"
          f"{compile_note(args.compile, device)}"])
    g = torch.Generator().manual_seed(0)
    boards = torch.randint(0, VOCAB, (args.batch, CELLS), generator=g).to(device)
    targets = torch.where(boards == 0, torch.randint(0, CLASSES, boards.shape, generator=g).to(device), -100)
    for precision in args.precisions.split(","):
        for mode in args.modes.split(","):
            training = mode == "training"
            rows = MODELS if args.models or device.type == "cpu" else {
                n: v for n, v in MODELS.items() if n not in CPU_ONLY}
            chosen = select(rows, args.models, BASE)
            built = {n: build(c, x, args, device) for n, (c, x) in chosen.items()}
            run_as = {n: compiled(m, args.compile, device) for n, m in built.items()}  # as train.compile
            fns = {n: make_train_step(m, ours_logits, boards, targets, precision=precision) if training
                   else make_infer_step(m, ours_logits, boards, precision=precision) for n, m in run_as.items()}
            for row, switch in SWITCHED.items():
                if row in fns:
                    fns[row] = in_context(fns[row], switch)
            if args.cuda_graph and training:  # every model again, its whole step one CUDA graph
                for n, (c, x) in chosen.items():
                    built[n + GRAPHED] = m = build(c, x, args, device)
                    with SWITCHED[n]() if n in SWITCHED else contextlib.nullcontext():  # what the graph captures
                        fns[n + GRAPHED] = make_graphed_train_step(m, ours_logits, boards, targets,
                                                                   precision=precision)
            own = {n: state_bytes(m, training) for n, m in built.items()}
            times, peak, oom = timed_runs(fns, args.warmup, args.repeats, device, own, args.keep_going)
            lines = ["", f"### {precision}{' autocast' if precision == 'bf16' else ''}, {mode}", "",
                     "| model | parameters | tokens/s | × transformer, median [min, max] | peak step GiB |",
                     "|---|---|---|---|---|"]
            for n, m in built.items():
                params = sum(p.numel() for p in m.parameters())
                if n in oom:
                    lines.append(f"| {n} | {params:,} | {oom[n]} | — | {'OOM' if oom[n] == 'OOM' else '—'} |")
                    continue
                tps = args.batch * CELLS / median(times[n])
                mem = "n/a" if peak[n] is None else f"{peak[n] / 2**30:.2f}"
                base = BASE + GRAPHED if n.endswith(GRAPHED) else BASE
                lines.append(f"| {n} | {params:,} | {tps:,.0f} | {ratio(times, n, base)} | {mem} |")
            emit(lines)
            del built, fns
            if device.type == "cuda":
                torch.cuda.empty_cache()


def size_args(ap: argparse.ArgumentParser) -> None:
    """The model size and precision options this script shares with ``hyperset_ops.py`` (the paper's size)."""
    ap.add_argument("--dim", type=_page.positive_int, default=768)
    ap.add_argument("--heads", type=_page.positive_int, default=12)
    ap.add_argument("--iterations", type=_page.positive_int, default=24)
    ap.add_argument("--batch", type=_page.positive_int, default=64)
    ap.add_argument("--precisions", type=_page.precisions, default="bf16,fp32", help="bf16 (autocast) and/or fp32")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    size_args(ap)
    ap.add_argument("--modes", default="training,inference", help="training and/or inference")
    ap.add_argument("--models", help="only these models (names separated by ';'; the transformer is always timed); "
                    "default: all")
    ap.add_argument("--repeats", type=_page.positive_int, default=7)
    ap.add_argument("--warmup", type=_page.nonneg_int, default=2)
    ap.add_argument("--tiny", action="store_true", help="CPU smoke size: d 32, 4 heads, L 2, batch 2")
    compile_arg(ap)
    ap.add_argument("--cuda-graph", action="store_true",
                    help="(CUDA, training) also time every model with its whole step captured as one CUDA graph "
                         "(lm_throughput.make_graphed_train_step): the step without the host's launch overhead; "
                         "those rows' ratios are to the graphed transformer")
    keep_going_arg(ap)
    ap.add_argument("--out", type=Path, help="also write the output to this file (markdown)")
    ap.add_argument("--render-only", type=Path, metavar="DIR",
                    help="measure nothing: write DIR/README.md (issue 20's speed target and its verdict) from the "
                         "gpu_throughput*.md outputs committed in DIR")
    args = ap.parse_args(argv)
    if args.render_only:
        import _hyperset_gpu_page

        print(_hyperset_gpu_page.write(args.render_only))
        return
    if args.tiny:
        args.dim, args.heads, args.iterations, args.batch = 32, 4, 2, 2
    if pick_device().type == "cpu":
        torch.set_num_threads(1)
    run(args, markdown_emitter(args.out, "Hyper-SET vs the looped transformer: Sudoku training tokens/s "
                                         "(`python benchmarks/hyperset_gpu.py`)", header_lines=2))


if __name__ == "__main__":
    _page.run(main)
