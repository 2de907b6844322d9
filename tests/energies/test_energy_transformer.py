"""Energy Transformer energies (Hoover et al. 2023): closed forms against autograd and hand-written
formulas, in float64. The library-wide property test also runs them; these add what it cannot see."""

import math

import pytest
import torch

from energyformer.energies import EnergyLayerNorm, EnergyTransformerEnergy, ETAttentionEnergy, HopfieldEnergy


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _autograd(energy, x, iterate=True):
    xg = x.clone().requires_grad_(True)
    st = energy.prepare(xg)
    (g,) = torch.autograd.grad(energy.energy(xg, st).sum(), xg)
    return g


def test_hopfield_closed_form_gradient_equals_autograd():
    torch.manual_seed(0)
    e = HopfieldEnergy(6, 24).double()
    x = _x(3, 4, 6)
    h = x @ e.xi.t()
    assert (h > 0).any() and (h < 0).any()  # both sides of the ReLU are exercised
    torch.testing.assert_close(e.grad(x, None), _autograd(e, x), rtol=1e-12, atol=1e-12)
    # and the energy is the formula, token by token
    with torch.no_grad():
        ref = torch.tensor([-0.5 * sum(max(float(e.xi[m] @ x[b, n]), 0.0) ** 2 for m in range(24))
                            for b in range(3) for n in range(4)], dtype=torch.float64).reshape(3, 4)
        torch.testing.assert_close(e.energy(x, None), ref)


def test_hopfield_memories_keep_their_own_scale():
    e = HopfieldEnergy(64, 256)
    assert e.xi.abs().max() <= 1 / math.sqrt(64) + 1e-9  # U(-1/sqrt(D), 1/sqrt(D)) (nn.Linear default)
    assert e.xi.std() > 0.5 / math.sqrt(3 * 64)


@pytest.mark.parametrize("self_interaction", [False, True])
def test_et_attention_energy_is_the_formula(self_interaction):
    torch.manual_seed(1)
    e = ETAttentionEnergy(8, 2, beta=0.6, self_interaction=self_interaction, init_std=0.4).double()
    g = _x(1, 4, 8, seed=1)[0]
    ref = torch.zeros(4, dtype=torch.float64)
    for c in range(4):
        for h in range(2):
            q = e.wq[h].detach() @ g[c]
            terms = [0.6 * float((e.wk[h].detach() @ g[b]) @ q) for b in range(4) if self_interaction or b != c]
            ref[c] += -math.log(sum(math.exp(t) for t in terms)) / 0.6
    with torch.no_grad():
        torch.testing.assert_close(e.energy(g[None], e.prepare(g[None]))[0], ref)


def test_et_attention_gradient_is_total_derivative():
    """The closed form has the query side and the key side; the query side alone is not the gradient."""
    torch.manual_seed(2)
    e = ETAttentionEnergy(8, 2, beta=0.7, init_std=0.4).double()
    x = _x(2, 5, 8, seed=2)
    st = e.prepare(x)
    full = e.grad(x, st)
    torch.testing.assert_close(full, _autograd(e, x), rtol=1e-10, atol=1e-12)
    xq = x.clone().requires_grad_(True)  # context held fixed: only the query side
    (partial,) = torch.autograd.grad(e.energy(xq, st).sum(), xq)
    assert (full - partial).abs().max() > 1e-3


def test_et_attention_padding_mask_hides_keys():
    torch.manual_seed(3)
    e = ETAttentionEnergy(8, 2, init_std=0.4).double()
    x = _x(1, 5, 8, seed=3)
    mask = torch.tensor([[True, True, True, False, False]])
    y = x.clone()
    y[:, 3:] = _x(1, 2, 8, seed=4)  # change only padded tokens
    ex = e.energy(x, e.prepare(x, mask=mask))[:, :3]
    ey = e.energy(y, e.prepare(y, mask=mask))[:, :3]
    torch.testing.assert_close(ex, ey)


