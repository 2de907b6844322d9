"""Energies the core must accept: composite energies (each term prepared once, traced per term),
energies whose context is the iterate (re-prepared every step)."""

import pytest
import torch
from core_toys import Counting, LeaveOneOut

from energyformer.core import (
    CompositeEnergy, EnergyBlock, ForwardContext, GradientDescent, IdentityPrecond, QuadraticEnergy, Traces,
)

DT = torch.float64


def _x(seed, shape=(2, 5, 4)):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=DT)


def test_composite_is_the_weighted_sum_traced_per_term():
    a, b = Counting(4).to(DT), QuadraticEnergy(4, scales=[1.0, 2.0, 3.0, 4.0]).to(DT)
    comp = CompositeEnergy({"a": a, "b": b}, {"b": 0.25})
    blk = EnergyBlock(comp, GradientDescent(step_size=0.2), steps=4)
    blk.qualname = "layer"
    ctx = ForwardContext(traces=Traces())
    x = _x(0)
    y = blk(x, ctx)
    assert a.prepares == 1 and a.reprepares == 0  # prepared once per block call, not per step
    tr = ctx.traces[("layer", 0)]
    assert list(tr.terms) == ["a", "b"] and tr.steps == 4
    torch.testing.assert_close(tr.term_tensor("a") + tr.term_tensor("b"), tr.energy_tensor(), rtol=1e-14, atol=0)
    torch.testing.assert_close(tr.term_tensor("b")[0], 0.25 * b.energy(x, x))
    assert ctx.traces.summary()["layer"]["terms"]["b"][0] == pytest.approx(float(tr.term_tensor("b")[0].mean()))
    # the update is the gradient of the weighted sum
    ref = x
    for _ in range(4):
        ref = ref - 0.2 * (a.grad(ref, x) + 0.25 * b.grad(ref, x))
    torch.testing.assert_close(y, ref, rtol=1e-13, atol=1e-13)
    assert comp.exact and blk.exact


def test_composite_exactness_and_reprepare_follow_its_terms():
    it = Counting(4, iterate=True)
    comp = CompositeEnergy({"plain": Counting(4), "iter": it})
    assert comp.context_is_iterate and comp.exact
    st = comp.prepare(_x(1))
    new = comp.reprepare(st, _x(2))
    assert new["plain"] is st["plain"] and it.reprepares == 1
    assert not CompositeEnergy({"x": LeaveOneOut(), "q": QuadraticEnergy(4)}).exact
    with pytest.raises(ValueError, match="unknown terms"):
        CompositeEnergy({"a": QuadraticEnergy(4)}, {"b": 1.0})


def test_iterate_context_energy_is_reprepared_at_every_step():
    e = Counting(4, iterate=True).to(DT)
    x0, steps, eta = _x(3), 5, 0.3
    res = GradientDescent(step_size=eta).run(e, x0, e.prepare(x0), steps)
    assert e.reprepares == steps
    # hand loop: the context is u_t / 2 at every step -> x_{t+1} = x_t − eta (x_t − x_t / 2)
    torch.testing.assert_close(res.x, x0 * (1 - eta / 2) ** steps, rtol=1e-14, atol=0)
    # a stale context (prepared once, from x0) would give a different point
    stale = Counting(4).to(DT)
    assert not torch.allclose(GradientDescent(step_size=eta).run(stale, x0, 0.5 * x0, steps).x, res.x)


def test_inexact_iterate_energy_in_a_block_matches_its_per_token_update():
    e = LeaveOneOut()
    blk = EnergyBlock(e, GradientDescent(step_size=0.1), steps=3)
    assert blk.exact is False  # an inexact energy makes the block inexact
    x = _x(4)
    ref = x
    for _ in range(3):
        ref = ref + 0.1 * e.reference_direction(ref, None, IdentityPrecond(4))
    torch.testing.assert_close(blk(x), ref, rtol=1e-13, atol=1e-14)


def test_quadratic_energy_refuses_an_indefinite_matrix():
    """E = ½ (x − c)ᵀ A (x − c) is bounded below only for A ⪰ 0: a negative scale or eigenvalue is refused."""
    with pytest.raises(ValueError, match="positive semi-definite"):
        QuadraticEnergy(2, scales=[1.0, -1.0])
    with pytest.raises(ValueError, match="positive semi-definite"):
        QuadraticEnergy(2, matrix=torch.tensor([[1.0, 2.0], [2.0, 1.0]]))  # eigenvalues 3, −1
    QuadraticEnergy(2, scales=[1.0, 0.0])  # semi-definite: accepted
