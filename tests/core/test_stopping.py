"""Stopping rules of the shared loop: per-token tolerance (finished tokens stop, the others go
on), energy threshold, padding masks (masked tokens never move), and the per-token statistics."""

import math

import pytest
import torch

from energyformer.core import ForwardContext, GradientDescent, Momentum, QuadraticEnergy

DT = torch.float64


def _unit_problem():
    """Identity quadratic, x0 = 0, targets with per-token norms spread over 5 decades."""
    g = torch.Generator().manual_seed(0)
    c = torch.randn(2, 5, 3, generator=g, dtype=DT)
    c = c / c.norm(dim=-1, keepdim=True) * torch.logspace(-2, 3, 10, dtype=DT).view(2, 5, 1)
    return QuadraticEnergy(3).to(DT), c, torch.zeros_like(c)


def _expected_tol_steps(r, tol, cap):
    """GD with eta = 1/2 on ½‖x − c‖²: ‖Δ_t‖ = 2^-(t+1) r; a token stops after its first step below tol."""
    return torch.tensor([min(next(t + 1 for t in range(cap + 1) if 0.5 ** (t + 1) * float(v) < tol), cap)
                         for v in r.flatten()]).view(r.shape)


def test_per_token_tolerance_stops_converged_tokens_and_lets_the_others_continue():
    energy, c, x0 = _unit_problem()
    tol, cap = 1e-3, 100
    res = GradientDescent(step_size=0.5, tol=tol).run(energy, x0, c, cap, trace=True)
    r = c.norm(dim=-1)
    expected = _expected_tol_steps(r, tol, cap)
    assert len(set(expected.flatten().tolist())) > 5  # tokens really stop at different steps
    assert torch.equal(res.stats.steps, expected)
    assert res.steps == int(expected.max()) == res.trace.steps < cap
    # each token is exactly where its own number of steps puts it: x = c (1 − 2^-n_i)
    n = expected.to(DT).unsqueeze(-1)
    torch.testing.assert_close(res.x, c * (1 - 0.5 ** n), rtol=1e-14, atol=1e-15)
    # final step norm per token = its last (sub-tolerance) step
    torch.testing.assert_close(res.stats.step_norm, 0.5 ** expected.to(DT) * r, rtol=1e-9, atol=0)  # c − x cancels
    assert bool((res.stats.step_norm < tol).all())
    # in the trace, a token's step norm is zero after it stopped
    norms = torch.stack(res.trace.step_norm)  # (T, B, N)
    t = torch.arange(res.steps).view(-1, 1, 1)
    assert bool((norms[t >= expected] == 0).all()) and bool((norms[t < expected] > 0).all())


def test_tolerance_stops_the_loop_early_and_trace_counts_steps():
    energy, c, x0 = _unit_problem()
    tol = 1e-3
    res = GradientDescent(step_size=0.5, tol=tol).run(energy, x0, c, 100, trace=True)
    expected = 1 + math.ceil(math.log2(0.5 * c.norm(dim=-1).max().item() / tol))
    assert res.steps == expected < 100
    assert res.trace.steps == res.steps and len(res.trace.energy) == res.steps + 1
    e = res.trace.mean_energy()
    assert all(b < a for a, b in zip(e, e[1:]))


@pytest.mark.parametrize("tol", [None, 1e-3])
def test_masked_tokens_never_move(tol):
    energy, c, x0 = _unit_problem()
    x0 = x0 + 0.1
    mask = torch.rand(2, 5, generator=torch.Generator().manual_seed(3)) > 0.4
    mask[0, 0], mask[1, 0] = False, True
    ctx = ForwardContext(mask=mask)
    for solver in (GradientDescent(step_size=0.5, tol=tol), Momentum(step_size=0.5, beta=0.5, tol=tol)):
        res = solver.run(energy, x0, c, 20, ctx=ctx, stats=True)
        assert torch.equal(res.x[~mask], x0[~mask])  # bit-for-bit
        assert bool((res.x[mask] != x0[mask]).all())
        assert bool((res.stats.steps[~mask] == 0).all()) and bool((res.stats.steps[mask] > 0).all())
        assert bool((res.stats.step_norm[~mask] == 0).all())
        free = solver.run(energy, x0, c, 20, stats=True)  # real tokens move as without a mask
        torch.testing.assert_close(res.x[mask], free.x[mask], rtol=0, atol=0)


def test_energy_threshold_stops_tokens_at_or_below_it():
    energy, c, x0 = _unit_problem()
    thr, cap = 1e-4, 60
    res = GradientDescent(step_size=0.5, energy_threshold=thr).run(energy, x0, c, cap, trace=True)
    # E_i(x_t) = ½ 4^-t r_i²: a token steps while its energy is above thr
    e0 = 0.5 * c.norm(dim=-1) ** 2
    expected = torch.tensor([next(t for t in range(cap + 1) if 0.25 ** t * float(v) <= thr or t == cap)
                             for v in e0.flatten()]).view(e0.shape)
    assert torch.equal(res.stats.steps, expected)
    assert res.steps == int(expected.max())
    final = energy.energy(res.x, c)
    assert bool((final <= thr).all())
    assert bool((final[expected > 0] > thr / 4 - 1e-18).all())  # none overshoots: stopped at first crossing
    assert len(res.trace.energy) == res.steps + 1  # the last energy is recorded once


