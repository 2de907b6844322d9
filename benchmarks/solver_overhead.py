"""Overhead of the shared solver loop (traces off) against a hand-inlined loop (issue 7, item 6).

A small stack of CEM layers — each an attention and an MLP sublayer with T = 2 within-layer steps
(``energyformer.blocks.cem``) — does one forward + backward step in two ways that use the *same*
modules and give the same numbers:

  library   ``x = block(x, ctx)``: EnergyBlock.forward -> Solver.run -> Descent.descend
  inlined   the same computation written out by hand:
                h = norm(x); state = energy.prepare(h); x_t = x
                for t in 0..T-1:  x_t = x_t + eta * energy.direction(norm(x_t), state, P)

The variants are interleaved (random order within each round) and repeated; each sample times
``--inner`` forward+backward steps. Printed: median and range (min..max) of each variant, the
ratio of the medians, the ratio of the minima (the least noisy estimate of a fixed overhead on a
shared machine) and the median/range of the per-round paired ratios library / inlined.
Target: ratio <= 1.02.

Clock: on CPU the default is the process's CPU time (``time.process_time``), which time spent
preempted by other processes on a shared machine does not inflate; ``--clock wall`` uses
``time.perf_counter`` (the default on CUDA, with synchronisation).

Usage: python benchmarks/solver_overhead.py [--dim 128 --heads 4 --seq 64 --batch 8 --layers 2
                                             --repeats 30 --inner 3 --device cpu --threads 2
                                             --clock process|wall]
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402  (a sibling: argument checks and the run header)

from energyformer.blocks.cem import CEMMLP, CEMAttention, CEMAttentionConfig, CEMMLPConfig  # noqa: E402
from energyformer.core import EnergyBlock, ForwardContext  # noqa: E402


class Stack(nn.Module):
    """L layers of (CEM attention T=2, CEM MLP T=2); both sublayers include their residual."""

    def __init__(self, dim: int, heads: int, layers: int, steps: int):
        super().__init__()
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(CEMAttention(dim, heads, CEMAttentionConfig(steps=steps)))
            self.blocks.append(CEMMLP(dim, CEMMLPConfig(steps=steps), hidden=2 * dim))

    def library(self, x: torch.Tensor) -> torch.Tensor:
        ctx = ForwardContext()  # traces and stats off
        for blk in self.blocks:
            x = blk(x, ctx)
        return x

    def inlined(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            x = inlined_block(blk, x)
        return x


def inlined_block(blk: EnergyBlock, x: torch.Tensor) -> torch.Tensor:
    """EnergyBlock.forward for CEM blocks (init residual, norm in the loop, fixed eta) by hand."""
    h = blk.norm(x)
    state = blk.energy.prepare(h, cache=None, offset=0)
    eta, precond = blk.solver.step_size.value, blk.solver.precond
    for _ in range(blk.steps):
        x = x + eta * blk.energy.direction(blk.norm(x), state, precond)
    return x


def measure(model: Stack, x: torch.Tensor, repeats: int, inner: int, clock, sync, seed: int
            ) -> tuple[dict[str, list[float]], list[float]]:
    """Interleaved timings (seconds per forward+backward step) and per-round ratios library/inlined."""

    def sample(fn) -> float:
        sync()
        t0 = clock()
        for _ in range(inner):
            model.zero_grad(set_to_none=True)
            x.grad = None
            fn(x).square().mean().backward()
        sync()
        return (clock() - t0) / inner

    with torch.no_grad():  # same modules, same numbers
        a, b = model.library(x), model.inlined(x)
    if not torch.equal(a, b):
        raise SystemExit(f"variants differ (max |diff| = {float((a - b).abs().max()):.3g}): not the same computation")
    variants = {"library": model.library, "inlined": model.inlined}
    for fn in variants.values():  # warm-up
        sample(fn)
        sample(fn)
    rng = random.Random(seed)
    times: dict[str, list[float]] = {k: [] for k in variants}
    ratios = []
    for _ in range(repeats):
        order = list(variants)
        rng.shuffle(order)
        got = {k: sample(variants[k]) for k in order}
        for k, v in got.items():
            times[k].append(v)
        ratios.append(got["library"] / got["inlined"])
    return times, ratios


def report(times: dict[str, list[float]], ratios: list[float]) -> None:
    for k, v in times.items():
        print(f"{k:8s} median {statistics.median(v) * 1e3:8.3f} ms   range {min(v) * 1e3:8.3f} .. {max(v) * 1e3:8.3f} ms")
    med = statistics.median(times["library"]) / statistics.median(times["inlined"])
    low = min(times["library"]) / min(times["inlined"])
    print(f"ratio of medians library / inlined = {med:.4f}  (overhead {100 * (med - 1):+.2f} %)")
    print(f"ratio of minima  library / inlined = {low:.4f}  (overhead {100 * (low - 1):+.2f} %)")
    print(f"paired per-round ratio: median {statistics.median(ratios):.4f}, range {min(ratios):.4f} .. "
          f"{max(ratios):.4f}   target <= 1.02")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    pos = _page.positive_int
    p.add_argument("--dim", type=pos, default=128)
    p.add_argument("--heads", type=pos, default=4)
    p.add_argument("--seq", type=pos, default=64)
    p.add_argument("--batch", type=pos, default=8)
    p.add_argument("--layers", type=pos, default=2)
    p.add_argument("--steps", type=pos, default=2, help="T within-layer steps of every sublayer")
    p.add_argument("--repeats", type=pos, default=30, help="rounds; each times both variants once")
    p.add_argument("--inner", type=pos, default=3, help="forward+backward steps per timed sample")
    p.add_argument("--device", type=_page.device_arg, default="cuda" if torch.cuda.is_available() else "cpu",
                   help="cpu or cuda")
    p.add_argument("--threads", type=pos, default=None, help="torch.set_num_threads (CPU)")
    p.add_argument("--seed", type=_page.nonneg_int, default=0)
    p.add_argument("--clock", choices=("process", "wall"), default=None,
                   help="process CPU time (CPU default) or wall clock (CUDA default)")
    p.add_argument("--no-tiny", action="store_true", help="skip the absolute-overhead measurement")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    clock_name = args.clock or ("wall" if dev.type == "cuda" else "process")
    if clock_name == "process" and dev.type == "cuda":
        raise SystemExit("--clock process measures CPU time only; use --clock wall on CUDA")
    clock = time.process_time if clock_name == "process" else time.perf_counter

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    torch.manual_seed(args.seed)
    model = Stack(args.dim, args.heads, args.layers, args.steps).to(dev)
    x = torch.randn(args.batch, args.seq, args.dim, device=dev, requires_grad=True)
    times, ratios = measure(model, x, args.repeats, args.inner, clock, sync, args.seed)

    threads = torch.get_num_threads() if dev.type == "cpu" else "-"
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu"
    print(f"# {_page.header(dev)}")
    print(f"# solver loop overhead, traces off: {args.layers} layers x (CEM attention + CEM MLP), "
          f"T={args.steps}, B={args.batch} N={args.seq} D={args.dim} H={args.heads}, forward+backward")
    print(f"# device {dev} ({name}), threads {threads}, torch {torch.__version__}; {args.repeats} interleaved "
          f"rounds x {args.inner} steps, {clock_name} clock")
    report(times, ratios)
    if args.no_tiny:
        return
    # The loop's cost does not depend on the tensor sizes: measure it where it is not drowned in
    # arithmetic (a tiny stack of the same depth), then express it relative to the step above.
    torch.manual_seed(args.seed)
    tiny = Stack(16, 2, args.layers, args.steps).to(dev)
    xt = torch.randn(1, 4, 16, device=dev, requires_grad=True)
    t_times, t_ratios = measure(tiny, xt, 3 * args.repeats, 20, clock, sync, args.seed)
    calls = len(tiny.blocks)
    print(f"# tiny stack (B=1 N=4 D=16 H=2, same depth and T), {3 * args.repeats} rounds x 20 steps: "
          f"the loop's absolute cost")
    report(t_times, t_ratios)
    per_call = (statistics.median(t_times["library"]) - statistics.median(t_times["inlined"])) / calls
    implied = 1 + per_call * calls / statistics.median(times["inlined"])
    print(f"absolute overhead per sublayer call (forward+backward, median difference): {per_call * 1e6:+.1f} us; "
          f"implied ratio for the model above: {implied:.4f} ({100 * (implied - 1):+.2f} %)")


if __name__ == "__main__":
    _page.run(main)
