"""CEM attention's Triton kernel (energies/cem_kernel.py, ``attn_path: kernel``).

On CPU the kernels run through Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1 there;
``interpreted`` in cem_cases.py); ``test_cem_kernel_cuda.py`` runs the compiled kernel on a GPU.

* the kernel function equals a dense float64 softmax (outputs, log Z and every gradient, log Z's
  included): causal / bidirectional, key padding, queries at an offset (chunked prefill, decoding);
* the kernel path of the block equals the fused float64 reference path: outputs, the input gradient and
  every parameter gradient, T = 1 and 2, both read-outs, every option it covers (per-head
  preconditioner banks included);
* its energy (log Z from the kernel) equals the dense float64 energy; KV-cache decoding equals the full
  forward; under torch.compile the kernel stays in one graph;
* options it does not cover raise, naming the option; ``auto`` takes it on CUDA only.

Elsewhere: float32 / bf16 / float16 against float64 in ``test_cem_kernel_precision.py``, the compiled kernel on a
GPU in ``test_cem_kernel_cuda.py``, the launch's options and arguments in ``test_cem_launch.py``.
"""

import pytest
import torch

from energyformer.blocks.cem import CEMAttention, CEMAttentionConfig
from energyformer.energies import cem_kernel, cem_launch, cem_products
from energyformer.energies.interaction import InteractionEnergy

from .cem_cases import (MASK7, MODES, assert_same_block, decode_in_pieces, dense_attention, interpreted, kernel_mode,
                        opts_id, randomised, randomised_energy)

pytest.importorskip("triton")


@interpreted
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("causal,masked,nq,nk", [
    (True, False, 7, 7), (True, True, 7, 7), (False, True, 7, 7), (False, False, 20, 20),
    (True, True, 3, 10), (True, False, 1, 9)])
def test_kernel_function_equals_dense_float64(causal, masked, nq, nk, mode):
    """'sum': the head-summed h read-out, its shared products materialised or recomputed in the kernels;
    'stack': per-head factors c_k and extra value columns x_k."""
    _check_function_against_dense(causal, masked, nq, nk, mode, D=10)


@interpreted
@pytest.mark.parametrize("mode", ["sum", "grid", "grid-gather", "grid-stack"])
@pytest.mark.parametrize("causal", [True, False])
def test_a_whole_key_tile_hidden_before_visible_keys(causal, mode):
    """Left padding: the first 16 keys hidden from every row, tiles of 16, so a query's first key tile has no
    visible key and its running max stays −inf until the next (the forward kernels' rescaling guards it; probe AN:
    without the guard every real row was NaN, and no test's mask hid a whole tile)."""
    _check_function_against_dense(causal, False, 32, 32, mode, D=10, left_pad=16, block_m=16, block_n=16)


@interpreted
@pytest.mark.parametrize("mode", ["sum", "grid-gather"])
@pytest.mark.parametrize("nq,nk,tiles", [(16, 17, dict(block_m=16, block_n=16)), (16, 65, {})],
                         ids=["offset1-16x16", "offset49-default"])
def test_queries_at_an_offset_one_past_a_key_tile(nq, nk, tiles, mode):
    """Causal queries at offset nk − nq ≡ 1 (mod 16): a key tile starts at the last query row's own position, so a
    tile bound one short loses that row's own key (the forward's key end) or the query tile holding a key tile's
    diagonal (the key-tile kernel's first query; probe AN: three such off-by-ones passed, the offsets tested being
    0, 3, 7, 8, 13, 40 and 60)."""
    _check_function_against_dense(True, True, nq, nk, mode, D=10, **tiles)


@interpreted
@pytest.mark.parametrize("mode", ["sum", "sum-recompute", "stack"])
def test_no_shared_diagonal_equals_dense_float64(mode):
    """``ud=None`` (no shared diagonal) with the h read-out on the loop kernels, as ``cem_attention`` allows (the
    model takes that read-out only with a diagonal; probe AN: Σ_k P_k not stored without one went unseen)."""
    _check_function_against_dense(True, True, 7, 7, mode, D=10, no_ud=True)


