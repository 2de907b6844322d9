"""How CEM's Triton kernels are launched (``attn_kernel`` in a config; issue 21, docs/cem.md "shared memory").

:class:`KernelTiles` is the launch a model config names — tiles, warps, pipelining stages, the grid, how the head
sums and the shared products are formed — and the functions here turn it into what the kernels take: their
constexpr arguments (:func:`launch_args`, per kernel :func:`kernel_meta`), the causal row chunks of the materialised
products (:func:`launch_chunks`) and the per-head buffers' geometry (:func:`geometry`). The launches themselves
are :mod:`.cem_kernel`'s; ``cem_compile.py`` compiles the same arguments for sm_90 without a GPU.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import model_validator
from torch import Tensor

from energyformer.utils.config import HASH_NEUTRAL, ConfigModel, Field

from .cem_products import head_block_size, row_chunks


def pow2(n: int, lo: int = 16) -> int:
    """The smallest power of two ≥ n and ≥ lo: a Triton block size (every ``tl.arange`` is a power of two)."""
    return max(lo, 1 << (max(1, n) - 1).bit_length())


Tile = Literal[16, 32, 64, 128]


class KernelTiles(ConfigModel):
    """How the kernels are launched: tile sizes, warps and software-pipelining stages (docs/cem.md,
    "shared memory"). Every tile is zero-padded, so any N and D work with any choice; the choice changes
    speed, rounding order and the per-block shared memory (227 KiB on H100/H200), never the result's
    meaning. The defaults fit every kernel in under half of that at any D (measured at D 768 and
    2,048, triton 3.9: ``tests/energies/test_cem_compile.py``), under the 255-register cap, and are
    chosen by the traffic model of ``benchmarks/cem_flops.py``. ``benchmarks/cem_tiles.py`` times the
    choices; its first GPU run (one H100, docs/results/cem/gpu_h100/gpu_tiles_98ac984.md) found no tile pair
    clearly faster than 16 x 64 under one program per head, and 4 causal chunks faster than 8 in every pair."""

    block_m: Tile = 16
    """rows each program owns: queries in ``_fwd`` and ``_bwd_q``, keys in ``_bwd_kv`` (its BN)"""
    block_n: Tile = 64
    """rows each program steps through: keys in ``_fwd`` and ``_bwd_q``, queries in ``_bwd_kv`` (its BM).
    Every step reads and adds back the program's per-head float32 accumulators (oq, dq or dk: H·R
    floats per owned row), so their traffic falls as 1/block_n in all three kernels; 64 (with
    ``block_m`` 16, 4 warps): at most 203 registers and no spills at GPT-2 small (docs/cem.md)"""
    block_d: Literal[16, 32, 64, 128, 256] = 64
    """columns of D per chunk (BD) of the D-wide products (ud Hᵀ, (Σ_k P_k) H, the gradients'): shared
    memory and registers grow with it, not with D"""
    num_warps: Literal[1, 2, 4, 8] = 4
    """warps per program"""
    num_stages: int = Field(1, ge=1, le=4)
    """Triton's software-pipelining stages (buffers per prefetched load); 1: no prefetch. Triton's
    default of 3 multiplied the D-wide tiles' buffers before the D chunking (issue 21)"""
    shared: Literal["materialize", "recompute"] = "materialize"
    """how the D-wide products shared by the heads are formed (docs/cem.md, "materialised shared tiles").
    'materialize' (recommended): one batched matmul each — G = ud Hᵀ (in forward and again in
    backward) and dHs Hᵀ as (B, Nq, Nk) tensors in the accumulation dtype, which the kernels read per
    tile; the kernels store the head sums Σ_k P_k and Σ_k dS_k per tile in the operand dtype, and
    (Σ_k P_k) H, d(ud) and dh are matmuls. 3 + 4 products over the visible blocks of ``causal_chunks``
    row chunks (at 4, 14 % fewer training FLOPs than 'recompute' at GPT-2 small; whole N × N products
    were 8 % more) run on the matmul library instead of the kernels'
    small D chunks, and the kernels no longer read and write D-wide float32 accumulators at every step
    (benchmarks/cem_flops.py); costs 6 (forward) and 12 (backward) B of transient memory per (query,
    key) pair, not per head. 'recompute': every product in the kernels, in ``block_d`` chunks; no N×N
    tensor at all. Per-head factors (h_mode 'stack') recompute on the loop kernels; on one program per
    head their per-head products are materialised too (``grid``). On one H100 (GPT-2 small, bf16,
    docs/results/cem/gpu_h100/gpu_lm_98ac984.md) the model trained at 0.64x Llama's tokens/s materialised vs
    0.52x recomputed (N 1,024) and 0.26x vs 0.16x (N 4,096), both with the loop kernels."""
    head_unroll: Literal[1, 2, 4] = 1
    """how many heads one turn of each kernel's head loop handles (Triton's ``loop_unroll_factor``);
    1 (recommended): a loop whose head is a runtime index. Registers per thread at GPT-2 small, bf16,
    16 × 16 tiles, shared products recomputed, sm_90a (``cem_compile.resources``, docs/cem.md): the
    loop needs 130 / 168 / 140 for ``_fwd`` / ``_bwd_q`` / ``_bwd_kv`` and spills at most 28 B; the fully
    unrolled heads of the first kernels took all 255 (two programs per SM) and spilled up to 500 B"""
    grid: Literal["auto", "rows", "heads", "heads_inner"] = "auto"
    """what one program owns (docs/cem.md, "one program per head"). 'rows': a tile of rows of one batch
    row, every head walked in a loop inside the program, the per-head running state read and added back
    in global memory at each step; no atomics, results bitwise repeatable. 'heads': FlashAttention's
    grid, a tile of rows of one head of one batch row (``cem_triton_heads.py``): the head's accumulators
    stay in registers; the heads' sums Σ_k P_k and Σ_k dS_k and dq are atomic float adds (exact to
    rounding, not bitwise repeatable), and backward is two kernels instead of three passes (no
    query-tile pass for dq: 9 → 7 per-head products in training). 'heads' needs ``shared =
    'materialize'``. Per-head factors (h_mode 'stack', e.g. the paper's per-head preconditioners) run on
    'heads' (or 'heads_inner') only where this names it: the kernels then store every head's probabilities
    in the operand dtype and read a per-head (dHs ∘ c_k) Hᵀ in the accumulation dtype, both on the causal row
    chunks' blocks, and their D-wide products are three batched matmuls per chunk (docs/cem.md, "per-head
    factors on one program per head"; about 2 + 4 + 2 B of transient memory per (query, key) pair and head of
    the blocks) instead of the loop kernels' D-wide float32 accumulators. 'auto' (recommended): 'heads' where it
    applies (materialised products), per-head factors included since an H100 timed them there — on 64 × 32
    tiles where the tiles are the defaults (:meth:`launch`: 3x the loop kernels' tokens/s for the paper
    configuration) — else 'rows'. Measured on one H100 (bf16, GPT-2 small, B 8; docs/results/cem/gpu_h100/): at
    the default tiles the 'heads' kernels' forward + backward took 0.82x [0.71, 0.89] the 'rows' time at N 1,024; with
    64 x 32 tiles the whole model trained at 0.68x Llama's tokens/s vs 0.64x for 'rows' at N 1,024, and
    0.42x vs 0.26x at N 4,096 (gpu_lm_98ac984.md); at the default tiles, each step one CUDA graph, 0.64x vs
    0.46x (N 1,024) and 0.33x vs 0.22x (N 4,096) (gpu_lm_graphs_fef18e0.md). 'heads_inner': the programs
    of 'heads' (the same arithmetic), launched with the heads of one (tile, batch row) next to each other
    instead of every tile of one head: each tile of the (B, Nq, Nk) shared products (G, dHs Hᵀ) and head
    sums is then read and added by all heads while it is in L2, where 'heads' walks a whole head's rows
    — 64 MiB per batch row and product at N 4,096, more than an H100's 50 MB L2 — before the next head;
    causal query tiles launch longest first (docs/cem.md, "launch order"); not yet timed on a GPU."""

    causal_chunks: int = Field(4, ge=1, le=64)
    """row chunks of the materialised shared products under a causal mask (docs/cem.md): each chunk of
    query rows is multiplied with the keys it can see only, so the seven N × N products cost 1 + 1/chunks
    causal products instead of 2 (the FLOPs of ``benchmarks/cem_flops.py``'s ``--causal-chunks``); 1:
    whole N × N products. 4 (recommended): 5/8 of the full FLOPs in 4 matmuls each; faster than 8 in every
    tile pair timed on an H100 (docs/results/cem/gpu_h100/gpu_tiles_98ac984.md). Bidirectional attention
    always multiplies the whole product."""

    head_sums: Literal["auto", "atomic", "gather", "gather_all"] = Field("auto", json_schema_extra={HASH_NEUTRAL: True})
    """how one program per head forms the head sum Σ_k P_k of the head-summed read-out (docs/cem.md, "head sums
    gathered"). 'auto' (recommended, the default): 'gather' — on one H100 (GPT-2 small, bf16, B 8 × N 1,024 and B 2 × N
    4,096, each step one CUDA graph; docs/results/cem/gpu_h100/gpu_lm_gathered_d80aaf5.md) the model trained at 0.66x
    Llama's tokens/s gathered vs 0.65x atomic at N 1,024 and 0.37x vs 0.34x at N 4,096, with 3-5 % more peak memory
    (1.01x Llama's at 4k), and its kernels alone took 0.88x the atomic time at 4k (gpu_tiles_gather_4k_d80aaf5.md).
    'atomic': every head's program adds its normalised probabilities into a (B, Nq, Nk) accumulation-dtype buffer
    (zeroed on the blocks) in a second pass over the keys, and the backward's key-tile kernel adds them up again.
    'gather': the head's forward is one pass (FlashAttention's online rescaling: two per-head products instead of three)
    and a kernel with one program per (query tile, run of keys, batch row), ``_psum_h`` (``psum_keys``), recomputes
    every head's p on each tile (the third product), sums them in registers and stores Σ_k P_k once, in the operand
    dtype, on the row chunks' blocks — G read once per tile for all heads, no atomic adds and no fill of Σ_k P_k — and
    the blocks are kept for the backward instead of being added up again: 2 B per (query, key) pair of the blocks per
    layer call (at 4 chunks 5/8 of N², e.g. 10 MB at N 1,024, B 8). The same FLOPs. 'gather_all': also Σ_k dS_k (with a
    shared diagonal), by ``_dsum_h`` in place of ``_bwd_d_h``: one program per (query tile, batch row) walks the heads
    twice — every head's Δ_k, then the sum of dS_k = p (dP_k − Δ_k) in registers, stored once in the operand dtype — so
    the key-tile kernel adds no dS atomically and each head no longer reads G and dHs Hᵀ for Δ; two more per-head
    products in the backward (26 causal D-wide units instead of 24, ``benchmarks/cem_flops.py``). Takes effect on one
    program per head with the head-summed read-out; per-head factors ('stack') store every head's P_k either way. Needs
    one program per head (``grid`` 'auto', 'heads' or 'heads_inner' with ``shared = 'materialize'``): the loop kernels
    ('rows') sum the heads in registers already. Hash-neutral at its default (added after the studies' runs were
    recorded: ``utils.config.HASH_NEUTRAL``), as is ``shared_dtype``; their defaults, 'atomic' and 'accumulation' then,
    became 'auto' once a GPU had timed them — a launch choice, like ``grid`` 'auto': the same maths in another rounding
    order, which the records of a study do not depend on. 'gather_all' measured slower (0.33x vs 0.34x at 4k, its
    kernels 1.05-1.34x the atomic time), so 'auto' never takes it."""

    shared_dtype: Literal["auto", "accumulation", "operand"] = Field("auto", json_schema_extra={HASH_NEUTRAL: True})
    """the dtype the materialised shared products are stored in for the kernels to read (docs/cem.md, "the
    shared products in the operand dtype"): G = ud Hᵀ (the shared-diagonal logits) and Gh = dHs Hᵀ (the h part
    of every head's dP), and with per-head factors each head's (dHs ∘ c_k) Hᵀ — each summed in float32 by its
    matmul and then kept in 'accumulation' (float32) or rounded once to
    'operand', the operands' dtype (bf16 under bf16 autocast: as PyTorch's own bf16 matmul returns them),
    which halves the bytes every head's program reads per (query, key) pair — 5 of the 6 accesses per pair and
    head with the head sums gathered. Within the tests' bf16 tolerance (a rounding of the logits like the
    blocked path's bf16 products); float32 and float64 operands are unaffected, and float16 ones keep float32
    products (float16's range, 6.5e4, cannot hold every logit). Needs materialised products. 'auto'
    (recommended, the default): 'operand' where the head sums are gathered (:func:`gathers`: one program per head,
    the head-summed read-out), the launch timed there — with bf16 shared products the model trained at 0.67x
    Llama's tokens/s vs 0.66x at N 1,024 and 0.38x vs 0.37x at N 4,096 (each step one CUDA graph, one H100,
    gpu_lm_gathered_d80aaf5.md) — and 'accumulation' elsewhere (the loop kernels and per-head factors: untimed)."""

    kv_keys: Tile | None = Field(None, json_schema_extra={HASH_NEUTRAL: True})
    """keys each program of the backward's key-tile kernel (``_bwd_kv``, ``_bwd_kv_h``) owns, its BN (docs/cem.md,
    "the key-tile kernel's own tiles"); None (the default): ``block_m``, as before this field. One program per head
    adds dq = dS K atomically into float32 once per (key tile, query step) pair: D_r floats per query row and
    head for every ``kv_keys`` keys, 4 B × D / ``kv_keys`` per (query, key) pair — at the default 16 keys 1.6 GB per
    layer and batch row at N 4,096, 16 % of the tile model's bytes (``benchmarks/cem_flops.py --kv-keys``), and the
    kernel reads the query side once per key tile. Larger key tiles divide both; the program's dk (and dx)
    accumulators grow with them (``scripts/cem_heads_resources.py --kv``: 128 × 32 on 8 warps fits). On one H100
    (bf16, GPT-2 small, each step one CUDA graph; docs/results/cem/gpu_h100/gpu_lm_graphs_855edd0.md) 128 × 32 on
    8 warps trained at 0.69x / 0.42x Llama's tokens/s (N 1,024 / 4,096) against the default's 0.67x / 0.40x, and with
    the other kernels on 64 × 32 at 0.69x / 0.45x; not the default until the model-size CUDA test has run that launch
    (docs/cem.md, "the key-tile kernel's own tiles")."""
    kv_queries: Tile | None = Field(None, json_schema_extra={HASH_NEUTRAL: True})
    """queries that kernel steps through per turn, its BM; None (the default): ``block_n``"""
    kv_warps: Literal[1, 2, 4, 8] | None = Field(None, json_schema_extra={HASH_NEUTRAL: True})
    """warps per program of that kernel; None (the default): ``num_warps``"""

    psum_keys: int = Field(512, ge=0, le=1 << 20, json_schema_extra={HASH_NEUTRAL: True})
    """keys of a query tile's row one program of ``_psum_h`` (the gathered head sums, 'gather') covers, rounded down
    to whole key tiles (at least one); 0: all of them, one program per (query tile, batch row) as before this field
    (docs/cem.md, "the gathered head sums' programs"). Each entry of Σ_k P_k depends on its own tile only (the
    heads' m, l are final), so splitting a row's keys among programs changes neither the arithmetic nor the result
    (bitwise) nor the bytes read, only the longest program: one that walks a whole row does the row's key tiles ×
    every head in series — at N 4,096 and 64-key tiles the last query tile's 64 × 12 tile steps, where a head's
    forward program does 64. 512 (the default): 8 key tiles per program at the default 64. On one H100 (the kernels
    alone, N 4,096 × B 2, docs/results/cem/gpu_h100/gpu_tiles_kv_4k_855edd0.md) 0 took 0.99x [0.97, 1.11] of 512's time
    at the default tiles, and 1.15x at 64 × 32 (0.99x against 0.86x of the default launch's time)."""

    product_order: Literal["auto", "queries"] = Field("queries", json_schema_extra={HASH_NEUTRAL: True})
    """how one program per head's kernels form their per-head products (docs/cem.md, "which products run on
    Hopper's tensor-core instruction"). Triton puts a tile product on Hopper's wgmma only where the product's rows
    fill a warpgroup's 64, else on the older mma.sync. 'queries' (the default): every product with the queries as
    its rows, the form every GPU timing and CUDA test ran. 'auto': each product with the longer side of its output
    as its rows — the scores Q Kᵀ and dOq Kᵀ keys first, as (K Qᵀ)ᵀ, where a tile has more keys than queries; the
    accumulators oq, dq (queries × R) and dk (keys × R) held transposed where R is the longer side: compiled for
    sm_90, every kernel of the 16 × 64 launch then runs all its products on wgmma (docs/results/cem/tensor_cores_*.md),
    and through Triton's interpreter it equals 'queries' to rounding (tested). **Refused on CUDA**
    (:func:`check_product_order`): on one H100 (Triton 3.6, 2026-11-27) it ran into an illegal address in the
    backward's key-tile kernel at GPT-2 small's attention (12 heads of 64, bf16, N 1,024 × B 8 and 4,096 × B 2) and
    gave gradients off by orders of magnitude at B 2 × N 1,024, where every CUDA test at the tests' small sizes
    passed (docs/results/cem/gpu_h100/product_order_5cde3b5.md). It was the default, untimed, from 2026-11-27 until
    that run. ``scripts/cem_order_bisect.py``, each kernel's flag on alone at that size, named the key-tile
    kernel's dk held transposed (``TK``: dk 16 % off at B 8, NaN at B 2; every other turned form within bf16
    rounding of 'queries', also all of them together: order_bisect_855edd0.md), so 'auto' no longer holds dk
    transposed anywhere; the refusal stays until the model-size CUDA test has passed 'auto' as it is now."""

    def kv_tiles(self) -> tuple[int, int, int]:
        """(keys owned, queries stepped, warps) of the backward's key-tile kernel, the fields' None resolved."""
        return (self.kv_keys or self.block_m, self.kv_queries or self.block_n, self.kv_warps or self.num_warps)

    def align(self) -> int:
        """The largest tile side of any kernel of the launch, which every row chunk's bounds are multiples of
        (:func:`launch_chunks`): every tile of every kernel then lies in one chunk."""
        return max(self.block_m, self.block_n, *self.kv_tiles()[:2])

    def head_sums_for(self, hmode: str) -> str:
        """The head sums a call with read-out ``hmode`` forms: where it gathers (:func:`gathers`) ``head_sums``
        with 'auto' as 'gather', else 'atomic'."""
        if not gathers(self, hmode):
            return "atomic"
        return "gather" if self.head_sums == "auto" else self.head_sums

    def per_head_programs(self, hmode: str) -> bool:
        """Whether the launch runs the one-program-per-head kernels (``grid`` resolved; the same for every
        ``hmode`` since per-head factors were timed there too: :meth:`launch`)."""
        return self.grid in ("heads", "heads_inner") or (self.grid == "auto" and self.shared == "materialize")

    def launch(self, hmode: str) -> KernelTiles:
        """The launch a call with read-out ``hmode`` runs: itself, except per-head factors (h_mode 'stack', the
        paper's per-head preconditioners) under ``grid`` 'auto' with materialised products, which run one program
        per head ('heads') and, at the default 16 × 64 tiles, on 64 × 32 tiles: the launch that compiles for
        sm_90 without spilling there (``tests/energies/test_cem_compile.py``; 16 × 64 spills 112 B in
        ``_bwd_kv_h`` and 8 B in ``_bwd_d_h``, triton 3.9.0) and the one timed — on one H100 (GPT-2 small, bf16,
        B 8 × N 1,024) the paper configuration trained at 0.18x [0.16, 0.19] Llama's tokens/s this way against
        0.06x [0.06, 0.07] on the loop kernels and 0.11x on the blocked path, at the same peak memory
        (docs/results/cem/gpu_h100/gpu_lm_paper_d80aaf5.md). Other tiles are kept; ``grid`` 'rows' keeps the
        loop kernels. The energy resolves it once (``InteractionEnergy.attn_launch``), outside the traced call."""
        if hmode != "stack" or self.grid != "auto" or self.shared != "materialize":
            return self
        tiles = {"block_m": 64, "block_n": 32} if (self.block_m, self.block_n) == (16, 64) else {}
        return self.model_copy(update={"grid": "heads", **tiles})

    @model_validator(mode="after")
    def _heads_grid_needs_materialized(self) -> KernelTiles:
        if self.grid in ("heads", "heads_inner") and self.shared != "materialize":
            raise ValueError(f"attn_kernel.grid = {self.grid!r} needs attn_kernel.shared = 'materialize' (got "
                             f"{self.shared!r}): one program per head cannot share in-kernel products")
        if self.shared_dtype == "operand" and self.shared != "materialize":
            raise ValueError(f"attn_kernel.shared_dtype = 'operand' needs attn_kernel.shared = 'materialize' (got "
                             f"{self.shared!r}): recomputed shared products are never stored")
        if self.head_sums not in ("auto", "atomic") and (self.grid == "rows" or self.shared != "materialize"):
            raise ValueError(f"attn_kernel.head_sums = {self.head_sums!r} needs one program per head (grid 'auto', "
                             f"'heads' or 'heads_inner' with shared 'materialize'; got grid {self.grid!r}, shared "
                             f"{self.shared!r}): the loop kernels sum the heads in registers already")
        return self


HMODES = {"none": 0, "sum": 1, "stack": 2}
GATHER_LEVELS = {"atomic": 0, "gather": 1, "gather_all": 2}  # the kernels' GATHER (KernelTiles.head_sums)


def launch_args(tl, q: Tensor, hm: Tensor | None, x: Tensor | None, causal: bool, has_g: bool, hmode: str,
                 alibi: bool, delta: bool, kmask: bool, tiles: KernelTiles) -> dict:
    """The kernels' constexpr arguments, and Triton's launch options num_warps and num_stages. MAT:
    the shared products are materialised (``tiles.shared``; only where there is one), and with per-head
    factors on the one-program-per-head kernels the per-head ones (P_k, (dHs ∘ c_k) Hᵀ); the loop kernels
    recompute per-head factors' products."""
    check_product_order(tiles, q.device.type)
    B, H, nq, R = q.shape
    D = 1 if hm is None else hm.shape[-1]
    E = 1 if x is None else x.shape[-1]
    acc = tl.float64 if q.dtype == torch.float64 else tl.float32
    return dict(H=H, R=R, D=D, E=E, RP=pow2(R), BD=min(tiles.block_d, pow2(D)), EP=pow2(E), HP=pow2(H, 2),
                BM=tiles.block_m, BN=tiles.block_n, HU=tiles.head_unroll, num_warps=tiles.num_warps,
                KV=tiles.kv_tiles(), KT=max(1, tiles.psum_keys // tiles.block_n) if tiles.psum_keys else 0,
                MAT=tiles.shared == "materialize" and (tiles.per_head_programs(hmode) if hmode == "stack"
                                                       else has_g or hmode == "sum"),
                num_stages=tiles.num_stages, HI=tiles.grid == "heads_inner", KO=tiles.product_order == "auto",
                GATHER=GATHER_LEVELS[tiles.head_sums_for(hmode)],
                CAUSAL=causal, HAS_G=has_g, HMODE=HMODES[hmode], HAS_X=x is not None,
                HAS_ALIBI=alibi, HAS_DELTA=delta, HAS_KMASK=kmask, PREC="ieee", ACC=acc,
                UPCAST=q.device.type != "cuda" and q.dtype in (torch.bfloat16, torch.float16))


def check_product_order(tiles: KernelTiles, device_type: str) -> None:
    """Refuse ``product_order`` 'auto' on CUDA: its compiled kernels ran into an illegal address and wrong
    gradients on an H100 (:attr:`KernelTiles.product_order`; the form at fault, dk held transposed, is no longer
    part of it, and the refusal stays until the model-size CUDA test has passed 'auto' as it is now); Triton's
    interpreter (CPU) runs it correctly."""
    if tiles.product_order == "auto" and device_type == "cuda":
        raise ValueError("attn_kernel.product_order = 'auto' is refused on CUDA (allowed there: 'queries'): its "
                         "compiled backward gave an illegal address and wrong gradients on an H100, and its form "
                         "without that fault has not run on a GPU yet (docs/results/cem/gpu_h100/"
                         "product_order_5cde3b5.md)")


def launch_chunks(nq: int, nk: int, offset: int, causal: bool, tiles: KernelTiles) -> list[tuple[int, int, int]]:
    """The launch's :func:`row_chunks`, aligned to its largest tile side (every kernel's tiles divide it)."""
    return row_chunks(nq, nk, offset, causal, tiles.causal_chunks, tiles.align())


DV_ROWS = 64  # key rows per program of _dv_h


def geometry(chunks, heads: int, nq: int, causal: bool, tiles: KernelTiles) -> tuple[int, int, int]:
    """The one-program-per-head kernels' (STEP, ALIGN, TOT): rows per row chunk, the alignment ``row_chunks``
    rounded the chunks' keys to (0: one chunk of every key) and the per-head buffers' elements per batch row
    (``cem_products.head_blocks``): what the kernels need to address a chunk's block (``_chunk_at``)."""
    step = chunks[1][0] if len(chunks) > 1 else max(nq, 1)
    align = tiles.align() if causal and tiles.causal_chunks > 1 else 0  # as launch_chunks
    return step, align, head_block_size(heads, chunks)


def kernel_meta(meta: dict, name: str) -> dict:
    """``meta`` (:func:`launch_args`) for kernel ``name``: ``_bwd_kv`` (and ``_bwd_kv_h``) owns key tiles and
    steps through queries, so its BN (keys owned) and BM (query step) are ``KernelTiles.kv_tiles`` (by default
    ``block_m`` and ``block_n``), and so are its warps; the
    launch order HI and GATHER are arguments of the one-program-per-head kernels (``*_h``) only; ``_psum_h`` and
    ``_dsum_h`` (the gathered head sums, one program per query tile and batch row — for ``_psum_h`` per run of
    KT key tiles too, ``KernelTiles.psum_keys``) take the scores' constexprs (and ``_dsum_h`` dP's). ``_dv_h`` (per-head
    factors' value gradients, an elementwise pass) takes its own blocks: 64 key rows × 64 columns of D. The other
    one-program-per-head kernels also take KMAJ, whether they form Q Kᵀ and dOq Kᵀ keys first, and ``_fwd_h`` and
    ``_bwd_kv_h`` TQ (oq, dq held transposed), ``_bwd_kv_h`` TK (dk; never set here: ``KernelTiles.product_order``)."""
    if name == "_dv_h":
        return dict(H=meta["H"], D=meta["D"], BJ=DV_ROWS, BD=min(64, meta["BD"]), ACC=meta["ACC"])
    keys_first = bool(meta.get("KO", False))  # KernelTiles.product_order 'auto': the longer tile side as the rows
    if name in ("_psum_h", "_dsum_h"):
        keep = ("H", "R", "RP", "BM", "BN", "CAUSAL", "HAS_G", "HAS_ALIBI", "HAS_DELTA", "HAS_KMASK", "PREC", "ACC",
                "UPCAST", "num_warps", "num_stages") + (("E", "EP", "HP", "HAS_X") if name == "_dsum_h" else ("KT",))
        return {**{k: meta[k] for k in keep if k in meta}, "KMAJ": keys_first and meta["BN"] > meta["BM"]}
    out = dict(meta)
    out.pop("KT", None)
    out.pop("KO", None)
    kv = out.pop("KV", None)  # (keys owned, queries stepped, warps): KernelTiles.kv_tiles
    if name in ("_bwd_kv", "_bwd_kv_h"):
        owned, step, warps = kv or (meta["BM"], meta["BN"], None)
        out.update(BN=owned, BM=step)
        if warps is not None and "num_warps" in out:
            out["num_warps"] = warps
    if name.endswith("_h"):  # (BM queries × BN keys) tiles, the keys owned in the key-tile kernel
        out["KMAJ"] = keys_first and out["BN"] > out["BM"]
        if name in ("_fwd_h", "_bwd_kv_h"):  # oq / dq (BM × R), dk (BN × R) held transposed where R is longer
            out["TQ"] = keys_first and meta["RP"] > out["BM"]
        if name == "_bwd_kv_h":  # dk is never held transposed by 'auto': the form an H100 miscompiled
            out["TK"] = False       # (KernelTiles.product_order; scripts/cem_order_bisect.py can still force it)
    else:
        out.pop("HI", None)
        out.pop("GATHER", None)
    return out


def shared_store_dtype(tiles: KernelTiles, dtype: torch.dtype, acc: torch.dtype, hmode: str) -> torch.dtype:
    """The dtype the materialised shared products are stored in (``KernelTiles.shared_dtype``; 'auto': 'operand'
    where the launch :func:`gathers`): bfloat16 operands' own with 'operand', else the accumulation dtype —
    float16's range (6.5e4) could not hold every logit a float32 sum can, and a logit that overflowed would be a
    silent wrong answer."""
    operand = tiles.shared_dtype == "operand" or (tiles.shared_dtype == "auto" and gathers(tiles, hmode))
    return dtype if operand and dtype == torch.bfloat16 else acc


def gathers(tiles: KernelTiles, hmode: str) -> bool:
    """Whether the launch gathers Σ_k P_k with ``_psum_h`` and keeps it for the backward
    (``KernelTiles.head_sums``, 'auto' included): one program per head with the head-summed read-out."""
    return tiles.head_sums != "atomic" and hmode == "sum" and tiles.per_head_programs(hmode)
