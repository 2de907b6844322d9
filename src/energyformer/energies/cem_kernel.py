"""Flash-style Triton kernel for CEM attention's averages (``attn_path: kernel``; issue 21, docs/cem.md).

For one batch row, queries i (positions offset + i) and keys j, with q already scaled by 1/τ and the
shared-diagonal query ud = d∘u/τ (CEM seed Eq. 1, 12, App. B; see :mod:`.interaction_paths`):

    s_ijk = q_ik·k_jk + ud_i·h_j − m_k |i − j| + δ_k [j = i]        (hidden: −∞; self always visible)
    oq_ik = Σ_j p_ijk k_jk          (B, H, Nq, Dr)    keys are the values (W_V = W_K)
    hs_i  = Σ_k Σ_j p_ijk h_j = ((Σ_k P_k) H)_i      (B, Nq, D)   the gradient read-out's h-term / d
    lse_ik = log Σ_j e^{s_ijk}     (B, H, Nq)

Flash-style: one program per (query tile, batch row) walks the key tiles; no N×N tensor per head
exists in memory. The shared-diagonal tile ``ud hᵀ`` is formed **once** and reused by every head
(heads are a loop inside the program), and the h read-out multiplies the head-summed
probabilities by H once. By default (``KernelTiles.shared = 'materialize'``) the products the heads
share are batched matmuls around the kernels — G = ud Hᵀ and dHs Hᵀ as (B, Nq, Nk) tensors the
kernels read per tile; the kernels write Σ_k P_k and Σ_k dS_k per tile, and (Σ_k P_k) H, d(ud) and dh
are matmuls of those; with 'recompute' the kernels form them tile by tile. Forward in two passes
(pass 1: every head's running max and sum → lse; pass 2: normalised probabilities → oq and hs),
because Σ_k P_k needs every head's final normaliser. Backward (with dS_k = P_k ∘ (dP_k − Δ_k) + g_lse P_k,
dP_k = dOq_k K_kᵀ + dHs Hᵀ, the second term shared): a query-tile kernel (Δ_k = Σ_j p dP, then dq_k
and d(ud) = (Σ_k dS_k) H) and a key-tile kernel (dk_k = dS_kᵀ q_k + P_kᵀ dOq_k and
dh = (Σ_k dS_k)ᵀ ud + (Σ_k P_k)ᵀ dHs). Per-head running state lives in the output buffers, which each
program owns row-wise (no atomics) — ``KernelTiles.grid = 'rows'``. ``grid = 'heads'`` runs instead one
program per head (``cem_triton_heads.py``: FlashAttention's grid, accumulators in registers, the head sums
and dq added up atomically, backward without the query-tile pass b; docs/cem.md, "one program per head");
the default ``'auto'`` takes it wherever it applies (faster on an H100, see :class:`KernelTiles`). There, with
``KernelTiles.head_sums = 'gather'`` (what its default 'auto' takes with the head-summed read-out), a head's
forward is one pass and Σ_k P_k is summed over the heads in registers by a kernel with one program per (query
tile, batch row) and kept for the backward, instead of being added up atomically in both (docs/cem.md, "head
sums gathered"); without an h read-out the head's forward is one pass either way.

Scores, softmax and accumulators run in float32 (float64 for float64 inputs); bf16 inputs are
multiplied in bf16 with float32 accumulation; float32 products use IEEE (no TF32). On CPU the kernels
run through Triton's interpreter (``TRITON_INTERPRET=1``; triton fixes its mode at its first import, so
one process runs either the GPU or the interpreted kernels — see :func:`_kernels`): slow, for tests.

Also: per-head factors c_k (h_mode 'stack': hs = Σ_k c_k ∘ (P_k H), one D-wide product per head, for
a per-head preconditioner's diagonal) and extra per-head value columns x_k (ox_k = P_k x_k, for its
low-rank part). On one program per head (the default since 2026-11-27) the per-head D-wide products are
batched matmuls around the kernels: hs = [P_1 … P_H] [c_1 ∘ H; …; c_H ∘ H] (the heads joined in the
contraction), the per-head dHs (c_k ∘ H)ᵀ that the backward kernels read, and t = P_kᵀ dHs, from which
``_dv_h`` forms dh and dc in one pass. Covered: causal and bidirectional, key padding, ALiBi, self bias, queries at an
offset (chunked prefill and KV-cache decoding), a shared diagonal or none, both read-outs, every
preconditioner. Not covered (the energy raises, naming the option): a per-head diagonal, whose logits
differ per head.

Shared memory (issue 21): every D-wide product left in the kernels runs in chunks of ``block_d``
columns — ``ud Hᵀ`` and ``dHs Hᵀ`` accumulate over chunks, the read-out and the gradients d(ud), dh,
dc are added chunk by chunk into their zeroed buffers (which each program owns) — so neither shared
memory nor registers grow with D; the launch (tiles, warps, pipelining stages, head-loop unrolling,
materialised or recomputed shared products, the grid) is a :class:`KernelTiles`, first timed on an H100 on
2026-11-26 (docs/results/cem/gpu_h100/).
``cem_compile.py`` compiles the kernels for sm_90 without a GPU to measure shared memory, registers
and spills (docs/cem.md).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path
from typing import Literal

import torch
from einops import rearrange
from pydantic import model_validator
from torch import Tensor

from energyformer.core.precision import autocast_off
from energyformer.utils.config import HASH_NEUTRAL, ConfigModel, Field

from . import cem_products
from .cem_products import (added, chunk_blocks, cols_mm, head_block_size, head_blocks, heads_pair_mm, heads_rows_mm,
                           mm_acc, pair_mm, row_chunks, rows_mm, zero_blocks)


#: whether the triton package is installed, looked up once at import (the kernel paths ask per call: without
#: triton imported yet ``find_spec`` searches the file system every time)
TRITON = importlib.util.find_spec("triton") is not None


def triton_available() -> bool:
    """Whether the triton package is installed (:data:`TRITON`). A plain read, so that torch.compile traces it
    as a constant: the ``functools.cache`` wrapper it had made Dynamo trace ``importlib.util.find_spec``, which
    torch before 2.13 cannot trace — a graph break inside every CEM and Hyper-SET block on CUDA, where the
    ``auto`` paths ask it (docs in ``train/compiling.py``)."""
    return TRITON


@functools.lru_cache(maxsize=4)
def _kernels(interpret: bool, file: str = "cem_triton.py"):
    """The kernel module ``file`` beside this one — ``cem_triton.py`` (``_fwd``, ``_bwd_q``, ``_bwd_kv``)
    or ``cem_triton_heads.py`` (``_fwd_h``, ``_bwd_d_h``, ``_bwd_kv_h``) — jitted for the GPU or for
    Triton's CPU interpreter. Triton fixes the mode of its own library when it is first imported,
    so one process has one mode: if triton is not imported yet, ``TRITON_INTERPRET`` is set here to
    what the first tensor's device needs; otherwise a mismatch is a clear error."""
    if "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    import triton

    if bool(triton.knobs.runtime.interpret) != interpret:
        need = "CPU tensors need TRITON_INTERPRET=1" if interpret else "CUDA tensors need TRITON_INTERPRET unset"
        raise RuntimeError(f"attn_path = 'kernel': triton was imported with TRITON_INTERPRET="
                           f"{os.environ.get('TRITON_INTERPRET')!r}; {need} before triton's first import")
    name = f"{__package__}._{Path(file).stem}_{'interpreted' if interpret else 'compiled'}"
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(file))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _pow2(n: int, lo: int = 16) -> int:
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
    accumulators grow with them (``scripts/cem_heads_resources.py --kv``: 128 × 32 on 8 warps fits). Not yet timed
    on a GPU, so not what any default takes."""
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
    forward program does 64. 512 (the default): 8 key tiles per program at the default 64. Untimed on a GPU."""

    product_order: Literal["auto", "queries"] = Field("auto", json_schema_extra={HASH_NEUTRAL: True})
    """how one program per head's kernels form their per-head products (docs/cem.md, "which products run on
    Hopper's tensor-core instruction"). Triton puts a tile product on Hopper's wgmma only where the product's rows
    fill a warpgroup's 64, else on the older mma.sync. 'auto' (recommended, the default): each product with the
    longer side of its output as its rows — the scores Q Kᵀ and dOq Kᵀ keys first, as (K Qᵀ)ᵀ, where a tile has
    more keys than queries; the accumulators oq, dq (queries × R) and dk (keys × R) held transposed where R is the
    longer side. Compiled for sm_90, every kernel of the default launch (16 × 64) then runs all its products on
    wgmma, where the query-tile kernels ran none and the key-tile kernel 60 % (docs/results/cem/tensor_cores_*.md).
    'queries': every product as before this field. The same products summed in the same dtype: equal results to
    rounding (tested). Untimed on a GPU: ``scripts/gpu_checks.sh next`` compares the two, and a slower result puts
    'queries' back as the default."""

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
        sm_90 without spilling there (``tests/energies/test_cem_compile.py``; 16 × 64 spills 84 B in
        ``_bwd_kv_h``) and the one timed — on one H100 (GPT-2 small, bf16, B 8 × N 1,024) the paper
        configuration trained at 0.18x [0.16, 0.19] Llama's tokens/s this way against 0.06x [0.06, 0.07] on the
        loop kernels and 0.11x on the blocked path, at the same peak memory
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