@interpreted
@pytest.mark.parametrize("mode", ["sum", "grid", "grid-stack", "grid-gather"])
def test_bidirectional_with_more_keys_than_queries(mode):
    """A bidirectional call with more keys than queries, the queries at positions 0-15 (``cem_attention`` allows any
    offset), at the default tiles: the per-head buffers hold every key of the row (probe AP: aligning them as for a
    causal call, to the rows' end, put hs and the gradients 10 off, some inf)."""
    _check_function_against_dense(False, True, 16, 100, mode, D=10, offset=0)


@interpreted
@pytest.mark.parametrize("launch", [dict(grid="rows"), dict(grid="heads", head_sums="atomic"),
                                    dict(grid="heads", head_sums="gather")],
                         ids=["rows", "heads-atomic", "heads-gather"])
@pytest.mark.parametrize("causal", [True, False])
def test_a_row_that_sees_no_key_gives_zeros_and_finite_gradients(causal, launch):
    """More query positions than keys and one batch row's keys all padded: its queries at positions 2 and 3 see
    nothing (those at 0 and 1 still see their own key, which the key mask never hides), so p = 0 there — oq and hs
    zero, lse −inf — and every gradient stays finite (probe AP: without the guard of the row's sum those rows and
    every gradient were NaN)."""
    g = torch.Generator().manual_seed(0)
    t = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).requires_grad_(True)  # noqa: E731
    q, k, ud, hm = t(2, 3, 4, 4), t(2, 3, 2, 4), t(2, 4, 8), t(2, 2, 8)
    key_mask = torch.tensor([[False, False], [True, True]])
    oq, hs, _, lse = cem_kernel.cem_attention(q, k, ud, hm, slopes=None, delta=None, key_mask=key_mask, causal=causal,
                                              offset=0, h_mode="sum", **launch)
    blind = oq[0, :, 2:], hs[0, 2:]
    assert all(torch.equal(o, torch.zeros_like(o)) for o in blind)
    assert bool((lse[0, :, 2:] == float("-inf")).all()) and bool(torch.isfinite(lse[:, :, :2]).all())
    grads = torch.autograd.grad(oq.sum() + hs.sum(), (q, k, ud, hm))
    assert all(bool(torch.isfinite(d).all()) for d in grads)


@interpreted
@pytest.mark.parametrize("mode", MODES)
def test_kernels_pass_the_interpreters_integer_overflow_check(mode, overflow_checked):
    """Every kernel of every launch, forward and backward (causal, key padding, queries at an offset, D in chunks,
    several causal chunks), with the interpreter's int32 overflow check on: the rest of the suite runs the kernels
    without it (tests/conftest.py: it doubles their time and cannot fire at test sizes)."""
    _check_function_against_dense(True, True, 6, 19, mode, D=40, block_d=16, causal_chunks=5)


@interpreted
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("causal,nq,nk,tiles", [
    (True, 5, 12, {}), (False, 20, 20, dict(block_m=32)), (True, 20, 20, dict(block_n=32, num_stages=3)),
    (True, 20, 20, dict(head_unroll=2)), (True, 20, 20, dict(causal_chunks=1)), (True, 6, 19, dict(causal_chunks=5)),
    (True, 37, 40, dict(kv_keys=32, kv_queries=16, kv_warps=2, causal_chunks=3)),
    (False, 20, 20, dict(block_m=32, kv_keys=16, kv_queries=32))])
def test_kernel_d_chunks_and_tiles_equal_dense_float64(causal, nq, nk, tiles, mode):
    """D = 40 in chunks of block_d = 16 (16 + 16 + a masked 8: every D-wide product and gradient is
    summed or written chunk by chunk), with query and key tiles of different sizes — the backward's key-tile
    kernel on tiles of its own (``kv_keys``, ``kv_queries``) larger and smaller than the other kernels'."""
    _check_function_against_dense(causal, True, nq, nk, mode, D=40, block_d=16, **tiles)


