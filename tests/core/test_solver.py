"""GradientDescent and EnergyBlock: the pre-existing behaviour (fixed steps, learned eta, traces
only when asked, option errors) plus call-time options: step overrides, (block, iteration) keys for
traces and statistics, exactness, the proximal anchor and momentum carried across blocks."""

import pytest
import torch
from core_toys import FixedTarget
from torch import nn

from energyformer.core import (
    EnergyBlock, ForwardContext, GradientDescent, Momentum, NetworkStepSize, ProximalGradient,
    QuadraticEnergy, SolverStats, Traces, make_preconditioner,
)
from energyformer.energies import ElementwiseEnergy

DT = torch.float64


def _x(seed=0, shape=(2, 3, 4)):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=DT)


def test_fixed_steps_without_trace_returns_no_trace():
    res = GradientDescent(step_size=1.0).run(QuadraticEnergy(3), torch.zeros(1, 2, 3), torch.ones(1, 2, 3), steps=3)
    assert res.trace is None and res.steps == 3 and res.stats is None
    torch.testing.assert_close(res.x, torch.ones(1, 2, 3))  # eta = 1 on a unit quadratic: exact in one step


def test_learned_step_size_starts_at_given_value_and_gets_gradients():
    s = GradientDescent(step_size=0.3, learn_step_size=True)
    assert s.step_size(0, None, None).item() == pytest.approx(0.3, rel=1e-6)
    blk = EnergyBlock(ElementwiseEnergy(6, 10), s, steps=2, norm=nn.RMSNorm(6))
    blk(torch.randn(2, 4, 6)).sum().backward()
    assert s.step_size.theta.grad is not None and s.step_size.theta.grad.abs() > 0


def test_block_records_traces_and_stats_only_when_asked_keyed_by_block_and_iteration():
    blk = EnergyBlock(ElementwiseEnergy(6, 10), GradientDescent(make_preconditioner("diagonal", 6)), steps=2)
    blk.qualname = "mlp"
    x = torch.randn(2, 4, 6)
    ctx = ForwardContext(traces=Traces(), stats={})
    for it in range(3):  # a block iterated by a recurrent-depth backbone keeps one record per pass
        ctx.iteration = it
        x = blk(x, ctx)
    assert list(ctx.traces) == [("mlp", 0), ("mlp", 1), ("mlp", 2)] and list(ctx.stats) == list(ctx.traces)
    assert ctx.traces[("mlp", 0)].steps == 2 and ctx.traces.blocks() == ["mlp"]
    assert ctx.traces.of("mlp")[2] is ctx.traces[("mlp", 2)]
    assert ctx.traces[("mlp", 1)].exact is True  # no norm, single diagonal P: exact preconditioned steps
    assert list(ctx.traces.summary()) == ["mlp", "mlp@1", "mlp@2"] and ctx.traces.summary()["mlp"]["energy"]
    st = ctx.stats[("mlp", 0)]
    assert isinstance(st, SolverStats) and st.steps.shape == (2, 4) and bool((st.steps == 2).all())
    plain = ForwardContext()
    blk(x, plain)
    assert plain.traces is None and plain.stats is None


def test_step_count_overrides_ctx_steps_then_argument():
    blk = EnergyBlock(QuadraticEnergy(4).to(DT), GradientDescent(step_size=0.5), steps=2)
    ctx = ForwardContext(stats={})
    blk(_x(), ctx)
    assert int(ctx.stats[(blk.record_name(), 0)].steps.max()) == 2
    ctx = ForwardContext(stats={}, steps=5)
    blk(_x(), ctx)
    assert int(ctx.stats[(blk.record_name(), 0)].steps.max()) == 5
    blk(_x(), ctx, steps=1)
    assert int(ctx.stats[(blk.record_name(), 0)].steps.max()) == 1


def test_exactness_combines_energy_rule_step_size_norm_and_preconditioner():
    q = QuadraticEnergy(4)
    assert EnergyBlock(q, GradientDescent(step_size=0.1), 1).exact
    assert EnergyBlock(q, ProximalGradient(), 1).exact  # exact on the traced objective E + prox
    assert not EnergyBlock(q, Momentum(), 1).exact
    assert not EnergyBlock(q, GradientDescent(step_size=NetworkStepSize(4)), 1).exact
    assert not EnergyBlock(q, GradientDescent(), 1, norm=nn.RMSNorm(4)).exact
    assert EnergyBlock(q, GradientDescent(), 1, norm=nn.RMSNorm(4), norm_in_loop=False).exact


def test_proximal_anchor_defaults_to_the_blocks_start_and_can_be_given():
    c = _x(1)
    energy, solver = FixedTarget(c).to(DT), ProximalGradient(step_size=0.2, gamma=0.5)
    blk = EnergyBlock(energy, solver, steps=4)
    x, a = _x(2), _x(3)
    torch.testing.assert_close(blk(x), solver.run(energy, x, c, 4, anchor=x).x, rtol=0, atol=0)
    torch.testing.assert_close(blk(x, anchor=a), solver.run(energy, x, c, 4, anchor=a).x, rtol=0, atol=0)
    assert not torch.allclose(blk(x), blk(x, anchor=a))


