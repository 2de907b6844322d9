"""benchmarks/cem_flops.py: the FLOP counts follow from the listed products, the tile model's bytes from
its tiles (a count and a model: nothing here is timed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .bench_script import load_bench


@pytest.fixture(scope="module")
def fl():
    return load_bench("cem_flops")


def units(fl, name: str) -> int:
    """training cost in causal D-wide products (a per-head product of width D_r summed over heads = 1, a
    shared D-wide one = 1, a full N × N one = 2)"""
    return sum({"r": 1, "d": 1, "D": 2, "rd": 13}[w] for ph in ("fwd", "bwd") for _, w, _ in fl.PRODUCTS[name][ph])


@pytest.mark.parametrize("name,expect", [("llama", 7), ("blocked", 12), ("kernel-rec", 24), ("kernel", 26),
                                         ("kernel-heads", 24), ("kernel-gather", 24), ("kernel-gather-all", 26)])
def test_training_flops_are_the_listed_products(fl, name, expect):
    n, d, h = 1024, 768, 12
    assert units(fl, name) == expect
    train = fl.flops(name, "fwd", n, d, h, chunks=1) + fl.flops(name, "bwd", n, d, h, chunks=1)
    assert train == pytest.approx(expect * n * n * d)  # N² D per causal D-wide product


@pytest.mark.parametrize("name", ["kernel", "kernel-heads", "kernel-gather", "kernel-gather-all"])
def test_row_chunks_cut_the_materialised_products_to_one_plus_one_over_c_causal_ones(fl, name):
    n, d, h = 1024, 768, 12
    mat = sum(1 for ph in ("fwd", "bwd") for _, w, _ in fl.PRODUCTS[name][ph] if w == "D")
    assert mat == 7
    whole, four = (sum(fl.flops(name, ph, n, d, h, chunks=c) for ph in ("fwd", "bwd")) for c in (1, 4))
    assert whole - four == pytest.approx(mat * n * n * d * (2 - 1.25))


def test_one_program_per_head_drops_the_query_tile_pass_b(fl):
    """no pass b: its QKᵀ and dOq Kᵀ recomputation is gone, dS K moves into the key-tile kernel"""
    loop = [p for p, _, _ in fl.PRODUCTS["kernel"]["bwd"]]
    heads = [p for p, _, _ in fl.PRODUCTS["kernel-heads"]["bwd"]]
    assert len(loop) - len(heads) == 2 and not any(p.startswith("b:") for p in heads)


def test_traffic_falls_with_the_tiles_a_program_owns(fl):
    n, d, h = 4096, 768, 12
    small = fl.traffic("kernel", n, d, h, 64, 2, kernel_tiles=(16, 64))[0]
    large = fl.traffic("kernel", n, d, h, 64, 2, kernel_tiles=(32, 64))[0]
    assert large < small
    heads = [fl.traffic("kernel-heads", n, d, h, 64, 2, heads_tiles=t)[0] for t in ((32, 32), (64, 32), (128, 32))]
    assert heads[0] > heads[1] > heads[2]
    assert fl.traffic("llama", n, d, h, 64, 2)[1] == 0 and fl.traffic("blocked", n, d, h, 64, 2)[1] == h * n * n / 2 * 4


def test_gathered_head_sums_move_fewer_bytes_for_the_same_products_and_keep_their_blocks(fl):
    """head_sums 'gather': the same products as one program per head (one forward pass per head, plus every
    head's scores in _psum_h), fewer bytes (no atomic Σ P, G read once per tile by _psum_h), and Σ P kept in
    the operand dtype on the blocks of the row chunks: (1 + 1/c) N²/2 pairs."""
    n, d, h = 4096, 768, 12
    units_of = lambda name: sorted(w for ph in ("fwd", "bwd") for _, w, _ in fl.PRODUCTS[name][ph])  # noqa: E731
    assert units_of("kernel-gather") == units_of("kernel-heads")
    heads, gather = (fl.traffic(name, n, d, h, 64, 2, chunks=4) for name in ("kernel-heads", "kernel-gather"))
    assert gather[0] < heads[0] and heads[1] == 0
    assert gather[1] == n * n * 1.25 / 2 * 2


def test_shared_products_in_the_operand_dtype_halve_their_reads(fl):
    """shared_dtype 'operand' (gbytes 2): one program per head reads G and dHs Hᵀ in 2 B instead of 4 — for the
    gathered form 5 of the 6 per-pair accesses of each head (dS added atomically in float32 the sixth), so its
    bytes fall by a fifth at N 4k (the key-tile kernel's float32 dq atomics, D floats per pair, stay)."""
    n, d, h = 4096, 768, 12
    for name in ("kernel-heads", "kernel-gather"):
        wide, narrow = (fl.traffic(name, n, d, h, 64, 2, gbytes=g)[0] for g in (4, 2))
        assert narrow < wide
    wide, narrow = (fl.traffic("kernel-gather", n, d, h, 64, 2, gbytes=g)[0] for g in (4, 2))
    assert narrow < 0.8 * wide
    assert fl.traffic("kernel", n, d, h, 64, 2, gbytes=2) == fl.traffic("kernel", n, d, h, 64, 2)  # loop kernels'


def test_gathering_the_gradient_sums_too_trades_two_products_for_the_atomic_ds(fl):
    """head_sums 'gather_all': _dsum_h recomputes every head's scores and dP twice (Δ, then Σ dS) where the per-head
    Δ pass did once — two more per-head products — and the key-tile kernel adds no dS, and no head reads G and
    dHs Hᵀ for Δ: fewer bytes than 'gather' by the tile model, float32 or bf16 shared products."""
    n, d, h = 4096, 768, 12
    bwd = lambda name: [p for p, _, _ in fl.PRODUCTS[name]["bwd"]]  # noqa: E731
    assert len(bwd("kernel-gather-all")) - len(bwd("kernel-gather")) == 2
    assert [p for p in bwd("kernel-gather-all") if p.startswith("Σ dS")] == ["Σ dS: QKᵀ", "Σ dS: dOq Kᵀ"]
    for g in (4, 2):
        gather, gather_all = (fl.traffic(name, n, d, h, 64, 2, gbytes=g)[0]
                              for name in ("kernel-gather", "kernel-gather-all"))
        assert gather_all < gather


@pytest.mark.parametrize("name", ["kernel-heads", "kernel-gather", "kernel-gather-all"])
def test_dq_atomics_fall_with_the_keys_the_key_tile_kernel_owns(fl, name):
    """One program per head adds 4 B × D of dq per query row and key tile: N² / (2 kv_owned) × 4 D in all; the
    key-tile kernel's own tiles (``--kv-keys``) change that term of the tile model and how often its pass reads
    the query side's rows (2 D operands per row, once per causal key tile), nothing else."""
    n, d, h = 4096, 768, 12
    assert fl.dq_atomics(n, d, 16) == n * n / 32 * 4 * d == 2 * fl.dq_atomics(n, d, 32) == 8 * fl.dq_atomics(n, d, 128)
    same = fl.traffic(name, n, d, h, 64, 2, heads_tiles=(16, 64), gbytes=2)
    assert fl.traffic(name, n, d, h, 64, 2, heads_tiles=(16, 64), gbytes=2, kv_owned=16) == same
    own = fl.traffic(name, n, d, h, 64, 2, heads_tiles=(16, 64), gbytes=2, kv_owned=128)
    reads = n * 2 * (2 * d) * (n / 32 - n / 256)  # 2-byte rows of 2 D, read n / (2 · keys owned) times
    assert same[0] - own[0] == pytest.approx(fl.dq_atomics(n, d, 16) - fl.dq_atomics(n, d, 128) + reads)
    assert own[1] == same[1]


ROOT = Path(__file__).resolve().parents[2]
FLOPS_PAGE = ROOT / "docs/results/cem/cem_flops.md"


def _sections(text: str) -> dict[str, str]:
    """{'## ...' heading: the code block under it} of the committed cem_flops.md"""
    out = {}
    for part in text.split("\n## ")[1:]:
        head, _, rest = part.partition("\n")
        out[head.strip()] = rest.split("```\n", 2)[1]
    return out


def test_the_committed_counts_are_the_scripts_output_today(fl, capsys):
    """docs/results/cem/cem_flops.md (quoted by docs/cem.md) is the script's output for each argument set it names: a
    change of the counts or the tile model must re-commit it (pure arithmetic: no timing in it)."""
    got = _sections(FLOPS_PAGE.read_text())
    assert set(got) == {"(default arguments)", "--shared-bytes 2", "--kernel-tiles 16 16", "--causal-chunks 8"}
    for head, block in got.items():
        fl.main([] if head.startswith("(") else head.split())
        assert capsys.readouterr().out == block, f"cem_flops.md section {head!r} differs from the script's output"


def test_the_docs_typed_run_is_the_committed_one():
    """docs/cem.md quotes the default run verbatim: it equals the committed artifact's section."""
    doc = (ROOT / "docs/cem.md").read_text()
    quoted = doc.split("```\n$ python benchmarks/cem_flops.py\n", 1)[1].split("```\n", 1)[0]
    assert quoted == _sections(FLOPS_PAGE.read_text())["(default arguments)"]
