"""Backward mode 'implicit' (core/implicit.py): implicit-function-theorem gradients at the end point.

On a converged run the implicit gradient equals the unrolled one (the unrolled derivative of a
contracting map converges to (I − J)^{-1} ∂T/∂θ); the forward value is the unrolled value exactly;
non-convergence (too few iterations, negative curvature) is reported, never silent."""

import warnings

import pytest
import torch

from energyformer.core import DiagonalPrecond, ForwardContext, Momentum, ProximalGradient, make_backward_mode
from energyformer.core.energy import Energy
from energyformer.core.implicit import Implicit, ImplicitSolveError, solve_cg
from energyformer.energies import ElementwiseEnergy
from energyformer.utils.validate import ConfigError

DT = torch.float64


def _setup(seed=0):
    torch.manual_seed(seed)
    energy = ElementwiseEnergy(6, 10).to(DT)
    g = torch.Generator().manual_seed(seed)
    ctx = torch.randn(2, 4, 6, generator=g, dtype=DT).requires_grad_(True)
    f = torch.randn(2, 4, 6, generator=g, dtype=DT).requires_grad_(True)
    w = torch.randn(2, 4, 6, generator=g, dtype=DT)
    return energy, ctx, f, w


def _grads(mode, steps, seed=0, mask=None):
    energy, ctx, f, w = _setup(seed)
    solver = ProximalGradient(step_size=0.1, gamma=0.25)
    if mode is not None:
        solver.backward = mode
    c = None if mask is None else ForwardContext(mask=mask)
    x = solver.run(energy, f, energy.prepare(ctx), steps, ctx=c).x
    params = [energy.W.weight, energy.V.weight, ctx, f]
    return x, torch.autograd.grad((w * x).sum(), params)


@pytest.mark.parametrize("method", ["cg", "fixed_point"])
def test_implicit_gradients_match_unrolled_gradients_at_convergence(method):
    mode = Implicit(method, max_iter=200, tol=1e-12)
    x_u, g_u = _grads(None, 300)
    x_i, g_i = _grads(mode, 300)
    torch.testing.assert_close(x_i, x_u, rtol=0, atol=0)  # the forward value is the unrolled one
    assert mode.last["status"] == "converged" and mode.last["forward_residual"] < 1e-12
    for a, b in zip(g_i, g_u):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)
    # and they are not the one-step (Jacobian-free) gradient: the solve matters
    _, g_1 = _grads(Implicit(method, max_iter=1, tol=1e-12, on_fail="fallback"), 300)
    assert not torch.allclose(g_1[1], g_u[1], rtol=1e-3)


def test_short_unroll_differs_from_the_implicit_gradient():
    """At K = 2 the unrolled gradient is not the equilibrium's: implicit is for converged runs."""
    _, g_short = _grads(None, 2)
    _, g_imp = _grads(Implicit("cg", tol=1e-12), 300)
    assert not torch.allclose(g_short[1], g_imp[1], rtol=1e-2)


def test_masked_tokens_keep_the_identity_gradient_and_others_match_unroll():
    mask = torch.tensor([[True, False, True, True], [True, True, True, False]])
    _, g_u = _grads(None, 300, mask=mask)
    _, g_i = _grads(Implicit("cg", tol=1e-12), 300, mask=mask)
    for a, b in zip(g_i, g_u):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


def test_non_convergence_is_reported_warned_or_raised():
    mode = Implicit("fixed_point", max_iter=2, tol=1e-14)
    with pytest.warns(UserWarning, match="did not converge: max_iter after 2 iterations"):
        _grads(mode, 300)
    assert mode.failures == 1 and mode.last["status"] == "max_iter"
    with pytest.raises(ImplicitSolveError, match="did not converge"):
        _grads(Implicit("cg", max_iter=1, tol=1e-14, on_fail="raise"), 300)


class _Concave(Energy):
    """E = −(s/2)‖x − c‖²: the proximal objective is concave when s > 1/γ."""

    def __init__(self, s):
        super().__init__()
        self.s = torch.nn.Parameter(torch.tensor(float(s), dtype=DT))

    def energy(self, x, c):
        return -0.5 * self.s * (x - c).pow(2).sum(-1)


def test_negative_curvature_stops_cg_and_is_reported():
    e = _Concave(2.0)
    c = torch.randn(1, 3, 4, dtype=DT)
    f = torch.randn(1, 3, 4, dtype=DT, requires_grad=True)
    mode = Implicit("cg", tol=1e-12)
    solver = ProximalGradient(step_size=0.1, gamma=1.0)
    solver.backward = mode
    x = solver.run(e, f, c, 3).x
    with pytest.warns(UserWarning, match="negative_curvature"):
        x.sum().backward()
    assert mode.last["status"] == "negative_curvature" and mode.failures == 1


def test_cg_solves_a_spd_system():
    A = torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=DT)
    g = torch.tensor([1.0, 2.0], dtype=DT)
    v, info = solve_cg(lambda p: A @ p, g, 10, 1e-12)
    torch.testing.assert_close(v, torch.linalg.solve(A, g))
    assert info["status"] == "converged" and info["iterations"] <= 2


def test_rules_and_methods_that_cannot_be_differentiated_implicitly_are_rejected():
    energy, ctx, f, _ = _setup()
    m = Momentum(step_size=0.1, beta=0.5)
    m.backward = Implicit()
    with pytest.raises(ConfigError, match="carries memory across steps"):
        m.run(energy, f, energy.prepare(ctx), 3)
    p = ProximalGradient(DiagonalPrecond(6).to(DT), step_size=0.1)
    p.backward = Implicit("cg")
    with pytest.raises(ConfigError, match="implicit.method = 'cg' needs a symmetric step Jacobian"):
        p.run(energy, f, energy.prepare(ctx), 3)
    with pytest.raises(ConfigError, match=r"implicit.method = 'newton': allowed values are 'cg', 'fixed_point'"):
        Implicit("newton")