@interpreted
@pytest.mark.parametrize("kv", [dict(kv_keys=32, kv_queries=16, kv_warps=2), {}], ids=["kv-32x16", "kv-default"])
@pytest.mark.parametrize("mode", ["grid", "grid-stack", "grid-gather", "grid-gather-all"])
def test_products_keys_first_equal_queries_first(mode, kv):
    """``KernelTiles.product_order``: with heads of 32 at these tiles, 'auto' turns every kind of per-head product
    but one — Q Kᵀ and dOq Kᵀ keys first (16 queries × 64 keys; the key-tile kernel's 32 keys × 16 queries), oq and dq held
    transposed (R 32 > 16 queries), never dk (the form an H100 miscompiled; ``scripts/cem_order_bisect.py`` still
    forces it, and holds it to 'queries' through the interpreter) — and 'queries' forms them as before the field
    (the launcher's flags: ``test_cem_launch.py``). The same products, so every output and gradient agrees to
    float64 rounding; the other interpreter tests (heads of 4, so only Q Kᵀ and dOq Kᵀ turn there) hold 'auto' to
    the dense reference."""
    g = torch.Generator().manual_seed(5)
    B, H, R, D, nq, nk = 2, 3, 32, 40, 37, 40
    t = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).requires_grad_(True)  # noqa: E731
    q, k, ud, hm, delta = t(B, H, nq, R), t(B, H, nk, R), t(B, nq, D), t(B, nk, D), t(H)
    h_mode, with_c, with_x, launch = kernel_mode(mode)
    c, x = t(H, D) if with_c else None, t(B, H, nk, 6) if with_x else None
    slopes = torch.rand(H, generator=g, dtype=torch.float64)
    key_mask = torch.rand(B, nk, generator=g) > 0.3
    ins = [v for v in (q, k, ud, hm, delta, c, x) if v is not None]
    outs = []
    for order in ("auto", "queries"):
        got = cem_kernel.cem_attention(q, k, ud, hm, slopes=slopes, delta=delta, key_mask=key_mask, causal=True,
                                       offset=nk - nq, h_mode=h_mode, c=c, x=x, block_d=16, causal_chunks=3,
                                       product_order=order, **kv, **launch)
        got = [o for o in got if o is not None]
        w = [torch.ones_like(o) * (i + 1) for i, o in enumerate(got)]
        outs.append(got + list(torch.autograd.grad(sum((o * z).sum() for o, z in zip(got, w)), ins)))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@interpreted
@pytest.mark.parametrize("mode", ["sum", "grid", "grid-none", "grid-stack", "grid-gather", "grid-gather-all"])
@pytest.mark.parametrize("nq,nk,offset,tiles", [
    (40, 40, None, dict(block_m=16, block_n=16)), (37, 45, None, dict(block_m=16, block_n=32, causal_chunks=3)),
    (40, 40, None, dict(block_m=32, block_n=16, causal_chunks=8)), (20, 20, None, {}),
    (3, 100, 60, dict(block_m=16, block_n=16)), (21, 90, 40, dict(block_m=16, block_n=32, causal_chunks=2)),
    (37, 45, None, dict(block_m=16, block_n=16, kv_keys=32, causal_chunks=3)),
    (21, 90, 40, dict(block_m=16, block_n=16, kv_queries=32, causal_chunks=2, psum_keys=32)),
    (3, 100, 60, dict(block_m=16, block_n=16, causal_chunks=1))])
def test_no_kernel_reads_outside_the_shared_products_blocks(monkeypatch, nq, nk, offset, tiles, mode):
    """The (B, Nq, Nk) buffers of the materialised products are allocated uninitialised and written on the
    aligned row chunks' blocks only (G, Gh: the matmuls; the head sums: zeroed there): filled with NaN instead,
    every output and gradient still equals the dense float64 reference (causal, queries at an offset, keys
    beyond the last query's position, several chunks, tiles that do not divide N) — no kernel and no matmul
    reads a value outside the blocks (the chunks aligned to the largest tile of any kernel, the key-tile
    kernel's own ones included: ``KernelTiles.align``).
    With per-head factors on one program per head the per-head buffers
    (every head's P_k, (dHs ∘ c_k) Hᵀ) are poisoned the same way."""
    made = []

    def nan_scratch(shape, like, dtype):
        made.append(shape)
        return torch.full(shape, float("nan"), device=like.device, dtype=dtype)

    monkeypatch.setattr(cem_products, "scratch", nan_scratch)
    _check_function_against_dense(True, False, nq, nk, mode, D=8, offset=offset, **tiles)
    assert made  # the buffers came from the poisoned allocator