def _launch_args(tl, q: Tensor, hm: Tensor | None, x: Tensor | None, causal: bool, has_g: bool, hmode: str,
                 alibi: bool, delta: bool, kmask: bool, tiles: KernelTiles) -> dict:
    """The kernels' constexpr arguments, and Triton's launch options num_warps and num_stages. MAT:
    the shared products are materialised (``tiles.shared``; only where there is one), and with per-head
    factors on the one-program-per-head kernels the per-head ones (P_k, (dHs ∘ c_k) Hᵀ); the loop kernels
    recompute per-head factors' products."""
    B, H, nq, R = q.shape
    D = 1 if hm is None else hm.shape[-1]
    E = 1 if x is None else x.shape[-1]
    acc = tl.float64 if q.dtype == torch.float64 else tl.float32
    return dict(H=H, R=R, D=D, E=E, RP=_pow2(R), BD=min(tiles.block_d, _pow2(D)), EP=_pow2(E), HP=_pow2(H, 2),
                BM=tiles.block_m, BN=tiles.block_n, HU=tiles.head_unroll, num_warps=tiles.num_warps,
                KV=tiles.kv_tiles(), KT=max(1, tiles.psum_keys // tiles.block_n) if tiles.psum_keys else 0,
                MAT=tiles.shared == "materialize" and (tiles.per_head_programs(hmode) if hmode == "stack"
                                                       else has_g or hmode == "sum"),
                num_stages=tiles.num_stages, HI=tiles.grid == "heads_inner", KO=tiles.product_order == "auto",
                GATHER=GATHER_LEVELS[tiles.head_sums_for(hmode)],
                CAUSAL=causal, HAS_G=has_g, HMODE=HMODES[hmode], HAS_X=x is not None,
                HAS_ALIBI=alibi, HAS_DELTA=delta, HAS_KMASK=kmask, PREC="ieee", ACC=acc,
                UPCAST=q.device.type != "cuda" and q.dtype in (torch.bfloat16, torch.float16))


def launch_chunks(nq: int, nk: int, offset: int, causal: bool, tiles: KernelTiles) -> list[tuple[int, int, int]]:
    """The launch's :func:`row_chunks`, aligned to its largest tile side (every kernel's tiles divide it)."""
    return row_chunks(nq, nk, offset, causal, tiles.causal_chunks, tiles.align())


DV_ROWS = 64  # key rows per program of _dv_h


def _geometry(chunks, heads: int, nq: int, causal: bool, tiles: KernelTiles) -> tuple[int, int, int]:
    """The one-program-per-head kernels' (STEP, ALIGN, TOT): rows per row chunk, the alignment ``row_chunks``
    rounded the chunks' keys to (0: one chunk of every key) and the per-head buffers' elements per batch row
    (``cem_products.head_blocks``): what the kernels need to address a chunk's block (``_chunk_at``)."""
    step = chunks[1][0] if len(chunks) > 1 else max(nq, 1)
    align = tiles.align() if causal and tiles.causal_chunks > 1 else 0  # as launch_chunks
    return step, align, head_block_size(heads, chunks)


def kernel_meta(meta: dict, name: str) -> dict:
    """``meta`` (:func:`_launch_args`) for kernel ``name``: ``_bwd_kv`` (and ``_bwd_kv_h``) owns key tiles and
    steps through queries, so its BN (keys owned) and BM (query step) are ``KernelTiles.kv_tiles`` (by default
    ``block_m`` and ``block_n``), and so are its warps; the
    launch order HI and GATHER are arguments of the one-program-per-head kernels (``*_h``) only; ``_psum_h`` and
    ``_dsum_h`` (the gathered head sums, one program per query tile and batch row — for ``_psum_h`` per run of
    KT key tiles too, ``KernelTiles.psum_keys``) take the scores' constexprs (and ``_dsum_h`` dP's). ``_dv_h`` (per-head
    factors' value gradients, an elementwise pass) takes its own blocks: 64 key rows × 64 columns of D. The other
    one-program-per-head kernels also take KMAJ, whether they form Q Kᵀ and dOq Kᵀ keys first, and ``_fwd_h`` and
    ``_bwd_kv_h`` TQ (oq, dq held transposed), ``_bwd_kv_h`` TK (dk) (``KernelTiles.product_order``)."""
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
        if name == "_bwd_kv_h":
            out["TK"] = keys_first and meta["RP"] > out["BN"]
    else:
        out.pop("HI", None)
        out.pop("GATHER", None)
    return out


def _dummy(q: Tensor) -> Tensor:
    """The pointer the kernels get for an absent input or output (never read or written: a constexpr flag
    says it is absent), allocated without a fill (the NaN-poisoned tests prove it unread)."""
    return cem_products.scratch((1,), q, q.dtype)


def _heads_grid(tiles: int, bh: int, meta: dict) -> tuple[int, int]:
    """The one-program-per-head kernels' grid: (tiles, B·H), or (B·H, tiles) with heads inner (HI)"""
    return (bh, tiles) if meta.get("HI") else (tiles, bh)


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


def _fwd_impl(q, k, ud, hm, x, c, delta, slopes, kmask, causal: bool, offset: int, hmode: str,
              tiles: KernelTiles) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor, Tensor, Tensor, Tensor | None]:
    """(oq, hs or None, ox or None, lse, m, l, kept or None): the forward launches (m, l: every head's running
    max and sum, p = e^{s − m} / l, which the backward reads; kept: the gathered Σ_k P_k, (B, one-head buffer) in
    the operand dtype, for the backward — :func:`gathers`)."""
    B, H, nq, R = q.shape
    nk = k.shape[2]
    acc_dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    dummy = _dummy(q)
    meta = _launch_args(_kernels(q.device.type != "cuda").tl, q, hm, x, causal, ud is not None, hmode,
                        slopes is not None, delta is not None, kmask is not None, tiles)
    grid = tiles.per_head_programs(hmode)  # one program per head (cem_triton_heads.py)
    kern = _kernels(q.device.type != "cuda", "cem_triton_heads.py" if grid else "cem_triton.py")
    new = functools.partial(torch.zeros, device=q.device, dtype=acc_dt)
    oq = (torch.empty if grid else new)(B, H, nq, R, device=q.device, dtype=acc_dt)
    hs = new(B, nq, meta["D"]) if hmode != "none" and not meta["MAT"] else dummy
    ox = (torch.empty if grid else new)(B, H, nq, meta["E"], device=q.device, dtype=acc_dt) \
        if x is not None else dummy
    lse = torch.empty(B, H, nq, device=q.device, dtype=acc_dt)
    m, l = torch.empty_like(lse), torch.empty_like(lse)  # running max and sum (p = e^{s − m} / l)
    ins = [t if t is not None else dummy for t in (q, k, ud, hm, x, c, slopes, delta, kmask)]
    chunks = launch_chunks(nq, nk, offset, causal, tiles)  # blocks of the shared products
    sdt = shared_store_dtype(tiles, q.dtype, acc_dt, hmode)
    g = pair_mm(ud, hm.mT, acc_dt, chunks, sdt) if meta["MAT"] and ud is not None else dummy  # (B, Nq, Nk)
    # Σ_k P_k: (B, Nq, Nk), stored per tile (loop) or added up atomically in the accumulation dtype (grid);
    # per-head factors (grid): every head's P_k in the operand dtype, per chunk a (B, rows, H, keys) block
    ps = dummy
    gather = gathers(tiles, hmode)
    if gather:  # Σ_k P_k on the chunks' blocks, one after another, every entry written by _psum_h: no fill
        ps = cem_products.scratch((B, head_block_size(1, chunks)), q, q.dtype)
    elif meta["MAT"] and hmode == "sum":
        ps = zero_blocks((B, nq, nk), q, acc_dt if grid else q.dtype, chunks)
    elif meta["MAT"] and hmode == "stack":  # every block entry written by _fwd_h (zeros where hidden): no fill
        ps = cem_products.scratch((B, head_block_size(H, chunks)), q, q.dtype)
    name = "_fwd_h" if grid else "_fwd"
    n_qt = -(-nq // meta["BM"])
    launch = getattr(kern, name)[_heads_grid(n_qt, B * H, meta) if grid else (n_qt, B)]
    geom = _geometry(chunks, H, nq, causal, tiles) if grid else ()  # the per-head buffers' layout
    launch(*ins, g, ps, oq, hs, ox, lse, m, l, nq, nk, offset, *geom, **kernel_meta(meta, name))
    if gather:  # every head's p summed per tile in registers, stored once (needs every head's final m, l)
        step, align, _ = geom  # its buffer holds one "head"
        runs = -(-nk // (meta["KT"] * meta["BN"])) if meta["KT"] else 1  # runs of KT key tiles per query tile
        kern._psum_h[(n_qt, runs, B)](q, k, ins[6], ins[7], ins[8], g, m, l, ps, nq, nk, offset, step, align,
                                      head_block_size(1, chunks), **kernel_meta(meta, "_psum_h"))
    del g
    if gather:
        hs = rows_mm(gathered_blocks(ps, chunks), hm, acc_dt, chunks)  # (Σ_k P_k) H: (B, Nq, D)
    elif meta["MAT"] and hmode == "sum":
        hs = rows_mm(chunk_blocks(ps, chunks, q.dtype), hm, acc_dt, chunks)  # (Σ_k P_k) H: (B, Nq, D)
    elif meta["MAT"] and hmode == "stack":  # Σ_k c_k ∘ (P_k H) = [P_1 … P_H] [c_1 ∘ H; …; c_H ∘ H], (B, Nq, D)
        hs = heads_rows_mm(ps, hm, c.to(acc_dt), q.dtype, acc_dt, chunks)
    return oq, (hs if hmode != "none" else None), (ox if x is not None else None), lse, m, l, (ps if gather else None)


def gathered_blocks(ps: Tensor, chunks) -> list[Tensor]:
    """The chunks' (B, rows, keys) blocks of a gathered Σ_k P_k (:func:`gathers`; views)"""
    return [blk.flatten(2) for blk in head_blocks(ps, 1, chunks)]


def _bwd_impl(q, k, ud, hm, x, c, delta, slopes, kmask, m, l, kept, goq, ghs, gox, glse, causal: bool, offset: int,
              hmode: str, tiles: KernelTiles) -> tuple:
    """(dq, dk, d(ud), dh, dx, dc, dδ), None where the input is None; an output's gradient may be None. kept: the
    forward's gathered Σ_k P_k (:func:`gathers`) or None."""
    B, H, nq, R = q.shape
    nk = k.shape[2]
    acc_dt = m.dtype
    if gathers(tiles, hmode) != (kept is not None):  # the key-tile kernel would skip Σ P with nothing to replace it
        got = "one" if kept is not None else "none"
        raise RuntimeError(f"cem_attention backward: head_sums = {tiles.head_sums!r} with h_mode {hmode!r} needs the "
                           f"forward's gathered Σ_k P_k exactly when it gathers (got {got})")
    meta = _launch_args(_kernels(q.device.type != "cuda").tl, q, hm, x, causal, ud is not None, hmode,
                        slopes is not None, delta is not None, kmask is not None, tiles)
    grid = tiles.per_head_programs(hmode)
    chunks = launch_chunks(nq, nk, offset, causal, tiles)
    new = functools.partial(torch.zeros, device=q.device, dtype=acc_dt)
    dummy = _dummy(q)
    goq = new(B, H, nq, R) if goq is None else goq
    if x is not None:
        gox = (new(B, H, nq, meta["E"]) if gox is None else gox).to(q.dtype).contiguous()
    dlt = new(B, H, nq) if glse is None else -glse.to(acc_dt)  # (B, H, Nq); the kernel adds Σ_j p dP
    if hmode != "none":
        ghs = (new(B, nq, meta["D"]) if ghs is None else ghs).to(q.dtype).contiguous()
    # one program per head stores dk, dx (every key row: one program per key tile) and the self-bias gradient
    # (every query row: the program whose key tile holds its position) without reading them: no fill first
    stored = (lambda *shape: cem_products.scratch(shape, q, acc_dt)) if grid else new
    dq, dk = new(q.shape), stored(*k.shape)
    mat, hsum, hstack = meta["MAT"], hmode == "sum", meta["MAT"] and hmode == "stack"
    dud = new(ud.shape) if ud is not None and not mat else dummy  # materialised: a matmul below
    dh = new(hm.shape) if hm is not None and not grid else None  # one program per head writes no dh
    dx = stored(*x.shape) if x is not None else dummy
    ddiag = stored(B, H, nq) if delta is not None else dummy
    meta_kv = kernel_meta(meta, "_bwd_kv_h" if grid else "_bwd_kv")
    n_kt = -(-nk // meta_kv["BN"])
    dc = new(B, n_kt, H, meta["D"]) if hmode == "stack" and not hstack else dummy  # the loop kernels' parts
    # materialised shared products (B, Nq, Nk): G = ud Hᵀ, Gh = dHs Hᵀ; the head sums Σ dS, Σ P (stored
    # per tile in the operand dtype, or added up atomically in the accumulation dtype by the grid kernels)
    pair = functools.partial(zero_blocks, (B, nq, nk), q, acc_dt if grid else q.dtype, chunks)
    sdt = shared_store_dtype(tiles, q.dtype, acc_dt, hmode)
    g = pair_mm(ud, hm.mT, acc_dt, chunks, sdt) if mat and ud is not None else dummy
    gh = pair_mm(ghs, hm.mT, acc_dt, chunks, sdt) if mat and hsum else dummy
    gather_ds = tiles.head_sums_for(hmode) == "gather_all" and ud is not None  # Σ dS by _dsum_h
    if gather_ds:  # every entry of the blocks written by _dsum_h (zeros where hidden): no fill
        dss = cem_products.scratch((B, head_block_size(1, chunks)), q, q.dtype)
    else:
        dss = pair() if mat and ud is not None else dummy
    ps = pair() if mat and hsum and kept is None else dummy  # gathered: the forward's, kept
    if hstack:  # per head, per chunk (B, rows, H, keys): (dHs ∘ c_k) Hᵀ = dHs (c_k ∘ H)ᵀ, one matmul; and every
        # head's P_k keys first (B, keys, H, rows), every block entry written by _bwd_kv_h (zeros where hidden)
        gh = heads_pair_mm(ghs, hm, c.to(acc_dt), q.dtype, acc_dt, chunks, sdt)
        ps = cem_products.scratch((B, head_block_size(H, chunks)), q, q.dtype)
    ins = [t if t is not None else dummy for t in (q, k, ud, hm, x, c, slopes, delta, kmask)] + [g, gh]
    ins += [m, l, goq.to(q.dtype).contiguous(), ghs if hmode != "none" else dummy,
            gox if x is not None else dummy, dlt.contiguous()]
    if grid:  # Δ per query tile, then every gradient per key tile (dq, Σ dS, Σ P by atomic adds)
        kern = _kernels(q.device.type != "cuda", "cem_triton_heads.py")
        geom = _geometry(chunks, H, nq, causal, tiles)
        if gather_ds:  # Δ of every head and Σ_k dS_k, one program per (query tile, batch row)
            xx, sl, dl, km, gg, ggh, mm, ll, go, _, gx, dd = ins[4], *ins[6:9], *ins[9:17]  # dd: DLT, read next
            kern._dsum_h[(-(-nq // meta["BM"]), B)](q, k, xx, sl, dl, km, gg, ggh, mm, ll, go, gx, dd, dss, nq, nk,
                                                    offset, geom[0], geom[1], head_block_size(1, chunks),
                                                    **kernel_meta(meta, "_dsum_h"))
        else:
            kern._bwd_d_h[_heads_grid(-(-nq // meta["BM"]), B * H, meta)](*ins, nq, nk, offset, *geom,
                                                                           **kernel_meta(meta, "_bwd_d_h"))
        kern._bwd_kv_h[_heads_grid(n_kt, B * H, meta)](*ins, ps, dss, dq, dk, dx, ddiag, nq, nk, offset, *geom,
                                                       **meta_kv)
    else:
        kern = _kernels(q.device.type != "cuda")
        kern._bwd_q[(-(-nq // meta["BM"]), B)](*ins, ps, dss, dq, dud, ddiag, nq, nk, offset,
                                               **kernel_meta(meta, "_bwd_q"))
        kern._bwd_kv[(n_kt, B)](*ins, dk, dh if dh is not None else dummy, dx, dc, nq, nk, offset, **meta_kv)
    del g, gh
    if mat and ud is not None:  # d(ud) = (Σ_k dS_k) H;  dh = (Σ_k dS_k)ᵀ ud + (Σ_k P_k)ᵀ dHs
        # the blocks cast once, read twice (gathered: already in the operand dtype)
        dss = gathered_blocks(dss, chunks) if gather_ds else chunk_blocks(dss, chunks, q.dtype)
        dud = rows_mm(dss, hm, acc_dt, chunks)
        dh = added(dh, cols_mm(dss, ud, acc_dt, chunks, nk))
    if mat and hsum:
        psb = gathered_blocks(kept, chunks) if kept is not None else chunk_blocks(ps, chunks, q.dtype)
        dh = added(dh, cols_mm(psb, ghs, acc_dt, chunks, nk))
    if hstack:  # per row chunk t_k = P_kᵀ dHs (B, ke, H, D), one matmul; _dv_h: dh += Σ_k c_k ∘ t_k, dc_k += Σ h ∘ t_k
        dh = new(hm.shape) if dh is None else dh
        dc = new(1, 1, H, meta["D"])  # (1, 1, H, D): summed below as the loop kernels' parts are
        mdv = kernel_meta(meta, "_dv_h")
        for (r0, r1, ke), blk in zip(chunks, head_blocks(ps, H, chunks, keys_first=True)):
            # t (B, ke·H, D), one chunk's at a time (freed after the launch); the block is a view
            kern._dv_h[(-(-B * ke // mdv["BJ"]), -(-meta["D"] // mdv["BD"]))](
                mm_acc(blk.reshape(B, ke * H, r1 - r0), ghs[:, r0:r1], acc_dt), hm, c, dh, dc, B * ke, ke, nk, **mdv)
        del ps
    if hm is not None and dh is None:
        dh = new(hm.shape)

    def back(g, t):
        return None if t is None else g.to(t.dtype)

    return (back(dq, q), back(dk, k), back(dud, ud), back(dh, hm), back(dx, x),
            None if c is None else dc.sum((0, 1)).to(c.dtype),
            None if delta is None else ddiag.sum((0, 2)).to(delta.dtype))


class _CEMAttention(torch.autograd.Function):
    """(oq, hs, ox, lse) of :func:`cem_attention` with the kernels' own backward (the eager wrapper; under
    torch.compile the same launches are custom operators, ``cem_kernel_ops.py``)."""

    @staticmethod
    def forward(ctx, q, k, ud, hm, x, c, delta, slopes, kmask, causal, offset, hmode, tiles):
        oq, hs, ox, lse, m, l, kept = _fwd_impl(q, k, ud, hm, x, c, delta, slopes, kmask, causal, offset, hmode,
                                                tiles)
        # not the outputs: saving oq would keep a float32 (B, H, Nq, Dr) per call alive
        ctx.save_for_backward(q, k, ud, hm, x, c, delta, slopes, kmask, m, l, kept)
        ctx.args = causal, offset, hmode, tiles
        return oq, hs, ox, lse

    @staticmethod
    def backward(ctx, goq, ghs, gox, glse):
        return (*_bwd_impl(*ctx.saved_tensors, goq, ghs, gox, glse, *ctx.args), None, None, None, None, None, None)


def cem_attention(q: Tensor, k: Tensor, ud: Tensor | None, hm: Tensor | None, *, slopes: Tensor | None,
                  delta: Tensor | None, key_mask: Tensor | None, causal: bool, offset: int,
                  h_mode: str = "none", c: Tensor | None = None, x: Tensor | None = None,
                  tiles: KernelTiles | None = None, **launch) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor]:
    """(oq (B, H, Nq, Dr), hs (B, Nq, D) or None, ox (B, H, Nq, E) or None, lse (B, H, Nq)).

    q: (B, H, Nq, Dr) = W_Q u / τ; k: (B, H, Nk, Dr) keys (= values); ud: (B, Nq, D) = d∘u/τ or None
    (no diagonal); hm: (B, Nk, D) normalised context (needed with ud or an h read-out); slopes, delta:
    (H,) ALiBi slopes and self bias or None; key_mask: (B, Nk) bool (True = real) or None.
    h_mode: 'none'; 'sum': hs = (Σ_k P_k) H; 'stack': hs = Σ_k c_k ∘ (P_k H) with c: (H, D).
    x: (B, H, Nk, E) extra per-head value columns (ox = P_k x_k) or None. Differentiable in q, k, ud,
    hm, x, c and delta (slopes are fixed). float64, float32, bfloat16 or float16 operands (one dtype).
    ``launch``: :class:`KernelTiles` fields by name (block_m, block_n, …; the others at its defaults), resolved
    for ``h_mode`` by :meth:`KernelTiles.launch` (a bad value or an unknown name is a ConfigError naming it); or
    ``tiles``, an already validated and resolved launch, which replaces them (what the energy passes: no
    validation per call, and nothing that torch.compile cannot trace)."""
    if tiles is None:
        tiles = KernelTiles(**launch).launch(h_mode)
    dt = q.dtype
    if dt not in (torch.float64, torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"cem_attention: dtype {dt} is not supported (float64, float32, bfloat16, float16)")
    if h_mode not in HMODES or (h_mode == "stack") != (c is not None):
        raise ValueError(f"cem_attention: h_mode = {h_mode!r} (allowed: {sorted(HMODES)}; c exactly with 'stack')")
    acc_dt = torch.float64 if dt == torch.float64 else torch.float32
    q, k = q.contiguous(), k.to(dt).contiguous()
    ud = None if ud is None else ud.to(dt).contiguous()
    hm = None if hm is None or (ud is None and h_mode == "none") else hm.to(dt).contiguous()
    x = None if x is None else x.to(dt).contiguous()
    c = None if c is None else c.contiguous()
    slopes = None if slopes is None else slopes.to(device=q.device, dtype=acc_dt).contiguous()
    delta = None if delta is None else delta.to(acc_dt).contiguous()
    kmask = None if key_mask is None else key_mask.to(device=q.device, dtype=torch.int8).contiguous()
    if torch.compiler.is_compiling():  # custom operators, which Dynamo keeps in its graph (cem_kernel_ops.py)
        from .cem_kernel_ops import cem_attention_op

        return cem_attention_op(q, k, ud, hm, x, c, delta, slopes, kmask, bool(causal), int(offset), h_mode, tiles)
    return _CEMAttention.apply(q, k, ud, hm, x, c, delta, slopes, kmask, bool(causal), int(offset), h_mode,
                               tiles)


# ------------------------------------------------------------------------------ the energy's path
def attend_kernel(e, u: Tensor, st, bs, plan, need_logz: bool):
    """The attention averages (:class:`~.interaction_paths.Averages`) of queries u (B, Nq, D) through
    :func:`cem_attention`; ``bs`` is the state's :class:`~.interaction_paths.BlockedState` (keys and
    h in the product dtype). Read-out plans: no h term, the head-summed one (c = d: hs ∘ d after the
    kernel), per-head factors c_k ('stack', inside the kernel), and a per-head preconditioner's
    low-rank projections x_k = [d_k∘V_k, d_k∘U_k]ᵀ h as extra value columns."""
    from .interaction_paths import Averages

    H = e.heads
    # projections outside the no-autocast region (as the blocked path): bf16 under bf16 autocast
    q = rearrange(e.wq(u) * (1.0 / e.tau), "b n (h r) -> b h n r", h=H).to(bs.cdt)  # (B, H, Nq, Dr)
    ud = None if e.d is None else (u * (e.d / e.tau)).to(bs.cdt)                     # (B, Nq, D)
    mode = plan.h_mode or "none"
    x = None
    if plan.lr is not None:  # Σ_j p_ijk [V_kᵀ(d_k∘h_j) ; U_kᵀ(d_k∘h_j)]: (B, H, Nk, 2R), once per call
        x = bs.once(("kernel-x", *plan.key), lambda: torch.einsum("bnd,hdr->bhnr", bs.h, plan.lr.to(bs.cdt)))
    with autocast_off(u.device.type):
        oq, hs, ox, lse = cem_attention(
            q, bs.k, ud, bs.h, slopes=e.slopes if e.alibi else None, delta=e.self_bias,
            key_mask=st.key_mask, causal=e.causal, offset=st.offset, h_mode=mode,
            c=plan.c.to(torch.promote_types(bs.cdt, torch.float32)) if mode == "stack" else None, x=x,
            tiles=e.attn_launch[mode])
        # 'sum': d ∘ ((Σ_k P_k) H): (B, Nq, D), in the product dtype like the blocked path's, so that the
        # product keeps a 16-bit hs for d's gradient under bf16 autocast, not the kernel's float32 one
        hterm = hs.to(bs.cdt) * plan.c.to(bs.cdt) if mode == "sum" else hs
    return Averages(oq=oq, hterm=hterm, lowrank=ox, logz=lse if need_logz else None)
