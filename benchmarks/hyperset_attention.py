"""Hyper-SET benchmarks (measured side by side in one run; ratios, median and range).

1. Bi-softmax attention, fused (two SDPA passes + one chunked log-sum-exp) vs einsum (N x N scores,
   row and column softmax) at N = 81, 256, 1024, 2048: time (forward, and forward + backward) with the
   variants interleaved and repeated, and peak memory (each variant alone in a fresh subprocess:
   the rise of the process's peak resident memory during one call, inputs already allocated).
2. Training throughput (boards/s) of Hyper-SET vs the looped transformer on Sudoku batches at equal
   iterations, width and batch (interleaved, repeated).

    PYTHONPATH=src python benchmarks/hyperset_attention.py [--threads 1] [--repeats 5] [--quick]
        [--sizes 1024 2048] [--no-training]

"time ratio" is the median over repeats of fused / einsum timed back to back in the same repeat (not the
ratio of the two medians, which a noisy machine can put on the other side of 1).

Run ``benchmarks/sudoku_generator.py`` for the generator's puzzles per second.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch

SIZES = (81, 256, 1024, 2048)


def _inputs(n: int, b: int = 2, h: int = 4, p: int = 32, grad: bool = False):
    g = torch.Generator().manual_seed(n)
    z = torch.nn.functional.rms_norm(torch.randn(b, h, n, p, generator=g), (p,))
    return z.requires_grad_(grad)


def _call(variant: str, z: torch.Tensor, backward: bool) -> None:
    from energyformer.energies.hyperspherical_ops import bisoftmax_einsum, bisoftmax_fused

    scale = z.shape[-1] ** -0.5
    y = bisoftmax_fused(z, z, z, scale)[0] if variant == "fused" else bisoftmax_einsum(z, z, z, scale)
    if backward:
        y.sum().backward()


def _hwm_bytes() -> int:
    """Peak resident memory of this process image. /proc's VmHWM is reset by exec; getrusage's
    ru_maxrss is not (a child forked from a large parent starts at the parent's peak), so it is only
    the fallback off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _peak_child(variant: str, n: int, backward: bool) -> None:
    """Child process: allocate inputs, then report the rise in peak RSS during one call (bytes)."""
    torch.set_num_threads(1)
    z = _inputs(n, grad=backward)
    _call(variant, _inputs(8, grad=backward), backward)  # load kernels on a tiny input
    before = _hwm_bytes()
    _call(variant, z, backward)
    print(json.dumps({"peak_rise_bytes": _hwm_bytes() - before}))


def peak_memory(variant: str, n: int, backward: bool) -> int:
    out = subprocess.run([sys.executable, __file__, "--child", variant, str(n), str(int(backward))],
                         capture_output=True, text=True, check=True)
    return int(json.loads(out.stdout.strip().splitlines()[-1])["peak_rise_bytes"])


def time_interleaved(fns: dict, repeats: int, inner: int = 1) -> dict[str, list[float]]:
    for f in fns.values():  # warm-up
        f()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            t0 = time.perf_counter()
            for _ in range(inner):
                f()
            times[k].append((time.perf_counter() - t0) / inner)
    return times


def _fmt(ts: list[float]) -> str:
    return f"{1e3 * statistics.median(ts):8.2f} ms [{1e3 * min(ts):.2f}, {1e3 * max(ts):.2f}]"


def bench_attention(repeats: int, sizes) -> list[dict]:
    rows = []
    for n in sizes:
        for backward in (False, True):
            z = _inputs(n, grad=backward)
            fns = {v: (lambda v=v: _call(v, z, backward)) for v in ("fused", "einsum")}
            with torch.set_grad_enabled(backward):
                t = time_interleaved(fns, repeats, inner=max(1, 256 // n))
            mem = {v: peak_memory(v, n, backward) for v in ("fused", "einsum")}
            ratio_t = statistics.median(a / b for a, b in zip(t["fused"], t["einsum"]))
            row = {"N": n, "backward": backward, "time_fused_ms": 1e3 * statistics.median(t["fused"]),
                   "time_einsum_ms": 1e3 * statistics.median(t["einsum"]), "time_ratio": ratio_t,
                   "mem_fused_MB": mem["fused"] / 2**20, "mem_einsum_MB": mem["einsum"] / 2**20,
                   "mem_ratio": mem["fused"] / max(1, mem["einsum"])}
            rows.append(row)
            print(f"N={n:5d} {'fwd+bwd' if backward else 'fwd    '}  fused {_fmt(t['fused'])}  einsum "
                  f"{_fmt(t['einsum'])}  time ratio {ratio_t:.2f}x   peak memory {row['mem_fused_MB']:.1f} MB vs "
                  f"{row['mem_einsum_MB']:.1f} MB = {row['mem_ratio']:.2f}x", flush=True)
    return rows


def bench_training(repeats: int, steps: int = 3) -> dict:
    from energyformer.data.sudoku import generate_puzzles
    from energyformer.models import MODELS, ModelConfig
    from energyformer.tasks.sudoku import targets_of

    p, s, _ = generate_puzzles(64, (21, 34), seed=0)
    p, s = torch.as_tensor(p).long(), torch.as_tensor(s).long()
    models, opts = {}, {}
    for name, block in (("hyperset", {"attention": "hyperset", "mlp": "hyperset"}),
                        ("transformer", {"attention": "gpt", "mlp": "gelu"})):
        cfg = ModelConfig.model_validate(dict(vocab_size=10, dim=128, heads=4, n_layers=1, iterations=8,
                                              positions="learned", max_seq_len=81, causal=False, block=block))
        torch.manual_seed(0)
        models[name] = MODELS.build(cfg, n_out=9)
        opts[name] = torch.optim.AdamW(models[name].parameters(), 1e-3)
    batch = (p[:16], targets_of(p[:16], s[:16]))

    def step(name):
        m, o = models[name], opts[name]
        logits = m(batch[0]).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[1].flatten(), ignore_index=-100)
        o.zero_grad()
        loss.backward()
        o.step()

    t = time_interleaved({k: (lambda k=k: step(k)) for k in models}, repeats, inner=steps)
    out = {k: 16 / statistics.median(v) for k, v in t.items()}
    ratio = statistics.median(a / b for a, b in zip(t["transformer"], t["hyperset"]))
    print(f"training (d=128, 4 heads, L=8, batch 16): Hyper-SET {out['hyperset']:.1f} boards/s "
          f"{_fmt(t['hyperset'])}/step, transformer {out['transformer']:.1f} boards/s {_fmt(t['transformer'])}/step; "
          f"Hyper-SET throughput = {ratio:.2f}x the transformer's")
    return {"boards_per_s": out, "hyperset_over_transformer": ratio}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="N = 81, 256 only, 3 repeats")
    ap.add_argument("--sizes", type=int, nargs="+", default=None, help=f"token counts N (default {SIZES})")
    ap.add_argument("--no-training", action="store_true", help="skip the training-throughput comparison")
    ap.add_argument("--json", default=None, help="also write the numbers to this file")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        _peak_child(a.child[0], int(a.child[1]), bool(int(a.child[2])))
        return 0
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {a.threads} thread(s); B=2, H=4, p=32, float32")
    sizes = a.sizes or (SIZES[:2] if a.quick else SIZES)
    rows = bench_attention(3 if a.quick else a.repeats, sizes)
    train = None if a.no_training else bench_training(3 if a.quick else a.repeats)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"attention": rows, "training": train, "torch": torch.__version__, "threads": a.threads}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
