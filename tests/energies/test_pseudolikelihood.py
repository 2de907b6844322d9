"""Bare self-attention's energy (seed 004; reconstructed.md §2.1): the dynamics are the per-token partial
gradient step, not gradient descent on F; J's closed-form (Hebbian) gradient equals autograd; the plain
pseudo-likelihood diverges as J grows and the normalised objectives do not; bad inputs are refused."""

from __future__ import annotations

import pytest
import torch

from energyformer.core import IdentityPrecond
from energyformer.energies.pl_objectives import (
    OBJECTIVES, hebbian_gradient, pl_objective, pl_objective_reference,
)
from energyformer.energies.pseudolikelihood import (
    PseudoLikelihoodEnergy, apply_couplings, bare_scores, bare_step, pseudolikelihood_F, safe_norm, unit,
)

D64 = torch.float64


def _setup(N=5, d=3, B=3, seed=0, std=0.8, unit=True):
    g = torch.Generator().manual_seed(seed)
    J = torch.randn(N, N, d, d, generator=g, dtype=D64) * std
    x = torch.randn(B, N, d, generator=g, dtype=D64)
    return J, x / x.norm(dim=-1, keepdim=True) if unit else x


def _energy(J, lam=1.0, gamma=1.0):
    e = PseudoLikelihoodEnergy(J.shape[0], J.shape[2], lam=lam, gamma=gamma).double()
    with torch.no_grad():
        e.J.copy_(J)
    return e


