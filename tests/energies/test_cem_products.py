"""The products CEM attention's heads share, materialised around the kernel (energies/cem_products.py):
float32 accumulation of 16-bit operands, and the causal row chunks' blocks (every visible key of every
row, aligned to the launch's tiles) with their matmuls equal to the whole products where they are read."""

import pytest
import torch

from energyformer.energies import cem_products

from .cem_cases import visible


def test_shared_products_accumulate_in_float32_without_rounding_the_operands():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(2, 5, 300, generator=g), torch.randn(2, 300, 7, generator=g)
    for dt in (torch.bfloat16, torch.float16):
        got = cem_products.mm_acc(a.to(dt), b.to(dt), torch.float32)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, a.to(dt).double() @ b.to(dt).double(), rtol=1e-6, atol=1e-5, check_dtype=False)
    assert cem_products.mm_acc(a.double(), b.double(), torch.float64).dtype == torch.float64


@pytest.mark.parametrize("nq,nk,offset,causal,pieces,align", [
    (7, 7, 0, True, 4, 1), (3, 10, 7, True, 4, 1), (20, 20, 0, True, 3, 1), (9, 9, 0, False, 4, 1),
    (5, 5, 0, True, 1, 1), (2, 6, 4, True, 8, 1), (20, 20, 0, True, 3, 4), (37, 45, 8, True, 4, 8),
    (70, 70, 0, True, 4, 16)])
def test_causal_row_chunks_cover_every_visible_key_once(nq, nk, offset, causal, pieces, align):
    """row_chunks: every query row in exactly one chunk, and that chunk's keys include every key the row
    sees (causal: j <= offset + i), so the chunked shared products equal the whole ones where visible; with
    ``align``, chunk bounds are multiples of it and so are the key ends (or nk)"""
    chunks = cem_products.row_chunks(nq, nk, offset, causal, pieces, align)
    rows = [i for r0, r1, _ in chunks for i in range(r0, r1)]
    assert rows == list(range(nq)) and len(chunks) <= max(1, pieces)
    for r0, r1, ke in chunks:
        assert ke <= nk and all(ke >= (min(nk, offset + i + 1) if causal else nk) for i in range(r0, r1))
        assert r0 % align == 0 and (r1 == nq or r1 % align == 0) and (ke == nk or ke % align == 0)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(2, nq, 5, generator=g, dtype=torch.float64)
    b = torch.randn(2, nk, 5, generator=g, dtype=torch.float64)
    vis = visible(2, nq, nk, causal, None, offset)
    full = a @ b.mT
    got = cem_products.pair_mm(a, b.mT, torch.float64, chunks)
    torch.testing.assert_close(got[vis], full[vis], rtol=0, atol=1e-14)
    w = torch.where(vis, torch.randn(2, nq, nk, generator=g, dtype=torch.float64), 0.0)
    torch.testing.assert_close(cem_products.rows_mm(w, b, torch.float64, chunks), w @ b, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(cem_products.cols_mm(w, a, torch.float64, chunks, nk), w.mT @ a, rtol=1e-14,
                               atol=1e-14)
    # stored in a narrower dtype (KernelTiles.shared_dtype 'operand'): summed in float32, rounded once
    a16, b16 = a.bfloat16(), b.bfloat16()
    got16 = cem_products.pair_mm(a16, b16.mT, torch.float32, chunks, torch.bfloat16)
    assert got16.dtype == torch.bfloat16
    assert torch.equal(got16[vis], (a16.float() @ b16.float().mT).bfloat16()[vis])


def test_one_chunk_is_every_row_and_every_key():
    """One piece (or bidirectional) is the whole (Nq, Nk) product, whatever the offset: the launcher's geometry then
    aligns nothing (ALIGN 0, "all Nk keys"), so the host's blocks and the kernels' must agree on Nk (probe AP: a
    causal single chunk rounded to the rows' end, 80 of 100 keys, crashed the gathered and per-head launches)."""
    assert cem_products.row_chunks(3, 100, 60, True, 1, 16) == [(0, 3, 100)]
    assert cem_products.row_chunks(16, 100, 0, False, 4, 16) == [(0, 16, 100)]


@pytest.mark.parametrize("nq,nk,offset,causal,pieces,align", [
    (20, 20, 0, True, 3, 4), (37, 45, 8, True, 4, 8), (9, 9, 0, False, 4, 1), (3, 10, 7, True, 4, 1)])
def test_per_head_blocks_and_their_matmuls_equal_dense_per_head_products(nq, nk, offset, causal, pieces, align):
    """Per-head factors on one program per head: a per-head buffer holds, per batch row, every chunk's (rows, H,
    keys) block one after another (head_blocks' views, keys first or not, tile the buffer exactly); over those
    blocks Σ_k c_k ∘ (P_k H) (heads_rows_mm) and every head's (g ∘ c_k) Hᵀ (heads_pair_mm) equal the dense
    per-head products where a key is visible, with the values c_k ∘ h_j (head_values) rounded once."""
    B, H, D = 2, 3, 5
    chunks = cem_products.row_chunks(nq, nk, offset, causal, pieces, align)
    size = cem_products.head_block_size(H, chunks)
    assert size == sum((r1 - r0) * H * ke for r0, r1, ke in chunks)
    for keys_first in (False, True):
        buf = torch.arange(B * size, dtype=torch.float64).view(B, size)
        seen = torch.cat([blk.flatten(1) for blk in cem_products.head_blocks(buf, H, chunks, keys_first)], 1)
        assert torch.equal(seen, buf)  # the views tile each batch row in order, nothing shared or skipped
    g = torch.Generator().manual_seed(1)
    hm, c = torch.randn(B, nk, D, generator=g, dtype=torch.float64), torch.randn(H, D, generator=g, dtype=torch.float64)
    vis = visible(B, nq, nk, causal, None, offset)  # (B, Nq, Nk)
    p = torch.where(vis[:, :, None], torch.rand(B, nq, H, nk, generator=g, dtype=torch.float64), 0.0)
    w = torch.empty(B, size, dtype=torch.float64)
    for (r0, r1, ke), blk in zip(chunks, cem_products.head_blocks(w, H, chunks)):
        blk.copy_(p[:, r0:r1, :, :ke])
    want = torch.einsum("bihj,bjd,hd->bid", p, hm, c)
    got = cem_products.heads_rows_mm(w, hm, c, torch.float64, torch.float64, chunks)
    torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13)
    gr = torch.randn(B, nq, D, generator=g, dtype=torch.float64)
    pair = cem_products.heads_pair_mm(gr, hm, c, torch.float64, torch.float64, chunks)
    dense = torch.einsum("bid,hd,bjd->bihj", gr, c, hm)
    for (r0, r1, ke), blk in zip(chunks, cem_products.head_blocks(pair, H, chunks)):
        torch.testing.assert_close(blk, dense[:, r0:r1, :, :ke], rtol=1e-13, atol=1e-13)
    # 16-bit values: c_k ∘ h_j formed in float32 and rounded once
    v = cem_products.head_values(hm.float().bfloat16(), c.float(), torch.bfloat16)
    assert v.dtype == torch.bfloat16 and v.shape == (B, H * nk, D)
    exact = (hm.float().bfloat16().float()[:, None] * c.float()[:, None]).bfloat16().view(B, H * nk, D)
    assert torch.equal(v, exact)
