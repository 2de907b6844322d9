"""Registers, spills and shared memory of CEM's one-program-per-head kernels (``cem_triton_heads.py``) per tile
pair and number of software-pipelining stages, compiled for sm_90 without a GPU (issue 21).

``KernelTiles.num_stages`` (Triton's prefetch buffers per load) is 1 by default and was 1 in every GPU timing so
far (docs/results/cem/gpu_h100/gpu_tiles_98ac984.md). This table says which (tiles, stages) launches fit — no
spill, under the 255-register cap and the 227 KiB of shared memory per block — so that a GPU session times only
those (``benchmarks/cem_tiles.py --grid heads --num-stages 1,2,3``). GPT-2 small's call (12 heads of 64, D 768,
bf16, causal, ALiBi and self bias, the head-summed read-out), through ``cem_compile.resources`` (a fresh process;
Triton's compiler and its bundled ptxas).

    python scripts/cem_heads_resources.py --out docs/results/cem/heads_stages.md

``--head-sums atomic,gather,gather_all`` and ``--shared-dtype accumulation,operand`` cross the launches with how
the head sums are formed (``KernelTiles.head_sums``: gathered, the kernels include ``_psum_h``, and with
'gather_all' ``_dsum_h``) and the dtype the shared products are stored in (``KernelTiles.shared_dtype``):

    python scripts/cem_heads_resources.py --tiles 16x64w4,64x32w4 --stages 1 --head-sums atomic,gather,gather_all \
        --shared-dtype accumulation,operand --out docs/results/cem/heads_gather_resources.md

``--psum-keys 0,512`` crosses the gathered launches with ``KernelTiles.psum_keys`` (``_psum_h``'s keys per program):

    python scripts/cem_heads_resources.py --tiles 16x64w4,64x32w4 --stages 1 --head-sums gather \
        --shared-dtype operand --psum-keys 0,512 --out docs/results/cem/psum_resources.md

``--kv KxQwW,...`` gives the backward's key-tile kernel tiles of its own (``KernelTiles.kv_keys``, ``kv_queries``,
``kv_warps``: K keys owned, Q queries a step, W warps) and compiles only ``_bwd_kv_h`` (the other kernels do not
take them):

    python scripts/cem_heads_resources.py --tiles 16x64w4 --stages 1 --head-sums gather --shared-dtype operand \
        --kv 16x64w4,64x32w4,64x32w8,64x64w4,64x64w8,128x16w4,128x16w8,128x32w8,128x64w8 \
        --out docs/results/cem/kv_tiles_resources.md

Every table adds each kernel's share of tensor-core work on Hopper's wgmma (``cem_compile.mma_work``);
``--product-order auto,queries`` crosses the launches with the way the kernels form their per-head products
(``KernelTiles.product_order``; docs/results/cem/tensor_cores_tiles.md, tensor_cores_kv.md).
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
from pathlib import Path

from energyformer.energies.cem_compile import (GATHER_KERNELS, GRID_KERNELS, SHARED_LIMIT_SM90, STACK_KERNELS,
                                               CompilerUnavailable, resources)
from energyformer.energies.cem_launch import KernelTiles

TILES = "16x64w4,64x32w4,128x32w8,64x64w4"


def _tile(t: str, what: str) -> tuple[int, int, int]:
    m = re.fullmatch(r"(\d+)x(\d+)w(\d+)", t.strip())
    if m is None:
        raise SystemExit(f"{what}: {t!r} is not MxNwW (e.g. 64x32w4)")
    return int(m[1]), int(m[2]), int(m[3])


def kv_cases(base: dict[str, dict], kv: str) -> dict[str, dict]:
    """every case of ``base`` with each of the key-tile kernel's own tiles in ``kv`` (KxQwW: keys owned, queries a
    step, warps)"""
    out = {}
    for name, kw in base.items():
        for t in kv.split(","):
            k, q, w = _tile(t, "--kv")
            out[f"{name}; key-tile kernel {k} keys × {q} queries, {w} warps"] = dict(kw, kv_keys=k, kv_queries=q,
                                                                                     kv_warps=w)
    return out


def ordered(base: dict[str, dict], product_order: str = "auto") -> dict[str, dict]:
    """every case of ``base`` with each ``KernelTiles.product_order`` of the comma list ``product_order`` (named
    where not 'auto')"""
    return {name + ("" if order == "auto" else f", {order} first"): dict(kw, product_order=order)
            for name, kw in base.items() for order in product_order.split(",")}


def heads_shape(text: str) -> tuple[int, int]:
    """``--heads HxR``: H heads of R dimensions (GPT-2 small: 12x64)"""
    m = re.fullmatch(r"(\d+)x(\d+)", text.strip())
    if m is None or int(m[1]) < 1 or int(m[2]) < 1:
        raise SystemExit(f"--heads: {text!r} is not HxR with H, R >= 1 (e.g. 12x64: 12 heads of 64)")
    return int(m[1]), int(m[2])


def cases(tiles: str, stages: str, dim: int, head_sums: str = "atomic",
          shared_dtype: str = "accumulation", psum_keys: str = "", heads: tuple[int, int] = (12, 64),
          readout: str = "sum", x_cols: int | None = None) -> dict[str, dict]:
    """launch_meta keywords per launch; ``psum_keys`` (a comma list, gathered head sums only; "": the default);
    ``heads`` (H, R); ``readout`` a comma list of h read-outs ('sum': the head-summed one, 'stack': per-head factors,
    the paper configuration's, launched as the energy launches it, ``KernelTiles.launch``); ``x_cols`` the extra
    value columns per head (the paper's rank-4 low-rank bank: 8), None for none"""
    out = {}
    for t, st, hsum, sd, ro in itertools.product(tiles.split(","), stages.split(","), head_sums.split(","),
                                                 shared_dtype.split(","), readout.split(",")):
        bm, bn, w = _tile(t, "--tiles")
        if ro not in ("sum", "stack"):
            raise SystemExit(f"--readout: {ro!r} is not 'sum' or 'stack'")
        for pk in (psum_keys.split(",") if psum_keys and hsum != "atomic" else [""]):
            extra = "" if (hsum, sd) == ("atomic", "accumulation") else f", head sums {hsum}, shared {sd}"
            extra += f", psum_keys {pk}" if pk else ""
            extra += ", per-head factors" if ro == "stack" else ""
            extra += f", {x_cols} value columns" if x_cols else ""
            out[f"{bm}×{bn}, {w} warps, {st} stage(s){extra}"] = dict(
                heads=heads[0], head_dim=heads[1], dim=dim, block_m=bm, block_n=bn, num_warps=w, num_stages=int(st),
                grid="heads", head_sums=hsum, shared_dtype=sd, **({"psum_keys": int(pk)} if pk else {}),
                **({"h_mode": ro} if ro != "sum" else {}), **({"x_cols": x_cols} if x_cols else {}))
    return out


def wgmma_share(used: dict[str, int]) -> str:
    """the share of a kernel's tensor-core multiply-adds issued as Hopper's wgmma (``cem_compile.mma_work``), or
    "" where the compile result has no such count"""
    if "wgmma" not in used:
        return ""
    total = used["wgmma"] + used["mma_sync"]
    return f", {100 * used['wgmma'] / total:.0f} %" if total else ", —"


def table(res: dict[str, dict[str, dict[str, int]]], kernels: tuple[str, ...] = GRID_KERNELS) -> list[str]:
    mma = any("wgmma" in u for ks in res.values() for u in ks.values())
    what = "registers (spill stores B), shared KiB" + (", products on wgmma" if mma else "")
    lines = ["| launch | " + " | ".join(f"`{k}` {what}" for k in kernels) + " | fits |",
             "|---" * (len(kernels) + 2) + "|"]
    for case, ks in res.items():
        cells = [f"{ks[k]['registers']} ({ks[k]['spill_stores']:,}), {ks[k]['shared'] / 1024:.0f}{wgmma_share(ks[k])}"
                 if k in ks else "— (not launched)" for k in kernels]
        fits = all(u["spill_stores"] == 0 and u["shared"] <= SHARED_LIMIT_SM90 for u in ks.values())
        lines.append(f"| {case} | " + " | ".join(cells) + f" | {'yes' if fits else 'no'} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiles", default=TILES, help="comma-separated MxNwW launches (block_m x block_n, W warps)")
    ap.add_argument("--stages", default="1,2,3", help="comma-separated num_stages values")
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--heads", default="12x64", help="HxR: H heads of R dimensions (default: GPT-2 small's 12x64)")
    ap.add_argument("--readout", default="sum",
                    help="comma-separated h read-outs: sum (head-summed), stack (per-head factors: the paper "
                         "configuration, which also launches _dv_h)")
    ap.add_argument("--x-cols", type=int, help="extra value columns per head (the paper's rank-4 bank: 8)")
    ap.add_argument("--head-sums", default="atomic", help="comma-separated KernelTiles.head_sums values")
    ap.add_argument("--shared-dtype", default="accumulation", help="comma-separated KernelTiles.shared_dtype values")
    ap.add_argument("--psum-keys", default="", help="comma-separated KernelTiles.psum_keys values (gathered sums)")
    ap.add_argument("--kv", help="comma-separated KxQwW tiles of the backward's key-tile kernel (only it compiled)")
    ap.add_argument("--product-order", default="auto",
                    help="comma-separated KernelTiles.product_order values (auto: every per-head product with the "
                         "longer side of its output as its rows; queries: every product as before the field)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--title", help="the --out page's title (default: one naming the options crossed)")
    a = ap.parse_args(argv)
    def launched(head_sums: str) -> tuple[str, ...]:  # _psum_h where Σ P is gathered; _dsum_h for _bwd_d_h with Σ dS
        heads = tuple(k for k in GRID_KERNELS if not (head_sums == "gather_all" and k == "_bwd_d_h"))
        return heads + GATHER_KERNELS[:{"atomic": 0, "gather": 1, "gather_all": 2}[head_sums]]

    def launched_case(kw: dict) -> tuple[str, ...]:  # the head sums the launch forms ('auto' resolved); stack: _dv_h
        hmode = kw.get("h_mode", "sum")
        tiles = KernelTiles(**{k: v for k, v in kw.items() if k in KernelTiles.model_fields}).launch(hmode)
        return launched(tiles.head_sums_for(hmode)) + (STACK_KERNELS if hmode == "stack" else ())

    shape = heads_shape(a.heads)
    try:
        all_cases = cases(a.tiles, a.stages, a.dim, a.head_sums, a.shared_dtype, a.psum_keys, shape, a.readout,
                          a.x_cols)
        if a.kv:
            all_cases = kv_cases(all_cases, a.kv)
        all_cases = ordered(all_cases, a.product_order)
        kernels = ("_bwd_kv_h",) if a.kv else tuple(dict.fromkeys(k for kw in all_cases.values()
                                                                  for k in GRID_KERNELS + launched_case(kw)))
        res = {}
        for name, kw in all_cases.items():  # _psum_h only where the head sums are gathered
            res.update(resources({name: kw}, kernels=kernels if a.kv else launched_case(kw)))
    except CompilerUnavailable as err:
        print(f"unavailable: triton cannot compile for sm_90 here: {err}")
        sys.exit(3)
    import triton

    readouts = " / ".join(f"'{r}'" for r in a.readout.split(","))
    cols = f", {a.x_cols} extra value columns per head" if a.x_cols else ""
    text = "\n".join([f"triton {triton.__version__}, sm_90a, bf16, H {shape[0]} × R {shape[1]}, D {a.dim}, causal, "
                      f"ALiBi + self bias, h read-out {readouts}{cols}, one program per head; registers per thread "
                      "(255: the cap), spill stores "
                      "per thread, shared memory per block (limit 227 KiB); products on wgmma: the share of a "
                      "program's tensor-core multiply-adds that its PTX issues as Hopper's wgmma rather than as "
                      "mma.sync (`cem_compile.mma_work`: every instruction once, times the warps or warpgroups that "
                      "issue it)", "", *table(res, kernels)])
    print(text)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        title = a.title or (
            "The backward's key-tile kernel on tiles of its own (`KernelTiles.kv_keys`, `kv_queries`, `kv_warps`)"
            if a.kv else "The gathered head sums' keys per `_psum_h` program (`KernelTiles.psum_keys`)"
            if a.psum_keys else "One program per head: launches that fit, by pipelining stages")
        a.out.write_text(f"# {title} (`python scripts/cem_heads_resources.py`)\n\n" + text + "\n")


if __name__ == "__main__":
    main()
