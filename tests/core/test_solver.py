import math

import pytest
import torch
from torch import nn

from energyformer.core import EnergyBlock, ForwardContext, GradientDescent, Traces, make_preconditioner
from energyformer.energies import ElementwiseEnergy


class Quadratic(nn.Module):
    """E_i(x) = ½‖x_i − c_i‖² with c = context (exact gradient x − c) — a solver test bed."""

    exact = True

    def prepare(self, context, **kw):
        return context

    def energy(self, x, c):
        return 0.5 * (x - c).pow(2).sum(-1)

    def grad(self, x, c):
        return x - c

    def direction(self, x, c, P):
        return -P(self.grad(x, c))

    def precond_exact(self, P):
        return True


def test_tolerance_stops_early_and_trace_counts_steps():
    solver = GradientDescent(step_size=0.5, tol=1e-3)
    c = torch.randn(2, 3, 4)
    res = solver.run(Quadratic(), torch.zeros_like(c), c, steps=100, trace=True)
    # step norm halves every step: ‖Δ_t‖ = 0.5^(t+1)‖c‖ — stops once below tol
    expected = 1 + math.ceil(math.log2(0.5 * c.norm(dim=-1).max().item() / 1e-3))
    assert res.steps == expected < 100
    assert res.trace.steps == res.steps and len(res.trace.energy) == res.steps + 1
    e = res.trace.mean_energy()
    assert all(b < a for a, b in zip(e, e[1:]))


def test_fixed_steps_without_trace_returns_no_trace():
    res = GradientDescent(step_size=1.0).run(Quadratic(), torch.zeros(1, 2, 3), torch.ones(1, 2, 3), steps=3)
    assert res.trace is None and res.steps == 3
    torch.testing.assert_close(res.x, torch.ones(1, 2, 3))  # eta = 1 on a unit quadratic: exact in one step


def test_learned_step_size_starts_at_given_value_and_gets_gradients():
    s = GradientDescent(step_size=0.3, learn_step_size=True)
    assert s.eta().item() == pytest.approx(0.3, rel=1e-6)
    blk = EnergyBlock(ElementwiseEnergy(6, 10), s, steps=2, norm=nn.RMSNorm(6))
    blk(torch.randn(2, 4, 6)).sum().backward()
    assert s.theta.grad is not None and s.theta.grad.abs() > 0


def test_block_records_trace_only_when_asked():
    blk = EnergyBlock(ElementwiseEnergy(6, 10), GradientDescent(make_preconditioner("diagonal", 6)), steps=2)
    blk.qualname = "mlp"
    ctx = ForwardContext(traces=Traces())
    blk(torch.randn(2, 4, 6), ctx)
    assert list(ctx.traces) == ["mlp"] and ctx.traces["mlp"].steps == 2
    assert ctx.traces["mlp"].exact is True  # no norm, single diagonal P: exact preconditioned steps
    assert ctx.traces.summary()["mlp"]["energy"]


def test_bad_solver_options():
    with pytest.raises(ValueError, match="step_size"):
        GradientDescent(step_size=0.0)
    with pytest.raises(ValueError, match="tol"):
        GradientDescent(tol=-1.0)
    with pytest.raises(ValueError, match="steps"):
        EnergyBlock(ElementwiseEnergy(4, 4), GradientDescent(), steps=0)
