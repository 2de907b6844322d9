"""Training-step time, FLOPs and memory of the intrinsic-optimizer attention kinds, relative to MHA.

For each context length (default 256 and 1024) every variant's model (GPT backbone, small vocabulary so
that the layer stack, not the LM head, dominates) takes full training steps (forward, backward, AdamW).
Variants are **interleaved** within each repetition (order shuffled per repetition) so that machine
load affects all alike; we report per variant the median step time and its range over repetitions,
and the ratio to MHA as the median (and range) of the per-repetition ratios.

FLOPs of one step come from ``torch.utils.flop_counter.FlopCounterMode`` (matmuls, SDPA; element-wise
work is not counted). Memory: on CUDA the peak allocated memory of one step
(``torch.cuda.max_memory_allocated``); on CPU, where the allocator is not tracked, the bytes of the
tensors saved for backward (``saved_tensors_hooks``: the activation memory, the part that grows with
context), which is deterministic and comparable between variants.

Budgets (issue #10): MomenMHA / NagMHA ≤ 1.05x, MHA2nd-lite ≤ 1.3x, MHA2nd1st ≤ 2x (it materialises
the N×N attention matrix: no fused kernel returns P, and the bias ``C a`` needs it).

    python benchmarks/intrinsic_attention.py [--contexts 256 1024] [--reps 7] [--device cpu|cuda] [--json OUT]
    python benchmarks/intrinsic_attention.py --render-only DIR   # DIR/benchmark.md from DIR/benchmark.json

``--json OUT`` records the raw step times (every repetition), FLOPs, memory and the machine (threads, load
average before and after); ``--render-only DIR`` rebuilds the CPU results page
(``docs/results/intrinsic/cpu/benchmark.md``) from the committed ``benchmark.json`` without measuring.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from energyformer.models.lm import CausalLM, ModelConfig  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402

VARIANTS = {
    "mha": ("mha", "gelu"),
    "momen_mha": ("momen_mha", "momen_gelu"),
    "nag_mha": ("nag_mha", "nag_gelu"),
    "mha2nd_lite": ("mha2nd_lite", "gelu"),
    "mha2nd1st": ("mha2nd1st", "gelu"),
    "mha2nd1st_simple": ("mha2nd1st_simple", "gelu"),
    "mha_tied": ("mha_tied", "gelu"),
    "linear_attn": ("linear_attn", "gelu"),
    "mha2nd": ("mha2nd", "gelu"),
    # MHA2nd-lite with its q/k/v projection in autocast's dtype (fp32_heads false): what the default's float32
    # projection under --bf16 costs (energies/newton.py, LiteHeads.project_qkv); not in the default set
    "mha2nd_lite_bf16_heads": ({"kind": "mha2nd_lite", "fp32_heads": False}, "gelu"),
}
DEFAULT_VARIANTS = [v for v in VARIANTS if v != "mha2nd_lite_bf16_heads"]
BUDGET = {"momen_mha": 1.05, "nag_mha": 1.05, "mha2nd_lite": 1.3, "mha2nd1st": 2.0}


def build(variant: str, args, ctx: int, device) -> CausalLM:
    att, mlp = VARIANTS[variant]
    cfg = ModelConfig(vocab_size=args.vocab, dim=args.dim, n_layers=args.layers, heads=args.heads,
                      max_seq_len=ctx, positions="learned", final_norm="layer",
                      block={"attention": att, "mlp": mlp, "dropout": 0.1})
    torch.manual_seed(0)
    return CausalLM(cfg).to(device)


def step_fn(model, opt, x, autocast):
    def run():
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=autocast):
            loss = model(x, x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return run


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def flops(model, x) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        model(x, x).loss.backward()
    model.zero_grad(set_to_none=True)
    return fc.get_total_flops()


def memory(model, opt, x, device, autocast) -> float:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        step_fn(model, opt, x, autocast)()
        sync(device)
        return torch.cuda.max_memory_allocated() / 2**20
    seen, total = set(), [0]

    def pack(t):
        key = (t.data_ptr(), t.numel(), t.dtype)
        if key not in seen:
            seen.add(key)
            total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(x, x).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    return total[0] / 2**20


def bench(args) -> dict:
    device = torch.device(args.device)
    results = {}
    for ctx in args.contexts:
        names = [v for v in args.variants if not (v == "mha2nd" and ctx > args.mha2nd_max_ctx)]
        x = torch.randint(0, args.vocab, (args.batch, ctx), generator=torch.Generator().manual_seed(0)).to(device)
        models = {v: build(v, args, ctx, device) for v in names}
        opts = {v: torch.optim.AdamW(m.parameters(), lr=1e-4) for v, m in models.items()}
        fns = {v: step_fn(models[v], opts[v], x, args.bf16) for v in names}
        info = {v: {"flops": flops(models[v], x), "memory_mib": memory(models[v], opts[v], x, device, args.bf16)}
                for v in names}
        for v in names:  # warm-up
            for _ in range(args.warmup):
                fns[v]()
        sync(device)
        times = {v: [] for v in names}
        rng = random.Random(0)
        for _ in range(args.reps):
            order = names[:]
            rng.shuffle(order)
            for v in order:
                sync(device)
                t = time.perf_counter()
                fns[v]()
                sync(device)
                times[v].append(time.perf_counter() - t)
        base = times["mha"]
        row = {}
        for v in names:
            ratios = [a / b for a, b in zip(times[v], base)]
            row[v] = {"median_s": statistics.median(times[v]), "min_s": min(times[v]), "max_s": max(times[v]),
                      "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
                      "flops_ratio": info[v]["flops"] / info["mha"]["flops"], "gflop": info[v]["flops"] / 1e9,
                      "memory_mib": info[v]["memory_mib"],
                      "memory_ratio": info[v]["memory_mib"] / info["mha"]["memory_mib"],
                      "times_s": times[v]}
        results[ctx] = row
        del models, opts, fns
    return results


def markdown(results: dict, args: dict, meta: dict) -> str:
    """The measurement tables (what the script prints) from the raw results."""
    mem = "peak allocated (MiB)" if args["device"].startswith("cuda") else "saved-for-backward activations (MiB)"
    out = [f"device {args['device']}, {meta['threads']} thread(s), torch {meta['torch']}; model: width "
           f"{args['dim']}, {args['layers']} layers, {args['heads']} heads, vocabulary {args['vocab']}, batch "
           f"{args['batch']}{', bf16 autocast' if args['bf16'] else ', fp32'}; {args['reps']} interleaved "
           "repetitions\n"]
    for ctx, row in results.items():
        out.append(f"\n### context {ctx}\n")
        out.append(f"| variant | step time median [min, max] (ms) | ratio to MHA median [min, max] | budget | "
                   f"GFLOP/step | FLOP ratio | {mem} | memory ratio |")
        out.append("|---|---:|---:|:---:|---:|---:|---:|---:|")
        for v, r in row.items():
            b = BUDGET.get(v)
            verdict = "" if b is None else (f"≤ {b}: {'yes' if r['ratio_median'] <= b else 'NO'}")
            out.append(f"| {v} | {r['median_s'] * 1e3:.1f} [{r['min_s'] * 1e3:.1f}, {r['max_s'] * 1e3:.1f}] | "
                       f"{r['ratio_median']:.3f} [{r['ratio_min']:.3f}, {r['ratio_max']:.3f}] | {verdict} | "
                       f"{r['gflop']:.2f} | {r['flops_ratio']:.2f} | {r['memory_mib']:.1f} | {r['memory_ratio']:.2f} |")
        if "mha2nd" in args["variants"] and int(ctx) > args["mha2nd_max_ctx"]:  # requested, not run: say so
            out.append(f"\nmha2nd: not run at context {ctx} (above --mha2nd-max-ctx {args['mha2nd_max_ctx']}: its "
                       "per-token eigh makes a step too slow there)")
    return "\n".join(out)


NAMES = {"momen_mha": "MomenMHA", "nag_mha": "NagMHA", "mha2nd_lite": "MHA2nd-lite", "mha2nd1st": "MHA2nd1st"}


def page(raw: dict) -> str:
    """``docs/results/intrinsic/cpu/benchmark.md`` from the raw output of ``--json``."""
    args, meta, results = raw["args"], raw["meta"], raw["results"]
    ctxs = list(results)
    lines = ["# Intrinsic attention kinds: CPU training-step benchmark (issue 10, Performance)", "",
             "Rendered by `python benchmarks/intrinsic_attention.py --render-only DIR` from the committed raw output "
             "[benchmark.json](benchmark.json), measured by:", "", "```", meta["command"], "```", "",
             f"Measured on a shared {meta['cpus']}-core machine {_page.load_words(meta)} "
             f"({_page.load_line(meta)}), with `nice -n {meta['nice']}`, {meta['threads']} torch thread, variants "
             f"shuffled and interleaved within each of {args['reps']} repetitions so that the load hits all alike. "
             "The spread of the per-repetition ratios (in brackets) is the measure of that noise: a median whose range "
             "straddles a budget is not settled by this run. Memory on CPU is the bytes saved for backward "
             "(activation memory, deterministic), not a peak. FLOPs are exact (`FlopCounterMode`: matmuls and SDPA; "
             "element-wise work such as the momentum update is not counted).", "",
             "Targets (median ratio to MHA, [min, max] over repetitions):", "",
             "| target | " + " | ".join(f"context {c}" for c in ctxs) + " |", "|---|" + "---|" * len(ctxs)]
    for v, b in BUDGET.items():
        cells = []
        for c in ctxs:
            r = results[c].get(v)
            cells.append("not run" if r is None else
                         f"{r['ratio_median']:.3f} [{r['ratio_min']:.3f}, {r['ratio_max']:.3f}]: "
                         f"{'met' if r['ratio_median'] <= b else 'not met'}"
                         f"{' (range straddles it)' if r['ratio_min'] <= b < r['ratio_max'] else ''}")
        lines.append(f"| {NAMES[v]} ≤ {b}x | " + " | ".join(cells) + " |")
    last = ctxs[-1]
    acts = ", ".join(f"{NAMES.get(v, v)} {r['memory_ratio']:.2f}" for v, r in results[last].items() if v != "mha")
    lines += [f"| activations at {last} (x MHA) | " + " | " * (len(ctxs) - 1) + acts + " |", "",
              "MHA2nd1st materialises the N×N attention matrix (no fused kernel returns P, and the bias `C a` needs "
              "it), so its cost grows faster with the context than MHA's. The GPU measurement "
              "([../gpu/benchmark.md](../gpu/benchmark.md), H100) is free of this machine's load.", "",
              "## Output", "", markdown(results, args, meta)]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    pos = _page.positive_int
    p.add_argument("--contexts", nargs="+", type=pos, default=[256, 1024])
    p.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, choices=list(VARIANTS),
                   help="mha is always run (the ratios are to it)")
    p.add_argument("--dim", type=pos, default=128)
    p.add_argument("--layers", type=pos, default=2)
    p.add_argument("--heads", type=pos, default=2)
    p.add_argument("--vocab", type=pos, default=256)
    p.add_argument("--batch", type=pos, default=2)
    p.add_argument("--reps", type=pos, default=7)
    p.add_argument("--warmup", type=_page.nonneg_int, default=2)
    p.add_argument("--threads", type=pos, default=1)
    p.add_argument("--mha2nd-max-ctx", type=pos, default=256,
                   help="MHA2nd (per-token eigh) only up to this context (a longer one is noted as not run)")
    p.add_argument("--device", type=_page.device_arg, default="cpu", help="cpu or cuda")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--json", type=Path, help="also write the raw results and the machine here")
    p.add_argument("--render-only", type=Path, metavar="DIR",
                   help="measure nothing: write DIR/benchmark.md from DIR/benchmark.json")
    a = p.parse_args(argv)
    if a.render_only:
        _page.write_page(a.render_only, "benchmark.md", page(_page.read_json(a.render_only, "benchmark.json")))
        return 0
    if "mha" not in a.variants:
        a.variants = ["mha"] + a.variants
    torch.set_num_threads(a.threads)
    meta = _page.machine(argv)
    print(_page.header(a.device))
    res = bench(a)
    meta = _page.finish(meta)
    args = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items() if k not in ("json", "render_only")}
    print(markdown(res, args, meta))
    if a.json:
        _page.write_json(a.json, {"args": args, "meta": meta, "results": {str(k): v for k, v in res.items()}})
    return 0


if __name__ == "__main__":
    _page.run(main)