@pytest.mark.parametrize("self_interaction", [False, True])
def test_et_attention_padded_tokens_are_not_queries(self_interaction):
    """Once: a padded token's E_C stayed in the total energy, so its query pulled on the real tokens' keys (the
    key side of the gradient), and a padded row's real tokens moved unlike the row truncated to them (6.7e-3 in a
    tiny encoder). A fully padded row gives zeros, not NaN."""
    torch.manual_seed(3)
    e = ETAttentionEnergy(8, 2, init_std=0.4, self_interaction=self_interaction).double()
    x = _x(3, 5, 8, seed=3)
    mask = torch.tensor([[True, True, True, False, False], [True] * 5, [False] * 5])
    y = x.clone()
    y[0, 3:] = _x(2, 8, seed=4)  # change only padded tokens
    gx, gy = e.grad(x, e.prepare(x, mask=mask)), e.grad(y, e.prepare(y, mask=mask))
    torch.testing.assert_close(gx[0, :3], gy[0, :3], rtol=1e-12, atol=1e-12)
    short = x[:1, :3]
    torch.testing.assert_close(gx[0, :3], e.grad(short, e.prepare(short))[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gx[1], e.grad(x[1:2], e.prepare(x[1:2]))[0], rtol=1e-12, atol=1e-12)
    en = e.energy(x, e.prepare(x, mask=mask))
    assert (en[0, 3:] == 0).all() and (en[2] == 0).all() and (gx[2] == 0).all() and torch.isfinite(gx).all()
    xg = x[:2].clone().requires_grad_(True)  # the closed form is the gradient of the masked total
    (auto,) = torch.autograd.grad(e.energy(xg, e.prepare(xg, mask=mask[:2])).sum(), xg)
    torch.testing.assert_close(gx[:2], auto, rtol=1e-10, atol=1e-12)


def test_et_attention_query_that_sees_no_key_has_no_energy():
    """Without self-interaction a sequence of one token, or a padded row's only real token, sees no key: its
    E_C was log of an empty sum (+∞ energy, NaN gradient and NaN block output); it is the empty interaction, 0,
    and the padded row's real token moves as the row truncated to it. Autograd of the energy agrees."""
    torch.manual_seed(5)
    e = ETAttentionEnergy(8, 2, beta=0.7, init_std=0.3).double()
    one = _x(2, 1, 8, seed=5)
    assert torch.equal(e.energy(one, e.prepare(one)), torch.zeros(2, 1))
    assert torch.equal(e.grad(one, e.prepare(one)), torch.zeros(2, 1, 8))
    x = _x(2, 5, 8, seed=6)
    mask = torch.tensor([[True] * 5, [True, False, False, False, False]])
    g = e.grad(x, e.prepare(x, mask=mask))
    assert torch.isfinite(g).all() and torch.equal(g[1], torch.zeros(5, 8))
    energy = e.energy(x, e.prepare(x, mask=mask))
    assert torch.equal(energy[1], torch.zeros(5))  # the real token's empty interaction too (probe AG: it was −4.4)
    torch.testing.assert_close(energy[0], e.energy(x[:1], e.prepare(x[:1]))[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g[0], e.grad(x[:1], e.prepare(x[:1]))[0], rtol=1e-12, atol=1e-12)
    xg = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(e.energy(xg, e.prepare(xg, mask=mask)).sum(), xg)
    torch.testing.assert_close(g, auto, rtol=1e-10, atol=1e-12)


def test_composite_et_energy_traces_both_terms():
    torch.manual_seed(4)
    e = EnergyTransformerEnergy(8, 2, memories=16, beta=0.5, init_std=0.3).double()
    x = _x(2, 3, 8, seed=5)
    st = e.prepare(x)
    terms = e.energy_terms(x, st)
    assert set(terms) == {"attention", "hopfield"}
    torch.testing.assert_close(sum(terms.values()), e.energy(x, st))
    torch.testing.assert_close(e.grad(x, st), _autograd(e, x), rtol=1e-10, atol=1e-12)
    assert EnergyTransformerEnergy(8, 2, memories=0).hopfield is None


def test_energy_layer_norm_jacobian_is_symmetric_psd_with_scalar_gain():
    """Why ET uses a scalar gain: then dg/dx is symmetric PSD and -grad_g E descends E(LN(x))."""
    ln = EnergyLayerNorm(6).double()
    with torch.no_grad():
        ln.gamma.fill_(1.7)
        ln.delta.copy_(_x(6, seed=6))
    x = _x(6, seed=7)
    J = torch.autograd.functional.jacobian(ln, x)
    torch.testing.assert_close(J, J.t())
    assert torch.linalg.eigvalsh(J).min() > -1e-10
    # a per-channel gain (nn.LayerNorm) breaks the symmetry
    ln2 = torch.nn.LayerNorm(6).double()
    with torch.no_grad():
        ln2.weight.copy_(torch.linspace(0.5, 2.0, 6))
    J2 = torch.autograd.functional.jacobian(ln2, x)
    assert (J2 - J2.t()).abs().max() > 1e-2
    # the layer norm itself
    xm = x - x.mean()
    with torch.no_grad():
        torch.testing.assert_close(ln(x), 1.7 * xm / torch.sqrt(xm.pow(2).mean() + 1e-5) + ln.delta)


def test_the_default_inverse_temperature_is_one_over_root_head_dim():
    """β = 1/√p when not given (ET §3; probe Z: only a stored system output caught a default of 1/p)."""
    assert ETAttentionEnergy(16, 2).beta == pytest.approx(1 / math.sqrt(8), rel=1e-15)
    assert ETAttentionEnergy(16, 2, head_dim=5).beta == pytest.approx(1 / math.sqrt(5), rel=1e-15)


def test_the_default_number_of_memories_is_four_times_the_width():
    """The Hopfield network's K = 4 D memories when not given (as ``ETConfig.memories_ratio``: ET's code)."""
    from energyformer.energies.energy_transformer import EnergyTransformerEnergy

    assert EnergyTransformerEnergy(8, 2).terms["hopfield"].memories == 32