@interpreted
@pytest.mark.parametrize("causal,masked,nq,nk,offset,tiles", [
    (True, True, 37, 45, None, dict(block_m=16, block_n=32, causal_chunks=3)),
    (True, False, 3, 100, 60, dict(block_m=16, block_n=16)), (False, True, 20, 20, None, {})])
def test_heads_inner_launch_order_runs_the_same_arithmetic(monkeypatch, causal, masked, nq, nk, offset, tiles):
    """``grid: heads_inner`` launches the one-program-per-head kernels on a (B·H, tiles) grid, heads first:
    every output and gradient equals the dense float64 reference, with the shared products' buffers
    poisoned with NaN outside their blocks as in the test above."""
    grids = []
    real = cem_kernel._heads_grid

    def spy(n_tiles, bh, meta):
        grids.append((n_tiles, bh, real(n_tiles, bh, meta)))
        return grids[-1][2]

    monkeypatch.setattr(cem_kernel, "_heads_grid", spy)
    monkeypatch.setattr(cem_products, "scratch", lambda shape, like, dtype: torch.full(
        shape, float("nan"), device=like.device, dtype=dtype))
    monkeypatch.setitem(MODES, "grid-inner", dict(h_mode="sum", x=True, grid="heads_inner"))
    _check_function_against_dense(causal, masked, nq, nk, "grid-inner", D=8, offset=offset, **tiles)
    assert len(grids) == 3 and all(g == (bh, n) for n, bh, g in grids)  # _fwd_h, _bwd_d_h, _bwd_kv_h


@interpreted
@pytest.mark.parametrize("causal,nq,nk,offset,chunks", [(True, 40, 40, 0, 3), (True, 21, 90, 40, 2),
                                                        (False, 20, 50, 0, 1)])
