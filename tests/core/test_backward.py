"""Backward modes: 'truncated' backpropagates through the last k steps only (the graph-free
prefix keeps the input path, x_{T−k} = x0 + stopgrad(x_{T−k} − x0)). 'implicit': test_backward_implicit.py."""

import pytest
import torch

from energyformer.core import GradientDescent, Momentum, make_backward_mode
from energyformer.energies import ElementwiseEnergy
from energyformer.utils.validate import ConfigError

DT = torch.float64


def _setup(seed=0):
    torch.manual_seed(seed)
    energy = ElementwiseEnergy(6, 10).to(DT)
    g = torch.Generator().manual_seed(seed)
    ctx = torch.randn(2, 4, 6, generator=g, dtype=DT)
    x0 = torch.randn(2, 4, 6, generator=g, dtype=DT).requires_grad_(True)
    return energy, ctx, x0


def _grads(loss, params):
    return torch.autograd.grad(loss, params, allow_unused=True)


@pytest.mark.parametrize("rule", ["gd", "momentum"])
def test_truncated_gradients_equal_a_manual_detach_of_the_first_steps(rule):
    T, k, eta, beta = 5, 2, 0.3, 0.6
    energy, ctx, x0 = _setup()
    make = (lambda **kw: GradientDescent(step_size=eta, learn_step_size=True, **kw)) if rule == "gd" else \
        (lambda **kw: Momentum(step_size=eta, learn_step_size=True, beta=beta, **kw))
    trunc, unroll = make(backward="truncated", truncate=k).to(DT), make().to(DT)
    unroll.load_state_dict(trunc.state_dict())
    params = [energy.W.weight, energy.V.weight, trunc.step_size.theta, x0]

    state = energy.prepare(ctx)
    y = trunc.run(energy, x0, state, T).x
    g_trunc = _grads((y ** 2).sum(), params)

    # manual reference: the same loop, the first T − k steps computed without a graph
    eta_t = torch.nn.functional.softplus(trunc.step_size.theta)
    x, m = x0, None
    for t in range(T):
        with torch.set_grad_enabled(t >= T - k):
            d = energy.direction(x, energy.prepare(ctx), trunc.precond)
            m = d if (rule == "gd" or m is None) else beta * m + d
            dx = eta_t * m
        x = x + dx
    g_manual = _grads((x ** 2).sum(), params)
    torch.testing.assert_close(y, x, rtol=1e-13, atol=1e-13)
    for a, b in zip(g_trunc, g_manual):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)

    # the same forward value as the full unroll, different (truncated) gradients
    y_full = unroll.run(energy, x0, energy.prepare(ctx), T).x
    torch.testing.assert_close(y_full, y, rtol=1e-13, atol=1e-13)
    g_full = _grads((y_full ** 2).sum(), [energy.W.weight, energy.V.weight, unroll.step_size.theta, x0])
    assert not torch.allclose(g_full[1], g_trunc[1])


def test_truncation_at_or_beyond_the_budget_is_the_full_unroll():
    energy, ctx, x0 = _setup(1)
    a = GradientDescent(step_size=0.3, backward="truncated", truncate=3).to(DT)
    b = GradientDescent(step_size=0.3).to(DT)
    ga = torch.autograd.grad(a.run(energy, x0, energy.prepare(ctx), 3).x.sum(), energy.V.weight)[0]
    gb = torch.autograd.grad(b.run(energy, x0, energy.prepare(ctx), 3).x.sum(), energy.V.weight)[0]
    torch.testing.assert_close(ga, gb, rtol=0, atol=0)


def test_backward_mode_errors_name_the_option_and_the_allowed_values():
    assert type(make_backward_mode("implicit")).__name__ == "Implicit"  # registered (tests/core/test_backward_implicit.py)
    with pytest.raises(ConfigError, match="'unroll', 'truncated', 'implicit'"):
        GradientDescent(backward="phantom")
    with pytest.raises(ConfigError, match="needs truncate"):
        GradientDescent(backward="truncated")
    with pytest.raises(ConfigError, match="only allowed with backward = 'truncated'"):
        GradientDescent(truncate=2)


def test_bare_step_map_equals_one_step_of_the_loop():
    """``Descent.step`` (the x_t -> x_{t+1} map a future implicit mode differentiates) is the loop's step."""
    from energyformer.core import Descent

    energy, ctx, x0 = _setup(2)
    solver = Momentum(step_size=0.3, beta=0.5).to(DT)
    state = energy.prepare(ctx)
    loop = Descent(solver, energy, x0, None, 0, None, False, False)
    x1, _, m1 = loop.descend(x0, state, None, 0, 1)
    y1, _, n1, dx = loop.step(x0, state, None, 0)
    torch.testing.assert_close(y1, x1, rtol=0, atol=0)
    torch.testing.assert_close(n1, m1, rtol=0, atol=0)
    torch.testing.assert_close(dx, y1 - x0, rtol=1e-15, atol=1e-15)
