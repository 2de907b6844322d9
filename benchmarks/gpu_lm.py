"""CEM vs Llama at GPT-2-small size: tokens/s and peak step memory (issue 21's table).

For each setting (sequence length N × batch B), precision (bf16 autocast, fp32) and mode (training step
= forward + backward + AdamW; inference forward), every model is timed interleaved with the others
(``_timing.interleaved_times``: the starting model rotates every repeat), and the table gives

* tokens/s (median over repeats) and the ratio to the Llama baseline, median [min, max] of the
  per-repeat ratios;
* peak step memory (CUDA only): the peak allocated during one call, minus what was allocated before
  it, plus the model's own resident state (parameters and, in training, AdamW's two moments) — what
  the model would use alone, although all models share the device; the ratio to Llama's.

Models (built with ``benchmarks/lm_throughput.py``'s helpers): the Llama baseline, CEM attention T=1 +
Llama MLP, full CEM T=1 (``attn_path: auto``: the Triton kernel on CUDA when triton is installed,
otherwise the blocked path; its default launch: one program per head), the same with the kernel
recomputing the products its heads share (``attn_kernel.shared: recompute``; the default materialises
them with batched matmuls; on CPU the same blocked path as auto), with the kernel's row tiles
(``attn_kernel.grid: rows``, the default before the first GPU timing) and with one program per head on
64 × 32 tiles, full CEM T=1 forced onto the blocked and the fused paths, and the CEM
paper configuration (T=2, diagonal + low-rank per-head preconditioners; ``auto``, so the kernel on
CUDA, and forced onto the blocked path). A model that runs out of memory is reported as OOM and left out of
the later repeats.

Usage (GPU; write the output under docs/results/cem/):
    python benchmarks/gpu_lm.py --out docs/results/cem/gpu_lm.md
    python benchmarks/gpu_lm.py --precisions bf16 --modes training --cuda-graph \
        --models "full CEM T=1 (auto path)"     # + the same models with each step one CUDA graph
    python benchmarks/gpu_lm.py --compile ...   # every model torch.compile'd first (train.compile)
    python benchmarks/gpu_lm.py --compile reduce-overhead ...   # + CUDA graph trees (train.compile's mode)
    python benchmarks/gpu_lm.py --tiny          # CPU smoke run at a tiny size (the test's)
    python benchmarks/gpu_lm.py --render-only docs/results/cem/gpu_h100   # its README.md: issue 21's targets
                                                # and verdicts from the gpu_lm*.md there (_gpu_lm_page.py)
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402  (sibling scripts)
from _page import git_commit  # noqa: E402  (host_time, hyperset_gpu import it from here)
from _timing import median  # noqa: E402
from lm_throughput import (  # noqa: E402  (a sibling script)
    CausalLM, make_graphed_train_step, make_infer_step, make_train_step, model_config, ours_logits, pick_device,
)

from energyformer.blocks.cem import CEMAttentionConfig, CEMMLPConfig  # noqa: E402
from energyformer.blocks.layer import BlockConfig  # noqa: E402

BASE = "Llama baseline"


def models() -> dict[str, BlockConfig]:
    """The compared blocks (issue 21's table plus the forced blocked / fused paths)."""
    paper = dict(steps=2, precond="diag_low_rank")
    return {
        BASE: BlockConfig(),
        "CEM attention T=1 + Llama MLP": BlockConfig(attention="cem"),
        "full CEM T=1 (auto path)": BlockConfig(attention="cem", mlp="cem"),
        "full CEM T=1, kernel recomputing shared products": BlockConfig(
            attention=CEMAttentionConfig(attn_kernel={"shared": "recompute"}), mlp="cem"),
        "full CEM T=1, kernel with row tiles (grid rows)": BlockConfig(
            attention=CEMAttentionConfig(attn_kernel={"grid": "rows"}), mlp="cem"),
        "full CEM T=1, kernel with one program per head (64 × 32)": BlockConfig(
            attention=CEMAttentionConfig(attn_kernel={"grid": "heads", "block_m": 64, "block_n": 32}), mlp="cem"),
        "full CEM T=1, one program per head, 2 pipelining stages": BlockConfig(
            attention=CEMAttentionConfig(attn_kernel={"num_stages": 2}), mlp="cem"),
        # the same programs as the default, the heads of one (tile, batch row) launched next to each other
        "full CEM T=1, one program per head, heads launched inner": BlockConfig(
            attention=CEMAttentionConfig(attn_kernel={"grid": "heads_inner"}), mlp="cem"),
        # the shared products in 2 causal row chunks instead of 4: 30 fewer ops per layer (cem_ops.py), each
        # product 1.5 causal products' FLOPs instead of 1.25
        "full CEM T=1, two causal chunks": BlockConfig(
            attention=CEMAttentionConfig(attn_kernel={"causal_chunks": 2}), mlp="cem"),
        # Σ_k P_k gathered by _psum_h and kept for the backward (no atomic head sums; the head's forward in one
        # pass): 22% fewer bytes per layer than one program per head by cem_flops.py's tile model at N 4k;
        # docs/cem.md, "head sums gathered"
        "full CEM T=1, head sums gathered": BlockConfig(
            attention=CEMAttentionConfig(attn_kernel={"head_sums": "gather"}), mlp="cem"),
        # and G, dHs Hᵀ stored in the operands' dtype (bf16 under autocast): half the bytes each head reads per pair
        "full CEM T=1, head sums gathered, shared products in the operand dtype": BlockConfig(
            attention=CEMAttentionConfig(attn_kernel={"head_sums": "gather", "shared_dtype": "operand"}), mlp="cem"),
        # and Σ_k dS_k gathered too (_dsum_h: two more per-head products in the backward, no atomic dS)
        "full CEM T=1, all head sums gathered, shared products in the operand dtype": BlockConfig(
            attention=CEMAttentionConfig(attn_kernel={"head_sums": "gather_all", "shared_dtype": "operand"}),
            mlp="cem"),
        # the default launch before 2026-11-27 (Σ_k P_k added atomically by every head, G and dHs Hᵀ in float32),
        # and at 64 × 32 tiles, the fastest kernel pair at N 4k (docs/results/cem/gpu_h100/gpu_tiles_gather_4k_*)
        "full CEM T=1, head sums atomic": BlockConfig(
            attention=CEMAttentionConfig(attn_kernel={"head_sums": "atomic", "shared_dtype": "accumulation"}),
            mlp="cem"),
        "full CEM T=1, head sums atomic (64 × 32)": BlockConfig(
            attention=CEMAttentionConfig(attn_kernel={"head_sums": "atomic", "shared_dtype": "accumulation",
                                                      "block_m": 64, "block_n": 32}), mlp="cem"),
        "full CEM T=1, head sums gathered (64 × 32)": BlockConfig(
            attention=CEMAttentionConfig(attn_kernel={"head_sums": "gather", "block_m": 64, "block_n": 32}),
            mlp="cem"),
        # the backward's key-tile kernel on tiles of its own (KernelTiles.kv_*): dq's atomic adds fall as 1 / keys
        # owned (16 at the default tiles: cem_flops.py); both launches compile for sm_90 without spilling
        # (docs/results/cem/kv_tiles_resources.md)
        "full CEM T=1, key-tile kernel 128 × 32 (8 warps)": BlockConfig(
            attention=CEMAttentionConfig(attn_kernel={"kv_keys": 128, "kv_queries": 32, "kv_warps": 8}), mlp="cem"),
        "full CEM T=1, key-tile kernel 64 × 32": BlockConfig(
            attention=CEMAttentionConfig(attn_kernel={"kv_keys": 64, "kv_queries": 32}), mlp="cem"),
        # and the other kernels on 64 × 32 (the fastest forward pair at 4k, gpu_tiles_gather_4k_d80aaf5.md): the
        # fewest bytes of the tile model (cem_flops.py --heads-tiles 64 32 --kv-keys 128)
        "full CEM T=1, head sums gathered (64 × 32), key-tile kernel 128 × 32 (8 warps)": BlockConfig(
            attention=CEMAttentionConfig(attn_kernel={"head_sums": "gather", "block_m": 64, "block_n": 32,
                                                      "kv_keys": 128, "kv_queries": 32, "kv_warps": 8}), mlp="cem"),
        # every kernel on 128-row tiles and 8 warps: the query-tile kernels' products all on Hopper's wgmma (none at
        # the default 16 × 64), the fewest tile-model bytes with 128 × 64 (cem_flops.py); no spill
        # (docs/results/cem/tensor_cores_tiles.md)
        "full CEM T=1, head sums gathered (128 × 32, 8 warps), key-tile kernel 128 × 32": BlockConfig(
            attention=CEMAttentionConfig(attn_kernel={"head_sums": "gather", "block_m": 128, "block_n": 32,
                                                      "num_warps": 8, "kv_keys": 128, "kv_queries": 32}), mlp="cem"),
        "full CEM T=1, blocked path": BlockConfig(attention=CEMAttentionConfig(attn_path="blocked"), mlp="cem"),
        "full CEM T=1, fused path": BlockConfig(attention=CEMAttentionConfig(attn_path="fused"), mlp="cem"),
        "paper configuration (T=2, D+LR)": BlockConfig(attention=CEMAttentionConfig(**paper),
                                                       mlp=CEMMLPConfig(**paper)),
        # its per-head factors on one program per head, 64 × 32 tiles (KernelTiles.launch; the loop kernels with
        # D-wide float32 accumulators before 2026-11-27: 0.06-0.08x Llama on an H100, the row below)
        "paper configuration, loop kernels (grid rows)": BlockConfig(
            attention=CEMAttentionConfig(**paper, attn_kernel={"grid": "rows"}), mlp=CEMMLPConfig(**paper)),
        # the blocked path does those products as batched matmuls over materialised probabilities
        "paper configuration, blocked path": BlockConfig(
            attention=CEMAttentionConfig(**paper, attn_path="blocked"), mlp=CEMMLPConfig(**paper)),
        # its per-head factors on one program per head: every head's P_k and (dHs ∘ c_k) Hᵀ materialised per
        # layer call, the per-head D-wide products batched matmuls (docs/cem.md, "per-head factors on one
        # program per head"); what 'auto' runs since this row was timed (0.18x vs 0.06x). 64 × 32 tiles: the launch
        # that compiles for sm_90 without spilling with its extra value columns (tests/energies/test_cem_compile.py)
        "paper configuration, one program per head (64 × 32)": BlockConfig(
            attention=CEMAttentionConfig(**paper, attn_kernel={"grid": "heads", "block_m": 64, "block_n": 32}),
            mlp=CEMMLPConfig(**paper)),
        # half the query blocks at N 1k (4 instead of 8): half the blocked path's launches, 11% more causal work
        "paper configuration, blocked path, query block 256": BlockConfig(
            attention=CEMAttentionConfig(**paper, attn_path="blocked", attn_block=256), mlp=CEMMLPConfig(**paper)),
    }


GRAPHED = ", CUDA graph"   # --cuda-graph rows (training): the model's whole step one CUDA graph


def select(blocks: dict, names: str | None, base: str = BASE) -> dict:
    """``--models``: the named models (separated by ';', names hold commas), the baseline always first."""
    if not names:
        return blocks
    wanted = [n.strip() for n in names.split(";") if n.strip()]
    for n in wanted:
        if n not in blocks:
            raise SystemExit(f"--models: {n!r} is not a model here; allowed: {'; '.join(blocks)}")
    return {n: b for n, b in blocks.items() if n == base or n in wanted}


def is_oom(err: BaseException) -> bool:
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err).lower()