def test_gathered_head_sums_split_among_programs_are_bitwise_the_same(monkeypatch, causal, nq, nk, offset, chunks):
    """``psum_keys``: ``_psum_h``'s programs each cover a run of a query tile's key tiles (here 1, 2 or all of
    them, on a grid with a key axis of as many runs), every entry the same arithmetic: the stored Σ_k P_k (NaN
    poisoned beforehand, so every entry of the blocks is written) and every output equal bitwise to one program
    per whole row."""
    grids, kept = [], []
    kern = cem_kernel._kernels(True, "cem_triton_heads.py")
    real = kern._psum_h
    monkeypatch.setattr(kern, "_psum_h", type("Spy", (), {"__getitem__": lambda self, grid: (
        grids.append(grid), real[grid])[1]})())
    monkeypatch.setattr(cem_products, "scratch", lambda shape, like, dtype: torch.full(
        shape, float("nan"), device=like.device, dtype=dtype))
    real_fwd = cem_kernel._fwd_impl
    monkeypatch.setattr(cem_kernel, "_fwd_impl", lambda *a: (lambda out: kept.append(out[-1]) or out)(real_fwd(*a)))
    g = torch.Generator().manual_seed(nq + nk)
    t = lambda *s: torch.randn(*s, generator=g, dtype=torch.float32)  # noqa: E731
    q, k, ud, hm, slopes = t(2, 3, nq, 4), t(2, 3, nk, 4), t(2, nq, 8), t(2, nk, 8), torch.rand(3, generator=g)
    outs = []
    for keys in (0, 16, 32):
        outs.append(cem_kernel.cem_attention(q, k, ud, hm, slopes=slopes, delta=None,
                                             key_mask=None, causal=causal, offset=offset, h_mode="sum",
                                             grid="heads", head_sums="gather", block_m=16, block_n=16,
                                             causal_chunks=chunks, psum_keys=keys))
    assert [gr[1] for gr in grids] == [1, -(-nk // 16), -(-nk // 32)]
    assert not kept[0].isnan().any()
    for out, ps in zip(outs[1:], kept[1:]):
        assert torch.equal(ps, kept[0])
        for a, b in zip(out, outs[0]):
            assert (a is None and b is None) or torch.equal(a, b)


@interpreted
@pytest.mark.parametrize("has_g", [True, False], ids=["diagonal", "no-diagonal"])
def test_gathered_head_sums_are_formed_once_and_kept_for_the_backward(monkeypatch, has_g):
    """``head_sums: gather``: ``_psum_h`` runs once per forward and the backward adds no Σ_k P_k of its own — of
    the zeroed (B, Nq, Nk) head-sum buffers only Σ_k dS_k's is left (with a shared diagonal), where the atomic
    form zeroes one for Σ_k P_k in the forward and another in the backward; ``gather_all``: with a shared
    diagonal ``_dsum_h`` forms Σ_k dS_k in place of ``_bwd_d_h`` and nothing is zeroed (without one there is no
    Σ_k dS_k, and ``_bwd_d_h`` runs). The result is the dense float64 one (the modes' tests above), and the
    atomic form's to rounding."""
    zeroed, launched = [], []
    real_zero = cem_products.zero_blocks
    monkeypatch.setattr(cem_kernel, "zero_blocks", lambda *a: zeroed.append(a[0]) or real_zero(*a))
    kern = cem_kernel._kernels(True, "cem_triton_heads.py")
    for name in ("_psum_h", "_dsum_h", "_bwd_d_h"):
        real = getattr(kern, name)
        monkeypatch.setattr(kern, name, type("Spy", (), {"__getitem__": lambda self, grid, n=name, r=real: (
            launched.append(n), r[grid])[1]})())
    g = torch.Generator().manual_seed(0)
    t = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).requires_grad_(True)  # noqa: E731
    q, k, ud, hm = t(2, 3, 20, 4), t(2, 3, 20, 4), t(2, 20, 8) if has_g else None, t(2, 20, 8)
    out = {}
    for sums in ("atomic", "gather", "gather_all", "auto"):
        zeroed.clear(), launched.clear()
        oq, hs, _, lse = cem_kernel.cem_attention(q, k, ud, hm, slopes=None, delta=None, key_mask=None, causal=True,
                                                  offset=0, h_mode="sum", grid="heads", head_sums=sums,
                                                  block_m=16, block_n=16)
        n_fwd = len(zeroed)
        grads = torch.autograd.grad((oq.sum() + hs.square().sum() + lse.sum()), [v for v in (q, k, ud, hm)
                                                                                  if v is not None])
        out[sums] = (n_fwd, len(zeroed) - n_fwd, sorted(launched), [oq, hs, lse, *grads])
    assert out["atomic"][:3] == (1, 1 + has_g, ["_bwd_d_h"])
    assert out["auto"][:3] == out["gather"][:3]  # the default gathers
    assert out["gather"][:3] == (0, int(has_g), ["_bwd_d_h", "_psum_h"])
    assert out["gather_all"][:3] == (0, 0, ["_dsum_h", "_psum_h"] if has_g else ["_bwd_d_h", "_psum_h"])
    for sums in ("gather", "gather_all"):
        for a, b in zip(out[sums][3], out["atomic"][3]):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def _check_function_against_dense(causal, masked, nq, nk, mode, D, offset=None, left_pad=0, no_ud=False, **tiles):
    """``left_pad``: the key mask hides the first keys of every row instead (whole key tiles before visible ones);
    ``no_ud``: no shared diagonal (ud None)."""
    g = torch.Generator().manual_seed(nq + nk)
    B, H, R = 2, 3, 4
    t = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).requires_grad_(True)  # noqa: E731
    q, k, ud, hm, delta = t(B, H, nq, R), t(B, H, nk, R), t(B, nq, D), t(B, nk, D), t(H)
    mode, with_c, with_x, launch = kernel_mode(mode)
    c, x = t(H, D) if with_c else None, t(B, H, nk, 6) if with_x else None
    slopes = torch.rand(H, generator=g, dtype=torch.float64)
    key_mask = torch.rand(B, nk, generator=g) > 0.3 if masked else None
    if left_pad:
        key_mask = torch.arange(nk).expand(B, nk) >= left_pad
    got = cem_kernel.cem_attention(q, k, None if no_ud else ud, hm, slopes=slopes, delta=delta, key_mask=key_mask,
                                   causal=causal, offset=nk - nq if offset is None else offset, h_mode=mode,
                                   c=c, x=x, **launch, **tiles)
    off = nk - nq if offset is None else offset
    if no_ud:
        ud = torch.zeros_like(ud, requires_grad=False)
    ref = dense_attention(q, k, ud, hm, slopes, delta, key_mask, causal, off, c, x, mode)
    assert (got[1] is None) == (ref[1] is None) and (got[2] is None) == (ref[2] is None)
    got, ref = [o for o in got if o is not None], [o for o in ref if o is not None]
    ins = [v for v in (q, k, None if no_ud else ud, hm, delta, c, x) if v is not None]
    w = [torch.randn(r.shape, generator=g, dtype=torch.float64) for r in ref]
    grads = [torch.autograd.grad(sum((o * z).sum() for o, z in zip(out, w)), ins) for out in (got, ref)]
    for a, b in zip(got + list(grads[0]), ref + list(grads[1])):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


