"""The CEM kernels' launch arguments (energies/cem_launch.py): each kernel of cem_triton.py and
cem_triton_heads.py gets exactly the constexprs it declares — a missing one would be compiled as a pointer
argument, an extra one is refused by Triton's launcher — from the launcher (``kernel_meta`` of
``launch_args``) and from ``scripts/triton_ptx.py``'s configurations, which compile them without a GPU."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from energyformer.energies import cem_kernel, cem_launch
from energyformer.energies.interaction import InteractionEnergy
from energyformer.utils.validate import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src/energyformer/energies"
LOOP, HEADS = ("_fwd", "_bwd_q", "_bwd_kv"), ("_fwd_h", "_bwd_d_h", "_bwd_kv_h", "_psum_h", "_dsum_h")
OPTIONS = {"num_warps", "num_stages"}  # Triton's launch options, not kernel arguments


def constexprs(file: str) -> dict[str, set[str]]:
    """{kernel: its tl.constexpr parameters} of the launched kernels in ``file`` (read from the source)"""
    out = {}
    for node in ast.parse((SRC / file).read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name in LOOP + HEADS:
            out[node.name] = {a.arg for a in node.args.args
                              if a.annotation is not None and ast.unparse(a.annotation) == "tl.constexpr"}
    return out


KERNELS = {**constexprs("cem_triton.py"), **constexprs("cem_triton_heads.py")}


def test_every_launched_kernel_is_found():
    assert set(KERNELS) == set(LOOP + HEADS) and all(KERNELS.values())


@pytest.mark.parametrize("grid", ["rows", "heads", "heads_inner", "heads-gather", "heads-atomic"])
@pytest.mark.parametrize("hmode", ["none", "sum", "stack"])
def test_the_launcher_passes_each_kernel_exactly_its_constexprs(grid, hmode):
    import triton.language as tl

    q, hm = torch.zeros(1, 2, 4, 4), torch.zeros(1, 4, 8)
    tiles = cem_launch.KernelTiles(grid="heads", head_sums=grid[6:]) if "-" in grid else \
        cem_launch.KernelTiles(grid=grid)
    meta = cem_launch.launch_args(tl, q, hm, None, True, True, hmode, True, True, False, tiles)
    for name in LOOP + HEADS:
        assert set(cem_launch.kernel_meta(meta, name)) - OPTIONS == KERNELS[name], name


def test_triton_ptx_configurations_give_every_kernel_its_constexprs():
    """scripts/triton_ptx.py sets TRITON_INTERPRET=0 when imported: read in a process of its own"""
    code = ("import json, sys; sys.path.insert(0, 'scripts'); import triton_ptx as t; "
            "print(json.dumps(sorted(t.configurations(1)[0]['meta'])))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    given = set(json.loads(out.stdout.strip().splitlines()[-1]))
    for name, need in KERNELS.items():
        assert need <= given, (name, need - given)


@pytest.mark.parametrize("grid", ["rows", "heads"])
def test_the_key_tile_kernel_takes_its_own_tiles_and_warps(grid):
    """``KernelTiles.kv_keys`` / ``kv_queries`` / ``kv_warps`` reach the backward's key-tile kernel only (its BN,
    BM and warps); unset, it owns ``block_m`` keys and steps ``block_n`` queries with ``num_warps``, as before
    the fields; the row chunks align to the largest tile side of any kernel."""
    import triton.language as tl

    q, hm = torch.zeros(1, 2, 4, 4), torch.zeros(1, 4, 8)
    kv = "_bwd_kv_h" if grid == "heads" else "_bwd_kv"
    base = cem_launch.KernelTiles(grid=grid, block_m=16, block_n=32, num_warps=4, product_order="auto")
    own = base.model_copy(update=dict(kv_keys=128, kv_queries=16, kv_warps=8))
    metas = [cem_launch.launch_args(tl, q, hm, None, True, True, "sum", True, True, False, t) for t in (base, own)]
    plain, tiled = (cem_launch.kernel_meta(m, kv) for m in metas)
    assert (plain["BN"], plain["BM"], plain["num_warps"]) == (16, 32, 4)
    assert (tiled["BN"], tiled["BM"], tiled["num_warps"]) == (128, 16, 8)
    for name in set(LOOP + HEADS) - {"_bwd_kv", "_bwd_kv_h"}:
        assert cem_launch.kernel_meta(metas[0], name) == cem_launch.kernel_meta(metas[1], name), name
    assert (base.align(), own.align()) == (32, 128)
    assert cem_launch.launch_chunks(300, 300, 0, True, own) == cem_products_row_chunks(300, own)
    # KernelTiles.product_order: the one-program-per-head kernels form Q Kᵀ and dOq Kᵀ keys first where their tile
    # has more keys than queries ('auto'), never with 'queries'; the loop kernels take no such flag
    rows_first = own.model_copy(update=dict(product_order="queries"))
    wide = base.model_copy(update=dict(block_m=64, block_n=32))  # 64 queries × 32 keys; the key-tile kernel 64 × 32
    for tiles, query_tiles, key_tiles in ((base, True, False), (own, True, True), (rows_first, False, False),
                                          (wide, False, True)):
        meta = cem_launch.launch_args(tl, q, hm, None, True, True, "sum", True, True, False, tiles)
        for name in LOOP + HEADS:
            got = cem_launch.kernel_meta(meta, name)
            assert "KO" not in got, name
            if name in LOOP or name == "_dv_h":
                assert "KMAJ" not in got, name
            else:
                assert got["KMAJ"] is (key_tiles if name == "_bwd_kv_h" else query_tiles), (tiles, name)
    # and the accumulators of R columns held transposed where R is the longer side: heads of 32 at the default tiles
    # (16 queries × 64 keys; the key-tile kernel owns 16 keys and steps 64 queries): oq (TQ), not dq — dq too where
    # the key-tile kernel steps 16 queries; never dk (TK: the form an H100 miscompiled,
    # docs/results/cem/gpu_h100/order_bisect_855edd0.md)
    wide_heads = torch.zeros(1, 2, 4, 32)
    for order, on in (("auto", True), ("queries", False)):
        for kv, dq in (({}, False), ({"kv_keys": 16, "kv_queries": 16}, on)):
            tiles = cem_launch.KernelTiles(grid=grid, product_order=order, **kv)
            meta = cem_launch.launch_args(tl, wide_heads, hm, None, True, True, "sum", True, True, False, tiles)
            fwd, kvm = cem_launch.kernel_meta(meta, "_fwd_h"), cem_launch.kernel_meta(meta, "_bwd_kv_h")
            assert (fwd["TQ"], kvm["TQ"], kvm["TK"]) == (on, dq, False), (order, kv)
        assert all(k not in cem_launch.kernel_meta(meta, n) for n in ("_bwd_d_h", "_psum_h", "_fwd")
                   for k in ("TQ", "TK"))


def cem_products_row_chunks(n: int, tiles) -> list:
    from energyformer.energies.cem_products import row_chunks

    return row_chunks(n, n, 0, True, tiles.causal_chunks, 128)


def test_shared_products_are_materialised_where_there_are_any():
    """KernelTiles.shared = 'materialize' takes effect with a shared diagonal or the head-summed read-out; with
    per-head factors ('stack': one D-wide product per head) only on the one-program-per-head kernels, which
    ``auto`` takes for them too (never with recomputed products)."""
    import triton.language as tl

    q, hm = torch.zeros(1, 2, 4, 4), torch.zeros(1, 4, 8)

    def mat(has_g, hmode, shared="materialize", grid="auto"):
        return cem_launch.launch_args(tl, q, hm, None, True, has_g, hmode, True, True, False,
                                       cem_launch.KernelTiles(shared=shared, grid=grid))["MAT"]

    assert mat(True, "none") and mat(False, "sum") and mat(True, "sum")
    assert not mat(False, "none") and not mat(True, "sum", "recompute") and not mat(True, "stack", "recompute")
    assert mat(True, "stack") and mat(True, "stack", grid="heads") and mat(True, "stack", grid="heads_inner")
    assert not mat(True, "stack", grid="rows")


def test_kernel_tiles_bad_values_are_config_errors(config_error_says):
    config_error_says(cem_launch.KernelTiles, {"block_d": 48}, ["block_d", "48", "16"])
    config_error_says(cem_launch.KernelTiles, {"num_stages": 0}, ["num_stages", "0", "1"])
    config_error_says(cem_launch.KernelTiles, {"head_unroll": 3}, ["head_unroll", "3", "1"])
    config_error_says(cem_launch.KernelTiles, {"shared": "cache"}, ["shared", "cache", "materialize"])
    config_error_says(cem_launch.KernelTiles, {"causal_chunks": 0}, ["causal_chunks", "0", "1"])
    config_error_says(cem_launch.KernelTiles, {"grid": "heads", "shared": "recompute"},
                      ["grid", "heads", "shared", "recompute", "materialize"])
    config_error_says(cem_launch.KernelTiles, {"grid": "heads_inner", "shared": "recompute"},
                      ["grid", "heads_inner", "shared", "recompute", "materialize"])
    config_error_says(cem_launch.KernelTiles, {"head_sums": "scatter"}, ["head_sums", "scatter", "gather"])
    config_error_says(cem_launch.KernelTiles, {"head_sums": "gather", "grid": "rows"},
                      ["head_sums", "gather", "grid", "rows", "heads"])
    config_error_says(cem_launch.KernelTiles, {"head_sums": "gather", "shared": "recompute"},
                      ["head_sums", "gather", "shared", "recompute", "materialize"])
    config_error_says(cem_launch.KernelTiles, {"shared_dtype": "operand", "shared": "recompute"},
                      ["shared_dtype", "operand", "shared", "recompute", "materialize"])
    config_error_says(cem_launch.KernelTiles, {"shared_dtype": "bf16"}, ["shared_dtype", "bf16", "operand"])
    config_error_says(cem_launch.KernelTiles, {"kv_keys": 48}, ["kv_keys", "48", "128"])
    config_error_says(cem_launch.KernelTiles, {"kv_warps": 3}, ["kv_warps", "3", "8"])
    config_error_says(cem_launch.KernelTiles, {"psum_keys": -64}, ["psum_keys", "-64", "0"])
    with pytest.raises(ConfigError, match="block_m"):
        z = torch.zeros(1, 1, 4, 4)
        cem_kernel.cem_attention(z, z, None, None, slopes=None, delta=None, key_mask=None, causal=True,
                                 offset=0, block_m=24)


def test_shared_products_in_the_operand_dtype_only_for_bfloat16():
    """``shared_dtype: operand`` stores G and dHs Hᵀ in bf16 for bf16 operands; float16 operands keep float32
    products (a logit past float16's 6.5e4 would overflow to inf: a silent wrong answer), float32 and float64
    ones are their own accumulation dtype; 'accumulation' keeps the accumulation dtype everywhere; the default
    'auto' stores bf16 exactly where the launch gathers the head sums (one program per head, the head-summed
    read-out: the launch timed on a GPU), the accumulation dtype elsewhere."""
    op, acc = cem_launch.KernelTiles(shared_dtype="operand"), cem_launch.KernelTiles(shared_dtype="accumulation")
    f32, bf = torch.float32, torch.bfloat16
    for hmode in ("sum", "stack", "none"):
        assert cem_launch.shared_store_dtype(op, bf, f32, hmode) == bf
        assert cem_launch.shared_store_dtype(op, torch.float16, f32, hmode) == f32
        assert cem_launch.shared_store_dtype(op, torch.float64, torch.float64, hmode) == torch.float64
        assert cem_launch.shared_store_dtype(acc, bf, f32, hmode) == f32
    auto = cem_launch.KernelTiles()
    assert cem_launch.shared_store_dtype(auto, bf, f32, "sum") == bf
    assert cem_launch.shared_store_dtype(auto, torch.float16, f32, "sum") == f32
    assert cem_launch.shared_store_dtype(auto, f32, f32, "sum") == f32
    for tiles, hmode in ((auto, "stack"), (auto, "none"), (cem_launch.KernelTiles(grid="rows"), "sum"),
                         (cem_launch.KernelTiles(head_sums="atomic"), "sum"),
                         (cem_launch.KernelTiles(shared="recompute"), "sum")):
        assert cem_launch.shared_store_dtype(tiles, bf, f32, hmode) == f32, (tiles, hmode)


def test_auto_runs_per_head_factors_on_one_program_per_head_at_their_own_tiles():
    """``grid: auto`` with per-head factors: one program per head, on 64 x 32 tiles in place of the defaults (the
    launch timed and compiled without spills), other tiles kept; every other read-out, 'rows', recomputed
    products and an explicit grid unchanged; the energy resolves its launches once, as the kernel runs them."""
    auto = cem_launch.KernelTiles()
    got = auto.launch("stack")
    assert (got.grid, got.block_m, got.block_n) == ("heads", 64, 32) and auto.grid == "auto"
    assert got.model_dump(exclude={"grid", "block_m", "block_n"}) == auto.model_dump(exclude={"grid", "block_m",
                                                                                              "block_n"})
    assert auto.launch("sum") is auto and auto.launch("none") is auto
    own = cem_launch.KernelTiles(block_m=32).launch("stack")
    assert (own.grid, own.block_m, own.block_n) == ("heads", 32, 64)
    for kw in ({"grid": "rows"}, {"grid": "heads"}, {"grid": "heads_inner"}, {"shared": "recompute"}):
        t = cem_launch.KernelTiles(**kw)
        assert t.launch("stack") is t, kw
    e = InteractionEnergy(16, 4, attn_path="kernel")
    assert e.attn_launch["stack"] == auto.launch("stack") and e.attn_launch["sum"] is e.attn_kernel


def test_auto_head_sums_gather_only_where_one_program_per_head_sums_them():
    """``head_sums: auto`` (the default) is 'gather' on one program per head with the head-summed read-out, and
    changes nothing elsewhere: the loop kernels ('rows', recomputed shared products) and per-head factors never
    gather; it is valid with every grid (an explicit 'gather' on 'rows' is a ConfigError)."""
    auto = cem_launch.KernelTiles()
    assert auto.head_sums == "auto" and auto.head_sums_for("sum") == "gather"
    assert auto.head_sums_for("stack") == auto.head_sums_for("none") == "atomic"
    assert cem_launch.KernelTiles(head_sums="gather_all").head_sums_for("sum") == "gather_all"
    assert cem_launch.gathers(auto, "sum") and not cem_launch.gathers(auto, "stack")
    assert not cem_launch.gathers(auto, "none")
    for kw in ({"grid": "rows"}, {"shared": "recompute"}, {"head_sums": "atomic"}):
        assert not cem_launch.gathers(cem_launch.KernelTiles(**kw), "sum"), kw
    assert cem_launch.gathers(cem_launch.KernelTiles(grid="heads_inner"), "sum")


def test_each_kernel_module_is_loaded_once_per_process():
    """A module loaded again brings new JIT functions, which Triton compiles again on their first launch: the
    default file and its name give one module, and loading every kernel file keeps the first one loaded."""
    pytest.importorskip("triton")
    from energyformer.energies.cem_kernel import _kernels

    first = _kernels(True)
    assert _kernels(True, "cem_triton.py") is first
    for f in ("cem_triton_heads.py", "hyperspherical_triton.py", "cem_triton_heads_tiles.py", "cem_triton.py"):
        _kernels(True, f)
    assert _kernels(True) is first


def test_products_turned_to_their_longer_side_are_refused_on_cuda():
    """``product_order: auto`` gave an illegal address and wrong gradients compiled for an H100 (2026-11-27): on
    CUDA the launch refuses it with the key, the value and what is allowed; the default is 'queries', and CPU
    tensors (Triton's interpreter, where it is tested) still take 'auto'."""
    assert cem_launch.KernelTiles().product_order == "queries"
    auto = cem_launch.KernelTiles(product_order="auto")
    with pytest.raises(ValueError, match=r"attn_kernel.product_order = 'auto' is refused on CUDA \(allowed there: "
                                         r"'queries'\)"):
        cem_launch.check_product_order(auto, "cuda")
    for tiles, device in ((cem_launch.KernelTiles(), "cuda"), (auto, "cpu")):
        cem_launch.check_product_order(tiles, device)
