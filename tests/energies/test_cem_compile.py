"""CEM's Triton kernels compiled for sm_90 on this machine, no GPU needed (energies/cem_compile.py).

Issue 21: at GPT-2 small (D 768, 12 heads, bf16, causal, ALiBi, self bias, shared diagonal, head-summed
read-out) the compiled ``_bwd_q`` asked an H200 for 283,000 B of shared memory per block (limit
232,448 B) — the interpreter tests cannot see that. Each kernel is compiled with the launcher's own
constexprs and options and a real launch's argument specialisation; its shared memory must leave half
of the H100/H200 limit free (room to tune tiles) at GPT-2 small and at D = 2,048 with the per-head
read-out, low-rank value columns and key padding (every D-wide path at once), in 8 heads of 256: the
widest per-head tiles, and half the unrolled heads of 16 × 128 to compile (compile time grows with H;
shared memory, since the D chunks, with the tiles and R only: docs/cem.md).

Registers (``ptxas -v`` of the same PTX): the kernels' first form unrolled the head loop, so every
kernel sat at the 255-register cap and spilled (up to 500 B per thread at GPT-2 small): two programs
per SM. With the head a loop index (``KernelTiles.head_unroll`` 1, the default) GPT-2 small and D 2,048
in 16 heads of 128 must stay under the cap with at most a few spilled words, with the shared products
materialised (the default) or recomputed in the kernels.

One program per head (``KernelTiles.grid = 'heads'``, ``cem_triton_heads.py``) is compiled at the tiles
docs/cem.md suggests for it (64 owned × 32 stepped, 4 warps): at GPT-2 small, with and without extra
value columns and key padding, under the cap with no more spilling; at D 2,048 (heads of 128) within
the shared-memory bound.
"""

import re

import pytest

from energyformer.energies import cem_compile

pytest.importorskip("triton")

CASES = {
    "gpt2-small": dict(heads=12, head_dim=64, dim=768),
    "d2048-paper": dict(heads=8, head_dim=256, dim=2048, h_mode="stack", x_cols=8, key_mask=True),
    "d2048-16x128": dict(heads=16, head_dim=128, dim=2048),
    "gpt2-small-recompute": dict(heads=12, head_dim=64, dim=768, shared="recompute"),
}
REGISTER_CASES = ("gpt2-small", "d2048-16x128", "gpt2-small-recompute")
REGISTER_CAP = 255
SPILL_BYTES = 64  # per thread; the unrolled kernels spilled 60-500 B at GPT-2 small


def compile_or_skip(cases: dict, kernels: tuple[str, ...]) -> dict:
    try:
        return cem_compile.resources(cases, kernels=kernels)
    except cem_compile.CompilerUnavailable as err:
        pytest.skip(f"triton cannot compile for sm_90 here: {err}")


@pytest.fixture(scope="module")
def compiled():
    return compile_or_skip(CASES, cem_compile.KERNELS)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_kernels_fit_sm90_shared_memory(compiled, case):
    assert sorted(compiled[case]) == sorted(cem_compile.KERNELS)
    for name, used in compiled[case].items():
        assert used["shared"] <= cem_compile.SHARED_LIMIT_SM90 // 2, (case, name, used)


@pytest.mark.slow
@pytest.mark.parametrize("case", REGISTER_CASES)
def test_kernels_stay_under_the_register_cap(compiled, case):
    for name, used in compiled[case].items():
        assert used["registers"] < REGISTER_CAP and used["spill_stores"] <= SPILL_BYTES, (case, name, used)


HEADS_TILES = dict(grid="heads", block_m=64, block_n=32)
GRID_CASES = {
    "gpt2-small-heads": dict(heads=12, head_dim=64, dim=768, **HEADS_TILES),
    "gpt2-small-heads-x-mask": dict(heads=12, head_dim=64, dim=768, x_cols=8, key_mask=True, **HEADS_TILES),
    "d2048-16x128-heads": dict(heads=16, head_dim=128, dim=2048, **HEADS_TILES),
    # the default launch (grid 'auto' = one program per head here) at its default tiles
    "gpt2-small-default": dict(heads=12, head_dim=64, dim=768, grid="heads"),
    "d2048-16x128-default": dict(heads=16, head_dim=128, dim=2048, grid="heads"),
    # software pipelining for the next GPU sweep (scripts/cem_heads_resources.py, docs/results/cem/heads_stages.md)
    "gpt2-small-default-3-stages": dict(heads=12, head_dim=64, dim=768, grid="heads", num_stages=3),
    "gpt2-small-heads-3-stages": dict(heads=12, head_dim=64, dim=768, num_stages=3, **HEADS_TILES),
}


