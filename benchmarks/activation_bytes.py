"""Bytes autograd keeps for the backward, per token and layer: CEM vs Llama (issue 21's memory target).

Issue 21 asks for full CEM's peak training memory at most 1.3× Llama's on a GPU (B 8, N 1,024, D 768,
12 layers). Most of a training step's peak is the activations autograd saves in the forward, and those
can be counted on any machine: every tensor the forward saves for backward passes through
``torch.autograd.graph.saved_tensors_hooks``; the storages still held when the forward returns are
counted once each (parameters left out, their autocast copies counted). The models are ``benchmarks/gpu_lm.py``'s, built on
the path CUDA takes (``auto`` = the Triton kernel on a GPU; here through Triton's interpreter, or a path
named by the model); the forward runs at sequence lengths N and 2N with 1 and 2 layers, and the double
difference, divided by B·N, is what one more layer saves per token: without what a forward saves once
(the autocast weight copies) and without the embedding and the read-out's per-token share (the logits).
The kernel path keeps nothing N × N; the blocked path keeps its probabilities
(``H·N²/2`` per layer and step), so its per-token figure grows with N and is quoted at this N only.

This is a count of saved activations, not a measured peak (which adds parameters, gradients, AdamW's
moments, the transient N × N buffers of the kernel's shared products and the allocator's slack):
``benchmarks/gpu_lm.py`` measures the peak on a GPU.

Usage: python benchmarks/activation_bytes.py [--dim 768 --heads 12 --seq 64 --batch 1]
       [--precisions bf16,fp32] [--models "NAME;NAME"] [--out docs/results/cem/activation_bytes.md]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import weakref
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # the kernel path on CPU (triton fixes its mode at first import)

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402  (siblings)
from gpu_lm import BASE, models, select  # noqa: E402
from lm_throughput import CausalLM, _context, model_config, ours_logits  # noqa: E402

from energyformer.blocks.cem import CEMAttentionConfig  # noqa: E402


def on_cuda_path(block):
    """``block`` with a CEM attention left at ``auto`` set to the kernel, the path ``auto`` takes on CUDA"""
    att = block.attention
    if isinstance(att, CEMAttentionConfig) and att.attn_path == "auto":
        return block.model_copy(update={"attention": att.model_copy(update={"attn_path": "kernel"})})
    return block


def saved_bytes(model: torch.nn.Module, idx: torch.Tensor, precision: str) -> int:
    """bytes of the distinct storages the graph of one training forward still holds for backward when the
    forward returns (parameters excluded; tensors saved by graphs the forward itself dropped, e.g. an
    energy evaluated for a trace, are not counted: their storages may already hold other tensors)"""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: list[weakref.ref] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        # detached: a saved output returned as itself would tie its node to it in a cycle that no garbage
        # collector frees (every model of the run then stays in memory); nothing runs backward here
        d = t.detach()
        saved.append(weakref.ref(d))
        return d

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), _context(precision, idx.device):
        logits = ours_logits(model, idx)
    alive = [t for t in (r() for r in saved) if t is not None]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in alive}
    del logits, alive
    return sum(n for ptr, n in storages.items() if ptr not in params)


def per_token_layer(block, args, precision: str) -> float:
    """[S(2 layers, 2N) − S(2, N) − S(1, 2N) + S(1, N)] / (B · N), S: saved bytes of one forward"""
    s = {}
    for layers in (1, 2):
        for n in (args.seq, 2 * args.seq):
            torch.manual_seed(0)
            model = CausalLM(model_config(args.vocab, args.dim, layers, args.heads, args.mlp_hidden, 2 * args.seq,
                                          block)).train()
            idx = torch.randint(0, args.vocab, (args.batch, n), generator=torch.Generator().manual_seed(1))
            s[layers, n] = saved_bytes(model, idx, precision)
            del model
            gc.collect()  # free each model before the next is built
    n = args.seq
    return (s[2, 2 * n] - s[2, n] - s[1, 2 * n] + s[1, n]) / (args.batch * n)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    pos = _page.positive_int
    ap.add_argument("--vocab", type=pos, default=32000)
    ap.add_argument("--dim", type=pos, default=768)
    ap.add_argument("--heads", type=pos, default=12)
    ap.add_argument("--mlp-hidden", type=pos, default=2048)
    ap.add_argument("--seq", type=pos, default=64, help="N (and 2N) of the two forwards")
    ap.add_argument("--batch", type=pos, default=1)
    ap.add_argument("--precisions", type=_page.precisions, default="bf16,fp32", help="bf16 (autocast) and/or fp32")
    ap.add_argument("--models", help="only these models (names separated by ';'; the Llama baseline is always "
                    "counted); default: every model of benchmarks/gpu_lm.py")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    precs = a.precisions.split(",")
    rows = {name: {p: per_token_layer(on_cuda_path(b), a, p) for p in precs} for name, b in select(models(), a.models).items()}
    lines = [_page.header("cpu"), f"torch {torch.__version__}; D={a.dim} H={a.heads} F={a.mlp_hidden} V={a.vocab}, "
             f"B={a.batch}, forwards at N={a.seq} and {2 * a.seq} with 1 and 2 layers; CEM attention on the CUDA path "
             "(the Triton kernel, "
             "run here by its interpreter) unless the model names another; bytes autograd saves per token and "
             "layer (what one more layer adds per token)", "",
             "| model | " + " | ".join(f"{p}: B/token/layer | × Llama" for p in precs) + " |",
             "|---|" + "---|---|" * len(precs)]
    for name, r in rows.items():
        lines.append(f"| {name} | " + " | ".join(f"{r[p]:,.0f} | {r[p] / rows[BASE][p]:.2f}" for p in precs) + " |")
    text = "\n".join(lines)
    print(text)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text("# Activations saved for backward, CEM vs Llama (`python benchmarks/activation_bytes.py`)\n\n"
                         + text + "\n")


if __name__ == "__main__":
    _page.run(main)
