"""CEM vs Llama: aten ops, bytes and FLOPs per layer of a bf16 training step, counted without a GPU (issue 21).

What a GPU step of ``benchmarks/gpu_lm.py``'s models would launch at GPT-2-small width (D 768, 12 heads,
SwiGLU 2,048, vocabulary 32k), counted with ``benchmarks/hyperset_ops.py``'s machinery: one training step
(forward + cross-entropy + backward; no optimiser) on fake tensors (shapes and dtypes only, nothing
computed) under bf16 autocast with CUDA's float32 list, every aten op logged by a dispatch mode with its
dtypes, the bytes it reads and writes and its matmul FLOPs; ``F.rms_norm`` counted as CUDA's one fused
kernel pair. Per layer = the step with two layers minus the step with one (embedding, vocabulary head and
loss cancel). Columns: ops that launch a kernel (views excluded), of which matmuls; MB moved (the sum over
ops of their inputs' and outputs' sizes: an unfused eager step's memory traffic); matmul GFLOP; MB autograd
saves for the backward; ops and MB as multiples of Llama's layer.

The Triton kernel path (CUDA's ``auto`` for CEM attention; the rows "…, kernel path") is counted with
its launches stubbed: every aten op around them (allocations that fill, casts, the materialised shared
products' matmuls) is logged as usual, and each Triton launch as one row ``triton <kernel>`` whose bytes
are its tensor arguments' sizes (what it reads or writes at least once; tiles re-read are not counted)
and whose FLOPs are not counted. A gpu_lm model left on ``auto`` is counted on the path the CPU takes
(blocked). Nothing is timed: on a GPU, bytes set the time of memory-bound ops and the op count the
host's share of an eager step (each op is a launch and a Python-side dispatch, independent of the batch).

Usage:
    python benchmarks/cem_ops.py                                   # N 1,024, batch 1, the default models
    python benchmarks/cem_ops.py --seq 4096 --ops --out docs/results/cem/cem_ops.md
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from unittest import mock

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402  (sibling scripts)
from gpu_lm import BASE, models  # noqa: E402
from _op_log import MATMULS, OpLog, emulated_cuda_policy, fused_rms_norm, with_fake_tensors  # noqa: E402
from hyperset_ops import write_counts  # noqa: E402
from lm_throughput import CausalLM, model_config, ours_logits  # noqa: E402

from energyformer.energies.interaction_paths import _position_bias_cached  # noqa: E402

DEFAULT_MODELS = [BASE, "full CEM T=1, blocked path", "full CEM T=1, fused path", "paper configuration, blocked path"]
#: CUDA's ``auto`` path, forced (on fake CPU tensors ``auto`` takes the blocked path), its launches stubbed
KERNEL_SUFFIX = ", kernel path"


def block_of(name: str, blocks: dict):
    """gpu_lm's block ``name``, or for ``<gpu_lm name>, kernel path`` that block with CEM attention forced onto
    the Triton kernel (``attn_path: kernel``)."""
    if name.endswith(KERNEL_SUFFIX) and name[:-len(KERNEL_SUFFIX)] in blocks:
        block = blocks[name[:-len(KERNEL_SUFFIX)]]
        return block.model_copy(update={"attention": block.attention.model_copy(update={"attn_path": "kernel"})})
    if name not in blocks:
        allowed = "; ".join([*blocks, "or any of them + " + repr(KERNEL_SUFFIX)])
        raise SystemExit(f"--models: {name!r} is not a gpu_lm.py model; allowed: {allowed}")
    return blocks[name]


class _Launch:
    """``kernel[grid](*args)`` logged as one op ``triton <kernel>`` (nothing runs)."""

    def __init__(self, log: OpLog, name: str):
        self.log, self.name = log, name

    def __getitem__(self, grid):
        def launch(*args, **meta):
            self.log.add(f"triton {self.name}", [a for a in args if isinstance(a, torch.Tensor)], [])
        return launch


class _StubKernels:
    """Stands for a kernel module of ``cem_kernel._kernels``: its kernels as :class:`_Launch`, ``tl`` the real
    ``triton.language`` (the launch arguments read its dtypes)."""

    def __init__(self, log: OpLog):
        self._log = log

    @property
    def tl(self):  # imported when a kernel row asks: the other rows count without triton installed
        import triton.language as tl

        return tl

    def __getattr__(self, name: str) -> _Launch:
        return _Launch(self._log, name)


def stubbed_launches(log: OpLog):
    """CEM's Triton launches logged instead of run while inside."""
    from energyformer.energies import cem_kernel

    stub = _StubKernels(log)
    return mock.patch.object(cem_kernel, "_kernels", lambda interpret, file="cem_triton.py": stub)


def build_lm(block, layers: int, args) -> torch.nn.Module:
    torch.manual_seed(0)
    return CausalLM(model_config(args.vocab, args.dim, layers, args.heads, args.mlp_hidden, args.seq, block))


