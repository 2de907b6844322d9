"""Launches of the CEM attention kernel (issue 21): forward + backward time per KernelTiles variant.

``energies/cem_kernel.cem_attention`` at one layer's shapes of the GPT-2-small model of
``benchmarks/gpu_lm.py`` (B 8, H 12, R 64, D 768, causal, ALiBi and self bias, the head-summed h
read-out — full CEM T=1's call), bf16 operands: every variant — tile pair (block_m owned × block_n
stepped, optionally with its own warps) × head-loop unroll factor × how the shared products are formed
(``shared``: materialised by batched matmuls or recomputed in the kernels) × what a program owns
(``grid``: rows of every head, or rows of one head; 'heads' only with materialised products) × the row
chunks of the materialised products under the causal mask (``causal_chunks``) × how one program per head forms
the head sum Σ_k P_k (``head_sums``: atomic adds, or gathered by ``_psum_h`` and kept) × the dtype the shared
products are stored in (``shared_dtype``) × Triton's software-pipelining
stages (``num_stages``; at GPT-2 small the one-program-per-head kernels compile without spilling at 2 and 3
stages for 16 × 64, 64 × 32 and 128 × 32 on 8 warps: ``docs/results/cem/heads_stages.md``) — is
timed forward + backward, the variants interleaved and repeated (median [min, max] ms, and the ratio
per repeat to the library's default launch, ``KernelTiles().launch(h_mode)``, timed first where the variants
leave it out). A variant that Triton cannot build (shared
memory, registers) is listed with the error's first line. For scale, Llama's attention core at the same
shapes — ``scaled_dot_product_attention`` over (B, H, N, R), causal, forward + backward — is timed in
the same interleaved loop (``--no-sdpa`` leaves it out). ``--budget SECONDS`` bounds the run (a device
session's minutes are few): no variant is built after half of it has passed (the rest are listed as not
built), and no repeat starts after 85 % of it (at least one runs), so a cut run still prints its table.

``--h-mode stack`` times the paper configuration's call instead (per-head factors c_k and the rank-4 bank's
8 extra value columns per head; the library's default launch for it is one program per head on 64 × 32 tiles),
where one program per head materialises the per-head products (docs/cem.md, "per-head factors on one program
per head").

Usage (GPU):  python benchmarks/cem_tiles.py --out docs/results/cem/gpu_tiles.md [--n 1024] [--batch 8]
              [--tiles 16x16,16x64,32x64w8] [--head-unroll 1,2] [--shared materialize,recompute]
              [--grid rows,heads] [--causal-chunks 4,8] [--h-mode sum|stack] [--head-sums atomic,gather]
              [--shared-dtype accumulation,operand]
              [--num-stages 1,2,3] [--block-d 64] [--num-warps 4]   # the rest of the launch (KernelTiles)
              python benchmarks/cem_tiles.py --tiny   # CPU smoke run through Triton's interpreter
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path
from typing import NamedTuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402  (siblings)
from _timing import median  # noqa: E402
from lm_throughput import pick_device  # noqa: E402

# the launches that compile under the 255-register cap at GPT-2 small (docs/cem.md, "Registers"), and 64 × 64;
# 64 × 32 and 128 × 32 on 8 warps: the largest that one program per head compiles without spilling
DEFAULT_TILES = "16x16,16x32,32x32,16x64,32x64w8,16x128,64x64w8,64x32,128x32w8"
SDPA = "sdpa"  # the reference row: Llama's attention core


class Variant(NamedTuple):
    block_m: int
    block_n: int
    head_unroll: int
    num_warps: int
    shared: str
    grid: str = "rows"
    causal_chunks: int = 4
    num_stages: int = 1
    head_sums: str = "atomic"
    shared_dtype: str = "accumulation"
    kv: str = ""  # the backward's key-tile kernel's own tiles KxQwW (KernelTiles.kv_*); "": the tiles above
    psum_keys: int = 512  # keys per program of the gathered head sums (KernelTiles.psum_keys; 0: a whole row)
    product_order: str = "queries"  # 'auto': products turned to their longer side (KernelTiles.product_order)

    def label(self) -> str:
        return (f"| {self.block_m}×{self.block_n} | {self.head_unroll} | {self.num_warps} | {self.shared} "
                f"| {self.grid} | {self.causal_chunks} | {self.num_stages} | {self.head_sums} | {self.shared_dtype} "
                f"| {self.kv or '—'} | {self.psum_keys} | {self.product_order} |")

    def launch(self) -> dict:
        """the variant as :func:`cem_attention`'s keywords"""
        out = self._asdict()
        kv = out.pop("kv")
        if kv:
            out.update(zip(("kv_keys", "kv_queries", "kv_warps"), kv_tiles(kv)))
        return out