COVERED = [
    dict(steps=2),
    dict(diagonal="none", causal=False, masked=True),
    dict(alibi=False, self_bias=False, temperature="model_dim", masked=True),
    dict(precond="diag_low_rank", precond_rank=3, precond_per_head=False, causal=False),
    dict(diagonal_readout="algorithm1", precond="diag_low_rank", precond_rank=3, steps=2, masked=True),
    dict(precond="diag_low_rank", precond_rank=3, steps=2, masked=True),  # the paper's per-head D+LR bank
    dict(precond="diagonal", causal=False),
    dict(learn_step_size=True, step_size=0.7, norm={"in_loop": False, "init": "normalized"}),
    dict(steps=2, masked=True, attn_kernel={"shared": "recompute", "block_n": 32}),
    # the loop kernels (KernelTiles.grid = 'rows'; the cases above run the default, one program per head,
    # wherever it applies, the paper's per-head bank on 64 x 32 tiles): every read-out, and the per-head bank
    dict(steps=2, masked=True, attn_kernel={"grid": "rows", "block_m": 32}),
    dict(diagonal="none", diagonal_readout="algorithm1", causal=False, masked=True, attn_kernel={"grid": "rows"}),
    dict(precond="diag_low_rank", precond_rank=3, precond_per_head=False, attn_kernel={"grid": "rows"}),
    dict(precond="diag_low_rank", precond_rank=3, steps=2, masked=True, attn_kernel={"grid": "rows"}),
    # the paper's per-head bank on one program per head (its per-head products materialised per head)
    dict(precond="diag_low_rank", precond_rank=3, steps=2, masked=True, attn_kernel={"grid": "heads"}),
    dict(precond="diag_low_rank", precond_rank=3, steps=2, causal=False, attn_kernel={"grid": "heads_inner",
                                                                                       "block_m": 32}),
    # the head sums gathered (one-pass head forward, _psum_h, Σ_k P_k kept for the backward: the default launch,
    # which the cases above run), or added up atomically by every head's program
    dict(steps=2, masked=True, attn_kernel={"head_sums": "atomic"}),
    dict(steps=2, causal=False, masked=True, attn_kernel={"head_sums": "gather", "grid": "heads_inner"}),
    dict(steps=2, masked=True, attn_kernel={"head_sums": "gather_all", "shared_dtype": "operand"}),
]


