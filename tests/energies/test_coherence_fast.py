"""EqT coherence energies: the fast prepare / closed-form gradients equal the original formulas.

The original (slow) formulas are written out here, as they were before the band / closed-form
rewrite: the reverse term gathered the (B, N, W, D) gate of every window slot, the mask term the
(B, N, W, D) window embeddings. Both must agree with the fast path to 1e-10 in float64 (energy,
gradient in h, parameter gradients of an unrolled step), and float32 must track float64.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from energyformer.core.energy import Energy
from energyformer.energies.coherence import (
    CoherenceContext, MaskedReconstructionEnergy, ReversePredictionEnergy, band_apply, band_blocks, band_scores,
    window_positions)


def _old_rev(e: ReversePredictionEnergy, ctx: CoherenceContext, h):
    """Original ℒ_rev (bilinear): gathered gate (B, N, W, D), logits over all V classes."""
    tokens = ctx.tokens
    B, N = tokens.shape
    emb = e.embedding(tokens)
    u = torch.cat([e.bos.to(emb.dtype).expand(B, 1, -1), emb[:, :-1]], 1)
    for layer in e.layers:
        u = layer(u)
    u = e.ln_u(u)
    pos, valid, count = window_positions(N, e.window)
    E, r = e.embedding.weight, e.offset
    base = (e.base(u) @ E.t())[:, pos] + F.linear(r, e.base.weight) @ E.t()
    gate = e.gate(u)[:, pos] + F.linear(r, e.gate.weight)
    logits = base + (gate * e.h_in(h)[:, :, None]) @ E.t()
    nll = -F.log_softmax(logits, -1).gather(-1, tokens[:, pos][..., None])[..., 0]
    return (nll * valid.to(h.dtype) / count[:, None].to(h.dtype)).sum(-1)


def _old_mask(e: MaskedReconstructionEnergy, ctx: CoherenceContext, h):
    """Original ℒ_mask: gathered window embeddings (B, N, W, D), [MASK] by torch.where."""
    tokens = ctx.tokens
    B, N = tokens.shape
    pos, valid, count = window_positions(N, e.window)
    win = tokens[:, pos]
    masked = e.draw_mask(valid, B, ctx.generator, ctx.shared_mask)
    emb = e.embedding(win)
    shown = torch.where(masked[..., None], e.mask_vec, emb)
    s = (shown * e.gain * valid[..., None]).sum(2) / count[:, None].to(emb.dtype)
    b, t, k = masked.nonzero(as_tuple=True)
    a = F.gelu(e.fc1(e.query[k] + s[b, t]) + F.linear(h, e.fc1.weight)[b, t])
    logits = e.embedding.weight @ e.fc2(a).t()
    nll = F.cross_entropy(logits.t(), win[b, t, k], reduction="none")
    out = torch.zeros(h.shape[:2], dtype=h.dtype).index_put((b, t), nll, accumulate=True)
    return out / masked.sum(-1).to(h.dtype)


def _case(kind, dtype=torch.float64, B=3, N=11, D=8, V=3, W=4, scale=1.0, seed=0):
    torch.manual_seed(seed)
    if kind == "rev":
        e = ReversePredictionEnergy(D, V, window=W, heads=2)
    else:
        e = MaskedReconstructionEnergy(D, V, window=W, mask_prob=0.3)
    e = e.to(dtype)
    with torch.no_grad():  # non-trivial parameters (the mask term's defaults are zero / one)
        for prm in e.parameters():
            prm.add_(0.3 * torch.randn_like(prm))
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, V, (B, N), generator=g)
    h = scale * torch.randn(B, N, D, generator=g, dtype=dtype)
    return e, tokens, h, (_old_rev if kind == "rev" else _old_mask)


def _ctx(tokens):
    return CoherenceContext(tokens, None, torch.Generator().manual_seed(7))


@pytest.mark.parametrize("kind", ["rev", "mask"])
@pytest.mark.parametrize("N,W,V", [(11, 4, 3), (5, 8, 2), (16, 4, 2), (9, 9, 5)])
def test_fast_energy_and_grad_equal_the_original_formula(kind, N, W, V):
    e, tokens, h, old = _case(kind, N=N, W=W, V=V)
    st = e.prepare(_ctx(tokens))
    ref = old(e, _ctx(tokens), h)
    assert torch.allclose(e.energy(h, st), ref, atol=1e-10, rtol=0)
    hg = h.clone().requires_grad_(True)
    (g_ref,) = torch.autograd.grad(old(e, _ctx(tokens), hg).sum(), hg)
    assert torch.allclose(e.grad(h, st), g_ref, atol=1e-10, rtol=0)
    assert torch.allclose(Energy.grad(e, h, st), g_ref, atol=1e-10, rtol=0)  # autograd of the new energy


@pytest.mark.parametrize("kind", ["rev", "mask"])
def test_parameter_gradients_through_a_closed_form_step_equal_the_original(kind):
    """Training differentiates h − α∇ℒ(h) w.r.t. the energy's parameters: closed form vs autograd of
    the original energy with create_graph (the old path)."""
    e, tokens, h, old = _case(kind)
    h = h.requires_grad_(True)
    new = (h - 0.1 * e.grad(h, e.prepare(_ctx(tokens)))).pow(2).sum()
    gn = torch.autograd.grad(new, [h, *e.parameters()], allow_unused=True)
    (g,) = torch.autograd.grad(old(e, _ctx(tokens), h).sum(), h, create_graph=True)
    go = torch.autograd.grad((h - 0.1 * g).pow(2).sum(), [h, *e.parameters()], allow_unused=True)
    for a, b in zip(gn, go):
        assert (a is None and b is None) or torch.allclose(a, b, atol=1e-10, rtol=0)


@pytest.mark.parametrize("kind", ["rev", "mask"])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 30.0])
def test_float32_tracks_float64_at_small_and_large_inputs(kind, scale):
    e, tokens, h, _ = _case(kind, scale=scale)
    st = e.prepare(_ctx(tokens))
    g64, E64 = e.grad(h, st), e.energy(h, st)
    e32 = e.float()
    st32 = e32.prepare(_ctx(tokens))
    g32, E32 = e32.grad(h.float(), st32), e32.energy(h.float(), st32)
    assert torch.isfinite(g32).all() and torch.isfinite(E32).all()
    assert torch.allclose(E32.double(), E64, rtol=1e-4, atol=1e-4 * E64.abs().max().item() + 1e-5)
    assert torch.allclose(g32.double(), g64, rtol=1e-3, atol=1e-4 * g64.abs().max().item() + 1e-6)


@pytest.mark.parametrize("N,W", [(1, 4), (7, 3), (8, 4), (5, 32)])
def test_band_scores_and_their_transpose_match_a_gather(N, W):
    torch.manual_seed(0)
    B, P, D = 2, 3, 5
    q, keys, r = torch.randn(B, N, D).double(), torch.randn(B, N, P, D).double(), torch.randn(B, N, P, W).double()
    pos, valid, _ = window_positions(N, W)
    kg = keys[:, pos] * valid[..., None, None]                               # (B, N, W, P, D)
    blocks = band_blocks(keys, min(W, N))
    assert torch.allclose(band_scores(q, blocks, W), torch.einsum("bnd,bnkpd->bnpk", q, kg), atol=1e-12)
    assert torch.allclose(band_apply(r, blocks, W), torch.einsum("bnpk,bnkpd->bnd", r, kg), atol=1e-12)
