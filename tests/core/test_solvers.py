"""Step rules against their closed forms (float64): momentum and Nesterov against
torch.optim.SGD step for step; proximal gradient against its closed form and its contraction rate."""

import pytest
import torch

from energyformer.core import ISTA, GradientDescent, Momentum, Nesterov, ProximalGradient, QuadraticEnergy
from energyformer.core.precond import DiagLowRankPrecond, DiagonalPrecond

DT = torch.float64


def _spd(dim, lo, hi, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=DT))[0]
    a = q @ torch.diag(torch.linspace(lo, hi, dim, dtype=DT)) @ q.T
    return 0.5 * (a + a.T)


def _problem(seed=0, dim=5):
    g = torch.Generator().manual_seed(seed)
    energy = QuadraticEnergy(dim, matrix=_spd(dim, 0.2, 2.0, seed)).to(DT)
    c = torch.randn(2, 4, dim, generator=g, dtype=DT)
    x0 = torch.randn(2, 4, dim, generator=g, dtype=DT)
    return energy, c, x0


@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_and_nesterov_reproduce_torch_sgd_step_for_step(nesterov):
    energy, c, x0 = _problem(1)
    lr, beta, steps = 0.3, 0.9, 80
    cls = Nesterov if nesterov else Momentum
    solver = cls(step_size=lr, beta=beta)
    p = x0.clone().requires_grad_(True)
    opt = torch.optim.SGD([p], lr=lr, momentum=beta, nesterov=nesterov)
    x, carry = x0, None
    for _ in range(steps):  # one step per call, the velocity handed over as carry (as across layers)
        opt.zero_grad()
        energy.energy(p, c).sum().backward()
        opt.step()
        res = solver.run(energy, x, c, 1, carry=carry)
        x, carry = res.x, res.carry
        torch.testing.assert_close(x, p.detach(), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(carry, -opt.state[p]["momentum_buffer"], rtol=1e-13, atol=1e-13)
    # and the same trajectory in a single run of the shared loop
    torch.testing.assert_close(solver.run(energy, x0, c, steps).x, p.detach(), rtol=1e-13, atol=1e-13)
    assert float(energy.energy(x, c).sum()) < 1e-3 * float(energy.energy(x0, c).sum())


def test_momentum_with_beta_zero_is_gradient_descent():
    energy, c, x0 = _problem(2)
    a = Momentum(step_size=0.4, beta=0.0).run(energy, x0, c, 7).x
    b = GradientDescent(step_size=0.4).run(energy, x0, c, 7).x
    torch.testing.assert_close(a, b, rtol=0, atol=1e-15)


def test_learned_beta_starts_at_value_and_gets_gradient():
    energy, c, x0 = _problem(3)
    s = Nesterov(step_size=0.2, beta=0.7, learn_beta=True).to(DT)
    assert float(s.beta().detach()) == pytest.approx(0.7, rel=1e-6)  # theta built in float32
    s.run(energy, x0, c, 3).x.sum().backward()
    assert s.beta_logit.grad is not None and s.beta_logit.grad.abs() > 0


def test_proximal_equals_closed_form_with_given_and_default_anchor():
    energy, c, x0 = _problem(4)
    A = energy.A
    alpha, gamma, steps = 0.15, 0.7, 25
    anchor = torch.randn(x0.shape, generator=torch.Generator().manual_seed(9), dtype=DT)
    solver = ProximalGradient(step_size=alpha, gamma=gamma)
    M = A + torch.eye(5, dtype=DT) / gamma
    G = torch.linalg.matrix_power(torch.eye(5, dtype=DT) - alpha * M, steps)  # error map after T steps
    for a, kw in ((anchor, {"anchor": anchor}), (x0, {})):
        x_star = torch.linalg.solve(M, (c @ A + a / gamma).unsqueeze(-1)).squeeze(-1)  # A sym.
        expected = x_star + (x0 - x_star) @ G.T
        torch.testing.assert_close(solver.run(energy, x0, c, steps, **kw).x, expected, rtol=1e-12, atol=1e-12)


def test_proximal_contracts_at_exactly_the_predicted_rate():
    """reconstructed.md §3: eigenvalues in [0.1, 10], alpha = 0.1, gamma = 1 give
    rho = max|1 − alpha(λ + 1/gamma)| = 0.89; the measured per-step contraction of the step norms
    never exceeds rho and converges to it."""
    lam = torch.tensor([0.1, 1.0, 5.0, 10.0], dtype=DT)
    alpha, gamma = 0.1, 1.0
    rho = float((1 - alpha * (lam + 1 / gamma)).abs().max())
    assert rho == pytest.approx(0.89, abs=1e-15)
    g = torch.Generator().manual_seed(5)
    energy = QuadraticEnergy(4, scales=lam).to(DT)
    # the rate does not depend on c or the anchor (an affine shift); with both 0 the fixed point is
    # 0 and the error keeps full relative precision over 300 steps (0.89^300 ~ 1e-15)
    c, x0 = torch.zeros(2, 3, 4, dtype=DT), torch.randn(2, 3, 4, generator=g, dtype=DT)
    res = ProximalGradient(step_size=alpha, gamma=gamma).run(energy, x0, c, 300, trace=True,
                                                              anchor=torch.zeros_like(x0))
    norms = torch.stack(res.trace.step_norm)  # (T, B, N): ‖x_{t+1} − x_t‖ per token
    ratio = norms[1:] / norms[:-1]  # measured per-step contraction, per token
    assert float(ratio.max()) <= rho + 1e-12
    torch.testing.assert_close(ratio[-1], torch.full_like(ratio[-1], rho), rtol=0, atol=1e-10)
    # the traced objective includes the proximal term and decreases monotonically
    e = res.trace.mean_energy()
    assert all(b <= a for a, b in zip(e, e[1:]))
    torch.testing.assert_close(res.trace.term_tensor("quadratic") + res.trace.term_tensor("proximal"),
                               res.trace.energy_tensor(), rtol=1e-12, atol=1e-12)


def test_proximal_rejects_a_per_head_preconditioner_bank():
    from energyformer.core import DiagonalPrecond

    with pytest.raises(ValueError, match="per-head"):
        ProximalGradient(DiagonalPrecond(8, heads=2))


@pytest.mark.parametrize("nonnegative", [False, True])
def test_ista_step_is_the_soft_threshold_and_traces_lambda_l1(nonnegative):
    """One ISTA step is S_{ηλ}(x − η∇E): the soft threshold sign(v)·max(|v| − ηλ, 0), or max(v − ηλ, 0) with
    ``nonnegative`` (CRATE); its traced extra term is λ‖x‖₁."""
    energy, c, x0 = _problem(6)
    eta, lam = 0.3, 1.5
    v = x0 - eta * energy.grad(x0, c)
    want = torch.clamp(v - eta * lam, min=0) if nonnegative else torch.sign(v) * torch.clamp(v.abs() - eta * lam,
                                                                                            min=0)
    assert (want == 0).any() and (want != 0).any() and (nonnegative or (want < 0).any())  # every branch taken
    solver = ISTA(step_size=eta, lambd=lam, nonnegative=nonnegative)
    torch.testing.assert_close(solver.run(energy, x0, c, 1).x, want, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(solver.extra_energy(x0, None)["l1"], lam * x0.abs().sum(-1), rtol=1e-13, atol=0)


@pytest.mark.parametrize("nonnegative", [False, True])
def test_ista_with_a_diagonal_preconditioner_reaches_the_same_minimiser(nonnegative):
    """With a diagonal P the threshold is ηλP_ii, the proximal step in the metric P⁻¹: many steps reach the minimiser
    of E + λ‖z‖₁, the point plain ISTA reaches (with ηλ alone the fixed point was that of E + λ Σ|z_i| / P_ii); a P
    with a low-rank part is refused (no closed-form threshold)."""
    energy, c, x0 = _problem(6)
    P = DiagonalPrecond(5).to(DT)
    with torch.no_grad():
        P.p.copy_(torch.linspace(-0.5, 0.4, 5, dtype=DT))  # P_ii from 0.28 to 1.0: a step of 0.5 stays stable
    plain = ISTA(step_size=0.5, lambd=0.7, nonnegative=nonnegative).run(energy, x0, c, 1500).x
    pre = ISTA(P, step_size=0.5, lambd=0.7, nonnegative=nonnegative).run(energy, x0, c, 1500).x
    assert (plain == 0).any() and (plain != 0).any()  # the threshold is active somewhere
    torch.testing.assert_close(pre, plain, rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="ista with precond = diag_low_rank: .* allowed: identity, diagonal"):
        ISTA(DiagLowRankPrecond(5, rank=2), step_size=0.5)


def test_proximal_step_preconditions_the_proximal_term_too():
    """With a preconditioner P the step is x − α P(∇E(x) + (x − anchor)/γ): P acts on both terms."""
    energy, c, x0 = _problem(7)
    P = DiagonalPrecond(5).to(DT)
    with torch.no_grad():
        P.p.copy_(torch.linspace(-1.0, 1.0, 5, dtype=DT))  # a diagonal far from the identity's
    anchor = torch.randn(x0.shape, generator=torch.Generator().manual_seed(3), dtype=DT)
    alpha, gamma = 0.1, 0.5
    want = x0 - alpha * P(energy.grad(x0, c) + (x0 - anchor) / gamma)
    got = ProximalGradient(P, step_size=alpha, gamma=gamma).run(energy, x0, c, 1, anchor=anchor).x
    torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13)