@interpreted
@pytest.mark.parametrize("opts", COVERED, ids=opts_id)
def test_kernel_path_equals_fused_reference_float64(opts):
    opts = dict(opts)
    causal, masked = opts.pop("causal", True), opts.pop("masked", False)
    ref_blk = randomised(CEMAttentionConfig(**opts, attn_path="fused"), causal, 1)
    blk = randomised(CEMAttentionConfig(**opts, attn_path="kernel"), causal, 1)
    x = torch.randn(2, 7, 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    mask = MASK7 if masked else None
    assert blk.energy.prepare(blk.norm(x), mask=mask).path == "kernel"
    assert_same_block(blk, ref_blk, x, mask)


@interpreted
def test_block_config_attn_kernel_reaches_the_launch(monkeypatch):
    seen = []
    real = cem_kernel.cem_attention
    monkeypatch.setattr(cem_kernel, "cem_attention", lambda *a, **kw: seen.append(kw) or real(*a, **kw))
    blk = CEMAttention(16, 4, CEMAttentionConfig(attn_path="kernel", attn_kernel={"shared": "recompute",
                                                                                  "block_m": 32}))
    blk(torch.randn(1, 5, 16))
    assert seen and all(kw["tiles"].shared == "recompute" and kw["tiles"].block_m == 32 for kw in seen)


@interpreted
@pytest.mark.parametrize("causal", [True, False])
def test_kernel_energy_and_grad_equal_dense_float64(causal):
    e = randomised_energy(0, causal=causal, attn_path="kernel")
    h, u = torch.randn(2, 6, 16, dtype=torch.float64), torch.randn(2, 6, 16, dtype=torch.float64)
    mask = torch.tensor([[1] * 6, [1, 0, 1, 1, 0, 1]], dtype=torch.bool)
    st = e.prepare(h, mask=mask)
    assert st.path == "kernel"
    torch.testing.assert_close(e.energy_fused(u, st), e.energy(u, st), rtol=1e-12, atol=1e-12)
    u = u.requires_grad_(True)
    auto = torch.autograd.grad(e.energy(u, st).sum(), u)[0]
    torch.testing.assert_close(e.grad(u, st), auto, rtol=1e-10, atol=1e-12)
    # log Z's own gradient (energy traces and thresholds never need it; it is still exact)
    auto_fused = torch.autograd.grad(e.energy_fused(u, st).sum(), u)[0]
    torch.testing.assert_close(auto_fused, auto, rtol=1e-10, atol=1e-12)


@interpreted
@pytest.mark.parametrize("grid,bank", [("rows", False), ("heads", False), ("heads", True), ("gather", False),
                                       ("auto", True)],
                         ids=["rows", "heads", "heads-paper-bank", "heads-gathered", "auto-paper-bank"])
def test_kernel_kv_cache_decoding_equals_full_forward(grid, bank):
    """Prefill, decode steps and a chunk at an offset equal the full forward; 'heads-paper-bank': the per-head
    D+LR bank's per-head factors on one program per head (its per-head buffers' row chunks at an offset);
    'heads-gathered': the head sums gathered (their one-head buffer's row chunks at an offset); 'auto-paper-bank':
    the default launch, which runs the bank on one program per head at 64 x 32 tiles (KernelTiles.launch)."""
    paper = dict(precond="diag_low_rank", precond_rank=3) if bank else {}
    launch = {"grid": "heads", "head_sums": "gather"} if grid == "gather" else {"grid": grid}
    launch = {} if grid == "auto" else launch
    blk = randomised(CEMAttentionConfig(steps=2, attn_path="kernel", attn_kernel=launch, **paper), True, 5)
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    full = blk(x)
    pieces, _ = decode_in_pieces(blk, x, (4, 1, 1, 3))  # prefill, two decode steps, a chunk
    torch.testing.assert_close(pieces, full, rtol=1e-10, atol=1e-10)


def test_uncovered_options_raise_naming_the_option(monkeypatch):
    with pytest.raises(ValueError, match="attn_path = 'kernel' does not cover diagonal = 'per_head'"):
        CEMAttention(16, 4, CEMAttentionConfig(attn_path="kernel", diagonal="per_head"))
    monkeypatch.setattr("energyformer.energies.interaction.triton_available", lambda: False)
    with pytest.raises(ValueError, match="attn_path = 'kernel' needs the triton package"):
        InteractionEnergy(16, 4, attn_path="kernel")


def test_auto_takes_the_kernel_on_cuda_only():
    e = InteractionEnergy(16, 4)
    h = torch.randn(2, 8, 16)
    assert e.prepare(h).path == "blocked"  # CPU: never the (interpreted) kernel
    assert e._use_kernel(torch.empty(0, device="meta")) is False
    assert InteractionEnergy(16, 4, attn_path="kernel").prepare(h).path == "kernel"


@interpreted
@pytest.mark.parametrize("attn", [{}, {"attn_kernel": {"grid": "rows"}},
                                  {"precond": "diag_low_rank", "precond_rank": 2},
                                  {"precond": "diag_low_rank", "precond_rank": 2, "attn_kernel": {"grid": "heads"}},
                                  {"attn_kernel": {"head_sums": "gather"}},
                                  {"attn_kernel": {"kv_keys": 32, "kv_queries": 16, "kv_warps": 2}}],
                         ids=["default", "rows", "paper-bank", "paper-bank-heads", "gathered", "kv-tiles"])
def test_compile_keeps_the_kernel_in_one_graph(attn, compiles_like_eager):
    """Under torch.compile the kernel path runs as custom operators (cem_kernel_ops.py): a one-layer CEM model
    (T=2, causal, ALiBi, self bias; the default launch, the loop kernels, the paper's per-head D+LR bank with its
    per-head factors and extra value columns) traces with fullgraph=True, and its logits and gradients equal
    the eager Function's (aot_eager backend). One layer: every layer traces alike, and a graph break or
    recompile per layer is tests/train/test_compile_graph_breaks.py's (ten layers)."""
    from energyformer.models import CausalLM, ModelConfig
    from energyformer.utils.config import load_config

    torch.manual_seed(0)
    m = CausalLM(load_config(ModelConfig, {"vocab_size": 97, "dim": 32, "heads": 4, "n_layers": 1, "block": {
        "attention": {"kind": "cem", "attn_path": "kernel", "steps": 2, **attn}, "mlp": {"kind": "cem"}}}))
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(1))
    compiles_like_eager(lambda: m(idx).logits, m.parameters())