def kv_tiles(t: str) -> tuple[int, int, int]:
    """(keys owned, queries a step, warps) of a ``--kv`` item ``KxQwW``"""
    m = re.fullmatch(r"(\d+)x(\d+)w(\d+)", t.strip())
    if m is None:
        raise SystemExit(f"--kv: {t!r} is not KxQwW (e.g. 128x32w8: keys owned, queries a step, warps)")
    return int(m[1]), int(m[2]), int(m[3])


def parse_tiles(spec: str, head_unroll: str, num_warps: int, shared: str = "materialize",
                grid: str = "rows", causal_chunks: str = "4", num_stages: str = "1",
                head_sums: str = "atomic", shared_dtype: str = "accumulation", kv: str = "",
                psum_keys: str = "512", product_order: str = "queries") -> list[Variant]:
    """Variants: every ``MxN`` or ``MxNwW`` (W warps for this pair; else ``num_warps``) of the comma list
    ``spec``, with every head_unroll, ``shared``, ``grid``, ``causal_chunks``, ``num_stages``, ``head_sums``,
    ``shared_dtype``, ``kv`` (the key-tile kernel's own ``KxQwW``; an empty item: the pair's), ``psum_keys``
    (only with gathered head sums, the one kernel it changes) and ``product_order`` (one program per head only)
    value of their comma lists
    (the chunks only change the launcher's batched matmuls, so they add no build) — less the
    combinations KernelTiles refuses (grid 'heads' with shared 'recompute', head sums gathered on grid 'rows',
    shared_dtype 'operand' with shared 'recompute')
    and head_unroll > 1 with grid 'heads' (one program per head has no head loop)."""
    for t in kv.split(","):  # refused before anything is built
        if t.strip():
            kv_tiles(t)
    out = []
    for t in spec.split(","):
        m = re.fullmatch(r"(\d+)x(\d+)(?:w(\d+))?", t.strip())
        if m is None:
            raise SystemExit(f"--tiles: {t!r} is not MxN or MxNwW (e.g. 32x64w8)")
        out += [Variant(int(m[1]), int(m[2]), int(u), int(m[3] or num_warps), s, gr, int(c), int(st), hsum, sd,
                        kt.strip(), int(pk), ko)
                for u in head_unroll.split(",") for s in shared.split(",") for gr in grid.split(",")
                for c in causal_chunks.split(",") for st in num_stages.split(",") for hsum in head_sums.split(",")
                for sd in shared_dtype.split(",") for kt in kv.split(",")
                for pk in (psum_keys.split(",") if hsum != "atomic" else [Variant._field_defaults["psum_keys"]])
                for ko in (product_order.split(",") if gr != "rows"
                           else [Variant._field_defaults["product_order"]])
                if ((gr == "rows" and hsum == "atomic") or (gr != "rows" and s == "materialize" and u == "1"))
                and (s == "materialize" or sd == "accumulation")]
    return out


