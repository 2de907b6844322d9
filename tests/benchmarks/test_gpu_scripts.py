"""Smoke tests of the GPU benchmark scripts of issues 20 and 21 at their CPU sizes (no timing checks)."""

from __future__ import annotations

import re

import pytest

from .bench_script import load_bench


def test_hyperset_gpu_tiny_prints_every_model_and_writes_the_page(tmp_path, capsys):
    bench = load_bench("hyperset_gpu")
    out = tmp_path / "gpu_throughput.md"
    bench.main(["--tiny", "--repeats", "1", "--warmup", "0", "--precisions", "fp32", "--out", str(out)])
    text = capsys.readouterr().out
    assert text.startswith("device: cpu") and "### fp32, training" in text and "### fp32, inference" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| model")]
    assert len(rows) == 2 * len(bench.MODELS)
    assert all(row.split(" | ")[2].replace(",", "").isdigit() for row in rows)   # tokens/s measured
    assert out.read_text().startswith("# Hyper-SET vs the looped transformer") and "| Hyper-SET | " in out.read_text()


def test_cem_tiles_tiny_times_each_variant_through_the_interpreter(tmp_path, capsys):
    pytest.importorskip("triton")
    bench = load_bench("cem_tiles")
    out = tmp_path / "tiles.md"
    bench.main(["--tiny", "--out", str(out)])
    text = capsys.readouterr().out
    rows = [line for line in text.splitlines() if line.startswith("| 16×")]
    # the default launch (one program per head, head sums gathered), then 2 tile pairs × (2 unroll factors ×
    # 2 shared forms of one program per row, + one program per head with the head sums atomic)
    assert len(rows) == 11 and "not built" not in text
    assert rows[0].startswith("| 16×64 | 1 | 4 | materialize | heads | 4 | 1 | gather | operand | ")
    assert "| 16×64 | 1 | 4 | materialize | rows | " in text and "| 16×32 | 2 | 2 | recompute | rows | " in text
    assert "| 16×64 | 1 | 4 | materialize | heads | " in text
    assert rows[0].endswith("| 1.00 [1.00, 1.00] |")  # the ratio column is against the library default
    sdpa = next(line for line in text.splitlines() if line.startswith("| SDPA"))
    assert re.search(r"\| \d+\.\d+ \[\d+\.\d+, \d+\.\d+\] \| \d+\.\d+ \[", sdpa)  # timed with the rest
    assert "| 16×64 | 1 | 4 | materialize | rows | " in out.read_text()
    V = bench.Variant  # noqa: N806  (fields after num_stages: their defaults, atomic head sums in float32)
    assert bench.parse_tiles("32x64w8,16x16", "1", 4) == [V(32, 64, 1, 8, "materialize", "rows", 4, 1),
                                                         V(16, 16, 1, 4, "materialize", "rows", 4, 1)]
    assert bench.parse_tiles("16x16", "1", 4, causal_chunks="4,8") == [V(16, 16, 1, 4, "materialize", "rows", 4, 1),
                                                                        V(16, 16, 1, 4, "materialize", "rows", 8, 1)]
    assert bench.parse_tiles("64x32", "1", 4, grid="heads", num_stages="1,3") == [
        V(64, 32, 1, 4, "materialize", "heads", 4, 1), V(64, 32, 1, 4, "materialize", "heads", 4, 3)]
    # one program per head: only with materialised products, no head loop to unroll
    assert bench.parse_tiles("64x32", "1,2", 4, "materialize,recompute", "rows,heads") == [
        V(64, 32, 1, 4, "materialize", "rows", 4, 1), V(64, 32, 1, 4, "materialize", "heads", 4, 1),
        V(64, 32, 1, 4, "recompute", "rows", 4, 1), V(64, 32, 2, 4, "materialize", "rows", 4, 1),
        V(64, 32, 2, 4, "recompute", "rows", 4, 1)]
    # head sums gathered: one program per head only; shared products in the operand dtype: materialised only
    assert bench.parse_tiles("64x32", "1", 4, grid="rows,heads", head_sums="atomic,gather") == [
        V(64, 32, 1, 4, "materialize", "rows", 4, 1), V(64, 32, 1, 4, "materialize", "heads", 4, 1),
        V(64, 32, 1, 4, "materialize", "heads", 4, 1, "gather")]
    assert bench.parse_tiles("16x16", "1", 4, "materialize,recompute", shared_dtype="accumulation,operand") == [
        V(16, 16, 1, 4, "materialize", "rows", 4, 1), V(16, 16, 1, 4, "materialize", "rows", 4, 1, "atomic", "operand"),
        V(16, 16, 1, 4, "recompute", "rows", 4, 1)]
    with pytest.raises(SystemExit, match="32by64"):
        bench.parse_tiles("32by64", "1", 4)


def test_cem_tiles_times_per_head_factors_against_the_loop_kernels(capsys):
    """``--h-mode stack``: the paper configuration's call (per-head factors, extra value columns); its default
    launch, the ratios' base, is one program per head on 64 × 32 tiles (``KernelTiles.launch``)."""
    pytest.importorskip("triton")
    bench = load_bench("cem_tiles")
    bench.main(["--tiny", "--h-mode", "stack"])
    text = capsys.readouterr().out
    assert "h read-out 'stack' (per-head factors c_k, 8 extra value columns per head)" in text
    assert "not built" not in text and "| 16×64 | 1 | 4 | materialize | heads | " in text
    default = next(r for r in text.splitlines() if r.startswith("| 64×32 | 1 | 4 | materialize | heads | 4 | 1 | "))
    assert default.endswith("| 1.00 [1.00, 1.00] |") and "| 16×64 | 1 | 4 | materialize | rows | 4 | 1 | " in text