def compile_arg(ap: argparse.ArgumentParser, what: str = "") -> None:
    """``--compile [MODE]``: every model torch.compile'd first, as ``train.compile: MODE`` trains it."""
    from energyformer.train.compiling import COMPILE_MODES  # here: hyperset_ops imports this file to count older code

    ap.add_argument("--compile", nargs="?", const="default", choices=COMPILE_MODES, metavar="MODE",
                    help="torch.compile every model first, as train.compile does (MODE: "
                         + ", ".join(COMPILE_MODES) + "; default 'default'; 'reduce-overhead' adds CUDA graphs"
                         + f"; the warm-up calls compile{what})")


def compiled(model: torch.nn.Module, mode: str | None, device: torch.device) -> torch.nn.Module:
    """``model`` as ``train.compile: mode`` trains it (itself when ``mode`` is None)."""
    from energyformer.train.compiling import compile_for_training

    return model if mode is None else compile_for_training(model, mode, device)[0]


def compile_note(mode: str | None, device: torch.device) -> str:
    """The header's words for ``--compile mode`` on ``device`` (the mode it ran in, where that differs)."""
    if mode is None:
        return ""
    from energyformer.train.compiling import effective_mode

    ran = effective_mode(mode, device)
    return f"; torch.compile mode {mode!r}" + (f" (compiled as {ran!r}: no CUDA graphs on {device.type})"
                                               if ran != mode else "")


