"""The products CEM attention's heads share, materialised around the Triton kernels (issue 21; docs/cem.md,
"materialised shared products", "causal row chunks", "nothing outside the blocks").

With ``KernelTiles.shared = 'materialize'`` the launcher (:mod:`.cem_kernel`) forms G = ud Hᵀ and
Gh = dHs Hᵀ as (B, Nq, Nk) buffers the kernels read per tile, and the matmuls of the head sums Σ_k P_k and
Σ_k dS_k ((Σ P) H, (Σ dS) H, (Σ dS)ᵀ ud, (Σ P)ᵀ dHs), all over the blocks of causal row chunks
(:func:`row_chunks`). The buffers are allocated uninitialised (:func:`scratch`): every value a kernel or a
matmul reads lies in a block and is written first; the tests replace :func:`scratch` with a NaN fill to
prove it. With per-head factors on one program per head (h_mode 'stack', ``grid = 'heads'``), the values
c_k ∘ h_j of every head (:func:`head_values`) join the heads in one matmul's contraction.
"""

from __future__ import annotations

import torch
from torch import Tensor


def mm_acc(a: Tensor, b: Tensor, acc: torch.dtype, out: Tensor | None = None) -> Tensor:
    """Batched a @ b (B, n, k) @ (B, k, m) with the operands' products summed in ``acc`` (float32 for
    16-bit operands, as the kernels' MMA; the operands themselves are not rounded), written into ``out``
    (a (B, n, m) view, e.g. a block of a larger buffer) where given. On CUDA 16-bit operands go through
    torch.bmm's ``out_dtype``; elsewhere, or without it, they are upcast first (exact: a product of two
    16-bit floats fits float32). float32 operands on CUDA where the process allows TF32
    (``torch.get_float32_matmul_precision() != 'highest'``) are multiplied in float64: the kernels' own
    products are IEEE float32, and TF32's 10-bit mantissa would cost 1e-3 of a logit."""
    if a.dtype != acc and a.is_cuda:
        for kw in ([dict(out=out)] if out is not None else []) + [{}]:
            try:
                r = torch.bmm(a, b, out_dtype=acc, **kw)
                return r if out is None or kw else out.copy_(r)
            except (RuntimeError, TypeError):  # a torch without bmm's out_dtype (or its out= form)
                pass
    if acc == torch.float32 and a.is_cuda and torch.get_float32_matmul_precision() != "highest":
        r = torch.bmm(a.double(), b.double()).float()
        return r if out is None else out.copy_(r)
    return torch.bmm(a.to(acc), b.to(acc), out=out) if out is not None else torch.bmm(a.to(acc), b.to(acc))


def mm_store(a: Tensor, b: Tensor, acc: torch.dtype, out: Tensor) -> Tensor:
    """:func:`mm_acc` written into ``out`` in ``out``'s dtype: the products summed in ``acc`` and rounded once to
    ``out``'s dtype where that is narrower (``KernelTiles.shared_dtype = 'operand'``): on CUDA, 16-bit operands
    and output through torch.bmm itself (float32 accumulation in the matmul library), elsewhere summed in ``acc``
    first, then cast."""
    if out.dtype == acc:
        return mm_acc(a, b, acc, out=out)
    if a.is_cuda and a.dtype == out.dtype:
        return torch.bmm(a, b, out=out)
    return out.copy_(mm_acc(a, b, acc))