def test_dynamics_are_x_minus_partial_gradient_for_gamma_1():
    """x_i + Σ_j α_ij J_ij x_j (slide Eq. 3-4, literal) == x_i − ∂e_i/∂x_i (autograd, context fixed)."""
    J, x = _setup()
    e = _energy(J, lam=1.7)
    st = e.reprepare(e.prepare(x), x)
    xq = x.clone().requires_grad_(True)
    fixed_jx = apply_couplings(J, x)  # the other tokens held fixed
    ei = -torch.logsumexp(bare_scores(xq, fixed_jx, 1.7), -1) / 1.7
    (partial,) = torch.autograd.grad(ei.sum(), xq)
    literal = bare_step(x, J, lam=1.7, gamma=1.0, renorm=False)
    torch.testing.assert_close(literal, x - partial, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(x + e.direction(x, st, IdentityPrecond(3)), literal, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("gamma", [0.0, 0.5, 1.5])
def test_unit_step_is_gamma_x_plus_attention(gamma):
    J, x = _setup(seed=1)
    e = _energy(J, lam=0.6, gamma=gamma)
    st = e.reprepare(e.prepare(x), x)
    torch.testing.assert_close(x + e.direction(x, st, IdentityPrecond(3)),
                               bare_step(x, J, lam=0.6, gamma=gamma, renorm=False), rtol=1e-12, atol=1e-12)


def test_update_is_not_gradient_descent_on_F():
    """grad (total dF/dx, = autograd of F) differs from the update's partial gradient by an O(1) term."""
    J, x = _setup(seed=2)
    e = _energy(J)
    st = e.reprepare(e.prepare(x), x)
    xq = x.clone().requires_grad_(True)
    (gF,) = torch.autograd.grad(pseudolikelihood_F(xq, J).sum(), xq)
    torch.testing.assert_close(e.grad(x, st), gF, rtol=1e-10, atol=1e-12)
    gap = (gF - e.partial_grad(x, st)).abs().max()
    assert gap > 0.1, f"the non-gradient-flow term should be O(1); got {float(gap)}"
    assert not e.exact


def test_hebbian_rule_equals_autograd_of_F():
    """∂/∂J_ij mean_b F(x_b; J) = −mean_b α_ij x_i x_jᵀ (closed form, no graph)."""
    J, x = _setup(N=6, d=4, B=5, seed=3)
    Jg = J.clone().requires_grad_(True)
    pseudolikelihood_F(x, Jg, lam=1.3).mean().backward()
    torch.testing.assert_close(hebbian_gradient(J, x, lam=1.3), Jg.grad, rtol=1e-12, atol=1e-14)
    # J_ii gets no gradient (the blocks are unused)
    assert float(hebbian_gradient(J, x)[range(6), range(6)].abs().max()) == 0.0


@pytest.mark.parametrize("kind", OBJECTIVES)
@pytest.mark.parametrize("rows", [None, [2], [0, 4]])
def test_closed_form_objective_gradients_equal_autograd(kind, rows):
    J, x = _setup(N=5, d=3, B=4, seed=4)
    g = torch.Generator().manual_seed(5)
    xm = torch.randn(x.shape, generator=g, dtype=D64)
    E = torch.randn(4, 3, generator=g, dtype=D64)  # a non-orthonormal codebook
    r = None if rows is None else torch.tensor(rows)
    J1, J2 = J.clone().requires_grad_(True), J.clone().requires_grad_(True)
    l1 = pl_objective(J1, x, lam=0.7, kind=kind, rows=r, codebook=E, x_model=xm)
    l2 = pl_objective_reference(J2, x, lam=0.7, kind=kind, rows=r, codebook=E, x_model=xm)
    l1.backward()
    l2.backward()
    torch.testing.assert_close(l1, l2.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(J1.grad, J2.grad, rtol=1e-9, atol=1e-11)
    assert l1.grad_fn.name().startswith("PLObjective")  # one node: no graph through anything else


def test_one_random_site_is_unbiased_for_all_sites():
    J, x = _setup(N=5, seed=6)
    full = pl_objective(J, x)
    per_site = torch.stack([pl_objective(J, x, rows=torch.tensor([i])) for i in range(5)])
    torch.testing.assert_close(per_site.mean(), full, rtol=1e-12, atol=1e-12)


def test_plain_objective_diverges_along_rays_and_normalised_ones_do_not():
    """F(cJ) = c F(J) -> -inf (reconstructed §2.1: ratio 9.99 for c 100 -> 1000); the vMF, codebook and
    contrastive-divergence objectives grow instead, on several random rays."""
    N, d, B = 4, 3, 64
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, N, d, generator=g, dtype=D64)
    x = x / x.norm(dim=-1, keepdim=True)
    onehot = torch.eye(d, dtype=D64)[torch.randint(0, d, (B, N), generator=g)]
    for _ in range(3):
        J = torch.randn(N, N, d, d, generator=g, dtype=D64)
        plain = [float(pl_objective(c * J, x)) for c in (100.0, 1000.0)]
        assert plain[1] < 0 and 9.5 < plain[1] / plain[0] < 10.5
        for kind, data in (("vmf", x), ("codebook", onehot), ("cd", x)):
            vals = [float(pl_objective(c * J, data, kind=kind, codebook=torch.eye(d, dtype=D64),
                                       x_model=bare_step(data, c * J) if kind == "cd" else None))
                    for c in (1.0, 100.0, 1000.0)]
            assert vals[2] > vals[1] > 0, (kind, vals)


def _gd(kind, data, steps, wd=0.0, frob=None, lr=2.0):
    N, d = data.shape[1], data.shape[2]
    J = torch.zeros(N, N, d, d, dtype=D64, requires_grad=True)
    opt = torch.optim.SGD([J], lr=lr, weight_decay=wd)
    norms, losses = [], []
    for _ in range(steps):
        loss = pl_objective(J, data, kind=kind, codebook=torch.eye(d, dtype=D64))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if frob is not None:
            with torch.no_grad():
                n = J.flatten(2).norm(dim=-1)[..., None, None]
                J.mul_(torch.clamp(frob / n.clamp_min(1e-30), max=1.0))
        norms.append(float(J.detach().norm()))
        losses.append(float(loss.detach()))
    return norms, losses


def test_gradient_descent_plain_diverges_regularised_and_normalised_settle():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, 3, generator=g, dtype=D64)
    x = x / x.norm(dim=-1, keepdim=True)
    onehot = torch.eye(3, dtype=D64)[torch.randint(0, 3, (32, 4), generator=g)]
    n, loss = _gd("plain", x, 150, lr=4.0)
    assert n[149] / n[74] > 1.5 and loss[149] < loss[74] - 3  # linear growth, loss -> -inf
    for kw in ({"wd": 0.1}, {"frob": 1.0}):
        n, loss = _gd("plain", x, 150, lr=4.0, **kw)
        assert abs(n[149] - n[99]) < 1e-6 * n[149] and abs(loss[149] - loss[99]) < 1e-3, kw
    for kind, data in (("vmf", x), ("codebook", onehot)):
        n, loss = _gd(kind, data, 150, lr=4.0)
        assert n[149] - n[74] < 0.8 * (n[74] - n[0]), kind  # growth slows down
        assert min(loss) > (0.0 if kind == "codebook" else 1.0), kind  # bounded below (codebook: a CE)


def test_factored_coupling_is_sum_of_head_products():
    e = PseudoLikelihoodEnergy(4, 3, heads=2, head_dim=2, init_std=0.5).double()
    J = e.coupling()
    i, j = 1, 3
    ref = sum(e.K[h, i, j].T @ e.Q[h, i, j] for h in range(2))
    torch.testing.assert_close(J[i, j], ref)
    with pytest.raises(ValueError, match="init_std"):
        PseudoLikelihoodEnergy(4, 3, heads=2)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 0.08)])