def keep_going_arg(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--keep-going", action="store_true",
                    help="a model that fails with an error other than OOM is listed with the error's first line "
                         "(traceback on stderr) instead of stopping the run (a device session's one scripted run)")


def state_bytes(model: torch.nn.Module, training: bool) -> int:
    """Parameters, plus AdamW's two moments when training (float32 like the parameters)."""
    n = sum(p.numel() * p.element_size() for p in model.parameters())
    return 3 * n if training else n


def timed_runs(fns: dict[str, Callable[[], None]], warmup: int, repeats: int, device: torch.device,
               own_bytes: dict[str, int], keep_going: bool = False
               ) -> tuple[dict[str, list[float]], dict[str, float | None], dict[str, str]]:
    """(seconds per call, peak step bytes or None, models left out: name -> 'OOM' or 'failed: <error>');
    calls interleaved, the starting model rotated every repeat; an OOM drops the model from the later
    calls. Any other error is raised, unless ``keep_going`` (a device session's one scripted run: one
    model whose kernel does not build must not cost the others' numbers): then its traceback goes to
    stderr and the model is dropped like an OOM, listed with the error's first line."""
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    times: dict[str, list[float]] = {n: [] for n in fns}
    peak: dict[str, float | None] = {n: None for n in fns}
    oom: dict[str, str] = {}

    def call(n: str, timed: bool) -> None:
        if n in oom:
            return
        try:
            if cuda:
                sync()
                before = torch.cuda.memory_allocated(device)
                torch.cuda.reset_peak_memory_stats(device)
            t0 = time.perf_counter()
            fns[n]()
            sync()
            dt = time.perf_counter() - t0
            if cuda:
                step = torch.cuda.max_memory_allocated(device) - before + own_bytes[n]
                peak[n] = max(peak[n] or 0, step)
            if timed:
                times[n].append(dt)
        except Exception as err:  # noqa: BLE001 (re-raised below unless OOM or keep_going)
            if not is_oom(err) and not keep_going:
                raise
            if is_oom(err):
                oom[n] = "OOM"
            else:
                traceback.print_exc()
                first = (str(err).strip().splitlines() or [""])[0][:120].replace("|", "/")
                oom[n] = f"failed: {type(err).__name__}: {first}"
            times[n].clear()
            if cuda:
                torch.cuda.empty_cache()

    names = list(fns)
    for _ in range(warmup):
        for n in names:
            call(n, False)
    for r in range(repeats):
        for n in names[r % len(names):] + names[:r % len(names)]:
            call(n, True)
    return times, peak, oom