def log_step(block, layers: int, args) -> tuple[list[tuple], int]:
    """(op rows, bytes saved for the backward) of one bf16 training step on fake tensors."""
    store: dict[int, int] = {}
    held = []  # saved tensors stay referenced: no storage is freed and its address reused while counting

    model = build_lm(block, layers, args)
    _position_bias_cached.cache_clear()  # a bias cached by the last count is another fake mode's tensor
    # library code before b815f4c read the ALiBi slopes with tolist, which a fake tensor cannot answer: the
    # counter hands back placeholders (numbers never change what is launched), so older commits count too
    placeholder = mock.patch.object(FakeTensor, "tolist", lambda self: [0.5] * self.numel())
    # the fakes say they are on CUDA where the library asks (cem_products.mm_acc: 16-bit operands multiplied
    # by one bmm with a float32 out_dtype there, upcast first elsewhere)
    on_cuda = mock.patch.object(FakeTensor, "is_cuda", property(lambda self: True))
    with placeholder, on_cuda, emulated_cuda_policy(), FakeTensorMode(allow_non_fake_inputs=False):
        model = with_fake_tensors(model)  # built outside: constructors read numbers fakes do not hold
        params = {id(p) for p in model.parameters()}
        idx = torch.zeros(args.batch, args.seq, dtype=torch.long)
        forward = [True]

        def pack(t):
            if id(t) not in params and forward[0]:
                st = t.untyped_storage()
                store.setdefault(st._cdata, st.nbytes())
                held.append(t)
            return t

        log = OpLog()
        with log, fused_rms_norm(log), stubbed_launches(log), \
                torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with torch.autocast("cpu", torch.bfloat16):
                logits = ours_logits(model, idx)
                loss = F.cross_entropy(logits.float().flatten(0, 1), idx.flatten())
            forward[0] = False
            loss.backward()
    return log.rows, sum(store.values())


def per_layer(block, args) -> tuple[dict, Counter, Counter]:
    """Totals of one layer (two-layer step minus one-layer step) and its per-op counts and bytes."""
    (two, saved2), (one, saved1) = log_step(block, 2, args), log_step(block, 1, args)

    def totals(rows, saved):
        return {"ops": len(rows), "matmuls": sum(r[0] in MATMULS for r in rows), "bytes": sum(r[4] for r in rows),
                "flops": sum(r[5] for r in rows), "saved": saved}

    t2, t1 = totals(two, saved2), totals(one, saved1)
    n, nb = Counter(), Counter()
    for rows, sign in ((two, 1), (one, -1)):
        for r in rows:
            key = (r[0], "/".join(r[1]), "/".join(r[2]))
            n[key] += sign
            nb[key] += sign * r[4]
    return {k: t2[k] - t1[k] for k in t2}, n, nb


def report(args: argparse.Namespace) -> None:
    blocks = models()
    names = [s.strip() for s in args.models.split(";") if s.strip()]
    chosen = {name: block_of(name, blocks) for name in names}
    if BASE not in chosen:
        chosen = {BASE: blocks[BASE], **chosen}
    print(f"D={args.dim} H={args.heads} F={args.mlp_hidden} V={args.vocab}; N={args.seq}, batch {args.batch}; bf16 "
          "autocast training step (forward + loss + backward) under CUDA's autocast policy on fake tensors; "
          "one layer = step(2 layers) - step(1 layer)\n")
    print("| model | kernel ops | matmuls | MB moved | matmul GFLOP | MB saved for backward | ops × Llama | "
          "MB moved × Llama |")
    print("|---|---|---|---|---|---|---|---|")
    rows = {name: per_layer(block, args) for name, block in chosen.items()}
    base = rows[BASE][0]
    for name, (t, _, _) in rows.items():
        print(f"| {name} | {t['ops']:,} | {t['matmuls']:,} | {t['bytes'] / 1e6:,.1f} | {t['flops'] / 1e9:,.2f} | "
              f"{t['saved'] / 1e6:,.1f} | {t['ops'] / base['ops']:.2f} | {t['bytes'] / base['bytes']:.2f} |")
    if args.ops:
        for name, (_, n, nb) in rows.items():
            print(f"\n{name}: ops of one layer by bytes moved (count x op (dtypes in -> out): MB), the top {args.top}")
            for key, b in sorted(nb.items(), key=lambda kv: (-kv[1], kv[0]))[:args.top]:
                print(f"  {n[key]:4d} x {key[0]} ({key[1]} -> {key[2]}): {b / 1e6:,.1f}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq", type=_page.positive_int, default=1024)
    ap.add_argument("--batch", type=_page.positive_int, default=1,
                    help="batch rows (bytes and FLOPs scale with it, ops do not)")
    ap.add_argument("--dim", type=_page.positive_int, default=768)
    ap.add_argument("--heads", type=_page.positive_int, default=12)
    ap.add_argument("--mlp-hidden", type=_page.positive_int, default=2048)
    ap.add_argument("--vocab", type=_page.positive_int, default=32000)
    ap.add_argument("--models", default=";".join(DEFAULT_MODELS), help="gpu_lm.py model names separated by ';'")
    ap.add_argument("--ops", action="store_true", help="per-op counts and bytes of one layer")
    ap.add_argument("--top", type=_page.positive_int, default=15, help="--ops: how many ops per model")
    ap.add_argument("--out", type=Path, help="also write the output to this markdown file (a committed artifact)")
    args = ap.parse_args(argv)
    write_counts(args, argv, report, "CEM vs Llama: kernels, bytes and FLOPs per layer", "benchmarks/cem_ops.py")


if __name__ == "__main__":
    _page.run(main)
