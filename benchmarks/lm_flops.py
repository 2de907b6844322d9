"""Training-step FLOPs of ``gpu_lm.py``'s models, counted by PyTorch (issue 21: the FLOP ceiling of the ratios).

One training step (forward + loss + backward) of one sequence of N tokens runs on the CPU under
``torch.utils.flop_counter.FlopCounterMode``, which counts the matmuls (mm, bmm, addmm, ...) by their
shapes. Llama's attention runs on SDPA's math backend, so its N × N products are bmm's that the
counter sees; CEM runs on the CPU's ``auto`` path, the blocked path: the same maths as the GPU kernel
without its recomputations (the kernel recomputes scores in its passes; ``benchmarks/cem_flops.py``
counts those), every product over the whole N × N (masked afterwards), as Llama's math SDPA.

Columns: linear GFLOP (mm: projections, MLP, the vocabulary head), N × N GFLOP (bmm: every product whose
size grows with N², counted over the whole square), the causal total (linear + half of the N × N
part: what a kernel that skips the masked half does, as FlashAttention and CEM's kernel do), and
Llama's causal total over the model's: the tokens/s ratio the model would reach if both ran at the
same FLOP rate — a ceiling for a compute-bound step, not a prediction (the GPU's rate differs by kernel).

Usage: python benchmarks/lm_flops.py [--ns 1024] [--out docs/results/cem/lm_flops.md]
       python benchmarks/lm_flops.py --tiny       # the test's size
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402  (sibling scripts)
import gpu_lm  # noqa: E402
from lm_throughput import CausalLM, lm_loss, model_config, ours_logits  # noqa: E402

#: the models counted: every distinct computation of gpu_lm's table (the kernel variants and the
#: forced paths compute what 'auto' computes)
MODELS = (gpu_lm.BASE, "CEM attention T=1 + Llama MLP", "full CEM T=1 (auto path)", "paper configuration (T=2, D+LR)")


def count(block, args, n: int) -> tuple[float, float]:
    """(linear FLOPs, N × N FLOPs) of one training step of one sequence of ``n`` tokens."""
    torch.manual_seed(0)
    m = CausalLM(model_config(args.vocab, args.dim, args.layers, args.heads, args.mlp_hidden, n, block))
    idx = torch.randint(0, args.vocab, (1, n + 1))
    counter = FlopCounterMode(display=False)
    with counter, sdpa_kernel(SDPBackend.MATH):
        lm_loss(ours_logits(m, idx[:, :-1]), idx[:, 1:]).backward()
    by_op = {str(k).split(".")[-1]: v for k, v in counter.get_flop_counts()["Global"].items()}
    square = sum(v for k, v in by_op.items() if k in ("bmm", "baddbmm"))
    return counter.get_total_flops() - square, square


def run(args) -> list[str]:
    blocks = gpu_lm.models()
    out = [f"D={args.dim} L={args.layers} H={args.heads} F={args.mlp_hidden} V={args.vocab}; one sequence (B 1); "
           f"torch {torch.__version__}; commit {gpu_lm.git_commit()}", ""]
    for n in args.ns:
        rows = {name: count(blocks[name], args, n) for name in MODELS}
        base = rows[gpu_lm.BASE][0] + rows[gpu_lm.BASE][1] / 2
        out += [f"### N = {n}", "", "| model | linear GFLOP | N × N GFLOP (whole square) | causal total GFLOP | "
                "Llama's causal total / the model's (ceiling of the tokens/s ratio) |", "|---|---|---|---|---|"]
        for name, (lin, sq) in rows.items():
            causal = lin + sq / 2
            out.append(f"| {name} | {lin / 1e9:,.1f} | {sq / 1e9:,.1f} | {causal / 1e9:,.1f} | {base / causal:.2f} |")
        out.append("")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ns", type=_page.positive_int, nargs="+", default=[1024])
    ap.add_argument("--vocab", type=_page.positive_int, default=32000)
    ap.add_argument("--dim", type=_page.positive_int, default=768)
    ap.add_argument("--layers", type=_page.positive_int, default=12)
    ap.add_argument("--heads", type=_page.positive_int, default=12)
    ap.add_argument("--mlp-hidden", type=_page.positive_int, default=2048)
    ap.add_argument("--tiny", action="store_true", help="D 32, 2 layers, 4 heads, V 97, N 16")
    ap.add_argument("--out", type=Path, help="also write the output to this file (markdown)")
    args = ap.parse_args(argv)
    if args.tiny:
        args.vocab, args.dim, args.layers, args.heads, args.mlp_hidden, args.ns = 97, 32, 2, 4, 64, [16]
    torch.set_num_threads(max(1, torch.get_num_threads()))
    lines = run(args)
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("# Training-step FLOPs per model (`python benchmarks/lm_flops.py`)\n\n```\n"
                            + lines[0] + "\n```\n\n" + "\n".join(lines[2:]) + "\n")


if __name__ == "__main__":
    _page.run(main)
