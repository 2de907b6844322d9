"""Compile CEM's Triton kernels (src/energyformer/energies/cem_triton.py) for a GPU target on a machine
without a GPU and compare their PTX with another revision's: a kernel refactor that leaves every
kernel's instruction stream unchanged changes neither results nor speed.

    python scripts/triton_ptx.py --base main            # working tree vs main, sm_90, 10 configurations
    python scripts/triton_ptx.py --base HEAD~1 --every 1 --arch 80

Triton compiles to PTX (and cubin, with its bundled ptxas) without a device; the interpreter tests
(TRITON_INTERPRET=1) never run this compiler, so this also catches code the compiler rejects (e.g. a
loop-carried variable whose shape changes). PTX is compared line by line with debug line labels and
``.loc`` directives dropped; exit status 1 when any kernel differs.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # compiled mode: triton fixes it at its first import

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

KERNEL = "src/energyformer/energies/cem_triton.py"
ACC_BUFFERS = {"SLOPES", "DELTA", "C", "M", "L", "LSE", "DLT", "OQ", "HS", "OX", "DQ", "DUD", "DDIAG", "DK",
               "DH", "DX", "DC"}  # float32 (the accumulation dtype) whatever the operands' dtype


def configurations(every: int) -> list[dict]:
    """every ``every``-th of the 48 flag combinations (causal, diagonal, h read-out, x columns, dtype)"""
    out = []
    for causal, has_g, hmode, has_x, dt in itertools.product((True, False), (True, False), (0, 1, 2),
                                                             (False, True), ("fp32", "bf16")):
        out.append(dict(meta=dict(H=3, R=16, D=32, E=8, RP=16, DP=32, EP=16, HP=4, BM=16, BN=16, CAUSAL=causal,
                                  HAS_G=has_g, HMODE=hmode, HAS_X=has_x, HAS_ALIBI=True, HAS_DELTA=True,
                                  HAS_KMASK=True, PREC="ieee", ACC=tl.float32, UPCAST=False), dtype=dt))
    return out[::every]


def _signature(fn, meta: dict, dtype: str) -> dict:
    sig = {}
    for name in fn.arg_names:
        if name in meta:
            sig[name] = "constexpr"
        elif name in ("Nq", "Nk", "offset"):
            sig[name] = "i32"
        elif name == "KMASK":
            sig[name] = "*i8"
        else:
            sig[name] = "*fp32" if name in ACC_BUFFERS else f"*{dtype}"
    return sig


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


def compile_all(path: Path, confs: list[dict], arch: int) -> dict[str, list[str]]:
    """{'<configuration>/<kernel>': PTX body lines} of the kernels in ``path``"""
    spec = importlib.util.spec_from_file_location(f"cem_triton_{abs(hash(str(path)))}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = {}
    for i, conf in enumerate(confs):
        for name in ("_fwd", "_bwd_q", "_bwd_kv"):
            fn = getattr(mod, name)
            meta = conf["meta"]
            src = ASTSource(fn=fn, signature=_signature(fn, meta, conf["dtype"]),
                            constexprs={(fn.arg_names.index(k),): v for k, v in meta.items()})
            kern = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=dict(num_warps=4))
            out[f"{i:02d}{name}"] = _ptx_body(kern.asm["ptx"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="HEAD", help="git revision to compare the working tree's kernels with")
    ap.add_argument("--arch", type=int, default=90, help="CUDA compute capability, e.g. 80, 90")
    ap.add_argument("--every", type=int, default=5, help="compile every N-th of the 48 flag combinations")
    args = ap.parse_args()
    root = Path(__file__).resolve().parents[1]
    base_src = subprocess.run(["git", "show", f"{args.base}:{KERNEL}"], cwd=root, check=True,
                              capture_output=True, text=True).stdout
    confs = configurations(args.every)
    with tempfile.TemporaryDirectory() as tmp:
        base_path = Path(tmp) / "cem_triton_base.py"
        base_path.write_text(base_src)
        old = compile_all(base_path, confs, args.arch)
    new = compile_all(root / KERNEL, confs, args.arch)
    differ = [k for k in old if old[k] != new[k]]
    for k in old:
        print(f"{k:12s} {len(old[k]):5d} / {len(new[k]):5d} PTX lines  {'DIFFERENT' if k in differ else 'same'}")
    print(f"sm_{args.arch}, {len(confs)} configurations x 3 kernels vs {args.base}: "
          f"{len(old) - len(differ)} identical, {len(differ)} different")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