def test_cem_tiles_times_gathered_head_sums_beside_the_atomic_ones(capsys):
    """``--head-sums atomic,gather``: one program per head with Σ_k P_k added atomically and gathered by
    ``_psum_h`` (the default launch, with the shared products in the operand dtype: the ratios' base), all built
    and timed."""
    pytest.importorskip("triton")
    bench = load_bench("cem_tiles")
    bench.main(["--tiny", "--tiles", "16x64", "--grid", "heads", "--head-sums", "atomic,gather", "--shared-dtype",
                "accumulation,operand", "--no-sdpa"])
    text = capsys.readouterr().out
    assert "not built" not in text
    default = next(r for r in text.splitlines()
                   if r.startswith("| 16×64 | 1 | 4 | materialize | heads | 4 | 1 | gather | operand"))
    assert default.endswith("| 1.00 [1.00, 1.00] |")
    for sums, dt in (("gather", "accumulation"), ("atomic", "operand"), ("atomic", "accumulation")):
        assert re.search(rf"\| 16×64 \| 1 \| 4 \| materialize \| heads \| 4 \| 1 \| {sums} \| {dt} \| — \| 512 "
                         rf"\| queries \| \d", text)


def test_cem_tiles_crosses_the_product_order():
    """``--product-order auto,queries``: both orders of the per-head products for one program per head; the loop
    kernels (grid rows) take no such flag and keep the default ('queries'; 'auto' is refused on CUDA)."""
    bench = load_bench("cem_tiles")
    got = bench.parse_tiles("16x64", "1", 4, grid="rows,heads", kv=",128x32w8", product_order="auto,queries")
    assert [(v.grid, v.kv, v.product_order) for v in got] == [
        ("rows", "", "queries"), ("rows", "128x32w8", "queries"), ("heads", "", "auto"), ("heads", "", "queries"),
        ("heads", "128x32w8", "auto"), ("heads", "128x32w8", "queries")]
    assert got[-1].launch()["product_order"] == "queries" and got[-1].label().endswith("| 512 | queries |")
    assert got[-2].launch()["product_order"] == "auto"


def test_cem_tiles_gives_the_key_tile_kernel_its_own_tiles(capsys):
    """``--kv``: the backward's key-tile kernel on tiles of its own (an empty item: the pair's), each built and timed
    beside the default launch; a malformed item is refused naming the option."""
    pytest.importorskip("triton")
    bench = load_bench("cem_tiles")
    bench.main(["--tiny", "--tiles", "16x64", "--grid", "heads", "--head-sums", "gather", "--shared-dtype", "operand",
                "--kv", ",32x16w2", "--no-sdpa"])
    text = capsys.readouterr().out
    assert "not built" not in text
    rows = [r for r in text.splitlines() if r.startswith("| 16×64 | 1 | 4 | materialize | heads | 4 | 1 | gather")]
    assert len(rows) == 2 and rows[0].endswith("| 1.00 [1.00, 1.00] |") and "| operand | — | " in rows[0]
    assert "| operand | 32x16w2 | " in rows[1]
    assert bench.Variant(16, 64, 1, 4, "materialize", "heads", kv="128x32w8").launch()["kv_keys"] == 128
    # psum_keys: a list for the gathered head sums only (atomic ones run no _psum_h)
    assert [v.psum_keys for v in bench.parse_tiles("16x64", "1", 4, grid="heads", head_sums="atomic,gather",
                                                   psum_keys="0,512")] == [512, 0, 512]
    with pytest.raises(SystemExit, match="--kv"):
        bench.parse_tiles("16x64", "1", 4, kv="128x32")


def test_cem_tiles_budget_stops_building_and_still_prints_the_table(capsys):
    pytest.importorskip("triton")
    bench = load_bench("cem_tiles")
    bench.main(["--tiny", "--budget", "0"])
    text = capsys.readouterr().out
    assert "the budget of 0 s was half spent before its build" in text and "| block_m × block_n |" in text


def test_every_model_named_in_gpu_checks_exists():
    """scripts/gpu_checks.sh runs on a device session with no second chance: every `--models` name of its
    benchmark steps is one the benchmark knows (a renamed row would cost the session that step)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "scripts" / "gpu_checks.sh").read_text().replace("\\\n", "")
    lm, hs = set(load_bench("gpu_lm").models()), set(load_bench("hyperset_gpu").MODELS)
    known = {"gpu_lm.py": lm, "hyperset_gpu.py": hs, "gpu_profile.py": lm | hs}
    seen = 0
    for line in text.splitlines():
        script = re.search(r"benchmarks/(\w+\.py)", line)
        names = re.search(r'--models "([^"]+)"', line)
        if script and names and script.group(1) in known:
            for name in names.group(1).split(";"):
                assert name in known[script.group(1)], f"{script.group(1)}: no model {name!r}"
                seen += 1
    assert seen >= 10