def ratio(times: dict[str, list[float]], name: str, base: str = BASE) -> str:
    """tokens/s of ``name`` / ``base``'s (default Llama's), per repeat: 'median [min, max]'."""
    if not times.get(base) or not times.get(name):
        return "—"
    r = [b / t for b, t in zip(times[base], times[name])]
    return f"{median(r):.2f} [{min(r):.2f}, {max(r):.2f}]"


def header(args, device: torch.device) -> list[str]:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or "cpu")
    triton = "not installed"
    if importlib.util.find_spec("triton") is not None:
        import triton
        triton = triton.__version__
    lines = [f"device: {device.type} ({name}); torch {torch.__version__}; triton {triton}; "
             f"commit {git_commit()}; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"]
    if device.type == "cpu":
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        lines.append(f"CPU: {torch.get_num_threads()} threads, {os.cpu_count()} cores, 1-min load {load:.2f}; "
                     "no peak memory on CPU")
    lines.append(f"D={args.dim} L={args.layers} H={args.heads} F={args.mlp_hidden} V={args.vocab}; "
                 f"{args.repeats} interleaved repeats after {args.warmup} warm-up per model"
                 f"{compile_note(getattr(args, 'compile', None), device)}")
    return lines


def run(args, emit: Callable[[list[str]], None] = lambda lines: None) -> list[str]:
    """Every table's lines; ``emit(lines so far)`` after each table (a run cut short keeps what it measured)."""
    device = pick_device()
    out = header(args, device)
    blocks = select(models(), args.models)
    if args.cuda_graph:  # every model again, its whole training step one CUDA graph
        blocks |= {name + GRAPHED: block for name, block in list(blocks.items())}
    for setting in args.settings.split(","):
        n, b = (int(v) for v in setting.lower().split("x"))
        g = torch.Generator().manual_seed(2)
        idx = torch.randint(0, args.vocab, (b, n + 1), generator=g).to(device)
        x, y = idx[:, :-1], idx[:, 1:]
        for precision in args.precisions.split(","):
            for mode in args.modes.split(","):
                training = mode == "training"
                built = {}
                for name, block in blocks.items():
                    if name.endswith(GRAPHED) and not training:
                        continue
                    torch.manual_seed(0)
                    built[name] = CausalLM(model_config(args.vocab, args.dim, args.layers, args.heads,
                                                        args.mlp_hidden, n, block)).to(device)
                step = {True: make_graphed_train_step, False: make_train_step}
                run_as = {name: m if name.endswith(GRAPHED) else compiled(m, args.compile, device)
                          for name, m in built.items()}  # as train.compile: the warm-up calls compile
                fns = {name: (step[name.endswith(GRAPHED)](m, ours_logits, x, y, precision=precision) if training
                              else make_infer_step(m, ours_logits, x, precision=precision))
                       for name, m in run_as.items()}
                own = {name: state_bytes(m, training) for name, m in built.items()}
                times, peak, oom = timed_runs(fns, args.warmup, args.repeats, device, own, args.keep_going)
                out += ["", f"### N = {n}, B = {b}, {precision}{' autocast' if precision == 'bf16' else ''}, {mode}",
                        "", "| model | tokens/s | × Llama, median [min, max] | peak step GiB | × Llama |",
                        "|---|---|---|---|---|"]
                for name in built:
                    base = BASE + GRAPHED if name.endswith(GRAPHED) else BASE
                    if name in oom:
                        out.append(f"| {name} | {oom[name]} | — | {'OOM' if oom[name] == 'OOM' else '—'} | — |")
                        continue
                    tps = b * n / median(times[name])
                    mem = "n/a" if peak[name] is None else f"{peak[name] / 2**30:.2f}"
                    mem_r = "n/a" if peak[name] is None or peak.get(base) is None or base in oom \
                        else f"{peak[name] / peak[base]:.2f}"
                    out.append(f"| {name} | {tps:,.0f} | {ratio(times, name, base)} | {mem} | {mem_r} |")
                emit(out)
                del built, fns
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--mlp-hidden", type=int, default=2048)
    ap.add_argument("--settings", help="comma-separated NxB (sequence × batch); default 1024x8,4096x2 "
                    "(--tiny: 16x2)")
    ap.add_argument("--precisions", type=_page.precisions, default="bf16,fp32", help="bf16 (autocast) and/or fp32")
    ap.add_argument("--modes", default="training,inference", help="training and/or inference")
    ap.add_argument("--models", help="only these models (names separated by ';'; the Llama baseline is always "
                    "timed); default: all")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="(CUDA, training) also time every model with its whole step captured as one CUDA graph "
                         "(lm_throughput.make_graphed_train_step); those rows' ratios are to the graphed Llama")
    compile_arg(ap, "; not the --cuda-graph rows")
    ap.add_argument("--repeats", type=_page.positive_int, help="timed repeats per model (default 5; --tiny: 2)")
    ap.add_argument("--warmup", type=_page.nonneg_int, help="untimed calls per model first (default 2; --tiny: 1)")
    ap.add_argument("--tiny", action="store_true", help="CPU smoke size: D 32, 2 layers, V 97")
    keep_going_arg(ap)
    ap.add_argument("--out", type=Path, help="also write the output to this file (markdown)")
    ap.add_argument("--render-only", type=Path, metavar="DIR",
                    help="measure nothing: write DIR/README.md (issue 21's targets and verdicts) from the gpu_lm*.md "
                         "outputs committed in DIR")
    args = ap.parse_args(argv)
    if args.render_only:
        import _gpu_lm_page

        print(_gpu_lm_page.write(args.render_only))
        return
    if args.tiny:
        args.vocab, args.dim, args.layers, args.heads, args.mlp_hidden = 97, 32, 2, 4, 64
    for key, full, tiny in (("settings", "1024x8,4096x2", "16x2"), ("repeats", 5, 2), ("warmup", 2, 1)):
        if getattr(args, key) is None:
            setattr(args, key, tiny if args.tiny else full)
    if pick_device().type == "cpu":
        torch.set_num_threads(1)
    printed = 0

    def emit(lines: list[str]) -> None:   # print and write each table as it finishes
        nonlocal printed
        print("\n".join(lines[printed:]), flush=True)
        printed = len(lines)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            head = lines[:lines.index("")] if "" in lines else lines
            args.out.write_text("# CEM vs Llama: tokens/s and peak step memory (`python benchmarks/gpu_lm.py`)\n\n"
                                "```\n" + "\n".join(head) + "\n```\n" + "\n".join(lines[len(head):]) + "\n")

    run(args, emit)


if __name__ == "__main__":
    _page.run(main)
