"""EqT coherence energies with a key-padding mask: a padded position is in no real token's window or q_φ
context and has no energy; the closed-form gradients stay the gradients of the masked total."""

from __future__ import annotations

import pytest
import torch

from energyformer.energies.coherence import CoherenceContext, MaskedReconstructionEnergy, ReversePredictionEnergy

D, V, W = 8, 3, 4
#: real tokens per row: left padding, right padding, inner padding, none
MASK = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 0, 0, 0],
                     [1, 1, 0, 0, 1, 1, 1, 1, 1], [1] * 9], dtype=torch.bool)


def _energy(kind):
    torch.manual_seed(0)
    e = (ReversePredictionEnergy(D, V, window=W, heads=2) if kind == "rev"
         else MaskedReconstructionEnergy(D, V, window=W, mask_prob=0.3)).double()
    with torch.no_grad():  # away from the zero / one defaults, so every part acts
        for p in e.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return e


def _inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, MASK.shape, generator=g), torch.randn(*MASK.shape, D, generator=g, dtype=torch.float64)


def _ctx(tokens, mask=MASK):
    return CoherenceContext(tokens, None, torch.Generator().manual_seed(7), mask)


@pytest.mark.parametrize("kind", ["rev", "mask"])
def test_padded_positions_reach_no_real_token(kind):
    """Once: q_φ's causal pass and the windows read every position, so a padded token's id reached the real
    tokens' energies (with left padding, 2e-4 in an EqT model's logits)."""
    e = _energy(kind)
    tokens, h = _inputs(1)
    other, h2 = _inputs(2)
    tokens2 = torch.where(MASK, tokens, (other + 1) % V)   # other ids at the padded positions only
    h2 = torch.where(MASK[..., None], h, h2)               # and other states there
    st, st2 = e.prepare(_ctx(tokens)), e.prepare(_ctx(tokens2))
    en, en2 = e.energy(h, st), e.energy(h2, st2)
    torch.testing.assert_close(en2[MASK], en[MASK], rtol=0, atol=1e-12)
    assert (en[~MASK] == 0).all()
    g, g2 = e.grad(h, st), e.grad(h2, st2)
    torch.testing.assert_close(g2[MASK], g[MASK], rtol=0, atol=1e-12)
    assert (g[~MASK] == 0).all()
    hg = h.clone().requires_grad_(True)  # the closed form is the gradient of the masked total
    (auto,) = torch.autograd.grad(e.energy(hg, st).sum(), hg)
    torch.testing.assert_close(g, auto, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["rev", "mask"])
def test_an_all_real_mask_is_no_mask(kind):
    e = _energy(kind)
    tokens, h = _inputs(3)
    st, st_all = e.prepare(_ctx(tokens, None)), e.prepare(_ctx(tokens, torch.ones_like(MASK)))
    torch.testing.assert_close(e.energy(h, st_all), e.energy(h, st), rtol=0, atol=1e-14)
    torch.testing.assert_close(e.grad(h, st_all), e.grad(h, st), rtol=0, atol=1e-14)


def test_right_padding_is_truncation_for_the_reverse_term():
    """The reverse term draws nothing at random: a right-padded row's real tokens get the energies of the row
    cut to them (the mask term's random slots are drawn per position of the batch's shape, so it is not)."""
    e = _energy("rev")
    tokens, h = _inputs(4)
    padded = e.energy(h[1:2], e.prepare(_ctx(tokens[1:2], MASK[1:2])))[0, :6]
    cut = e.energy(h[1:2, :6], e.prepare(_ctx(tokens[1:2, :6], None)))[0]
    torch.testing.assert_close(padded, cut, rtol=1e-12, atol=1e-12)


def test_the_shared_mask_of_a_left_padded_row_is_the_one_it_gets_alone():
    """Evaluation's shared mask was drawn over absolute positions: a left-padded row got another mask than the same
    tokens alone, 3 % off an EqT model's logits in float64 (an outside probe); now each row reads the draw from its
    first real token on, so its energies are those of the row alone (and right padding is truncation)."""
    e = _energy("mask")
    tokens, h = _inputs(4)
    pad = MASK[0]                                            # 3 padded positions, then 6 real tokens
    ctx = CoherenceContext(tokens[:1], None, torch.Generator().manual_seed(7), MASK[:1], shared_mask=True)
    alone = CoherenceContext(tokens[:1, pad], None, torch.Generator().manual_seed(7), None, shared_mask=True)
    st, st_alone = e.prepare(ctx), e.prepare(alone)
    en, en_alone = e.energy(h[:1], st), e.energy(h[:1, pad], st_alone)
    torch.testing.assert_close(en[0, pad], en_alone[0], rtol=0, atol=1e-12)
    g, g_alone = e.grad(h[:1], st), e.grad(h[:1, pad], st_alone)
    torch.testing.assert_close(g[0, pad], g_alone[0], rtol=0, atol=1e-12)
