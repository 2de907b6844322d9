"""Intrinsic-optimizer energies (seed 001 §2, reconstructed.md §1.1, §1.3), float64 unless stated:
Lemma 1, Theorems 1-3 as equalities with attention, the Newton heads against autograd Hessians,
and float32 / bf16 against float64 at small and large magnitudes."""

import math

import pytest
import torch
import torch.nn.functional as F

from energyformer.core import IdentityPrecond
from energyformer.energies.free_energy import (
    HelmholtzFreeEnergy, MultiHeadFreeEnergy, SumOfSquaresEnergy, boltzmann, helmholtz,
)
from energyformer.energies.intrinsic_heads import MHAHeads, QKVState
from energyformer.energies.newton import LiteHeads, NewtonHeads

D64 = torch.float64
I1 = IdentityPrecond(1)


def _g(seed):
    return torch.Generator().manual_seed(seed)


def test_lemma1_boltzmann_minimises_helmholtz():
    E = torch.randn(6, 9, generator=_g(0), dtype=D64)
    T = 0.7
    p = boltzmann(E, T)
    fstar = -T * torch.logsumexp(-E / T, -1)
    torch.testing.assert_close(helmholtz(p, E, T), fstar)
    for s in range(5):
        q = torch.softmax(torch.randn(6, 9, generator=_g(s + 1), dtype=D64), -1)
        assert (helmholtz(q, E, T) > fstar).all()


def _sphere_setup(n=7, d=6, r=2.0):
    """Context with ‖W h_j‖ = r for all j (W = r Q, Q orthogonal, h_j unit) and a query z."""
    g = _g(3)
    Q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=D64))
    h = torch.randn(1, n, d, generator=g, dtype=D64)
    h = h / h.norm(dim=-1, keepdim=True)
    z = torch.randn(1, n, d, generator=g, dtype=D64)
    z = 1.5 * z / z.norm(dim=-1, keepdim=True)
    return r * Q, h, z


def test_theorem1_softmax_attention_plus_residual_is_one_gd_step_on_sphere_free_energy():
    W, h, z = _sphere_setup()
    T, eta = 0.8, 0.3
    e = HelmholtzFreeEnergy(6, form="sphere", temperature=T).double()
    with torch.no_grad():
        e.wk.weight.copy_(W)
    st = e.prepare(h)
    gd = z - eta * e.grad(z, st)
    k = h @ W.T                                     # W h_j
    attn = F.scaled_dot_product_attention(z[:, None], k[:, None], eta * k[:, None], is_causal=True, scale=1 / T)[:, 0]
    # (CPU SDPA in float64 agrees with the exact formula to ~1e-8: its exp is not libm's)
    torch.testing.assert_close(gd, z + attn, rtol=1e-6, atol=1e-8)
    # on the sphere the elastic free energy has the same Boltzmann weights (a constant shift)
    el = HelmholtzFreeEnergy(6, form="elastic", temperature=T).double()
    with torch.no_grad():
        el.wk.weight.copy_(W)
    mu_el = z - el.grad(z, el.prepare(h))          # ∇F* = z − μ
    mu_sp = -e.grad(z, st)                          # ∇F_s = −μ
    torch.testing.assert_close(mu_el, mu_sp, rtol=1e-12, atol=1e-12)


