"""Registers, spills and shared memory of Hyper-SET's bi-softmax kernels and its feed-forward's sphere norm + ReLU
(``hyperspherical_triton.py``), compiled for sm_90 on a machine without a GPU (Triton's compiler and its bundled
ptxas; ``cem_compile.ptxas_usage``).

The launcher (``hyperspherical_kernel._launch``) uses BN = the sequence length padded to a power of two (128 for
Sudoku's 81 cells), PP = the head dimension padded, 8 warps from BN = 128 on. Run in a fresh process (Triton
must not be in interpreter mode):

    python scripts/hyperset_kernel_resources.py --out docs/results/hyperset/kernel_resources.md
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: (operands, M) of the feed-forward kernels: 4d at d 768 and at d 2,048 (the launcher's widest row)
NORM_RELU_CASES = [("bf16", 3072), ("fp32", 3072), ("bf16", 8192)]
CASES = [("bf16", 128, 64, 8), ("bf16", 128, 64, 16), ("bf16", 64, 64, 4), ("fp32", 128, 64, 8), ("fp32", 64, 64, 4)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--cases", help="comma-separated DTYPE:BNxPP:WARPS (default: the table's five)")
    args = ap.parse_args(argv)
    cases = CASES if not args.cases else [(d, int(t.split("x")[0]), int(t.split("x")[1]), int(w))
                                          for d, t, w in (c.split(":") for c in args.cases.split(","))]
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from energyformer.energies.cem_compile import _platform_error, load_kernels, ptxas_usage

    err = _platform_error()
    if err is not None:
        print(f"unavailable: triton cannot compile for sm_90 here: {err}")
        sys.exit(3)

    def row(cells: str, fn, sig: dict, cx: dict, attrs: dict, warps: int) -> str:
        """``cells`` and the registers, spills and shared memory of ``fn`` compiled for sm_90 (printed too)"""
        src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(k),): v for k, v in cx.items()},
                        attrs=attrs)
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=1))
        use = ptxas_usage(k)
        line = (f"{cells} {use['registers']} | {use['spill_stores']:,} | {use['spill_loads']:,} "
                f"| {k.metadata.shared:,} |")
        print(line, flush=True)
        return line

    mod = load_kernels(ROOT / "src/energyformer/energies/hyperspherical_triton.py")
    lines = [f"triton {triton.__version__}, sm_90, num_stages 1; registers per thread (spill stores / loads, bytes), "
             "shared memory per block (bytes)", "",
             "| operands | BN × PP | warps | kernel | registers | spill stores | spill loads | shared |",
             "|---|---|---|---|---|---|---|---|"]
    for dtype, bn, pp, warps in cases:
        for name in ("_fwd", "_bwd"):
            fn = getattr(mod, name)
            cx = dict(BN=bn, PP=pp, PREC="ieee", ACC=tl.float32, UPCAST=False)
            ints = ("N", "P", "H", *(a for a in fn.arg_names if a.startswith(("su_", "sd_"))))
            sig = {a: "constexpr" if a in cx else "i32" if a in ints else "fp32" if a in ("scale", "sign")
                   else f"*{dtype}" for a in fn.arg_names}
            # pointers 16-byte aligned and strides multiples of 16, as a real launch at d 768 (12 heads of 64)
            # specialises them (not N = 81, P, H)
            aligned = ("U", "Y", "DY", "DU", *(a for a in ints if a.startswith(("su_", "sd_"))))
            attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if a in aligned}
            lines.append(row(f"| {dtype} | {bn} × {pp} | {warps} | `{name}` |", fn, sig, cx, attrs, warps))
    # the feed-forward's fused sphere norm + ReLU (hyperspherical_ffkernel.py): one program per row of M columns
    lines += ["", "Feed-forward sphere norm + ReLU, one program per row (BM = M padded to a power of two):", "",
              "| operands | M (BM) | warps | kernel | registers | spill stores | spill loads | shared |",
              "|---|---|---|---|---|---|---|---|"]
    for dtype, m in NORM_RELU_CASES:
        bm = 1 << (m - 1).bit_length()
        warps = 8 if bm >= 2048 else 4  # as the launcher
        for name in ("_norm_relu_fwd", "_norm_relu_bwd"):
            fn = getattr(mod, name)
            cx = dict(BM=bm, ACC=tl.float32)
            sig = {a: "constexpr" if a in cx else "i32" if a == "M" else "fp32" if a == "eps" else "*fp32"
                   if a == "RSTD" else f"*{dtype}" for a in fn.arg_names}
            attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if a in ("Z", "Y", "DY", "DZ",
                                                                                              "RSTD", "M")}
            lines.append(row(f"| {dtype} | {m} ({bm}) | {warps} | `{name}` |", fn, sig, cx, attrs, warps))
    if args.out:
        args.out.write_text("# Hyper-SET bi-softmax and feed-forward kernels compiled for sm_90 "
                            "(`python scripts/hyperset_kernel_resources.py`)\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    main()