@interpreted
def test_compile_differentiates_log_z_like_eager(compiles_like_eager):
    """The custom operators' backward takes the gradient of log Z (the energy's value) as well as the outputs' (the
    model's logits never read log Z, so the test above cannot see it; probe AP: a backward that dropped it gave
    gradients 2-6.5 off under compile only)."""
    g = torch.Generator().manual_seed(0)
    t = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).requires_grad_(True)  # noqa: E731
    ins = [t(1, 2, 8, 4), t(1, 2, 8, 4), t(1, 8, 8), t(1, 8, 8)]
    tiles = cem_launch.KernelTiles().launch("sum")

    def f():
        oq, _, _, lse = cem_kernel.cem_attention(*ins, slopes=None, delta=None, key_mask=None, causal=True, offset=0,
                                                 h_mode="sum", tiles=tiles)
        return lse.sum() + 0.1 * oq.sum()

    compiles_like_eager(f, ins, rtol=1e-10, atol=1e-12)


def test_backward_without_the_gathered_head_sums_it_needs_raises():
    """The key-tile kernel skips Σ_k P_k when the launch gathers it, so a backward called without the forward's
    gathered blocks (or with blocks it would not read) is an error naming the option, never a wrong gradient."""
    z = torch.zeros(1, 2, 4, 4, dtype=torch.float64)
    hm = torch.zeros(1, 4, 8, dtype=torch.float64)
    m = torch.zeros(1, 2, 4, dtype=torch.float64)
    gather = cem_launch.KernelTiles(grid="heads", head_sums="gather")
    atomic = cem_launch.KernelTiles(grid="heads", head_sums="atomic")
    for tiles, kept in ((gather, None), (cem_launch.KernelTiles(), None), (atomic, torch.zeros(1, 16))):
        with pytest.raises(RuntimeError, match="head_sums"):
            cem_kernel._bwd_impl(z, z, None, hm, None, None, None, None, None, m, m, kept, None, None, None, None,
                                 True, 0, "sum", tiles)
