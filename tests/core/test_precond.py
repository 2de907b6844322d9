"""core/precond.py: the preconditioners against their dense matrices written out (CEM seed Eq. 13)."""

import math

import pytest
import torch
import torch.nn.functional as F

from energyformer.core import make_preconditioner


def dense(P) -> torch.Tensor:
    """diag(softplus(√D p)) + U Vᵀ + V Uᵀ from the parameters, ([H,] D, D)."""
    d = torch.diag_embed(F.softplus(math.sqrt(P.dim) * P.p))
    if hasattr(P, "U"):
        d = d + P.U @ P.V.mT + P.V @ P.U.mT
    return d


def randomised(kind: str, heads, dim=12, rank=4):
    kw = {"rank": rank} if kind == "diag_low_rank" else {}
    P = make_preconditioner(kind, dim, heads=heads, **kw).double()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for prm in P.parameters():  # away from the initialisation (V = 0 there)
            prm.copy_(torch.randn(prm.shape, generator=g, dtype=prm.dtype) * 0.3)
    return P


@pytest.mark.parametrize("kind", ["diagonal", "diag_low_rank"])
@pytest.mark.parametrize("heads", [None, 3])
def test_application_is_the_dense_matrix(kind, heads):
    P = randomised(kind, heads)
    lead = (2, 5) + (() if heads is None else (heads,))
    g = torch.randn(*lead, P.dim, dtype=torch.float64)
    M = dense(P)  # ([H,] D, D)
    want = torch.einsum("...ij,...j->...i", M, g)
    torch.testing.assert_close(P(g), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(P.matrix(), M, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("heads", [None, 3])
def test_low_rank_gradients(heads):
    P = randomised("diag_low_rank", heads, dim=6, rank=2)
    g = torch.randn(4, *(() if heads is None else (heads,)), 6, dtype=torch.float64, requires_grad=True)

    # gradients through the parameters: compare with the dense matrix's autograd
    out = P(g)
    w = torch.randn_like(out)
    grads = torch.autograd.grad((out * w).sum(), [g, P.p, P.U, P.V])
    ref = torch.autograd.grad((torch.einsum("...ij,...j->...i", dense(P), g) * w).sum(), [g, P.p, P.U, P.V])
    for a, b in zip(grads, ref):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
def test_bf16_autocast_stays_within_bf16_error(scale):
    """Under bf16 autocast the products run in bf16: the result stays within bf16 rounding of float64's, at small
    and large magnitudes, and keeps the input's dtype (float32 in, float32 out)."""
    P = randomised("diag_low_rank", 3).float()
    g = torch.randn(2, 7, 3, P.dim) * scale
    with torch.autocast("cpu", torch.bfloat16):
        out = P(g)
    want = P.double()(g.double())
    assert out.dtype == torch.float32
    err = (out.double() - want).abs().max() / want.abs().max()
    assert err < 2e-2, err


@pytest.mark.parametrize("kind", ["diagonal", "diag_low_rank"])
@pytest.mark.parametrize("heads", [None, 3])
def test_weight_only_factors_are_built_once_per_call_with_the_same_numbers_and_gradients(kind, heads, op_counts):
    """Inside per_call() T applications build softplus(√D p) and [U, V] once per grad mode (before: at every
    descent step; per_call did not exist), with the same values, and parameter gradients up to the order of the
    sums, as T separate calls;
    a no_grad application in the scope does not hand a graph-less factor to a tracked one."""
    P = randomised(kind, heads, dim=6, rank=2)
    lead = (2,) + (() if heads is None else (heads,))
    gs = [torch.randn(*lead, 6, dtype=torch.float64) for _ in range(3)]
    params = list(P.parameters())

    def steps():
        with torch.no_grad():
            P(gs[0])  # an untracked step first (truncated backward)
        x = gs[0]
        for g in gs:
            x = P(x + g)
        return x, torch.autograd.grad(x.square().sum(), params)

    (x_plain, g_plain), plain = op_counts(steps)
    with P.per_call():
        with P.per_call():  # re-entrant: the inner scope shares the outer one's factors
            (x_once, g_once), once = op_counts(steps)
    assert plain["softplus"] == 4 and once["softplus"] == 2  # one per grad mode
    assert once["cat"] == (2 if kind == "diag_low_rank" else 0)
    assert torch.equal(x_once, x_plain)
    for a, b in zip(g_once, g_plain):  # a factor's gradient is summed over the steps before its backward: rounding
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert P._memo is None  # the scope's factors are dropped with it: no graph outlives the call


def test_a_solver_run_builds_the_factors_once_for_all_its_steps(op_counts):
    """``Solver.run`` opens the preconditioner's per_call scope: a 4-step descent builds softplus(√D p) and [U, V]
    once (it built them at every step), with the scope closed after the call (probe AA, F8)."""
    from energyformer.core import GradientDescent, QuadraticEnergy

    P = randomised("diag_low_rank", None, dim=6, rank=2)
    energy, solver = QuadraticEnergy(6).double(), GradientDescent(P, step_size=0.1)
    x0, target = torch.randn(2, 3, 6, dtype=torch.float64), torch.randn(2, 3, 6, dtype=torch.float64)
    res, ops = op_counts(lambda: solver.run(energy, x0, target, 4))
    assert ops["softplus"] == 1 and ops["cat"] == 1, ops
    assert P._memo is None
    plain = x0
    for _ in range(4):  # the same steps by hand, each building its own factors
        plain = plain + 0.1 * energy.direction(plain, target, P)
    torch.testing.assert_close(res.x, plain, rtol=1e-14, atol=0)


def test_low_rank_factors_start_as_documented():
    """P = diag(softplus(d)) + U Vᵀ + V Uᵀ starts with U ~ N(0, 0.02²) and V = 0 (seed Eq. 13): P g = softplus(d) ∘ g
    at the first step."""
    from energyformer.core.precond import DiagLowRankPrecond

    torch.manual_seed(0)
    P = DiagLowRankPrecond(64, 8)
    assert abs(float(P.U.std()) / 0.02 - 1.0) < 0.1 and torch.equal(P.V, torch.zeros_like(P.V))
