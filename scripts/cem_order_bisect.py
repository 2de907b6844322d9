"""Which kernel's turned products break ``KernelTiles.product_order = 'auto'`` on a GPU (issue 21).

On one H100 (Triton 3.6, 2026-11-27) 'auto' ran into an illegal address in the backward at GPT-2 small's attention
(12 heads of 64, bf16, causal, N 1,024 × B 8) and gave gradients off by orders of magnitude at B 2, while every
CUDA test at the tests' small sizes passed and Triton's interpreter agrees with 'queries' to rounding
(docs/results/cem/gpu_h100/product_order_5cde3b5.md). 'auto' set, per one-program-per-head kernel, the
constexprs ``KMAJ`` (Q Kᵀ, dOq Kᵀ formed keys first), ``TQ`` (oq / dq held transposed) and ``TK`` (dk held
transposed) where the tile's shape asks for it (``cem_launch.kernel_meta``). This script's first GPU run (one H100,
code 855edd0: order_bisect_855edd0.md) named ``_bwd_kv_h``'s ``TK``, which 'auto' no longer sets; the case
"bwd_kv TK" still forces it. This script runs the default launch
('queries') once, then again with one of those flags switched on in one kernel only (and with all of them, which is
'auto'), each case in a fresh process with ``CUDA_LAUNCH_BLOCKING=1`` (an illegal address kills the process's CUDA
context; the failing launch is the one named), and prints per case the relative differences of oq, hs and the
gradients of q, k, ud, hm to the 'queries' run, or the error and the launch it came from.

    python scripts/cem_order_bisect.py                 # on CUDA: N 1,024, B 8, 12 heads of 64, D 768, bf16
    python scripts/cem_order_bisect.py --tiny          # Triton's interpreter on CPU, N 40, B 2, 2 heads of 32

``'auto'`` itself is refused on CUDA (``cem_launch.check_product_order``); the flags are switched through the
launch's metadata, so this script needs no way around that check.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src")]

#: case name -> ((kernel, flag), ...) switched on over the 'queries' launch; "all" is what 'auto' sets
CASES: dict[str, tuple[tuple[str, str], ...]] = {
    "fwd KMAJ": (("_fwd_h", "KMAJ"),), "fwd TQ": (("_fwd_h", "TQ"),), "psum KMAJ": (("_psum_h", "KMAJ"),),
    "bwd_d KMAJ": (("_bwd_d_h", "KMAJ"),), "bwd_kv KMAJ": (("_bwd_kv_h", "KMAJ"),), "bwd_kv TQ": (("_bwd_kv_h", "TQ"),),
    "bwd_kv TK": (("_bwd_kv_h", "TK"),), "all": (),
}
OUTPUTS = ("oq", "hs", "dq", "dk", "dud", "dhm")


def one(case: str, n: int, b: int, heads: int, r: int, d: int) -> str:
    """One case in this process: a table row (case, flags, rel diffs or the error)."""
    import torch

    from energyformer.energies import cem_kernel
    from energyformer.energies.cem_launch import KernelTiles, launch_args

    real = cem_kernel.kernel_meta
    state = {"on": False, "turned": 0}  # turned: launches whose flags the patch changed
    flags = CASES[case]

    def patched(meta: dict, name: str) -> dict:
        out = real(meta, name)
        if not state["on"]:
            return out
        before = dict(out)
        if case == "all":  # what 'auto' sets for this kernel (cem_launch.kernel_meta with KO)
            auto = real({**meta, "KO": True}, name)
            out.update({k: auto[k] for k in ("KMAJ", "TQ", "TK") if k in auto})
        for kern, flag in flags:
            if name == kern:
                out[flag] = True
        state["turned"] += out != before
        return out

    cem_kernel.kernel_meta = patched
    cuda = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
    dev = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    g = torch.Generator().manual_seed(0)

    def t(*shape, scale=1.0):
        return (scale * torch.randn(*shape, generator=g)).to(dev, dtype).requires_grad_(True)

    q, k, ud, hm = t(b, heads, n, r, scale=r ** -0.5), t(b, heads, n, r), t(b, n, d, scale=d ** -0.5), t(b, n, d)
    slopes = torch.rand(heads, generator=g).to(dev)
    delta = torch.zeros(heads, device=dev, requires_grad=True)

    def run() -> list:
        for v in (q, k, ud, hm, delta):
            v.grad = None
        oq, hs, _, _ = cem_kernel.cem_attention(q, k, ud, hm, slopes=slopes, delta=delta, key_mask=None, causal=True,
                                                offset=0, h_mode="sum", product_order="queries")
        (oq.float().square().sum() + hs.float().square().sum()).backward()
        if cuda:
            torch.cuda.synchronize()
        return [oq.float(), hs.float()] + [v.grad.float() for v in (q, k, ud, hm)]

    meta = launch_args(cem_kernel._kernels(not cuda).tl, q, hm, None, True, True, "sum", True, True, False,
                       KernelTiles())
    sets = {name: {f: v for f, v in real({**meta, "KO": True}, name).items() if f in ("KMAJ", "TQ", "TK") and v}
            for name in ("_fwd_h", "_psum_h", "_bwd_d_h", "_bwd_kv_h")}
    what = ", ".join(f"{kern}.{flag}" for kern, flag in flags) or "auto: " + (
        "; ".join(f"{kn} {'+'.join(fs)}" for kn, fs in sets.items() if fs) or "nothing turns")
    ref = run()
    state["on"] = True
    try:
        got = run()
    except Exception as err:  # noqa: BLE001  (CUDA and Triton errors share no base)
        where = [line.strip() for line in traceback.format_exc().splitlines() if "cem_kernel.py" in line][-1:]
        return f"| {case} | {what} | {type(err).__name__}: {str(err).splitlines()[0][:90]} {where} |"
    if not state["turned"]:
        return f"| {case} | {what} | no launch takes these flags at this shape (nothing turned) |"
    diffs = [((a - e).norm() / e.norm().clamp_min(1e-30)).item() for a, e in zip(got, ref)]
    return (f"| {case} | {what} | {state['turned']} launches turned: "
            + " ".join(f"{nm} {x:.1e}" for nm, x in zip(OUTPUTS, diffs)) + " |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--r", type=int, default=64, help="head width")
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated case names (default: every one)")
    ap.add_argument("--tiny", action="store_true", help="Triton's interpreter on CPU: N 40, B 2, 2 heads of 32, D 64")
    ap.add_argument("--timeout", type=float, default=90, help="seconds per case")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.tiny:
        a.n, a.batch, a.heads, a.r, a.dim = 40, 2, 2, 32, 64
    if a.one:
        print("ROW " + one(a.one, a.n, a.batch, a.heads, a.r, a.dim), flush=True)
        return
    cases = [c.strip() for c in a.cases.split(",") if c.strip()]
    bad = [c for c in cases if c not in CASES]
    if bad:
        raise SystemExit(f"--cases: unknown {bad[0]!r} (allowed: {', '.join(CASES)})")
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1", **({"TRITON_INTERPRET": "1"} if a.tiny else {}))
    lines = [f"CEM kernels, 'queries' vs one kernel's flags turned (N {a.n}, B {a.batch}, {a.heads} heads of {a.r}, "
             f"D {a.dim}, causal, ALiBi, self bias, default launch){' through the interpreter' if a.tiny else ''}",
             "", "| case | flags on | relative difference to 'queries', or the error |", "|---|---|---|"]
    print("\n".join(lines), flush=True)
    for case in cases:
        cmd = [sys.executable, __file__, "--one", case, "--n", str(a.n), "--batch", str(a.batch), "--heads",
               str(a.heads), "--r", str(a.r), "--dim", str(a.dim)]
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
            rows = [line[4:] for line in r.stdout.splitlines() if line.startswith("ROW ")]
            tail = (r.stdout + r.stderr).strip().splitlines()[-1:] or ["no output"]
            row = rows[0] if rows else f"| {case} | | exit {r.returncode}: {tail[0][:120]} |"
        except subprocess.TimeoutExpired:
            row = f"| {case} | | past {a.timeout:g} s |"
        lines.append(row)
        print(row, flush=True)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text("# `python scripts/cem_order_bisect.py`\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
