"""FLOPs and memory traffic of CEM attention's formulations against Llama's attention (issue 21, item 1).

A count, not a timing: for one layer, one sequence (B = 1), causal, the attention *core* only
(projections W_Q, W_K, W_V, W_O excluded: they are the same or fewer for CEM, whose W_V = W_K and
W_O = W_Q are tied). Every core product is a (visible pairs) × width contraction: with N²/2 causal
pairs, one product of width w costs 2 · N²/2 · w = N² w FLOPs. Scores s_ijk of CEM (docs/cem.md):

    s_ijk = q_ik·k_jk/τ + (d∘u_i)·h_j/τ + b_ijk          (per head: D_r wide; shared term: D wide)
    read-out  Σ_k W_Qkᵀ Σ_j p_ijk k_jk + d ∘ (Σ_k P_k) H  (gradient read-out, shared diagonal d)

Formulations (the products are listed in PRODUCTS below, so each count can be checked by reading):

* ``llama``      flash attention: QKᵀ, PV forward; backward recomputes QKᵀ and forms dP = dO Vᵀ,
                 dV = Pᵀ dO, dQ = dS K, dK = dSᵀ Q.
* ``per-head``   the shared-diagonal term evaluated per head, as the ``fused`` path does (each head
                 D_r + D wide: keys [k ; h], values [k ; h]); flash forward/backward over that width.
* ``blocked``    the ``blocked`` path: the diagonal tile (d∘U)Hᵀ once for all heads and the value term
                 d ∘ ((Σ_k P_k) H) once; P kept for backward (N²/2 per head in memory).
* ``kernel-rec`` the flash-style kernel of ``energies/cem_kernel.py`` with ``shared: recompute``: as
                 ``blocked`` but nothing N² kept; forward in two passes (log Z, then normalised P),
                 backward recomputes (the shared tiles too, in every pass).
* ``kernel``     the same kernel with ``shared: materialize`` (the default): the products the heads
                 share are batched matmuls ("mat"), over row chunks of the N × N (``--causal-chunks``
                 c, the launch's ``causal_chunks``, default 4: each chunk of query rows times the keys it
                 sees, 1 + 1/c causal products; c = 1: the whole N × N, twice a causal product's FLOPs),
                 G = (d∘U)Hᵀ once in forward and once in backward, dHs Hᵀ once; the kernels store Σ_k P_k
                 and Σ_k dS_k per tile, and (ΣP)H, (ΣdS)H, (ΣdS)ᵀdU, (ΣP)ᵀdHs are matmuls too.
* ``kernel-heads`` the same with one program per head (``attn_kernel.grid: heads``,
                 ``cem_triton_heads.py``): backward is a Δ pass and a key-tile kernel that also adds dq
                 = dS K atomically (no query-tile pass b); the heads' sums Σ P, Σ dS are atomic adds.
* ``kernel-gather`` one program per head with the head sums gathered (``attn_kernel.head_sums: gather``):
                 the head's forward in one pass (QKᵀ, PK) and ``_psum_h``, one program per query tile
                 walking the heads, recomputes every head's scores (QKᵀ) and stores Σ_k P_k once, G read
                 once per tile for all heads; Σ_k P_k kept for backward (2 B per pair of the row chunks'
                 blocks), so the backward adds only Σ dS and dq atomically. The same products.
* ``kernel-gather-all`` and Σ dS gathered too (``head_sums: gather_all``): ``_dsum_h``, one program per query
                 tile walking the heads, forms every head's Δ (QKᵀ, dOq Kᵀ) and then Σ dS (both again) in place
                 of the per-head Δ pass; the key-tile kernel adds only dq atomically. Two more products.

Bytes: traffic of the core by a tile model (:func:`traffic`): a pass over the keys reads each key-side
row once per causal query tile (N / (2 BM) times on average; BM: ``--tile`` for Llama, per-head and
blocked, the rows a kernel program owns for the kernels); a materialised P is written once and read
once in backward (float32, as the blocked path keeps it); the kernels' float32 accumulators, which a
program reads and writes back at every step (:func:`accumulator_traffic`), the per-head programs'
shared-tile reads and atomic adds, and the N × N shared buffers. A model of bytes requested (cache or
memory), not a measurement. "kept N²" is the attention memory held for backward by one layer (B = 1).

Usage: python benchmarks/cem_flops.py [--dim 768 --heads 12 --ns 1024 4096 16384 --tile 64 --bytes 2
                                       --kernel-tiles 16 64 --heads-tiles 64 32 --causal-chunks 4]
"""