def test_momentum_velocity_is_carried_across_blocks_through_ctx():
    """Two one-step blocks sharing a carry key = one two-step run (one velocity stream)."""
    c = _x(4)
    energy = FixedTarget(c, scales=[0.5, 1.0, 1.5, 2.0]).to(DT)
    make = lambda key: EnergyBlock(energy, Momentum(step_size=0.3, beta=0.8, carry_key=key), steps=1)  # noqa: E731
    x = _x(5)
    ctx = ForwardContext()
    y = make("v")(make("v")(x, ctx), ctx)
    torch.testing.assert_close(y, Momentum(step_size=0.3, beta=0.8).run(energy, x, c, 2).x, rtol=1e-14, atol=0)
    assert ctx.carry["v"].shape == x.shape
    fresh = make(None)(make(None)(x))
    assert not torch.allclose(fresh, y)
    with pytest.raises(ValueError, match="carried velocity"):
        make("v")(_x(6, (2, 5, 4)), ctx)


def test_bad_solver_options():
    with pytest.raises(ValueError, match="step_size"):
        GradientDescent(step_size=0.0)
    with pytest.raises(ValueError, match="tol"):
        GradientDescent(tol=-1.0)
    with pytest.raises(ValueError, match="steps"):
        EnergyBlock(ElementwiseEnergy(4, 4), GradientDescent(), steps=0)
    with pytest.raises(ValueError, match="beta"):
        Momentum(beta=1.0)
    with pytest.raises(ValueError, match="learn_beta"):
        Momentum(beta=0.0, learn_beta=True)
    with pytest.raises(ValueError, match="gamma"):
        ProximalGradient(gamma=0.0)


def test_proximal_term_in_the_trace_is_half_the_squared_distance_over_gamma():
    """The traced proximal term is ‖x − anchor‖² / (2γ), the objective whose gradient the update takes (probe Z: the
    ½ dropped kept the terms summing to the energy and the energy falling, so no test saw it; traces and the
    energy-threshold stopping rule read it)."""
    c = _x(1)
    energy, gamma = FixedTarget(c).to(DT), 0.5
    x, a = _x(2), _x(3)
    res = ProximalGradient(step_size=0.2, gamma=gamma).run(energy, x, c, 2, anchor=a, trace=True)
    prox = res.trace.term_tensor("proximal")
    torch.testing.assert_close(prox[0], (x - a).pow(2).sum(-1) / (2 * gamma), rtol=1e-14, atol=0)


def test_adaptive_steps_go_to_the_tokens_asked_for_and_never_to_padding():
    """``adaptive = (more, k)`` (EqT §3.7 adaptive K): after the budget, exactly the tokens where ``more`` holds and
    the padding mask allows take k more gradient steps (each a (1 − η) contraction on E = ½‖x − c‖²); a padded token
    asked for more steps, and a real one not asked, keep the budget's iterate, and the statistics count each token's
    steps."""
    energy = QuadraticEnergy(2).to(DT)
    c = torch.zeros(1, 3, 2, dtype=DT)
    x0 = torch.tensor([[[1.0, 0.0], [4.0, 0.0], [2.0, 0.0]]], dtype=DT)
    mask = torch.tensor([[True, True, False]])          # the third token is padding
    more = torch.tensor([[True, False, True]])          # more steps for the first and the (padded) third
    eta, budget, k = 0.5, 2, 3
    r = GradientDescent(step_size=eta).run(energy, x0, c, budget, stats=True, adaptive=(more, k),
                                           ctx=ForwardContext(mask=mask))
    steps = torch.tensor([[budget + k, budget, 0]])      # padding never moves
    assert torch.equal(r.stats.steps.cpu(), steps)
    torch.testing.assert_close(r.x, x0 * (1 - eta) ** steps[..., None].to(DT), rtol=1e-14, atol=0)


def test_a_state_prepared_for_more_rows_than_the_iterate_is_a_one_line_error():
    """Probe AS: ``run(e, x0 (1, 5, 8), e.prepare(context (2, 5, 8)), steps)`` broadcast the update and returned a
    (2, 5, 8) iterate with no error."""
    with pytest.raises(ValueError, match=r"GradientDescent.run: the iterate went from shape \(1, 2, 3\) to \(4, 2, 3\)"
                                         r": the energy's state was prepared for other tokens"):
        GradientDescent(step_size=0.5).run(QuadraticEnergy(3), torch.zeros(1, 2, 3), torch.ones(4, 2, 3), steps=2)
    with pytest.raises(ValueError, match=r"went from shape \(1, 1, 3\) to \(1, 4, 3\)"):  # more tokens
        GradientDescent(step_size=0.5).run(QuadraticEnergy(3), torch.zeros(1, 1, 3), torch.ones(1, 4, 3), steps=2)
    assert GradientDescent(step_size=0.5).run(QuadraticEnergy(3), torch.zeros(4, 2, 3), torch.ones(4, 2, 3),
                                              steps=2).x.shape == (4, 2, 3)