@pytest.fixture(scope="module")
def compiled_grid():
    return compile_or_skip(GRID_CASES, cem_compile.GRID_KERNELS)


@pytest.mark.slow
@pytest.mark.parametrize("case", GRID_CASES)
def test_one_program_per_head_kernels_fit(compiled_grid, case):
    assert sorted(compiled_grid[case]) == sorted(cem_compile.GRID_KERNELS)
    for name, used in compiled_grid[case].items():
        assert used["shared"] <= cem_compile.SHARED_LIMIT_SM90 // 2, (case, name, used)
        if case.startswith("gpt2"):
            assert used["registers"] < REGISTER_CAP and used["spill_stores"] <= SPILL_BYTES, (case, name, used)


#: the paper configuration's per-head factors and low-rank value columns on one program per head (grid 'heads':
#: every head's probabilities stored in the operands' dtype, and _dv_h's value gradients)
STACK_CASES = {
    "gpt2-small-paper-heads": dict(heads=12, head_dim=64, dim=768, h_mode="stack", x_cols=8, **HEADS_TILES),
    "gpt2-small-paper-heads-default": dict(heads=12, head_dim=64, dim=768, h_mode="stack", x_cols=8, grid="heads"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", STACK_CASES)
def test_per_head_factors_on_one_program_per_head_fit(case):
    """Shared memory within half the limit; at the 64 × 32 tiles under the register cap without more spilling
    (the default 16 × 64 tiles spill in ``_bwd_kv_h`` and ``_bwd_d_h`` with per-head factors — 112 B and 8 B with
    triton 3.9, docs/results/cem/paper_heads_resources.md — so only the shared memory is held there)."""
    kernels = cem_compile.GRID_KERNELS + cem_compile.STACK_KERNELS
    got = compile_or_skip({case: STACK_CASES[case]}, kernels)[case]
    assert sorted(got) == sorted(kernels)
    for name, used in got.items():
        assert used["shared"] <= cem_compile.SHARED_LIMIT_SM90 // 2, (case, name, used)
        if "default" not in case:
            assert used["registers"] < REGISTER_CAP and used["spill_stores"] <= SPILL_BYTES, (case, name, used)


#: the head sums gathered (``head_sums: gather``): the one-pass head forward and ``_psum_h``, which walks every
#: head of a (query tile, batch row) with one (BM, BN) float32 sum in registers, and ``_dsum_h`` (Σ_k dS_k gathered)
GATHER_CASES = {
    "gpt2-small-gathered": dict(heads=12, head_dim=64, dim=768, head_sums="gather", **HEADS_TILES),
    "gpt2-small-gathered-default": dict(heads=12, head_dim=64, dim=768, head_sums="gather", grid="heads"),
    "d2048-16x128-gathered": dict(heads=16, head_dim=128, dim=2048, head_sums="gather", **HEADS_TILES),
    # with the shared products G, dHs Hᵀ in the operands' dtype (KernelTiles.shared_dtype)
    "gpt2-small-gathered-operand": dict(heads=12, head_dim=64, dim=768, head_sums="gather", shared_dtype="operand",
                                        **HEADS_TILES),
    "gpt2-small-gathered-all-operand": dict(heads=12, head_dim=64, dim=768, head_sums="gather_all",
                                            shared_dtype="operand", **HEADS_TILES),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", GATHER_CASES)
def test_gathered_head_sums_fit(case):
    """Within half the shared-memory limit; at GPT-2 small under the register cap without more spilling. Every
    kernel does tensor-core work; at 64 × 32 tiles the query-tile kernels' products (64 rows: a warpgroup's) are all
    on Hopper's wgmma (docs/results/cem/tensor_cores_tiles.md)."""
    kernels = cem_compile.GRID_KERNELS + cem_compile.GATHER_KERNELS
    got = compile_or_skip({case: GATHER_CASES[case]}, kernels)[case]
    assert sorted(got) == sorted(kernels)
    for name, used in got.items():
        assert used["shared"] <= cem_compile.SHARED_LIMIT_SM90 // 2, (case, name, used)
        if case.startswith("gpt2"):
            assert used["registers"] < REGISTER_CAP and used["spill_stores"] <= SPILL_BYTES, (case, name, used)
        assert used["wgmma"] + used["mma_sync"] > 0, (case, name, used)
        if GATHER_CASES[case].get("block_m") == 64 and name != "_bwd_kv_h":
            assert used["mma_sync"] == 0 and used["wgmma"] > 0, (case, name, used)


def test_mma_work_counts_multiply_adds_per_instruction_family():
    """m·n·k per instruction, times its issuers: a warpgroup (4 warps) per wgmma, a warp per mma.sync."""
    ptx = ("\twgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%f1}, %rd1, %rd2, p, 1, 1, 0, 1;\n"
           "\twgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%f2}, %rd3, %rd4, p, 1, 1, 0, 1;\n"
           "\tmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f3}, {%r1}, {%r2}, {%f4};\n"
           "\twgmma.fence.sync.aligned;\n")
    assert cem_compile.mma_work(ptx, 8) == {"wgmma": 2 * 64 * 32 * 16 * 2, "mma_sync": 16 * 8 * 16 * 8}
    assert cem_compile.mma_work(ptx, 4) == {"wgmma": 2 * 64 * 32 * 16, "mma_sync": 16 * 8 * 16 * 4}
    assert cem_compile.mma_work("ld.global.b32 %r1, [%rd1];", 4) == {"wgmma": 0, "mma_sync": 0}


#: the backward's key-tile kernel on tiles of its own (KernelTiles.kv_keys / kv_queries / kv_warps) beside the default
#: forward (16 × 64, head sums gathered, shared products in bf16): the launches gpu_checks.sh's `next` times
KV_CASES = {
    "gpt2-small-kv-128x32w8": dict(heads=12, head_dim=64, dim=768, grid="heads", head_sums="gather",
                                   shared_dtype="operand", kv_keys=128, kv_queries=32, kv_warps=8),
    "gpt2-small-kv-64x32w4": dict(heads=12, head_dim=64, dim=768, grid="heads", head_sums="gather",
                                  shared_dtype="operand", kv_keys=64, kv_queries=32, kv_warps=4),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", KV_CASES)
def test_key_tile_kernel_on_its_own_tiles_fits(case):
    """128 keys a program (8 warps) and 64 (4 warps): under the register cap without spilling, shared memory within
    half the limit (docs/results/cem/kv_tiles_resources.md has the others, some of which spill)."""
    used = compile_or_skip({case: KV_CASES[case]}, ("_bwd_kv_h",))[case]["_bwd_kv_h"]
    assert used["shared"] <= cem_compile.SHARED_LIMIT_SM90 // 2, used
    assert used["registers"] < REGISTER_CAP and used["spill_stores"] == 0, used


def test_heads_resources_script_crosses_the_launch_options_and_marks_kernels_not_launched(load_script):
    """scripts/cem_heads_resources.py (its table: docs/results/cem/heads_gather_resources.md): one case per tiles
    × stages × head sums × shared dtype, the launcher's keywords; ``_psum_h`` only where the head sums are
    gathered (a cell says so), and a launch fits only if every kernel it runs fits."""
    mod = load_script("scripts/cem_heads_resources.py")
    cases = mod.cases("64x32w4", "1", 768, "atomic,gather", "accumulation,operand")
    assert len(mod.cases("64x32w4,16x64w4", "1,2", 768, "atomic,gather,gather_all", "accumulation")) == 12
    assert len(cases) == 4 and {(c["head_sums"], c["shared_dtype"]) for c in cases.values()} == {
        ("atomic", "accumulation"), ("atomic", "operand"), ("gather", "accumulation"), ("gather", "operand")}
    assert all(c["grid"] == "heads" and c["block_m"] == 64 and c["block_n"] == 32 for c in cases.values())
    ok = dict(registers=100, spill_stores=0, shared=1024)
    res = {"atomic": {k: ok for k in cem_compile.GRID_KERNELS},
           "gather": {**{k: ok for k in cem_compile.GRID_KERNELS}, "_psum_h": dict(ok, spill_stores=8)}}
    rows = mod.table(res, cem_compile.GRID_KERNELS + cem_compile.GATHER_KERNELS)[2:]
    assert rows[0].endswith("| — (not launched) | — (not launched) | yes |")
    assert rows[1].endswith("| 100 (8), 1 | — (not launched) | no |")


def test_heads_resources_script_takes_the_heads_the_read_out_and_value_columns(load_script):
    """``--heads HxR``, ``--readout sum,stack`` and ``--x-cols`` (docs/results/cem/heads_d2048_resources.md,
    paper_heads_resources.md): the launcher's keywords carry them, the case names say them, a bad shape is refused."""
    mod = load_script("scripts/cem_heads_resources.py")
    assert mod.cases("64x32w4", "1", 768) == {"64×32, 4 warps, 1 stage(s)": dict(
        heads=12, head_dim=64, dim=768, block_m=64, block_n=32, num_warps=4, num_stages=1, grid="heads",
        head_sums="atomic", shared_dtype="accumulation")}   # the defaults' keywords and names as before
    got = mod.cases("64x32w4", "1", 2048, "auto", "auto", "", mod.heads_shape("16x128"), "sum,stack", 8)
    assert [(c["heads"], c["head_dim"], c.get("h_mode", "sum"), c["x_cols"]) for c in got.values()] == [
        (16, 128, "sum", 8), (16, 128, "stack", 8)]
    assert [n.endswith(e) for n, e in zip(got, ("8 value columns", "per-head factors, 8 value columns"))] == [True] * 2
    for bad in ("12", "0x64", "12x"):
        with pytest.raises(SystemExit, match="--heads"):
            mod.heads_shape(bad)
    with pytest.raises(SystemExit, match="--readout"):
        mod.cases("64x32w4", "1", 768, readout="per_head")


def test_heads_resources_script_gives_the_key_tile_kernel_its_own_tiles(load_script):
    """``--kv``: every launch crossed with the key-tile kernel's tiles (keys owned, queries a step, warps)."""
    mod = load_script("scripts/cem_heads_resources.py")
    got = mod.kv_cases(mod.cases("16x64w4", "1", 768, "gather", "operand"), "128x32w8,64x32w4")
    assert [(c["kv_keys"], c["kv_queries"], c["kv_warps"], c["block_m"]) for c in got.values()] == [
        (128, 32, 8, 16), (64, 32, 4, 16)]
    with pytest.raises(SystemExit, match="--kv"):
        mod.kv_cases(got, "128x32")
    both = mod.ordered(mod.kv_cases(mod.cases("16x64w4", "1", 768, "gather", "operand"), "128x32w8"), "auto,queries")
    assert [(name.endswith(", queries first"), c["product_order"]) for name, c in both.items()] == [
        (False, "auto"), (True, "queries")]
    # --psum-keys: the gathered launches only (the atomic ones run no _psum_h)
    ps = mod.cases("16x64w4", "1", 768, "atomic,gather", "operand", "0,512")
    assert [c.get("psum_keys") for c in ps.values()] == [None, 0, 512]


def test_heads_resources_script_shows_the_share_of_products_on_wgmma(load_script):
    """A cell adds the share of the kernel's tensor-core work on wgmma where the compile result counts it ("—" where
    the kernel has no products), and the header says so."""
    mod = load_script("scripts/cem_heads_resources.py")
    ok = dict(registers=100, spill_stores=0, shared=1024)
    res = {"a": {"_fwd_h": dict(ok, wgmma=2, mma_sync=3), "_bwd_d_h": dict(ok, wgmma=0, mma_sync=0),
                 "_bwd_kv_h": dict(ok, wgmma=5, mma_sync=0)}}
    head, _, row = mod.table(res)
    assert "products on wgmma" in head
    assert row == "| a | 100 (0), 1, 40 % | 100 (0), 1, — | 100 (0), 1, 100 % | yes |"


def test_order_bisect_script_turns_one_kernels_flag_per_case(load_script, tmp_path):
    """scripts/cem_order_bisect.py (``gpu_checks.sh order``): each case switches its kernel's flag on over the
    'queries' launch in a process of its own and says how many launches it turned and by how much the outputs
    moved; through the interpreter every turned form equals 'queries', and 'all' is what 'auto' sets per kernel."""
    pytest.importorskip("triton")
    mod = load_script("scripts/cem_order_bisect.py")
    out = tmp_path / "bisect.md"
    mod.main(["--tiny", "--cases", "bwd_kv TK,all", "--out", str(out)])
    rows = [r for r in out.read_text().splitlines() if r.startswith("| bwd_kv TK") or r.startswith("| all")]
    assert len(rows) == 2
    assert "| _bwd_kv_h.TK | 1 launches turned: " in rows[0]
    assert "auto: _fwd_h KMAJ+TQ; _psum_h KMAJ; _bwd_d_h KMAJ | 3 launches turned" in rows[1]   # never dk (TK)
    for row in rows:
        diffs = [float(x) for x in re.findall(r"(?:oq|hs|dq|dk|dud|dhm) ([\d.e+-]+)", row)]
        assert len(diffs) == 6 and max(diffs) < 1e-5, row
    with pytest.raises(SystemExit, match="--cases: unknown 'nope'"):
        mod.main(["--tiny", "--cases", "nope"])