from __future__ import annotations

import argparse

#: per formulation: forward / backward products as (name, width in units of D_r, per_head?) — a
#: per-head product costs H times, a shared one once. Widths: "r" = D_r, "d" = D, "rd" = D_r + D.
#: the materialised kernels' forward (both grids): two passes over the keys per head, the shared G and (ΣP)H
KERNEL_FWD = [("G = (d∘U)Hᵀ mat", "D", False), ("pass 1: QKᵀ", "r", True), ("pass 2: QKᵀ", "r", True),
              ("PK", "r", True), ("(ΣP)H mat", "D", False)]
PRODUCTS: dict[str, dict[str, list[tuple[str, str, bool]]]] = {
    "llama": {
        "fwd": [("QKᵀ", "r", True), ("PV", "r", True)],
        "bwd": [("QKᵀ (recompute)", "r", True), ("dO Vᵀ", "r", True), ("Pᵀ dO", "r", True),
                ("dS K", "r", True), ("dSᵀ Q", "r", True)],
    },
    "per-head": {
        "fwd": [("[Q;dU][K;H]ᵀ", "rd", True), ("P[K;H]", "rd", True)],
        "bwd": [("scores (recompute)", "rd", True), ("dO [K;H]ᵀ", "rd", True), ("Pᵀ dO", "rd", True),
                ("dS [K;H]", "rd", True), ("dSᵀ [Q;dU]", "rd", True)],
    },
    "blocked": {
        "fwd": [("QKᵀ", "r", True), ("(d∘U)Hᵀ once", "d", False), ("PK", "r", True), ("(ΣP)H once", "d", False)],
        "bwd": [("dOq Kᵀ", "r", True), ("dHs Hᵀ once", "d", False), ("dS K", "r", True), ("dSᵀ Q", "r", True),
                ("Pᵀ dOq", "r", True), ("(ΣdS) H once", "d", False), ("(ΣdS)ᵀ dU once", "d", False),
                ("(ΣP)ᵀ dHs once", "d", False)],
    },
    "kernel-rec": {
        "fwd": [("pass 1: QKᵀ", "r", True), ("pass 1: (d∘U)Hᵀ", "d", False),
                ("pass 2: QKᵀ", "r", True), ("pass 2: (d∘U)Hᵀ", "d", False), ("PK", "r", True),
                ("(ΣP)H", "d", False)],
        "bwd": [  # dq kernel: pass a (Δ = Σ_j p dP, the same dP as pass b), pass b; dkv kernel
            ("a: QKᵀ", "r", True), ("a: (d∘U)Hᵀ", "d", False), ("a: dHs Hᵀ", "d", False),
            ("a: dOq Kᵀ", "r", True),
            ("b: QKᵀ", "r", True), ("b: (d∘U)Hᵀ", "d", False), ("b: dHs Hᵀ", "d", False),
            ("b: dOq Kᵀ", "r", True), ("b: dS K", "r", True), ("b: (ΣdS) H", "d", False),
            ("kv: QKᵀ", "r", True), ("kv: (d∘U)Hᵀ", "d", False), ("kv: dHs Hᵀ", "d", False),
            ("kv: dOq Kᵀ", "r", True), ("kv: dSᵀ Q", "r", True), ("kv: Pᵀ dOq", "r", True),
            ("kv: (ΣdS)ᵀ dU", "d", False), ("kv: (ΣP)ᵀ dHs", "d", False)],
    },
    "kernel": {
        "fwd": KERNEL_FWD,
        "bwd": [("G mat", "D", False), ("dHs Hᵀ mat", "D", False),
                ("a: QKᵀ", "r", True), ("a: dOq Kᵀ", "r", True), ("b: QKᵀ", "r", True),
                ("b: dOq Kᵀ", "r", True), ("b: dS K", "r", True), ("kv: QKᵀ", "r", True),
                ("kv: dOq Kᵀ", "r", True), ("kv: dSᵀ Q", "r", True), ("kv: Pᵀ dOq", "r", True),
                ("(ΣdS) H mat", "D", False), ("(ΣdS)ᵀ dU mat", "D", False),
                ("(ΣP)ᵀ dHs mat", "D", False)],
    },
    "kernel-heads": {
        "fwd": KERNEL_FWD,  # the same forward, one program per head
        "bwd": [("G mat", "D", False), ("dHs Hᵀ mat", "D", False),
                ("Δ: QKᵀ", "r", True), ("Δ: dOq Kᵀ", "r", True), ("kv: QKᵀ", "r", True),
                ("kv: dOq Kᵀ", "r", True), ("kv: dSᵀ Q", "r", True), ("kv: Pᵀ dOq", "r", True),
                ("kv: dS K (dq, atomic)", "r", True),
                ("(ΣdS) H mat", "D", False), ("(ΣdS)ᵀ dU mat", "D", False),
                ("(ΣP)ᵀ dHs mat", "D", False)],
    },
}
PRODUCTS["kernel-gather"] = {  # one pass per head, then every head's scores again in _psum_h
    "fwd": [("G = (d∘U)Hᵀ mat", "D", False), ("QKᵀ", "r", True), ("PK", "r", True), ("Σ P: QKᵀ", "r", True),
            ("(ΣP)H mat", "D", False)],
    "bwd": PRODUCTS["kernel-heads"]["bwd"]}
