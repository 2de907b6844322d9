"""Property test over EVERY registered energy (energyformer.core.checks), float64:
closed-form grad == autograd of energy; where the energy is exact, a small step along its update
direction lowers the energy; where it is not, the direction equals its reference_direction (an
inexact energy without a reference fails — nothing is skipped)."""

import pytest
import torch
from core_toys import IgnoresPrecond, LeaveOneOut, NoReference, WrongGrad, WrongReference

import energyformer.energies  # noqa: F401  (registers all energies)
from energyformer.core import (
    ENERGIES, IdentityPrecond, check_energy, check_grad, check_reference,
)
from energyformer.core.checks import check_descent, standard_preconds


def _cases():
    for name, cls in sorted(ENERGIES.items()):
        for label, energy, ctx, x in cls.examples(torch.float64):
            yield pytest.param(energy, ctx, x, id=f"{name}[{label}]")


def _precond(kind, dim):
    """The three preconditioners check_energy uses by default (core.checks.standard_preconds)."""
    return dict(zip(("identity", "diagonal", "diag_low_rank"), standard_preconds(dim)))[kind]


def test_every_energy_has_examples():
    assert {"cem_interaction", "cem_elementwise", "quadratic", "composite"} <= set(ENERGIES)
    for name, cls in ENERGIES.items():
        assert cls.examples(torch.float64), name


@pytest.mark.parametrize("energy,ctx,x", list(_cases()))
def test_grad_matches_autograd(energy, ctx, x):
    check_grad(energy, energy.prepare(ctx), x)


@pytest.mark.parametrize("energy,ctx,x", list(_cases()))
@pytest.mark.parametrize("precond", ["identity", "diagonal", "diag_low_rank"])
def test_update_direction_descends_or_matches_reference(energy, ctx, x, precond):
    state, P = energy.prepare(ctx), _precond(precond, x.shape[-1])
    if energy.exact:
        check_descent(energy, state, x, P)
    else:
        check_reference(energy, state, x, P)


@pytest.mark.parametrize("energy,ctx,x", list(_cases()))
def test_public_check_energy_passes_with_every_preconditioner_and_a_key_mask(energy, ctx, x):
    """What a researcher's energy is held to (``check_energy`` with its defaults: the three preconditioners, and a
    key-padding mask handed to ``prepare`` where the context is a (B, N, ...) tensor): the package's own pass it."""
    check_energy(energy, ctx, x)


# --- the checks themselves catch what they claim to (toy energies, not registered)
def _x(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 5, 4, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("precond", ["identity", "diagonal"])
def test_inexact_iterate_energy_with_reference_passes(precond):
    x = _x()
    check_energy(LeaveOneOut(), x, x, _precond(precond, 4))


def test_inexact_energy_without_reference_fails():
    x = _x()
    with pytest.raises(NotImplementedError, match="reference_direction"):
        check_energy(NoReference(), x, x, IdentityPrecond(4))


def test_wrong_reference_and_wrong_grad_fail():
    x = _x()
    with pytest.raises(AssertionError, match="reference_direction"):
        check_energy(WrongReference(), x, x, IdentityPrecond(4))
    with pytest.raises(AssertionError, match="autograd"):
        check_energy(WrongGrad(4).double(), _x(1), x, IdentityPrecond(4))


@pytest.mark.parametrize("precond", ["diagonal", "diag_low_rank"])
def test_a_direction_that_leaves_the_preconditioner_out_fails(precond):
    """It descends (the old check passed it), but an exact energy's direction must be −P ∇E."""
    x, ctx, e = _x(), _x(1), IgnoresPrecond(4).double()
    check_energy(e, ctx, x, IdentityPrecond(4))  # with P = I it is right
    with pytest.raises(AssertionError, match="direction != -P grad"):
        check_energy(e, ctx, x, _precond(precond, 4))


def test_iterate_energy_grad_is_total_derivative_not_partial():
    """For an iterate-context energy the checked gradient goes through the context: the partial
    gradient (context held fixed) is NOT accepted as ``grad``."""
    x, e = _x(), LeaveOneOut()
    c = e.prepare(x)
    partial = x - torch.tanh(c)
    assert not torch.allclose(e.grad(x, c), partial)
    check_grad(e, c, x)  # the total derivative passes