def test_dynamics_in_low_precision_track_float64(dtype, tol):
    J, x = _setup(N=8, d=4, B=4, seed=7, std=0.5)
    ref, low = x, x.to(dtype)
    for _ in range(5):
        ref = bare_step(ref, J)
        low = bare_step(low, J.to(dtype))
    assert float((low.double() - ref).abs().max()) < tol


def test_bad_inputs_are_refused_with_clear_errors():
    e = PseudoLikelihoodEnergy(4, 3)
    with pytest.raises(ValueError, match="token dimension 5; J was built for dim = 3"):
        e.prepare(torch.randn(2, 4, 5))
    with pytest.raises(ValueError, match="6 tokens; J holds couplings for 2 .. n_tokens = 4"):
        e.prepare(torch.randn(2, 6, 3))
    with pytest.raises(ValueError, match=r"\(batch, tokens, dim\)"):
        e.prepare(torch.randn(4, 3))
    with pytest.raises(ValueError, match="bare_sa.lam = 0"):
        PseudoLikelihoodEnergy(4, 3, lam=0.0)
    J = torch.zeros(4, 4, 3, 3)
    with pytest.raises(ValueError, match=r"expected \(batch, N = 4, d = 3\)"):
        pl_objective(J, torch.randn(2, 5, 3))
    with pytest.raises(ValueError, match="codebook of shape"):
        pl_objective(J, torch.randn(2, 4, 3), kind="codebook")
    with pytest.raises(ValueError, match="x_model"):
        pl_objective(J, torch.randn(2, 4, 3), kind="cd")
    with pytest.raises(ValueError, match="allowed values are"):
        pl_objective(J, torch.randn(2, 4, 3), kind="hebb")


def test_shorter_sequences_use_the_leading_block_of_J():
    J, x = _setup(N=6, d=3, B=2, seed=8)
    e = _energy(J)
    xs = x[:, :4]
    st = e.reprepare(e.prepare(xs), xs)
    torch.testing.assert_close(xs + e.direction(xs, st, IdentityPrecond(3)),
                               bare_step(xs, J[:4, :4], renorm=False))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("scale", [1e-35, 1e-20, 1.0, 1e20, 1e35])
def test_unit_and_safe_norm_are_exact_at_any_scale(dtype, scale):
    """Issue 23: a plain norm squares first (float32: inf from ~1.8e19, 0 below ~1e-19, so v/‖v‖ was 0
    or a clamped wrong vector); unit() and safe_norm() are exact at every finite scale."""
    v = torch.tensor([[3.0, -4.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64) * scale
    u = unit(v.to(dtype))
    tol = {torch.float32: 1e-6, torch.float64: 1e-14, torch.bfloat16: 1e-2}[dtype]
    torch.testing.assert_close(u.double(), torch.tensor([[0.6, -0.8, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64),
                               rtol=tol, atol=tol)
    n = safe_norm(v.to(dtype), dim=-1)
    torch.testing.assert_close(n.double() / scale, torch.tensor([5.0, 0.0], dtype=torch.float64), rtol=tol, atol=tol)
    assert bool(torch.isnan(unit(torch.tensor([float("inf"), 1.0]))).all())  # never a finite wrong answer


@pytest.mark.parametrize("heads,init_std", [(2, 1.0), (4, 0.1)])
def test_factored_coupling_starts_at_about_the_given_std(heads, init_std):
    """K and Q are drawn so that J = Σ_h Kᵀ Q has entries of std ≈ ``init_std`` (each factor std
    √(init_std/√(H d_h))): within 15 % over 8 × 8 off-diagonal blocks of 16 × 16."""
    e = PseudoLikelihoodEnergy(8, 16, heads=heads, init_std=init_std, generator=torch.Generator().manual_seed(0))
    J = e.coupling().detach()
    off = ~torch.eye(8, dtype=torch.bool)
    assert abs(float(J[off].std()) / init_std - 1.0) < 0.15
