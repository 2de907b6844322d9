"""Property test over EVERY registered energy: closed-form grad == autograd of energy (float64),
and a small step along the update direction lowers the energy."""

import pytest
import torch

import energyformer.energies  # noqa: F401  (registers all energies)
from energyformer.core import ENERGIES, DiagonalPrecond, IdentityPrecond


def _cases():
    for name, cls in sorted(ENERGIES.items()):
        for label, energy, ctx, x in cls.examples(torch.float64):
            yield pytest.param(energy, ctx, x, id=f"{name}[{label}]")


def test_every_energy_has_examples():
    assert ENERGIES, "no energies registered"
    for name, cls in ENERGIES.items():
        assert cls.examples(torch.float64), name


@pytest.mark.parametrize("energy,ctx,x", list(_cases()))
def test_grad_matches_autograd(energy, ctx, x):
    state = energy.prepare(ctx)
    g = energy.grad(x, state)
    xg = x.clone().requires_grad_(True)
    (ga,) = torch.autograd.grad(energy.energy(xg, state).sum(), xg)
    assert g.shape == x.shape
    torch.testing.assert_close(g, ga, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("energy,ctx,x", list(_cases()))
@pytest.mark.parametrize("precond", ["identity", "diagonal"])
def test_small_step_lowers_energy(energy, ctx, x, precond):
    state = energy.prepare(ctx)
    P = IdentityPrecond(x.shape[-1]) if precond == "identity" else DiagonalPrecond(x.shape[-1]).double()
    with torch.no_grad():
        if precond == "diagonal":
            P.p.uniform_(-0.5, 0.5)
        d = energy.direction(x, state, P)
        e0 = energy.energy(x, state).sum()
        e1 = energy.energy(x + 1e-4 * d, state).sum()
        # first-order decrease predicted by the directional derivative
        slope = (energy.grad(x, state) * d).sum()
    assert slope < 0
    assert e1 < e0