PRODUCTS["kernel-gather-all"] = {  # Δ and Σ dS by _dsum_h: every head's scores and dP twice, per query tile
    "fwd": PRODUCTS["kernel-gather"]["fwd"],
    "bwd": [("G mat", "D", False), ("dHs Hᵀ mat", "D", False), ("Δ: QKᵀ", "r", True), ("Δ: dOq Kᵀ", "r", True),
            ("Σ dS: QKᵀ", "r", True), ("Σ dS: dOq Kᵀ", "r", True)] + PRODUCTS["kernel-heads"]["bwd"][4:]}
KERNELS = ("kernel-rec", "kernel", "kernel-heads", "kernel-gather", "kernel-gather-all")
HEADS_KERNELS = KERNELS[2:]  # one program per head (``attn_kernel.grid: heads``)


def width(code: str, r: int, d: int, chunks: int = 1) -> float:
    """the causal-product width of a product code; "D": a materialised shared product over row chunks
    (``attn_kernel.causal_chunks``): each chunk of N / c query rows times the keys it sees, 1 + 1/c causal
    products (c = 1: the whole N × N, twice a causal one)"""
    return {"r": r, "d": d, "rd": r + d, "D": d * (1 + 1 / chunks)}[code]


def flops(name: str, phase: str, n: int, d: int, heads: int, chunks: int = 4) -> float:
    """N² w per product (N²/2 causal pairs × 2 FLOPs × width w), × H for per-head products."""
    r = d // heads
    return sum(n * n * width(w, r, d, chunks) * (heads if per_head else 1) for _, w, per_head in PRODUCTS[name][phase])


def dq_atomics(n: int, d: int, kv_owned: int) -> float:
    """Bytes one program per head's key-tile kernel adds into dq atomically (float32): per (key tile, query
    step) pair the step's rows × D_r per head, so 4 B × D per query row and key tile — N² / (2 ``kv_owned``)
    × 4 D over a causal pass, whatever the query step (``KernelTiles.kv_keys``)."""
    return n * n / (2 * kv_owned) * 4 * d


