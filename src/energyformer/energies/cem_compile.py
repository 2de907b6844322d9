"""Compile CEM's Triton kernels (``cem_triton.py``) for a GPU target on a machine without a GPU (issue 21).

Triton's compiler runs on any machine: it lowers a kernel to PTX and, with its bundled ``ptxas``, to a
cubin whose metadata holds the **shared memory per block** the launch will ask for. A GPU refuses a
launch above its limit (H100/H200: 227 KiB = 232,448 B) with ``OutOfResources`` — which the
interpreter tests (``TRITON_INTERPRET=1``) never see. :func:`compile_kernels` compiles the kernels
with exactly the constexpr arguments and launch options of :mod:`.cem_kernel`'s launcher, and with the
argument specialisation a real launch gets (every pointer 16-byte aligned, N and the offset multiples
of 16, as at N = 1,024): without it Triton cannot prove aligned loads, does not pipeline them, and
reports far less shared memory than the GPU then needs (116,736 B instead of 283,000 B for the
original ``_bwd_q`` at GPT-2 small).

Triton fixes its mode (compiled or interpreted) at its first import, so the compilation runs in a
fresh process: ``python -m energyformer.energies.cem_compile`` prints one JSON line per kernel (shared
memory, and registers and spills from ``ptxas -v``). ``tests/energies/test_cem_compile.py`` checks them
at GPT-2 widths; ``scripts/triton_ptx.py``
compares PTX across revisions.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

KERNELS = ("_fwd", "_bwd_q", "_bwd_kv")
GRID_KERNELS = ("_fwd_h", "_bwd_d_h", "_bwd_kv_h")  # KernelTiles.grid = 'heads', in cem_triton_heads.py
STACK_KERNELS = ("_dv_h",)  # per-head factors on one program per head: their value gradients, also there
GATHER_KERNELS = ("_psum_h", "_dsum_h")  # KernelTiles.head_sums 'gather' (Σ_k P_k), 'gather_all' (and Σ_k dS_k)
SHARED_LIMIT_SM90 = 232_448  # bytes of shared memory one block may use on H100 / H200 (227 KiB)
ACC_BUFFERS = {"SLOPES", "DELTA", "C", "M", "L", "LSE", "DLT", "OQ", "HS", "OX", "DQ", "DUD", "DDIAG", "DK",
               "DH", "DX", "DC", "G", "GH"}  # float32 (the accumulation dtype) whatever the operands' dtype


def kernel_file(name: str, loop_file: str | Path) -> Path:
    """The file that holds kernel ``name``: ``loop_file`` (``cem_triton.py`` or another revision's copy)
    or, for the one-program-per-head kernels, ``cem_triton_heads.py`` beside it."""
    heads = name in GRID_KERNELS + STACK_KERNELS + GATHER_KERNELS
    return Path(loop_file).with_name("cem_triton_heads.py") if heads else Path(loop_file)


def signature(fn, constexprs: dict, dtype: str, shared_operand: bool = False) -> dict:
    """Triton signature of kernel ``fn``: operands in ``dtype`` ('bf16', 'fp32', ...), the accumulation
    buffers in fp32 (with the head sums PS and DSS, which the grid kernels add up atomically — with
    per-head factors, HMODE 2, PS holds every head's probabilities in the operands' dtype, as the gathered head
    sums of ``_psum_h`` and ``_dsum_h`` do — and ``_dv_h``'s T), the key mask int8, sizes int32 (TOT, a per-head
    buffer's elements per batch row, int64); ``shared_operand`` (:func:`stores_operand`): the materialised
    shared products G, GH in the operands' dtype."""
    acc = ACC_BUFFERS | ({"PS", "DSS", "T"} if fn.__name__ in GRID_KERNELS + STACK_KERNELS else set())
    if shared_operand:
        acc = acc - {"G", "GH"}
    if constexprs.get("HMODE") == 2 and fn.__name__ in GRID_KERNELS:
        acc = acc - {"PS"}
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in ("Nq", "Nk", "offset", "NR", "KE", "STEP", "ALIGN"):
            sig[name] = "i32"
        elif name == "TOT":  # elements per batch row of the per-head buffers (over 2³¹ at N 16k)
            sig[name] = "i64"
        elif name == "KMASK":
            sig[name] = "*i8"
        else:
            sig[name] = "*fp32" if name in acc else f"*{dtype}"
    return sig


def load_kernels(path: str | Path):
    """The kernel module at ``path``, jitted for compilation (TRITON_INTERPRET must be off)."""
    import triton

    if triton.knobs.runtime.interpret:
        raise RuntimeError("cem_compile: triton was imported with TRITON_INTERPRET set; compile in a fresh process")
    spec = importlib.util.spec_from_file_location(f"cem_triton_{abs(hash(str(path)))}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def compile_kernel(mod, name: str, constexprs: dict, dtype: str, *, arch: int = 90, num_warps: int = 4,
                   num_stages: int = 1, aligned: bool = True, shared_operand: bool = False):
    """One kernel of ``mod`` compiled for sm_``arch``: Triton's CompiledKernel (``.metadata.shared``,
    ``.asm['ptx']``). ``constexprs`` may hold keys the kernel does not take (ignored); ``aligned``: the
    runtime's specialisation of aligned pointers and sizes divisible by 16; ``shared_operand``: see
    :func:`signature`."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(mod, name)
    cx = {k: v for k, v in constexprs.items() if k in fn.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if aligned and a not in cx}
    src = ASTSource(fn=fn, signature=signature(fn, cx, dtype, shared_operand),
                    constexprs={(fn.arg_names.index(k),): v for k, v in cx.items()}, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32),
                          options=dict(num_warps=num_warps, num_stages=num_stages))


def launch_meta(*, heads: int, head_dim: int, dim: int, dtype: str = "bf16", causal: bool = True,
                has_g: bool = True, h_mode: str = "sum", x_cols: int | None = None, alibi: bool = True,
                self_bias: bool = True, key_mask: bool = False, **tiles) -> dict:
    """The launcher's (:func:`.cem_launch.launch_args`) constexprs and options for one call shape, as
    compiled on a GPU (UPCAST off); ``tiles``: :class:`.cem_launch.KernelTiles` fields."""
    import torch
    import triton.language as tl

    from .cem_launch import KernelTiles, launch_args

    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    q = torch.empty(1, heads, 16, head_dim, dtype=dt, device="meta")
    hm = torch.empty(1, 16, dim, dtype=dt, device="meta")
    x = None if x_cols is None else torch.empty(1, heads, 16, x_cols, dtype=dt, device="meta")
    launch = KernelTiles(**tiles).launch(h_mode)  # as the energy runs it
    meta = launch_args(tl, q, hm, x, causal, has_g, h_mode, alibi, self_bias, key_mask, launch)
    meta["UPCAST"] = False
    return meta


def stores_operand(dtype: str = "bf16", h_mode: str = "sum", **kw) -> bool:
    """Whether a case's launch stores the shared products G, GH in the operands' dtype
    (:func:`.cem_launch.shared_store_dtype`: ``shared_dtype`` 'operand', or 'auto' where the head sums are
    gathered; bf16 operands only)."""
    import torch

    from .cem_launch import KernelTiles, shared_store_dtype

    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    tiles = KernelTiles(**{k: v for k, v in kw.items() if k in KernelTiles.model_fields}).launch(h_mode)
    return dt != torch.float32 and shared_store_dtype(tiles, dt, torch.float32, h_mode) == dt


def ptxas_usage(kernel, arch: int = 90) -> dict[str, int]:
    """{registers, spill_stores, spill_loads} per thread of a compiled kernel: its PTX assembled again
    by the ``ptxas`` Triton itself uses for sm_``arch`` (``-v``, with Triton's register-allocation
    flag); a GPU fills the same numbers into ``CompiledKernel.n_regs`` / ``n_spills`` only when it loads
    the kernel. 255 registers is the cap: a kernel there spills, and fits two 128-thread programs per SM."""
    import re
    import tempfile

    from triton.backends.nvidia import compiler as nv

    ptxas = nv.get_ptxas(arch).path if hasattr(nv, "get_ptxas") else nv.knobs.nvidia.ptxas.path
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(kernel.asm["ptx"])
        out = subprocess.run([ptxas, "-v", "--regAllocOptLevel=2", f"--gpu-name=sm_{arch}a", str(src), "-o",
                              str(Path(tmp) / "k.o")], capture_output=True, text=True)
    log = out.stdout + out.stderr
    if out.returncode != 0:
        raise RuntimeError(f"ptxas failed (exit {out.returncode}): {log.strip()[-2000:]}")

    def num(pattern: str) -> int:
        m = re.search(pattern, log)
        if m is None:
            raise RuntimeError(f"ptxas -v printed no {pattern!r}: {log.strip()[-2000:]}")
        return int(m.group(1))

    return dict(registers=num(r"Used (\d+) registers"), spill_stores=num(r"(\d+) bytes spill stores"),
                spill_loads=num(r"(\d+) bytes spill loads"))


#: PTX tensor-core instructions: Hopper's warpgroup MMA (one instruction per 4 warps, m64nNk16) and the warp-level
#: MMA of earlier GPUs (one per warp, m16n8k16 for 16-bit operands), each with its shape
_MMA = {"wgmma": (r"wgmma\.mma_async\S*?\.m(\d+)n(\d+)k(\d+)", 4),
        "mma_sync": (r"(?<![\w.])mma\.sync\S*?\.m(\d+)n(\d+)k(\d+)", 1)}


def mma_work(ptx: str, num_warps: int) -> dict[str, int]:
    """{wgmma, mma_sync}: multiply-adds one program issues per pass over its PTX in each tensor-core
    instruction family — every instruction counted once wherever it stands (a loop body once), m·n·k times
    the warpgroups (``wgmma.mma_async``, issued by 4 warps together) or the warps (``mma.sync``) that issue it.
    Triton lowers a ``tl.dot`` to Hopper's wgmma only where the product's rows fill a warpgroup's 64 (and the
    operand layouts allow it); otherwise to mma.sync, the Ampere instruction, which an H100 runs at a
    fraction of wgmma's rate. The share on wgmma says how much of a kernel's product work can use it."""
    import re

    out = {}
    for name, (pattern, warps_per_issue) in _MMA.items():
        issuers = max(num_warps // warps_per_issue, 1)
        out[name] = sum(int(m) * int(n) * int(k) for m, n, k in re.findall(pattern, ptx)) * issuers
    return out


class CompilerUnavailable(RuntimeError):
    """Triton cannot compile for a CUDA target on this platform (no NVIDIA backend or ptxas)."""


_TINY = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef tiny(X):\n    tl.store(X, 1.0)\n"


def _platform_error() -> str | None:
    """None if Triton compiles a one-line kernel for sm_90 here, else the error's first line."""
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tiny_kernel.py"
        path.write_text(_TINY)
        try:
            fn = load_kernels(path).tiny
            triton.compile(ASTSource(fn=fn, signature={"X": "*fp32"}), target=GPUTarget("cuda", 90, 32))
        except Exception as err:  # noqa: BLE001  (a missing backend or ptxas has no common error type)
            return f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
    return None


def resources(cases: dict[str, dict], kernel_file: str | Path | None = None, registers: bool = True,
              kernels: tuple[str, ...] = KERNELS) -> dict[str, dict[str, dict[str, int]]]:
    """{case: {kernel: {shared, registers, spill_stores, spill_loads, wgmma, mma_sync}}} for :func:`launch_meta`
    keyword sets ``cases``, compiled for sm_90 in a fresh Python process (this one may have triton in
    interpreter mode); shared memory in bytes per block, registers and spills per thread (:func:`ptxas_usage`;
    left out with ``registers=False``), tensor-core work per program (:func:`mma_work`); ``kernels``: names from
    KERNELS and GRID_KERNELS. Raises
    :class:`CompilerUnavailable` if Triton cannot compile even a one-line kernel for sm_90 here."""
    path = Path(kernel_file) if kernel_file else Path(__file__).with_name("cem_triton.py")
    env = dict(os.environ, TRITON_INTERPRET="0", OMP_NUM_THREADS="1")
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in [env.get("PYTHONPATH")] if p])
    cmd = [sys.executable, "-m", "energyformer.energies.cem_compile", "--kernel-file", str(path), json.dumps(cases)]
    cmd += ["--kernels", ",".join(kernels)] + ([] if registers else ["--no-registers"])
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"cem_compile failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    res: dict[str, dict[str, dict[str, int]]] = {}
    for line in out.stdout.splitlines():
        r = json.loads(line)
        if "unavailable" in r:
            raise CompilerUnavailable(r["unavailable"])
        case, kernel = r.pop("case"), r.pop("kernel")
        res.setdefault(case, {})[kernel] = r
    return res


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", help='JSON {"name": {launch_meta keywords}, ...}')
    ap.add_argument("--kernel-file", default=str(Path(__file__).with_name("cem_triton.py")))
    ap.add_argument("--kernels", default=",".join(KERNELS),
                    help=f"of {', '.join(KERNELS + GRID_KERNELS + STACK_KERNELS + GATHER_KERNELS)}")
    ap.add_argument("--no-registers", action="store_true", help="shared memory only (no second ptxas run)")
    a = ap.parse_args(argv)
    os.environ.setdefault("TRITON_INTERPRET", "0")
    err = _platform_error()
    if err is not None:
        print(json.dumps(dict(unavailable=err)), flush=True)
        return
    from .cem_launch import kernel_meta

    mods: dict[Path, object] = {}
    for case, kw in json.loads(a.cases).items():
        meta = launch_meta(**kw)
        for name in a.kernels.split(","):
            path = kernel_file(name, a.kernel_file)
            mod = mods[path] = mods.get(path) or load_kernels(path)
            km = kernel_meta(meta, name)  # the key-tile kernel's own tiles and warps (KernelTiles.kv_tiles);
            # _dv_h's meta has no launch options (compiled with the launch's, as before)
            opts = {k: km.pop(k, meta[k]) for k in ("num_warps", "num_stages")}
            k = compile_kernel(mod, name, km, kw.get("dtype", "bf16"), shared_operand=stores_operand(**kw), **opts)
            usage = {} if a.no_registers else ptxas_usage(k)
            print(json.dumps(dict(case=case, kernel=name, shared=k.metadata.shared, **usage,
                                  **mma_work(k.asm["ptx"], opts["num_warps"]))), flush=True)


if __name__ == "__main__":
    main()
