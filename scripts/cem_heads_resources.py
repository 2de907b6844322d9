"""Registers, spills and shared memory of CEM's one-program-per-head kernels (``cem_triton_heads.py``) per tile
pair and number of software-pipelining stages, compiled for sm_90 without a GPU (issue 21).

``KernelTiles.num_stages`` (Triton's prefetch buffers per load) is 1 by default and was 1 in every GPU timing so
far (docs/results/cem/gpu_h100/gpu_tiles_98ac984.md). This table says which (tiles, stages) launches fit — no
spill, under the 255-register cap and the 227 KiB of shared memory per block — so that a GPU session times only
those (``benchmarks/cem_tiles.py --grid heads --num-stages 1,2,3``). GPT-2 small's call (12 heads of 64, D 768,
bf16, causal, ALiBi and self bias, the head-summed read-out), through ``cem_compile.resources`` (a fresh process;
Triton's compiler and its bundled ptxas).

    python scripts/cem_heads_resources.py --out docs/results/cem/heads_stages.md
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from energyformer.energies.cem_compile import GRID_KERNELS, SHARED_LIMIT_SM90, CompilerUnavailable, resources

TILES = "16x64w4,64x32w4,128x32w8,64x64w4"


def cases(tiles: str, stages: str, dim: int) -> dict[str, dict]:
    out = {}
    for t in tiles.split(","):
        m = re.fullmatch(r"(\d+)x(\d+)w(\d+)", t.strip())
        if m is None:
            raise SystemExit(f"--tiles: {t!r} is not MxNwW (e.g. 64x32w4)")
        for st in stages.split(","):
            out[f"{m[1]}×{m[2]}, {m[3]} warps, {st} stage(s)"] = dict(
                heads=12, head_dim=64, dim=dim, block_m=int(m[1]), block_n=int(m[2]), num_warps=int(m[3]),
                num_stages=int(st), grid="heads")
    return out


def table(res: dict[str, dict[str, dict[str, int]]]) -> list[str]:
    lines = ["| launch | " + " | ".join(f"`{k}` registers (spill stores B), shared KiB" for k in GRID_KERNELS)
             + " | fits |", "|---" * (len(GRID_KERNELS) + 2) + "|"]
    for case, ks in res.items():
        cells = [f"{ks[k]['registers']} ({ks[k]['spill_stores']:,}), {ks[k]['shared'] / 1024:.0f}"
                 for k in GRID_KERNELS]
        fits = all(ks[k]["spill_stores"] == 0 and ks[k]["shared"] <= SHARED_LIMIT_SM90 for k in GRID_KERNELS)
        lines.append(f"| {case} | " + " | ".join(cells) + f" | {'yes' if fits else 'no'} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiles", default=TILES, help="comma-separated MxNwW launches (block_m x block_n, W warps)")
    ap.add_argument("--stages", default="1,2,3", help="comma-separated num_stages values")
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    try:
        res = resources(cases(a.tiles, a.stages, a.dim), kernels=GRID_KERNELS)
    except CompilerUnavailable as err:
        print(f"unavailable: triton cannot compile for sm_90 here: {err}")
        sys.exit(3)
    import triton

    text = "\n".join([f"triton {triton.__version__}, sm_90a, bf16, H 12 × R 64, D {a.dim}, causal, ALiBi + self bias, "
                      "h read-out 'sum', one program per head; registers per thread (255: the cap), spill stores "
                      "per thread, shared memory per block (limit 227 KiB)", "", *table(res)])
    print(text)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text("# One program per head: launches that fit, by pipelining stages "
                         "(`python scripts/cem_heads_resources.py`)\n\n" + text + "\n")


if __name__ == "__main__":
    main()
