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
