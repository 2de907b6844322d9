"""Shared setup of the CEM attention tests (test_interaction.py, test_interaction_paths.py,
test_cem_kernel*.py): randomised float64 blocks and energies, one forward + backward, path-against-path
comparison, piecewise KV-cache decoding, the visibility mask of a dense reference, the dense float64
reference of the kernel function and the launches its tests cross (:data:`MODES`), and the marks that
run the Triton kernel through its CPU interpreter.

On CPU the kernel path runs through Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1
where there is no GPU), a mode triton fixes for the whole process at its first import; on a CUDA
machine triton runs compiled, and the tests marked ``cuda`` check the kernel there instead.
"""

import importlib.util

import pytest
import torch

from energyformer.blocks.cem import CEMAttention, CEMAttentionConfig
from energyformer.core import ForwardContext
from energyformer.energies.interaction import InteractionEnergy

#: the interpreted kernel runs only where triton runs in interpreter mode (no CUDA)
interpreted = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or torch.cuda.is_available(),
    reason="attn_path 'kernel' on CPU needs triton in interpreter mode (CUDA machine: the cuda-marked tests)")

#: every attention path, the kernel through the interpreter
PATHS = ["fused", "blocked", pytest.param("kernel", marks=interpreted)]

#: a (B=2, N=7) key-padding mask with holes, and its all-real counterpart
MASK7 = torch.tensor([[1] * 7, [1, 1, 0, 1, 1, 0, 0]], dtype=torch.bool)


def opts_id(opts: dict) -> str:
    """pytest id of an options dict: ``k=v,...`` (``default`` when empty)"""
    return ",".join(f"{k}={v}" for k, v in opts.items()) or "default"


def randomise(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Add N(0, 0.3²) noise (generator seeded with ``seed``) to every parameter, in place: d, the self
    bias and the preconditioner leave their initial values (0, 0, identity), so every term is exercised."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)
    return module


def randomised(cfg: CEMAttentionConfig, causal: bool = True, seed: int = 0, dim: int = 16,
               heads: int = 4) -> CEMAttention:
    """A float64 CEM attention block (built under ``torch.manual_seed(seed)``), randomised by ``seed``."""
    torch.manual_seed(seed)
    return randomise(CEMAttention(dim, heads, cfg, causal=causal).double(), seed)


def randomised_energy(seed: int = 0, **kw) -> InteractionEnergy:
    """A float64 InteractionEnergy(16, 4, **kw) with d ~ N(0, 0.5²) and self bias ~ N(0, 1) (where present)."""
    torch.manual_seed(seed)
    e = InteractionEnergy(16, 4, **kw).double()
    with torch.no_grad():
        if e.d is not None:
            e.d.normal_(0, 0.5)
        if e.self_bias is not None:
            e.self_bias.normal_(0, 1)
    return e


def fwd_bwd(blk: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None):
    """(y, dL/dx, {name: dL/dθ}) of L = Σ y ∘ w, w a fixed random weight (seed 7)."""
    x = x.clone().requires_grad_(True)
    y = blk(x, ForwardContext(mask=mask))
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(7), dtype=y.dtype)
    (y * w).sum().backward()
    grads = {n: p.grad.clone() for n, p in blk.named_parameters() if p.grad is not None}
    return y.detach(), x.grad, grads


def assert_same_block(blk: torch.nn.Module, ref_blk: torch.nn.Module, x: torch.Tensor,
                      mask: torch.Tensor | None) -> None:
    """``blk`` equals ``ref_blk`` in float64: outputs of real tokens (rtol 1e-10), the input gradient and
    every parameter gradient (rtol 1e-9); both have the same set of parameter gradients, not empty."""
    y0, gx0, g0 = fwd_bwd(ref_blk, x, mask)
    y1, gx1, g1 = fwd_bwd(blk, x, mask)
    keep = mask if mask is not None else torch.ones(x.shape[:2], dtype=torch.bool)
    torch.testing.assert_close(y1[keep], y0[keep], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(gx1, gx0, rtol=1e-9, atol=1e-11)
    assert set(g1) == set(g0) and g0
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], rtol=1e-9, atol=1e-11, msg=lambda m: f"{n}: {m}")