def inputs(b: int, h: int, n: int, r: int, d: int, dtype: torch.dtype, device: torch.device, h_mode: str = "sum",
           x_cols: int = 8):
    """(q, k, ud, hm, slopes, delta, c, x): one layer's call; c (H, D) float32 and x (B, H, N, x_cols) only with
    per-head factors (``h_mode`` 'stack'), else None."""
    g = torch.Generator().manual_seed(0)

    def t(*shape, scale=1.0):
        return (scale * torch.randn(*shape, generator=g)).to(device, dtype).requires_grad_(True)

    q, k = t(b, h, n, r, scale=r ** -0.5), t(b, h, n, r)
    ud, hm = t(b, n, d, scale=d ** -0.5), t(b, n, d)
    slopes = torch.rand(h, generator=g).to(device)
    delta = torch.zeros(h, device=device, requires_grad=True)
    if h_mode != "stack":
        return q, k, ud, hm, slopes, delta, None, None
    c = (0.5 + torch.rand(h, d, generator=g)).to(device).requires_grad_(True)
    return q, k, ud, hm, slopes, delta, c, t(b, h, n, x_cols, scale=d ** -0.5)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=_page.positive_int, default=1024)
    ap.add_argument("--batch", type=_page.positive_int, default=8)
    ap.add_argument("--heads", type=_page.positive_int, default=12)
    ap.add_argument("--dim", type=_page.positive_int, default=768)
    ap.add_argument("--tiles", default=DEFAULT_TILES, help="comma-separated MxN or MxNwW (W warps) tile pairs")
    ap.add_argument("--head-unroll", default="1", help="comma-separated KernelTiles.head_unroll values")
    ap.add_argument("--shared", default="materialize", help="comma-separated KernelTiles.shared values")
    ap.add_argument("--grid", default="rows,heads", help="comma-separated KernelTiles.grid values")
    ap.add_argument("--causal-chunks", default="4", help="comma-separated KernelTiles.causal_chunks values")
    ap.add_argument("--shared-dtype", default="accumulation",
                    help="comma-separated KernelTiles.shared_dtype values (operand: materialised products only)")
    ap.add_argument("--head-sums", default="atomic",
                    help="comma-separated KernelTiles.head_sums values (gather: one program per head only)")
    ap.add_argument("--kv", default="",
                    help="comma-separated KxQwW tiles of the backward's key-tile kernel (KernelTiles.kv_keys, "
                         "kv_queries, kv_warps); an empty item keeps the pair's (e.g. ',128x32w8')")
    ap.add_argument("--psum-keys", default="512",
                    help="comma-separated KernelTiles.psum_keys values (gathered head sums; 0: one program a row)")
    ap.add_argument("--product-order", default="queries",
                    help="comma-separated KernelTiles.product_order values (queries: every per-head product with the "
                         "queries as its rows; auto: the longer side of its output, refused on CUDA)")
    ap.add_argument("--h-mode", choices=("sum", "stack"), default="sum",
                    help="the h read-out: 'sum' (full CEM T=1) or 'stack' (the paper configuration's per-head factors)")
    ap.add_argument("--no-sdpa", action="store_true", help="leave out the SDPA (Llama attention) reference row")
    ap.add_argument("--block-d", type=_page.positive_int, default=64,
                    help="D chunk of every variant (KernelTiles.block_d)")
    ap.add_argument("--num-warps", type=_page.positive_int, default=4)
    ap.add_argument("--num-stages", default="1", help="comma-separated KernelTiles.num_stages values")
    ap.add_argument("--repeats", type=_page.positive_int, default=5)
    ap.add_argument("--budget", type=float, help="seconds for the whole run (builds stop at 1/2, repeats at 0.85)")
    ap.add_argument("--tiny", action="store_true", help="CPU interpreter smoke size (N 16, D 32, 2 heads)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    if a.tiny:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        a.n, a.batch, a.heads, a.dim, a.repeats = 16, 1, 2, 32, 1
        a.tiles, a.head_unroll, a.shared = "16x64,16x32w2", "1,2", "materialize,recompute"
        a.no_sdpa = False
    from energyformer.energies.cem_kernel import cem_attention
    from energyformer.energies.cem_launch import KernelTiles, shared_store_dtype

    device = pick_device()
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    r = a.dim // a.heads
    q, k, ud, hm, slopes, delta, c, x = inputs(a.batch, a.heads, a.n, r, a.dim, dtype, device, a.h_mode)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    variants = parse_tiles(a.tiles, a.head_unroll, a.num_warps, a.shared, a.grid, a.causal_chunks, a.num_stages,
                           a.head_sums, a.shared_dtype, a.kv, a.psum_keys, a.product_order)
    lib = KernelTiles().launch(a.h_mode)  # the default launch as the energy runs it
    bf16 = shared_store_dtype(lib, torch.bfloat16, torch.float32, a.h_mode) == torch.bfloat16
    default = Variant(lib.block_m, lib.block_n, lib.head_unroll, lib.num_warps, lib.shared,
                      "heads" if lib.per_head_programs(a.h_mode) else "rows", lib.causal_chunks,
                      lib.num_stages, lib.head_sums_for(a.h_mode),
                      "operand" if bf16 else "accumulation", psum_keys=lib.psum_keys,
                      product_order=lib.product_order)  # 'auto' resolved
    variants = ([] if default in variants else [default]) + variants  # the ratios' base is always timed
    variants += [] if a.no_sdpa else [SDPA]
    v_ = k.detach().clone().requires_grad_(True)  # Llama's values: separate from its keys

    def call(v: Variant | str) -> None:
        if v == SDPA:
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v_, is_causal=True)
            o.float().sum().backward()
            return
        oq, hs, ox, _ = cem_attention(q, k, ud, hm, slopes=slopes, delta=delta, key_mask=None, causal=True,
                                      offset=0, h_mode=a.h_mode, c=c, x=x, block_d=a.block_d, **v.launch())
        (oq.float().sum() + hs.float().sum() + (0 if ox is None else ox.float().sum())).backward()

    failed: dict[Variant, str] = {}
    start = time.perf_counter()

    def past(fraction: float) -> bool:
        return a.budget is not None and time.perf_counter() - start > fraction * a.budget

    for v in variants:   # build (compile) each variant once, untimed; said as it goes (a cut run keeps it)
        if past(0.5):
            failed[v] = f"the budget of {a.budget:g} s was half spent before its build"
            continue
        t0 = time.perf_counter()
        try:
            call(v)
            sync()
        except Exception as err:  # noqa: BLE001  (Triton's resource errors have no common base)
            failed[v] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:160]
        print(f"built {v} in {time.perf_counter() - t0:.1f}s: {failed.get(v, 'ok')}", flush=True)
    ok = [v for v in variants if v not in failed]
    times: dict[Variant, list[float]] = {v: [] for v in ok}
    for rep in range(a.repeats):
        if rep and past(0.85):
            a.repeats = rep  # said in the header
            break
        for v in ok[rep % len(ok):] + ok[:rep % len(ok)] if ok else []:
            sync()
            t0 = time.perf_counter()
            call(v)
            sync()
            times[v].append(time.perf_counter() - t0)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (Triton interpreter)"
    lines = [f"device: {device.type} ({name}); torch {torch.__version__}; commit {_page.git_commit()}",
             f"cem_attention forward + backward, B={a.batch} H={a.heads} N={a.n} R={r} D={a.dim}, {dtype}, causal, "
             f"ALiBi + self bias, h read-out {a.h_mode!r}"
             f"{' (per-head factors c_k, 8 extra value columns per head)' if a.h_mode == 'stack' else ''}; "
             f"block_d {a.block_d}; {a.repeats} "
             f"interleaved repeats after one untimed build; ratios to the default launch {default.label()}", "",
             "| block_m × block_n | head_unroll | warps | shared | grid | causal_chunks | num_stages | head_sums "
             "| shared_dtype | key-tile kernel | psum_keys | product_order | ms, median [min, max] "
             "| × default time, median [min, max] |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    base = times.get(default)
    for v in variants:
        label = ("| SDPA: Llama's attention core (B, H, N, R), causal | | | | | | | | | | | |" if v == SDPA
                 else v.label())
        if v in failed:
            lines.append(f"{label} not built: {failed[v]} | — |")
            continue
        ts = times[v]
        rel = "—" if not base else (lambda rs: f"{median(rs):.2f} [{min(rs):.2f}, {max(rs):.2f}]")(
            [x / y for x, y in zip(ts, base)])
        ms = f"{1e3 * median(ts):.2f} [{1e3 * min(ts):.2f}, {1e3 * max(ts):.2f}]"
        lines.append(f"{label} {ms} | {rel} |")
    text = "\n".join(lines)
    print(text, flush=True)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text("# CEM kernel launches (`python benchmarks/cem_tiles.py`)\n\n" + text + "\n")


if __name__ == "__main__":
    _page.run(main)
