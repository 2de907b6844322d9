"""CEM attention cost per evaluation path: within-layer recursion and memory growth (issue #8, Performance).

Prints, from one run on this machine (every number measured):
  1. forward+backward time of one CEM attention layer at T = 1 and T = 2, and of plain layer reuse
     (the T = 1 layer applied twice, keys recomputed), for each evaluation path (``fused`` SDPA and
     ``blocked``) and option set. All variants of one option set are interleaved in every repeat (start
     rotated); the T2/T1 and reuse/T1 ratios are taken repeat by repeat and reported as median [min, max].
     Floor of T2/T1: the keys/values are computed once, so T = 2 adds one query projection, one attention
     core and one read-out to T = 1's work — about 5/3 of T = 1 when those three dominate;
  2. peak live-tensor memory of forward+backward against N for the fused path, the blocked path keeping
     its probabilities, the blocked path recomputing them in backward (memory budget exceeded) and a dense
     reference that materialises all (B, H, N, N) scores (PyTorch's MemTracker, CPU and CUDA).

Usage: python benchmarks/cem_attention.py [--dim 256 --heads 8 --seq 256 --batch 8 --repeats 7 --threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402  (a sibling: argument checks and the run header)
from _timing import interleaved_times, median, paired_ratio  # noqa: E402

from energyformer.blocks.cem import CEMAttention, CEMAttentionConfig  # noqa: E402

OPTION_SETS = {
    "shared diagonal, identity P (default)": {},
    "shared diagonal, per-head D+LR P (R=4) (paper)": {"precond": "diag_low_rank"},
    "no diagonal, no ALiBi/self bias": {"diagonal": "none", "alibi": False, "self_bias": False},
}


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Reuse(torch.nn.Module):
    """Plain layer reuse: apply a T=1 block twice (keys recomputed each time)."""

    def __init__(self, block, times):
        super().__init__()
        self.block, self.times = block, times

    def forward(self, x):
        for _ in range(self.times):
            x = self.block(x)
        return x


def fwd_bwd(block, x, precision: str):
    """One forward+backward, under bf16 autocast for 'bf16', float32 for 'fp32' (any other name: ConfigError)."""
    _page.check_precision(precision)

    def once():
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            y = block(x)
        y.float().square().mean().backward()
    return once


def ratio(times, a, b) -> str:
    """time[a] / time[b] per repeat: 'median [min, max]'."""
    return "{:.2f} [{:.2f}, {:.2f}]".format(*paired_ratio(times, a, b))


def timing(args, precision: str) -> None:
    dev = device()
    torch.manual_seed(0)
    x = torch.randn(args.batch, args.seq, args.dim, device=dev, requires_grad=True)
    print(f"\n# forward+backward, B={args.batch} N={args.seq} D={args.dim} H={args.heads} on {dev}, {precision}; "
          f"{args.repeats} interleaved repeats; ratios per repeat: median [min, max]")
    for label, extra in OPTION_SETS.items():
        fns = {}
        for path in ("fused", "blocked"):
            for steps in (1, 2):
                torch.manual_seed(0)
                blk = CEMAttention(args.dim, args.heads, CEMAttentionConfig(steps=steps, attn_path=path, **extra))
                fns[(path, steps)] = fwd_bwd(blk.to(dev), x, precision)
            torch.manual_seed(0)
            reuse = Reuse(CEMAttention(args.dim, args.heads, CEMAttentionConfig(steps=1, attn_path=path, **extra)), 2)
            fns[(path, "reuse")] = fwd_bwd(reuse.to(dev), x, precision)
        t = interleaved_times(fns, 1, args.repeats, dev)
        print(f"{label}")
        for path in ("fused", "blocked"):
            print(f"  {path:8s} T=1 {median(t[(path, 1)]) * 1e3:8.1f} ms  T=2 {median(t[(path, 2)]) * 1e3:8.1f} ms  "
                  f"T2/T1 = {ratio(t, (path, 2), (path, 1))}   plain reuse x2 / T1 = {ratio(t, (path, 'reuse'), (path, 1))}")
        print(f"  blocked vs fused (time ratio fused/blocked): T=1 {ratio(t, ('fused', 1), ('blocked', 1))}, "
              f"T=2 {ratio(t, ('fused', 2), ('blocked', 2))}")


def peak_memory(mode: str, seq: int, args) -> int:
    """Peak bytes of live tensors during one forward+backward (PyTorch's dispatch-level MemTracker;
    RSS is useless on CPU because the allocator keeps freed pages)."""
    from torch.distributed._tools.mem_tracker import MemTracker

    dev = device()
    torch.manual_seed(0)
    cfg = {"fused": dict(attn_path="fused"), "blocked": dict(attn_path="blocked", attn_memory_mb=1e6),
           "recompute": dict(attn_path="blocked", attn_memory_mb=args.recompute_mb),
           "dense": dict(attn_path="fused")}[mode]
    blk = CEMAttention(args.dim, args.heads, CEMAttentionConfig(steps=args.steps, **cfg)).to(dev)
    x = torch.randn(1, seq, args.dim, device=dev, requires_grad=True)
    if mode == "dense" and blk.energy.alibi:
        # MemTracker allows one call of a module per iteration, and the dense reference reads the ALiBi slopes
        # twice (the state's bias and its scores): the constant (H,) slopes as a plain function instead
        slopes = blk.energy.slope_values()
        object.__setattr__(blk.energy, "slope_values", lambda: slopes)   # shadows the submodule, this block only
    mt = MemTracker()
    mt.track_external(blk, x)
    with mt:
        if mode == "dense":  # reference: explicit (B, H, N, N) scores via the energy's autograd
            u = blk.norm(x)
            st = blk.energy.prepare(u)
            blk.energy.energy(u, st).sum().backward()
        else:
            blk(x).square().mean().backward()
    peak = mt.get_tracker_snapshot("peak")
    return sum(stats.get("Total", 0) for stats in peak.values())


def memory(args) -> None:
    ns = args.mem_seqs
    print(f"\n# peak live-tensor memory of forward+backward (MiB), B=1 D={args.dim} H={args.heads} T={args.steps}; "
          f"recompute budget {args.recompute_mb} MiB")
    for mode, label in (("fused", "fused (SDPA)"), ("blocked", "blocked, keeps probabilities"),
                        ("recompute", "blocked, recomputes blocks"), ("dense", "dense N×N energy (reference)")):
        m = [peak_memory(mode, n, args) / 2**20 for n in ns]
        growth = ", ".join(f"x{b / a:.2f}" for a, b in zip(m, m[1:]))
        print(f"  {label:32s} " + "  ".join(f"N={n} {v:8.1f}" for n, v in zip(ns, m)) +
              f"   growth per doubling {growth} (linear x2, quadratic x4)")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    pos = _page.positive_int
    p.add_argument("--dim", type=pos, default=256)
    p.add_argument("--heads", type=pos, default=8)
    p.add_argument("--seq", type=pos, default=256)
    p.add_argument("--batch", type=pos, default=8)
    p.add_argument("--steps", type=pos, default=2, help="T of the memory section")
    p.add_argument("--repeats", type=pos, default=7)
    p.add_argument("--threads", type=pos, default=1)
    p.add_argument("--precisions", type=_page.precisions, default="fp32,bf16", help="fp32 and/or bf16 (autocast)")
    p.add_argument("--mem-seqs", type=_page.int_list, default="256,512,1024,2048")
    p.add_argument("--recompute-mb", type=_page.positive_float, default=16.0)
    p.add_argument("--skip-memory", action="store_true")
    p.add_argument("--skip-timing", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(_page.header(device()))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), 1-min load {load:.2f} on {os.cpu_count()} cores")
    if not args.skip_timing:
        for precision in args.precisions.split(","):
            timing(args, precision)
    if not args.skip_memory:
        memory(args)


if __name__ == "__main__":
    _page.run(main)