def test_implicit_by_name_and_without_grad_is_the_plain_run():
    mode = make_backward_mode("implicit")
    assert isinstance(mode, Implicit) and mode.method == "cg"
    energy, ctx, f, _ = _setup()
    s = ProximalGradient(step_size=0.1, gamma=0.25)
    s.backward = mode
    with torch.no_grad():
        x = s.run(energy, f, energy.prepare(ctx), 5).x
    torch.testing.assert_close(x, ProximalGradient(step_size=0.1, gamma=0.25).run(
        energy, f, energy.prepare(ctx), 5).x.detach(), rtol=0, atol=0)
    assert mode.solves == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        repr(mode)


def test_implicit_backward_of_a_zero_step_run_is_the_identity():
    """0 steps return x0: d out / d x0 = I and no parameter gradient (the old implicit backward solved for a fixed
    point anyway: d out / d x0 = 0 and a parameter gradient)."""
    energy = ElementwiseEnergy(3, hidden=5).double()
    x0 = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    solver = Momentum(step_size=0.3, beta=0.0, backward=make_backward_mode("implicit"))
    out = solver.run(energy, x0, energy.prepare(x0.detach()), 0).x
    out.sum().backward()
    torch.testing.assert_close(x0.grad, torch.ones_like(x0))
    assert all(p.grad is None or not p.grad.any() for p in energy.parameters())


class _Reads:
    """Counts host reads: ``_local_scalar_dense`` (item/float/bool, through a dispatch mode) and ``Tensor.tolist``."""

    def __init__(self, monkeypatch):
        from torch.utils._python_dispatch import TorchDispatchMode

        self.n = 0
        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                outer.n += func.overloadpacket.__name__ == "_local_scalar_dense"
                return func(*args, **(kwargs or {}))

        tolist = torch.Tensor.tolist

        def counted(t):
            self.n += 1
            return tolist(t)

        monkeypatch.setattr(torch.Tensor, "tolist", counted)
        self.mode = Mode()

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)


def _plain_cg(apply_a, g, max_iter, tol):
    """Textbook CG with a host test of each quantity as it is formed (the order the solver used before)."""
    v, r, p = torch.zeros_like(g), g.clone(), g.clone()
    rr = (r * r).sum()
    g_norm = float(rr) ** 0.5
    for it in range(1, max_iter + 1):
        ap = apply_a(p)
        pap = (p * ap).sum()
        if not float(pap) > 0:
            return v, it, float(rr) ** 0.5 / g_norm, "negative_curvature"
        a = rr / pap
        v, r = v + a * p, r - a * ap
        rr_new = (r * r).sum()
        if float(rr_new) ** 0.5 <= tol * g_norm:
            return v, it, float(rr_new) ** 0.5 / g_norm, "converged"
        p, rr = r + rr_new / rr * p, rr_new
    return v, max_iter, float(rr) ** 0.5 / g_norm, "max_iter"


@pytest.mark.parametrize("case", ["max_iter", "converged", "negative_curvature"])
def test_cg_reads_the_host_once_per_iteration_with_the_same_results(monkeypatch, case):
    """One read per iteration plus one before the loop (before: pᵀAp and ‖r‖² were read one by one, 2 per
    iteration, with 2 more before the loop and 1 after it); iterate, count, residual and status unchanged."""
    g0 = torch.Generator().manual_seed(0)
    m = torch.randn(12, 12, generator=g0, dtype=DT)
    A = m @ m.T + 0.1 * torch.eye(12, dtype=DT)
    if case == "negative_curvature":
        A = A - 3.0 * torch.eye(12, dtype=DT)
    g = torch.randn(12, generator=g0, dtype=DT)
    max_iter, tol = (4, 1e-14) if case == "max_iter" else (40, 1e-10)
    with _Reads(monkeypatch) as reads:
        v, info = solve_cg(lambda p: A @ p, g, max_iter, tol)
    want = _plain_cg(lambda p: A @ p, g, max_iter, tol)
    assert info["status"] == case == want[3] and info["iterations"] == want[1]
    assert torch.equal(v, want[0]) and info["rel_residual"] == want[2]
    assert reads.n == 1 + info["iterations"]


def test_the_forward_reads_nothing_and_last_reads_its_residuals_when_asked(monkeypatch):
    """An implicit run's forward makes no host read (before: two float() per block call for ``last``); ``last``
    reads the forward residuals on access, the same floats, next to the backward solve's statistics."""
    energy, ctx, f, w = _setup()
    mode = Implicit("cg", max_iter=200, tol=1e-12)
    solver = ProximalGradient(step_size=0.1, gamma=0.25)
    solver.backward = mode
    state = energy.prepare(ctx)
    with _Reads(monkeypatch) as reads:
        x = solver.run(energy, f, state, 5).x
    assert reads.n == 0
    with torch.no_grad():  # the residual of the end point by hand: ‖T(x) − x‖ is the size of one more step
        x5 = solver.run(energy, f, state, 5).x
        dx = solver.run(energy, x5, state, 1, anchor=f).x - x5
    res = dx.float().norm(dim=-1)
    rel = res / x5.float().norm(dim=-1)
    (w * x).sum().backward()
    assert mode.last["forward_residual"] == float(res.max()) and mode.last["forward_rel_residual"] == float(rel.max())
    assert mode.last["status"] == "converged" and list(mode.last)[:2] == ["forward_residual", "forward_rel_residual"]