def row_chunks(nq: int, nk: int, offset: int, causal: bool, pieces: int, align: int = 1) -> list[tuple[int, int, int]]:
    """(r0, r1, ke) per chunk of query rows: rows r0 … r1 − 1 (positions offset + i) see keys 0 … ke − 1
    (causal: ke = offset + r1; else every key). The materialised shared products are formed chunk by chunk
    over these blocks only (``KernelTiles.causal_chunks``): 1 + 1/pieces of a causal product's FLOPs
    instead of 2. ``align`` (the launcher: the largest tile side of its kernels, a power of two): chunk
    bounds multiples of it and ke rounded up to one, so every tile a kernel reads lies inside one chunk's
    block — a tile's query rows lie in one aligned block, hence one chunk, and it is read only if one of its
    keys is visible to one of them — and the (B, Nq, Nk) buffers need no values outside the blocks."""
    if not causal or pieces <= 1:
        return [(0, nq, nk)]
    up = lambda n: -(-n // align) * align  # noqa: E731
    step = up(-(-nq // pieces))
    # the key end from the rows' aligned end: a kernel's last query tile runs past Nq (padded rows, masked)
    # and reads the keys its padded end could see
    return [(r0, min(nq, r0 + step), min(nk, up(offset + up(min(nq, r0 + step))))) for r0 in range(0, nq, step)]


def scratch(shape: tuple[int, ...], like: Tensor, dtype: torch.dtype) -> Tensor:
    """An uninitialised buffer of the shared products (every value the kernels or the matmuls read is written
    first: see :func:`row_chunks`; the tests fill it with NaN instead)."""
    return torch.empty(shape, device=like.device, dtype=dtype)


def zero_blocks(shape: tuple[int, ...], like: Tensor, dtype: torch.dtype, chunks) -> Tensor:
    """A (B, Nq, Nk) buffer zero on the chunks' blocks (the head sums the kernels add or store into, which the
    matmuls then read block by block), uninitialised elsewhere: 5/8 of a whole fill at 4 causal chunks."""
    out = scratch(shape, like, dtype)
    for r0, r1, ke in chunks:
        out[:, r0:r1, :ke].zero_()
    return out


def pair_mm(a: Tensor, bt: Tensor, acc: torch.dtype, chunks, store: torch.dtype | None = None) -> Tensor:
    """(B, Nq, Nk) = a (B, Nq, D) @ bt (B, D, Nk) summed in ``acc`` on each chunk's block, unset elsewhere (the
    kernels read only the blocks: :func:`row_chunks`; no fill of the whole buffer); stored in ``store`` (default
    ``acc``; a narrower dtype: rounded once, :func:`mm_store`)."""
    out = scratch((a.shape[0], a.shape[1], bt.shape[-1]), a, store or acc)
    for r0, r1, ke in chunks:
        mm_store(a[:, r0:r1], bt[..., :ke], acc, out[:, r0:r1, :ke])
    return out


def chunk_blocks(w: Tensor | list[Tensor], chunks, dtype: torch.dtype | None = None) -> list[Tensor]:
    """w's chunk blocks w[:, r0:r1, :ke] (in ``dtype``: only the blocks are cast, not the whole buffer)."""
    if isinstance(w, list):
        return w
    return [w[:, r0:r1, :ke] if dtype is None else w[:, r0:r1, :ke].to(dtype) for r0, r1, ke in chunks]


def rows_mm(w: Tensor | list[Tensor], v: Tensor, acc: torch.dtype, chunks) -> Tensor:
    """(B, Nq, D) = w (B, Nq, Nk) @ v (B, Nk, D), w zero outside each chunk's block (or its :func:`chunk_blocks`)"""
    blocks = chunk_blocks(w, chunks)
    out = scratch((v.shape[0], chunks[-1][1], v.shape[-1]), v, acc)  # every row is in one chunk
    for (r0, r1, ke), wb in zip(chunks, blocks):
        mm_acc(wb, v[:, :ke], acc, out=out[:, r0:r1])
    return out


def cols_mm(w: Tensor | list[Tensor], v: Tensor, acc: torch.dtype, chunks, nk: int) -> Tensor:
    """(B, Nk, D) = wᵀ @ v for w (B, Nq, Nk) zero outside each chunk's block (or its :func:`chunk_blocks`),
    v (B, Nq, D):
    the chunk with the most keys written in place, the others added to its first keys (``add_`` on the slice:
    ``out[:, :ke] += …`` would also copy the slice onto itself)."""
    blocks = chunk_blocks(w, chunks)
    out = scratch((v.shape[0], nk, v.shape[-1]), v, acc)
    order = sorted(range(len(chunks)), key=lambda c: -chunks[c][2])  # the widest block first
    for n, c in enumerate(order):
        (r0, r1, ke), wb = chunks[c], blocks[c]
        if n == 0:
            mm_acc(wb.mT, v[:, r0:r1], acc, out=out[:, :ke])
            out[:, ke:].zero_()
        else:
            out[:, :ke].add_(mm_acc(wb.mT, v[:, r0:r1], acc))
    return out


def head_values(hm: Tensor, c: Tensor, dtype: torch.dtype) -> Tensor:
    """(B, H·Nk, D) in ``dtype``: every head's values c_k ∘ h_j, rows (k, j) — with a block of every head's
    probabilities laid out (B, rows, H, Nk), Σ_k c_k ∘ (P_k H) is one (B, rows, H·Nk) · (B, H·Nk, D) matmul
    (the heads joined in the contraction) and the per-head (dHs ∘ c_k) Hᵀ one (B, rows, D) · (B, D, H·Nk). The
    product is formed in float32 (or ``c``'s dtype) and rounded once to ``dtype``, the operands' (like a value
    matrix)."""
    B, nk, D = hm.shape
    out = scratch((B, c.shape[0], nk, D), hm, dtype)
    torch.mul(hm[:, None], c[:, None], out=out)
    return out.view(B, c.shape[0] * nk, D)


def head_block_size(heads: int, chunks) -> int:
    """elements per batch row of a per-head buffer (:func:`head_blocks`): every chunk's rows × heads × keys"""
    return sum((r1 - r0) * heads * ke for r0, r1, ke in chunks)


def head_blocks(buf: Tensor, heads: int, chunks, keys_first: bool = False) -> list[Tensor]:
    """The chunks' blocks of a per-head buffer ``buf`` (B, :func:`head_block_size`) — per-head factors on one
    program per head: every head's probabilities (or (dHs ∘ c_k) Hᵀ) on the blocks of the causal row chunks
    only, per batch row one block after another — as (B, rows, H, ke) views, or with ``keys_first``
    (B, ke, H, rows); the kernels address them the same way (``cem_triton_heads_tiles._chunk_at``)."""
    out, o = [], 0
    for r0, r1, ke in chunks:
        n = (r1 - r0) * heads * ke
        blk = buf[:, o:o + n]
        out.append(blk.view(-1, ke, heads, r1 - r0) if keys_first else blk.view(-1, r1 - r0, heads, ke))
        o += n
    return out


def heads_rows_mm(w: Tensor, hm: Tensor, c: Tensor, dtype: torch.dtype, acc: torch.dtype, chunks) -> Tensor:
    """(B, Nq, D) = Σ_k c_k ∘ (P_k H) from every head's probabilities ``w`` (a per-head buffer,
    :func:`head_blocks`), hm (B, Nk, D), c (H, D) in ``acc``: per chunk one (B, rows, H·ke) · (B, H·ke, D)
    matmul with the values c_k ∘ h_j of its keys (:func:`head_values`, in ``dtype``)."""
    out = scratch((hm.shape[0], chunks[-1][1], hm.shape[-1]), hm, acc)
    for (r0, r1, ke), blk in zip(chunks, head_blocks(w, c.shape[0], chunks)):
        mm_acc(blk.flatten(2), head_values(hm[:, :ke], c, dtype), acc, out=out[:, r0:r1])
    return out


def heads_pair_mm(g: Tensor, hm: Tensor, c: Tensor, dtype: torch.dtype, acc: torch.dtype, chunks,
                  store: torch.dtype | None = None) -> Tensor:
    """A per-head buffer (B, :func:`head_block_size`) of every head's (g ∘ c_k) Hᵀ = g (c_k ∘ H)ᵀ on the chunks'
    blocks, g (B, Nq, D) (the backward's dHs): one (B, rows, D) · (B, D, H·ke) matmul per chunk, summed in ``acc``
    and stored in ``store`` (default ``acc``)."""
    H = c.shape[0]
    out = scratch((g.shape[0], head_block_size(H, chunks)), g, store or acc)
    for (r0, r1, ke), blk in zip(chunks, head_blocks(out, H, chunks)):
        mm_store(g[:, r0:r1], head_values(hm[:, :ke], c, dtype).mT, acc, blk.flatten(2))
    return out


def added(total: Tensor | None, part: Tensor) -> Tensor:
    """total + part, in place into total; part itself where there is no total yet"""
    return part if total is None else total.add_(part)