def accumulator_traffic(name: str, n: int, d: int, owned: int, step: int, nbytes: int, heads: int = 1,
                        gbytes: int = 4, kv_owned: int | None = None) -> float:
    """Bytes the kernels move through their read-modify-write float32 accumulators and N × N buffers.

    Every (owned tile, step tile) pair of a causal pass (N² / (2 · owned · step) of them) reads and
    writes back the owned rows' accumulators, 8 B per float: forward oq (H·D_r = D per row); backward
    dq, and in the key-tile kernel dk — with ``recompute`` also the D-wide hs, d(ud) and dh. The
    ``kernel`` (materialised) instead reads the float32 G tile in 2 forward passes, G and dHs Hᵀ in 3
    backward passes, writes Σ P (forward, backward) and Σ dS in ``nbytes``, and its matmuls write G
    twice and dHs Hᵀ once (float32), read Σ P twice and Σ dS twice, and zero the three sum buffers.
    ``kernel-heads`` keeps its accumulators in registers, but every head's program reads the float32
    G tile (forward: 2 passes; backward: G and dHs Hᵀ in 2) and adds its float32 P (forward, backward)
    and dS tiles atomically (4 B each, per head), and the key-tile kernel adds dq atomically (its
    ``step`` query rows × D floats per pair); the three float32 sum buffers are zeroed, and rounded to
    ``nbytes`` once before their matmuls. ``kernel-gather``: every head's program reads G in one forward pass
    and G and dHs Hᵀ in two backward passes, and adds only dS atomically (and dq); ``_psum_h`` reads the G tile
    once for all heads and writes Σ P once in ``nbytes``; only Σ dS is zeroed and rounded. ``kernel-gather-all``:
    each head's programs read G in one forward pass and G and dHs Hᵀ in the key-tile kernel only, and add only dq
    atomically; ``_dsum_h`` reads G and dHs Hᵀ once per tile in each of its two passes and writes Σ dS once in
    ``nbytes``; nothing is zeroed or rounded. ``gbytes``: bytes per
    element of the stored G and dHs Hᵀ that one program per head reads (4: float32, ``shared_dtype:
    accumulation``; 2: bf16, ``shared_dtype: operand``). ``kv_owned``: the keys the key-tile kernel owns (its
    ``KernelTiles.kv_keys``; None: ``owned``), which divide its dq atomics (:func:`dq_atomics`)."""
    dq = dq_atomics(n, d, kv_owned or owned)
    pairs = n * n / (2 * owned * step)
    tile = owned * step
    if name == "kernel-rec":
        return pairs * 8 * d * owned * 6  # oq, hs | dq, d(ud) | dk, dh
    if name == "kernel":
        per_pair = 8 * d * owned * 3 + tile * (4 * 2 + 4 * 6 + nbytes * 3)
        return pairs * per_pair + n * n * (4 * 3 + nbytes * (4 + 3))
    if name == "kernel-heads":
        per_pair = heads * tile * (gbytes * 6 + 4 * 3)
        return pairs * per_pair + dq + n * n * (gbytes * 3 + 4 * 3 + 3 * (4 + nbytes) + nbytes * 4)
    if name == "kernel-gather":
        per_pair = heads * tile * (gbytes * 5 + 4 * 1) + tile * (gbytes + nbytes)
        return pairs * per_pair + dq + n * n * (gbytes * 3 + 4 * 1 + 1 * (4 + nbytes) + nbytes * 4)
    if name == "kernel-gather-all":
        per_pair = heads * tile * gbytes * 3 + tile * (gbytes * 5 + nbytes * 2)
        return pairs * per_pair + dq + n * n * (gbytes * 3 + nbytes * 4)
    return 0.0


