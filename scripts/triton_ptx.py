"""Compile CEM's Triton kernels (src/energyformer/energies/cem_triton.py, and cem_triton_heads.py's at the
flag combinations one program per head runs) for a GPU target on a machine without a GPU and compare
their PTX with another revision's: a kernel refactor that leaves every kernel's instruction stream
unchanged changes neither results nor speed; kernels the base revision lacks are compiled and listed as new.

    python scripts/triton_ptx.py --base main            # working tree vs main, sm_90, 20 configurations
    python scripts/triton_ptx.py --base HEAD~1 --every 1 --arch 80 --num-stages 3

Triton compiles to PTX (and cubin, with its bundled ptxas) without a device; the interpreter tests
(TRITON_INTERPRET=1) never run this compiler, so this also catches code the compiler rejects (e.g. a
loop-carried variable whose shape changes). PTX is compared line by line with debug line labels and
``.loc`` directives dropped; exit status 1 when any kernel differs. Both revisions are compiled by
``energyformer.energies.cem_compile`` (this checkout's) with the same options: the launcher's default
``num_stages`` and a real launch's alignment specialisation.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # compiled mode: triton fixes it at its first import

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's energyformer, whatever the venv's install points to

import triton.language as tl  # noqa: E402

from energyformer.energies.cem_compile import (  # noqa: E402
    GRID_KERNELS, KERNELS, compile_kernel, kernel_file, load_kernels,
)
from energyformer.energies.cem_launch import kernel_meta  # noqa: E402

KERNEL = "src/energyformer/energies/cem_triton.py"
HEADS_KERNEL = "src/energyformer/energies/cem_triton_heads.py"  # KernelTiles.grid = 'heads' (its own kernels)
HEADS_TILES = "src/energyformer/energies/cem_triton_heads_tiles.py"  # their tile helpers (revisions after 2026-11-27)


def configurations(every: int) -> list[dict]:
    """every ``every``-th of the 96 flag combinations (causal, diagonal, h read-out, x columns, dtype,
    materialised shared products); DP (D padded, revisions before issue 21's D chunks), BD (the D chunk),
    HU, MAT, HI, GATHER, KT, KMAJ, TQ and TK (later; HI False: the 'heads' launch order; GATHER 0: the head sums
    added atomically; KT 0: one ``_psum_h`` program per whole row; KMAJ, TQ, TK False: the products queries first)
    all given: each kernel takes the constexprs it declares"""
    out = []
    for causal, has_g, hmode, has_x, dt, mat in itertools.product(
            (True, False), (True, False), (0, 1, 2), (False, True), ("fp32", "bf16"), (False, True)):
        out.append(dict(meta=dict(H=3, R=16, D=32, E=8, RP=16, DP=32, BD=32, EP=16, HP=4, BM=16, BN=16, HU=1,
                                  HI=False, GATHER=0, KT=0, KMAJ=False, TQ=False, TK=False, MAT=mat and hmode != 2,
                                  CAUSAL=causal, HAS_G=has_g, HMODE=hmode, HAS_X=has_x,
                                  HAS_ALIBI=True, HAS_DELTA=True, HAS_KMASK=True, PREC="ieee", ACC=tl.float32,
                                  UPCAST=False), dtype=dt))
    return out[::every]


def _ptx_body(ptx: str) -> list[str]:
    lines = []
    for line in ptx.splitlines():
        line = line.split("//")[0].strip()
        if not line or line.startswith((".loc", ".file", ".section", ".b8", ".b32", ".b64")):
            continue
        if re.fullmatch(r"\$L__tmp\d+:", line):  # debug line-table labels
            continue
        lines.append(line)
    return lines


def grid_applies(meta: dict) -> bool:
    """one program per head runs a configuration: no per-head factors, and every shared product materialised"""
    return meta["HMODE"] != 2 and (meta["MAT"] or not (meta["HAS_G"] or meta["HMODE"] == 1))


def compile_all(path: Path, confs: list[dict], arch: int, num_stages: int) -> dict[str, list[str]]:
    """{'<configuration>/<kernel>': PTX body lines} of the kernels in ``path`` and, where the one-program-
    per-head file lies beside it, of its kernels at the configurations they run"""
    heads = kernel_file(GRID_KERNELS[0], path).exists()
    mods = {}
    out = {}
    for i, conf in enumerate(confs):
        names = KERNELS + (GRID_KERNELS if heads and grid_applies(conf["meta"]) else ())
        for name in names:
            mod = mods[name in GRID_KERNELS] = mods.get(name in GRID_KERNELS) or load_kernels(kernel_file(name, path))
            kern = compile_kernel(mod, name, kernel_meta(conf["meta"], name), conf["dtype"], arch=arch, num_warps=4,
                                  num_stages=num_stages)
            out[f"{i:02d}{name}"] = _ptx_body(kern.asm["ptx"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="HEAD", help="git revision to compare the working tree's kernels with")
    ap.add_argument("--arch", type=int, default=90, help="CUDA compute capability, e.g. 80, 90")
    ap.add_argument("--every", type=int, default=5, help="compile every N-th of the 96 flag combinations")
    ap.add_argument("--num-stages", type=int, default=1, help="Triton's pipelining stages (the launcher's: 1)")
    args = ap.parse_args()
    root = ROOT
    confs = configurations(args.every)
    with tempfile.TemporaryDirectory() as tmp:
        for rel in (KERNEL, HEADS_KERNEL, HEADS_TILES):  # the base revision's files, side by side as in src/
            got = subprocess.run(["git", "show", f"{args.base}:{rel}"], cwd=root, capture_output=True, text=True)
            if got.returncode == 0:
                (Path(tmp) / Path(rel).name).write_text(got.stdout)
            elif rel == KERNEL:
                raise SystemExit(f"git show {args.base}:{rel}: {got.stderr.strip()}")
        old = compile_all(Path(tmp) / Path(KERNEL).name, confs, args.arch, args.num_stages)
    new = compile_all(root / KERNEL, confs, args.arch, args.num_stages)
    differ = [k for k in old if k in new and old[k] != new[k]]
    for k in sorted(set(old) | set(new)):
        state = "new" if k not in old else "gone" if k not in new else "DIFFERENT" if k in differ else "same"
        print(f"{k:14s} {len(old.get(k, [])):5d} / {len(new.get(k, [])):5d} PTX lines  {state}")
    print(f"sm_{args.arch}, {len(confs)} configurations vs {args.base}: {len(old) - len(differ)} kernels identical, "
          f"{len(differ)} different, {len(set(new) - set(old))} new, {len(set(old) - set(new))} gone")
    return 1 if differ or set(old) - set(new) else 0


if __name__ == "__main__":
    sys.exit(main())
