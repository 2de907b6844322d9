"""CEM attention cost: within-layer recursion and memory growth (issue: energy core, Performance).

Prints, from one run on this machine:
  1. forward+backward time of a CEM attention layer at T=2 relative to T=1, next to the ratio for
     plain layer reuse (the same layer applied twice, keys recomputed), so the saving from computing
     keys/values once is visible;
  2. peak memory of forward+backward at N = 512, 1024, 2048 for the default fused path and for a
     dense reference that materialises the N×N scores (live tensors counted by PyTorch's MemTracker).

Usage: python benchmarks/cem_attention.py [--dim 256 --heads 8 --seq 512 --batch 4 --repeats 5]
"""

from __future__ import annotations

import argparse
import time

import torch

from energyformer.blocks.cem import CEMAttention, CEMAttentionConfig


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def fwd_bwd_time(block, x, repeats: int) -> float:
    def once():
        y = block(x)
        y.square().mean().backward()

    once()  # warm-up
    if x.is_cuda:
        torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        once()
        if x.is_cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]  # median


class Reuse(torch.nn.Module):
    """Plain layer reuse: apply a T=1 block twice (keys recomputed each time)."""

    def __init__(self, block, times):
        super().__init__()
        self.block, self.times = block, times

    def forward(self, x):
        for _ in range(self.times):
            x = self.block(x)
        return x


def timing(args, seq: int, batch: int) -> None:
    dev = device()
    torch.manual_seed(0)
    x = torch.randn(batch, seq, args.dim, device=dev, requires_grad=True)
    print(f"# forward+backward time (median of {args.repeats}), B={batch} N={seq} D={args.dim} H={args.heads} on {dev}")
    for label, extra in [("identity P, shared diagonal (default)", {}),
                         ("per-head D+LR P (R=4), shared diagonal", {"precond": "diag_low_rank"}),
                         ("no diagonal, no ALiBi/self bias", {"diagonal": "none", "alibi": False, "self_bias": False})]:
        t = {}
        for steps in (1, 2):
            torch.manual_seed(0)
            blk = CEMAttention(args.dim, args.heads, CEMAttentionConfig(steps=steps, **extra)).to(dev)
            t[steps] = fwd_bwd_time(blk, x, args.repeats)
        torch.manual_seed(0)
        reuse = Reuse(CEMAttention(args.dim, args.heads, CEMAttentionConfig(steps=1, **extra)).to(dev), 2)
        t_reuse = fwd_bwd_time(reuse, x, args.repeats)
        print(f"{label:42s} T=1 {t[1] * 1e3:8.1f} ms  T=2 {t[2] * 1e3:8.1f} ms  "
              f"ratio T2/T1 = {t[2] / t[1]:.2f}   plain reuse x2 / T1 = {t_reuse / t[1]:.2f}")


def peak_memory(mode: str, seq: int, args) -> int:
    """Peak bytes of live tensors during one forward+backward, counted by PyTorch's own
    dispatch-level ``MemTracker`` (works on CPU and CUDA; RSS is useless on CPU because the
    allocator keeps freed pages)."""
    from torch.distributed._tools.mem_tracker import MemTracker

    dev = device()
    torch.manual_seed(0)
    blk = CEMAttention(args.dim, args.heads, CEMAttentionConfig(steps=args.steps)).to(dev)
    x = torch.randn(1, seq, args.dim, device=dev, requires_grad=True)
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
    print(f"\n# peak live-tensor memory of forward+backward, B=1 D={args.dim} H={args.heads} T={args.steps}")
    for mode, label in (("fused", "fused (default path)"), ("dense", "dense N×N reference")):
        m = [peak_memory(mode, n, args) / 2**20 for n in (512, 1024, 2048)]
        print(f"{label:22s} N=512 {m[0]:7.1f} MiB  N=1024 {m[1]:7.1f} MiB  N=2048 {m[2]:7.1f} MiB   "
              f"growth x{m[1] / m[0]:.2f}, x{m[2] / m[1]:.2f}  (linear = x2, quadratic -> x4)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--skip-memory", action="store_true")
    args = p.parse_args()
    timing(args, args.seq, args.batch)
    timing(args, 64, args.batch * args.seq // 64)  # same tokens, short context: projections dominate
    if not args.skip_memory:
        memory(args)


if __name__ == "__main__":
    main()