def traffic(name: str, n: int, d: int, heads: int, tile: int, nbytes: int,
            kernel_tiles: tuple[int, int] = (16, 64), heads_tiles: tuple[int, int] = (64, 32),
            chunks: int = 4, gbytes: int = 4, kv_owned: int | None = None) -> tuple[float, float]:
    """(bytes moved by one training step's core, bytes of N² tensors kept for backward).

    Tile model: the per-token rows each formulation streams (Llama: K, V = 2D; per-head: every head's
    [k ; h] keys and values = 2H(D_r + D); CEM shared: K (all heads, D) + H (D)) are read once per
    causal query tile (of ``tile`` rows; a kernel's: the rows its programs own) in every pass over the
    keys (Llama, per-head, blocked: forward + backward = 2; kernels: forward 2 + backward 3, or 2 with
    one program per head), and the query-side rows (inputs, outputs and their gradients) are moved three
    times. The blocked path also writes its float32 probabilities once and reads them once; the kernels
    add :func:`accumulator_traffic` at their tiles (owned, stepped): ``kernel_tiles`` for the loop
    kernels, ``heads_tiles`` for one program per head (and the gathered head sums, which keep Σ P in ``nbytes``
    on the blocks of ``chunks`` row chunks, (1 + 1/chunks) N²/2 pairs, and read it once in backward); ``gbytes``:
    :func:`accumulator_traffic`'s, as is ``kv_owned``, which also sets how often one program per head's key-tile
    pass reads its rows (once per causal key tile of ``kv_owned`` keys)."""
    r = d // heads
    own = heads_tiles if name in HEADS_KERNELS else kernel_tiles
    tiles = n / (2 * (own[0] if name in KERNELS else tile))  # causal: a key row is read by half the query tiles
    row = {"llama": 2 * d, "per-head": 2 * heads * (r + d)}.get(name, 2 * d)
    q_side = {"llama": 2 * d, "per-head": 2 * heads * (r + d)}.get(name, 4 * d)
    passes = {"llama": 2, "per-head": 2, "blocked": 2, "kernel-heads": 4, "kernel-gather": 4,
              "kernel-gather-all": 5}.get(name, 5)
    reads = row * tiles * passes
    if name in HEADS_KERNELS:  # one of the passes is the key-tile kernel's,
        reads += row * (n / (2 * (kv_owned or own[0])) - tiles)  # which reads the query side once per key tile
    moved = n * nbytes * (3 * q_side + reads) + accumulator_traffic(name, n, d, *own, nbytes, heads, gbytes, kv_owned)
    kept = heads * n * n / 2 * 4 if name == "blocked" else 0.0
    if name in ("kernel-gather", "kernel-gather-all"):  # Σ P on the chunks' blocks, written by _psum_h, read once
        kept = n * n * (1 + 1 / chunks) / 2 * nbytes
        return moved + kept, kept
    return moved + 2 * kept, kept


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--ns", type=int, nargs="+", default=[1024, 4096, 16384])
    ap.add_argument("--tile", type=int, default=64, help="query tile of the flash-style passes")
    ap.add_argument("--bytes", type=int, default=2, help="bytes per element of q, k, h (2: bf16)")
    ap.add_argument("--mlp", type=int, default=2048, help="SwiGLU hidden size, for the rest of the layer")
    ap.add_argument("--kernel-tiles", type=int, nargs=2, default=(16, 64), metavar=("OWNED", "STEP"),
                    help="the loop kernels' block_m (rows a program owns) and block_n (rows it steps through)")
    ap.add_argument("--causal-chunks", type=int, default=4,
                    help="row chunks of the materialised shared products (attn_kernel.causal_chunks; 1: whole N × N)")
    ap.add_argument("--heads-tiles", type=int, nargs=2, default=(64, 32), metavar=("OWNED", "STEP"),
                    help="block_m and block_n of one program per head (attn_kernel.grid: heads)")
    ap.add_argument("--shared-bytes", type=int, choices=(2, 4), default=4,
                    help="bytes per element of the stored G, dHs Hᵀ one program per head reads (attn_kernel."
                         "shared_dtype: 4 accumulation, 2 operand under bf16)")
    ap.add_argument("--kv-keys", type=int, default=None,
                    help="keys one program per head's key-tile kernel owns (attn_kernel.kv_keys; default: the "
                         "first of --heads-tiles)")
    a = ap.parse_args(argv)
    d, heads = a.dim, a.heads
    kv = a.kv_keys or a.heads_tiles[0]
    print(f"attention core of one layer, B = 1, causal, D = {d}, H = {heads}, D_r = {d // heads}, "
          f"{a.bytes}-byte operands, query tile {a.tile}; kernels' tiles {a.kernel_tiles[0]} owned × "
          f"{a.kernel_tiles[1]} stepped, one program per head {a.heads_tiles[0]} × {a.heads_tiles[1]}; shared "
          f"products in {a.causal_chunks} row chunk(s), stored in {a.shared_bytes} B for one program per head; its "
          f"key-tile kernel owns {kv} keys")
    for name, ph in PRODUCTS.items():
        print(f"  {name:12s} fwd {len(ph['fwd'])} products, bwd {len(ph['bwd'])}: "
              + "; ".join(p for p, _, _ in ph["fwd"]) + " | " + "; ".join(p for p, _, _ in ph["bwd"]))
    print()
    print("| N | formulation | fwd GFLOP | train GFLOP | train × Llama | traffic GB | × Llama | kept N² GiB |")
    print("|---|---|---|---|---|---|---|---|")
    for n in a.ns:
        base_f = flops("llama", "fwd", n, d, heads) + flops("llama", "bwd", n, d, heads)
        cc = a.causal_chunks
        base_b, _ = traffic("llama", n, d, heads, a.tile, a.bytes, a.kernel_tiles, a.heads_tiles)
        for name in PRODUCTS:
            f = flops(name, "fwd", n, d, heads, cc)
            t = f + flops(name, "bwd", n, d, heads, cc)
            moved, kept = traffic(name, n, d, heads, a.tile, a.bytes, a.kernel_tiles, a.heads_tiles, cc,
                                  a.shared_bytes, kv)
            print(f"| {n} | {name} | {f / 1e9:.1f} | {t / 1e9:.1f} | {t / base_f:.2f} | {moved / 1e9:.2f} | "
                  f"{moved / base_b:.2f} | {kept / 2**30:.2f} |")
    print()
    print("one program per head's dq atomic adds (float32, the key-tile kernel; `attn_kernel.kv_keys`) by keys owned: "
          "GB per layer, their share of `kernel-gather`'s modelled traffic, and that traffic (GB):")

    def share(n: int, o: int) -> str:
        moved, _ = traffic("kernel-gather", n, d, heads, a.tile, a.bytes, a.kernel_tiles, a.heads_tiles,
                           a.causal_chunks, a.shared_bytes, o)
        return f"{o} keys {dq_atomics(n, d, o) / 1e9:.2f} ({dq_atomics(n, d, o) / moved:.0%} of {moved / 1e9:.2f})"

    for n in a.ns:
        print(f"  N = {n}: " + ", ".join(share(n, o) for o in (16, 32, 64, 128)))
    print()
    print(f"rest of a Llama layer (W_Q, W_K, W_V, W_O and a SwiGLU MLP of {a.mlp}; 6 FLOPs per weight and "
          "token for forward + backward), training GFLOP:")
    for n in a.ns:
        rest = 6 * n * (4 * d * d + 3 * d * a.mlp)
        base = flops("llama", "fwd", n, d, heads) + flops("llama", "bwd", n, d, heads)
        ratios = []
        for name in ("kernel", "kernel-rec", "kernel-heads", "kernel-gather", "kernel-gather-all"):
            kern = sum(flops(name, ph, n, d, heads, a.causal_chunks) for ph in ("fwd", "bwd"))
            ratios.append(f"{name} vs Llama {(rest + kern) / (rest + base):.2f}x")
        full = sum(n * n * width(w, d // heads, d, a.causal_chunks) for ph in ("fwd", "bwd")
                   for _, w, _ in PRODUCTS["kernel"][ph] if w == "D")
        print(f"  N = {n}: {rest / 1e9:.1f}; whole layer, " + ", ".join(ratios)
              + f" (kernel: {full / 1e9:.1f} GFLOP of it in batched matmuls)")


if __name__ == "__main__":
    main()