def test_stats_without_stopping_rules_only_when_asked():
    energy, c, x0 = _unit_problem()
    s = GradientDescent(step_size=0.5)
    assert s.run(energy, x0, c, 3).stats is None
    st = s.run(energy, x0, c, 3, stats=True).stats
    assert torch.equal(st.steps, torch.full((2, 5), 3))
    torch.testing.assert_close(st.step_norm, 0.125 * c.norm(dim=-1), rtol=1e-14, atol=0)


def test_zero_steps_returns_the_start():
    energy, c, x0 = _unit_problem()
    res = GradientDescent(step_size=0.5).run(energy, x0, c, 0, trace=True, stats=True)
    assert res.x is x0 and res.steps == 0 and len(res.trace.energy) == 1
    assert bool((res.stats.steps == 0).all())


def test_bad_mask_shape_is_a_clear_error():
    energy, c, x0 = _unit_problem()
    with pytest.raises(ValueError, match="ctx.mask has shape"):
        GradientDescent().run(energy, x0, c, 1, ctx=ForwardContext(mask=torch.ones(2, 4, dtype=torch.bool)))


def test_trace_means_count_real_tokens_only():
    """A padded token never moves, so counting it in the trace's means diluted each step's mean energy and
    step norm by the padding share (and an attention energy's padded row, which can rise as the real keys
    move, could hide a real token's rise); the old means averaged every token."""
    energy, c, x0 = _unit_problem()
    mask = torch.tensor([[True, True, False, False, False], [True, False, True, False, False]])
    res = GradientDescent(step_size=0.5).run(energy, x0 + 0.1, c, 4, ctx=ForwardContext(mask=mask), trace=True)
    tr = res.trace
    real = lambda v: float(v[mask].mean())  # noqa: E731
    assert tr.mean_energy() == pytest.approx([real(e) for e in tr.energy], rel=1e-12)
    assert tr.mean_step_norm() == pytest.approx([real(s) for s in tr.step_norm], rel=1e-12)
    assert tr.mean_step_norm()[0] != pytest.approx(float(tr.step_norm[0].mean()))  # padding no longer counted
    full = GradientDescent(step_size=0.5).run(energy, x0 + 0.1, c, 4, trace=True).trace
    assert full.mask is None and full.mean_energy() == pytest.approx([float(e.mean()) for e in full.energy])
    nobody = GradientDescent(step_size=0.5).run(energy, x0, c, 1, ctx=ForwardContext(mask=mask & False), trace=True)
    assert all(math.isnan(v) for v in nobody.trace.mean_energy())  # no real token: nan, not a number


def test_truncated_backward_with_a_stopping_rule_is_refused():
    """With tol, every token could stop inside truncated's untracked prefix (fixed at steps − k before the run):
    60 steps, k 3, tol 1e-6 stopped at ~21 steps and the parameters got zero gradient, silently."""
    from energyformer.core.sublayer import DescentConfig
    from energyformer.utils.validate import ConfigError

    for kw in ({"tol": 1e-6}, {"energy_threshold": -1.0}):
        with pytest.raises(ConfigError, match="backward = truncated .k 3. with .*untracked prefix"):
            GradientDescent(step_size=0.5, backward="truncated", truncate=3, **kw)
        with pytest.raises(ValueError, match="truncated .k 3. with solver.*allowed: backward unroll or implicit"):
            DescentConfig.model_validate({"solver": {"kind": "gd", **kw}, "backward": {"kind": "truncated", "k": 3}})
    GradientDescent(step_size=0.5, backward="truncated", truncate=3)  # without a stopping rule: fine
    DescentConfig.model_validate({"solver": {"kind": "gd", "tol": 1e-6}, "backward": "implicit"})


def test_the_rules_at_their_exact_boundaries():
    """On E = ½x², η = ½ every value is a power of two (exact in float64): a step norm equal to ``tol`` is not below
    it (the token steps on), an energy equal to ``energy_threshold`` is at it (the token stops)."""
    energy = QuadraticEnergy(1).double()
    c, x0 = torch.zeros(1, 1, 1, dtype=torch.float64), torch.ones(1, 1, 1, dtype=torch.float64)
    # steps 0.5, 0.25, 0.125: the one of norm 0.25 = tol is taken, the next (0.125 < tol) is the last
    tol = GradientDescent(step_size=0.5, tol=0.25).run(energy, x0, c, 10, stats=True)
    assert tol.stats.steps.tolist() == [[3]]
    # energies 0.5, 0.125 (= threshold: stop), so one step
    thr = GradientDescent(step_size=0.5, energy_threshold=0.125).run(energy, x0, c, 10, stats=True)
    assert thr.stats.steps.tolist() == [[1]]