def decode_in_pieces(blk: torch.nn.Module, x: torch.Tensor, sizes, mask: torch.Tensor | None = None):
    """(y (B, N, D), cache): ``blk`` run over x in consecutive chunks of ``sizes`` tokens with a KV cache
    (prefill, one-token decoding steps, chunked prefill), each chunk at its offset, under block name 'a'."""
    ctx = ForwardContext(cache={})
    blk.qualname = "a"
    pieces, pos = [], 0
    for n in sizes:
        ctx.offset = pos
        if mask is not None:
            ctx.mask = mask[:, pos:pos + n]
        pieces.append(blk(x[:, pos:pos + n], ctx))
        pos += n
    assert pos == x.shape[1]
    return torch.cat(pieces, 1), ctx.cache


def visible(batch: int, nq: int, nk: int, causal: bool, key_mask: torch.Tensor | None = None,
            offset: int = 0) -> torch.Tensor:
    """(B, Nq, Nk) bool: which key j query i (at position offset + i) sees: j <= i if causal (else
    every j), and the key real or j = i (a token always sees itself) — the dense references' mask."""
    i, j = offset + torch.arange(nq)[:, None], torch.arange(nk)[None]
    vis = ((j <= i) if causal else torch.ones(nq, nk, dtype=torch.bool)).expand(batch, nq, nk)
    if key_mask is not None:
        vis = (vis & key_mask[:, None, :]) | (i == j)
    return vis


def dense_attention(q, k, ud, hm, slopes, delta, key_mask, causal, offset, c, x, h_mode="sum"):
    """(oq, hs, ox, lse) with explicit (B, H, Nq, Nk) scores (float64 reference of cem_attention);
    hs = (Σ_k P_k) H without c, Σ_k c_k ∘ (P_k H) with c, None with h_mode 'none'."""
    B, H, nq, _ = q.shape
    nk = k.shape[2]
    s = q @ k.transpose(-1, -2) + (ud @ hm.transpose(-1, -2))[:, None]
    i, j = offset + torch.arange(nq)[:, None], torch.arange(nk)[None]
    s = s - slopes[:, None, None] * (i - j).abs() + delta[:, None, None] * (i == j)
    s = s.masked_fill(~visible(B, nq, nk, causal, key_mask, offset)[:, None], float("-inf"))
    p = s.softmax(-1)
    hs = p.sum(1) @ hm if c is None else torch.einsum("bhij,bjd,hd->bid", p, hm, c)
    return p @ k, None if h_mode == "none" else hs, None if x is None else p @ x, s.logsumexp(-1)


#: h read-out (h_mode; per-head factors c and extra value columns x) × how the shared products are formed
#: (KernelTiles.shared; the loop kernels recompute 'stack''s) × what a program owns (KernelTiles.grid)
MODES = {"sum": dict(h_mode="sum", grid="rows"), "sum-recompute": dict(h_mode="sum", shared="recompute"),
         "stack": dict(h_mode="stack", c=True, x=True, grid="rows"),
         "grid": dict(h_mode="sum", x=True, grid="heads", head_sums="atomic"),
         "grid-none": dict(h_mode="none", grid="heads"),
         "grid-stack": dict(h_mode="stack", c=True, x=True, grid="heads"),
         "grid-gather": dict(h_mode="sum", x=True, grid="heads", head_sums="gather"),
         "grid-gather-all": dict(h_mode="sum", x=True, grid="heads", head_sums="gather_all")}
#: the shared products stored in the operands' dtype (KernelTiles.shared_dtype), checked in low precision only:
#: with float32 / float64 operands the stored dtype is theirs, and the arithmetic is a mode above's
LOW_MODES = {"grid-gather-op": dict(h_mode="sum", x=True, grid="heads", head_sums="gather", shared_dtype="operand"),
             "rows-op": dict(h_mode="sum", grid="rows", shared_dtype="operand"),
             "grid-stack-op": dict(h_mode="stack", c=True, x=True, grid="heads", shared_dtype="operand")}


def kernel_mode(name: str) -> tuple[str, bool, bool, dict]:
    """(h_mode, with c, with x, launch keywords) of MODES[name] (or LOW_MODES[name])"""
    m = dict(MODES[name] if name in MODES else LOW_MODES[name])
    return m.pop("h_mode"), m.pop("c", False), m.pop("x", False), m