def test_theorem3_gd_on_multihead_free_energy_is_tied_mha():
    H, d, T, eta = 2, 8, 1.3, 0.7
    e = MultiHeadFreeEnergy(d, H, form="sphere", temperature=T).double()
    torch.manual_seed(0)
    with torch.no_grad():
        e.wq.weight.normal_(0, 0.6)
        e.wk.weight.normal_(0, 0.6)
    h, z = (torch.randn(2, 6, d, generator=_g(s), dtype=D64) for s in (4, 5))
    st = e.prepare(h)
    step = z + eta * e.direction(z, st, I1)
    torch.testing.assert_close(e.direction(z, st, I1), -e.grad(z, st), rtol=1e-6, atol=1e-8)
    P = e.wq.weight.view(H, d // H, d)
    Wk = e.wk.weight.view(H, d // H, d)
    out = z.clone()
    for hh in range(H):  # MHA with V^h = K^h and W_O^h = (eta/H) P_h^T
        q, k = z @ P[hh].T, h @ Wk[hh].T
        o = F.scaled_dot_product_attention(q, k, k, is_causal=True, scale=1 / T)
        out = out + (eta / H) * o @ P[hh]
    torch.testing.assert_close(step, out, rtol=1e-6, atol=1e-8)  # fused SDPA on both sides of the check


def test_theorem2_gd_on_sum_of_squares_is_linear_attention():
    d, eta = 5, 0.1
    e = SumOfSquaresEnergy(d, 1, temperature=1.0, head_dim=d).double()
    g = _g(6)
    W = torch.randn(d, d, generator=g, dtype=D64)
    with torch.no_grad():
        e.wq.weight.copy_(torch.eye(d, dtype=D64))
        e.wk.weight.copy_(W)
    h, z = torch.randn(1, 6, d, generator=g, dtype=D64), torch.randn(1, 6, d, generator=g, dtype=D64)
    gd = z - eta * e.grad(z, e.prepare(h))
    k = h @ W.T
    ref = z.clone()
    for i in range(6):
        ref[0, i] = z[0, i] - eta * sum((z[0, i] @ k[0, j]) * k[0, j] for j in range(i + 1))
    torch.testing.assert_close(gd, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("feature", ["none", "elu1"])
def test_gd_on_the_weighted_sum_of_squares_is_gated_kernelised_linear_attention(feature):
    """Seed §2.2 options carried by D6: w_ij = γ^{i−j} (gated / retention) and φ = elu + 1 (kernel).
    One GD step is z_i − η φ'(z_i) ⊙ Σ_{j≤i} γ^{i−j} (φ(z_i)·φ(k_j)) φ(k_j) (φ' = 1 without a kernel)."""
    d, eta, gamma = 4, 0.1, 0.7
    e = SumOfSquaresEnergy(d, 1, decay=True, feature=feature, temperature=1.0, head_dim=d).double()
    g = _g(11)
    W = torch.randn(d, d, generator=g, dtype=D64)
    with torch.no_grad():
        e.wq.weight.copy_(torch.eye(d, dtype=D64))
        e.wk.weight.copy_(W)
        e.decay_logit.fill_(math.log(gamma / (1 - gamma)))
    h, z = torch.randn(1, 6, d, generator=g, dtype=D64), torch.randn(1, 6, d, generator=g, dtype=D64)
    gd = z - eta * e.grad(z, e.prepare(h))
    phi = (lambda t: F.elu(t) + 1) if feature == "elu1" else (lambda t: t)  # noqa: E731
    dphi = (lambda t: torch.where(t > 0, 1.0, torch.exp(t))) if feature == "elu1" else torch.ones_like  # noqa: E731
    k = h[0] @ W.T
    ref = z.clone()
    for i in range(6):
        s = sum(gamma ** (i - j) * (phi(z[0, i]) @ phi(k[j])) * phi(k[j]) for j in range(i + 1))
        ref[0, i] = z[0, i] - eta * dphi(z[0, i]) * s
    torch.testing.assert_close(gd, ref, rtol=1e-12, atol=1e-12)


def _newton(mode, **kw):
    torch.manual_seed(1)
    e = NewtonHeads(8, 2, mode=mode, tie_values=True, pinv_eps=0.0, temperature_init=1.7,
                    bias_temperature_init=1.7, **kw).double().eval()
    with torch.no_grad():
        e.wq.weight.normal_(0, 0.6)
        e.wk.weight.normal_(0, 0.6)
    h, x = (torch.randn(1, 5, 8, generator=_g(s), dtype=D64) for s in (7, 8))
    return e, e.prepare(h), x


def _head_free_energy(q, k, T):
    return 0.5 * q @ q - T * torch.logsumexp((k @ q - 0.5 * (k * k).sum(-1)) / T, 0)


def test_mha2nd1st_head_output_is_minus_2I_minus_hessian_times_gradient():
    e, st, x = _newton("taylor")
    q = e.queries(x, st)
    o = e.head_steps(q, st)
    T = float(e.temp_score()[0].detach())
    for hh in range(2):
        for i in range(5):
            k = st.k[0, hh, : i + 1]
            qi = q[0, hh, i].detach().clone().requires_grad_(True)
            f = lambda v: _head_free_energy(v, k, T)  # noqa: E731
            g = torch.autograd.grad(f(qi), qi)[0]
            Hs = torch.autograd.functional.hessian(f, qi.detach())
            ref = -(2 * torch.eye(4, dtype=D64) - Hs) @ g
            torch.testing.assert_close(o[0, hh, i], ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("damping", ["clamp", "abs"])
def test_mha2nd_is_the_damped_pseudo_inverse_newton_step(damping):
    e, st, x = _newton("newton", damping=damping, damping_eps=0.3)
    with torch.no_grad():
        e.wk.weight.mul_(3.0)  # make some M = I − C/T indefinite so the damping matters
    st = e.prepare(st.h)
    d = e.direction(x, st, I1)
    T = float(e.temp_score()[0].detach())
    P = e.wq.weight.detach().view(2, 4, 8)
    n_indef = 0
    for i in range(5):
        step = torch.zeros(8, dtype=D64)
        for hh in range(2):
            k = st.k[0, hh, : i + 1].detach()
            z = x[0, i].detach().clone().requires_grad_(True)
            fz = lambda v: _head_free_energy(P[hh] @ v, k, T)  # noqa: E731
            gz = torch.autograd.grad(fz(z), z)[0]
            M = torch.autograd.functional.hessian(lambda v: _head_free_energy(v, k, T), P[hh] @ z.detach())
            lam, V = torch.linalg.eigh(M)
            n_indef += int((lam < 0).any())
            lam = lam.clamp_min(0.3) if damping == "clamp" else lam.abs().clamp_min(0.3)
            H = P[hh].T @ (V * lam) @ V.T @ P[hh]                     # damped Hessian in z-space (rank d_h)
            step = step - torch.linalg.pinv(H, hermitian=True) @ gz    # range-space Newton step
        torch.testing.assert_close(d[0, i], step, rtol=1e-8, atol=1e-10)
    assert n_indef > 0  # the case the damping is for was exercised


def test_lite_is_mha_when_the_preconditioning_temperature_is_infinite():
    torch.manual_seed(2)
    lite = LiteHeads(8, 2, bias_temperature_init=1e30).double().eval()
    mha = MHAHeads(8, 2).double().eval()
    mha.load_state_dict(lite.state_dict(), strict=False)
    h = torch.randn(2, 6, 8, generator=_g(9), dtype=D64)
    torch.testing.assert_close(lite.direction(h, lite.prepare(h), I1), mha.direction(h, mha.prepare(h), I1),
                               rtol=1e-6, atol=1e-8)  # two fused SDPA calls (float64 SDPA ~1e-8)


def _energies():
    torch.manual_seed(3)
    out = {"mha": MHAHeads(16, 2), "lite": LiteHeads(16, 2), "tied": MultiHeadFreeEnergy(16, 2),
           "taylor": NewtonHeads(16, 2, mode="taylor"), "simple": NewtonHeads(16, 2, output="learned")}
    for e in out.values():
        for p in e.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, 0, 0.3)
    return out


@pytest.mark.parametrize("name", ["mha", "lite", "tied", "taylor", "simple"])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 30.0])
def test_float32_and_bf16_match_float64(name, scale):
    """Directions and energies in low precision vs the float64 reference, small and large inputs."""
    e = _energies()[name].eval()
    h = scale * torch.randn(2, 24, 16, generator=_g(10))
    ref_e = e.double()
    d64 = ref_e.direction(h.double(), ref_e.prepare(h.double()), I1)
    en64 = ref_e.energy(h.double(), ref_e.prepare(h.double()))
    e32 = e.float()
    d32 = e32.direction(h, e32.prepare(h), I1)
    en32 = e32.energy(h, e32.prepare(h))
    assert torch.isfinite(d32).all() and torch.isfinite(en32).all()
    rel = lambda a, b: float((a.double() - b).norm() / b.norm().clamp_min(1e-300))  # noqa: E731
    tol32 = 1e-4 if scale <= 1 else 1e-3  # logits ~1e3 at scale 30: conditioning, not a bug
    assert rel(d32, d64) < tol32, rel(d32, d64)
    assert rel(en32, en64) < tol32, rel(en32, en64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        db = e32.direction(h, e32.prepare(h), I1)
    assert torch.isfinite(db).all()
    if scale <= 1:  # LayerNorm-scale inputs. At scale 30 the logits are ~1e3 and bf16 rounding of the
        # projections alone moves them by several nats (measured relative error 0.3-3): ill-conditioned
        # in bf16 whatever the implementation, so only finiteness is required there.
        assert rel(db.float(), d64) < 2e-2, rel(db.float(), d64)


@pytest.mark.parametrize("causal", [True, False])
def test_lite_variance_runs_in_float32_under_bf16_autocast(causal):
    """σ² = E[v⊙v] − μ⊙μ cancels where one key dominates: computed in bf16 it is mostly rounding (bf16 autocast
    at weights ×10 put 11% of the output's norm in error, against 0.5% for MHA). Under autocast the statistic
    runs in float32 on the bf16 projections, and its output comes back in bf16."""
    lite = LiteHeads(16, 2, causal=causal, bias_temperature_init=0.5).eval()
    g = _g(11)
    q, k, v = (torch.randn(2, 2, 12, 8, generator=g) * s for s in (3.0, 3.0, 4.0))  # peaked: logits ~ 9·8/√8
    q, k, v = (t.bfloat16() for t in (q, k, v))
    st = QKVState(h=torch.zeros(2, 12, 16, dtype=torch.bfloat16), q=q, k=k, v=v)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = lite.attend(q, st)
    with torch.no_grad():
        ref = lite.double().attend(q.double(), QKVState(st.h.double(), q.double(), k.double(), v.double()))
    assert out.dtype == torch.bfloat16
    rel = float((out.double() - ref).norm() / ref.norm())
    assert rel < 8e-3, rel  # bf16 rounding of the output (u = 3.9e-3); the statistic in bf16 measured 3.8e-2


def test_default_temperatures_are_the_root_of_the_width():
    """T = √D for the single-head free energy (the scaled dot product of Theorem 1), and both of MHA2nd1st's
    temperatures (scores and Taylor bias) √d_h per head when not given; the Newton damping clamps at 0.1."""
    assert HelmholtzFreeEnergy(16).temperature.tolist() == [4.0]
    n = NewtonHeads(32, 2).double()  # d_h = 16
    assert (n.damping, n.damping_eps) == ("clamp", 0.1)  # as MHA2ndConfig's (tests/blocks/test_defaults.py)
    for t in (n.temp_score(), n.temp_bias()):
        torch.testing.assert_close(t, torch.full((2,), 4.0, dtype=torch.float64), rtol=1e-6, atol=0)  # θ in fp32
