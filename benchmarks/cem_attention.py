"""CEM attention cost: within-layer recursion and memory growth (issue: energy core, Performance).

Prints, from one run on this machine:
  1. forward+backward time of a CEM attention layer at T=2 relative to T=1, next to the ratio for
     plain layer reuse (the same layer applied twice, keys recomputed), so the saving from computing
     keys/values once is visible;
  2. peak memory of forward+backward at N = 512, 1024, 2048 for the default fused path and for a
     dense reference that materialises the N×N scores (each measured in a fresh subprocess; CPU:
     peak RSS increase, CUDA: torch.cuda.max_memory_allocated).

Usage: python benchmarks/cem_attention.py [--dim 256 --heads 8 --seq 512 --batch 4 --repeats 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
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


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _peak_rss_during(fn) -> int:
    """Peak resident-set increase while ``fn`` runs, sampled every 0.2 ms by a background thread
    (ru_maxrss is useless here: it is dominated by one-off start-up peaks)."""
    import threading

    base, peak, done = _rss_bytes(), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss_bytes())
            time.sleep(0.0002)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    fn()
    done.set()
    t.join()
    return max(peak[0], _rss_bytes()) - base


def memory_child(args) -> None:
    """Run in a subprocess: peak memory of one forward+backward at sequence length args.seq."""
    dev = device()
    torch.manual_seed(0)
    blk = CEMAttention(args.dim, args.heads, CEMAttentionConfig(steps=args.steps)).to(dev)
    x = torch.randn(1, args.seq, args.dim, device=dev, requires_grad=True)
    if args.mode == "dense":  # reference: explicit (B, H, N, N) scores via the energy's autograd
        def run():
            u = blk.norm(x)
            st = blk.energy.prepare(u)
            blk.energy.energy(u, st).sum().backward()
    else:
        def run():
            blk(x).square().mean().backward()
    run()  # warm-up: library workspaces, thread pools
    x.grad = None
    blk.zero_grad(set_to_none=True)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        run()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = _peak_rss_during(run)
    print(json.dumps({"peak_bytes": peak}))


def memory(args) -> None:
    print(f"\n# peak memory of forward+backward, B=1 D={args.dim} H={args.heads} T={args.steps} "
          f"(fresh process per point)")
    rows = {}
    for mode in ("fused", "dense"):
        for n in (512, 1024, 2048):
            cmd = [sys.executable, __file__, "--child", "--mode", mode, "--seq", str(n), "--dim", str(args.dim),
                   "--heads", str(args.heads), "--steps", str(args.steps)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
            rows[(mode, n)] = max(json.loads(out)["peak_bytes"], 1)
        m = [rows[(mode, n)] / 2**20 for n in (512, 1024, 2048)]
        print(f"{mode:6s} N=512 {m[0]:8.1f} MiB  N=1024 {m[1]:8.1f} MiB  N=2048 {m[2]:8.1f} MiB   "
              f"growth 512->1024 x{m[1] / m[0]:.2f}, 1024->2048 x{m[2] / m[1]:.2f}  (linear = x2, quadratic = x4)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="fused", help=argparse.SUPPRESS)
    p.add_argument("--skip-memory", action="store_true")
    args = p.parse_args()
    if args.child:
        memory_child(args)
        return
    timing(args, args.seq, args.batch)
    timing(args, 64, args.batch * args.seq // 64)  # same tokens, short context: projections dominate
    if not args.skip_memory:
        memory(args)


if __name__ == "__main__":
    main()
