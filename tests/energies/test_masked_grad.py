"""Every registered energy whose ``prepare`` takes a key-padding ``mask``, float64, with padded tokens: ``grad`` is
autograd of the energy at every token (0 at a padded one where the context is the iterate: the energy does not
depend on it), ``direction`` is −P grad (exact energies) or ``reference_direction`` (inexact ones).

The old Hyper-SET energies (hyperset_attention, _linear_attention, _ff, _gated_ff, _softmax_ff) applied their
operator to every query row: ``grad`` / ``direction`` were finite and wrong at padded tokens (|grad − autograd| up
to 35 for hyperset_attention[sphere=False]; the FF's ``direction`` ignored the mask its ``grad`` applied; the
bi-softmax ``reference_direction`` disagreed with ``direction`` there).
"""

import inspect

import pytest
import torch

import energyformer.energies  # noqa: F401  (registers all energies)
from energyformer.core import ENERGIES, DiagonalPrecond, IdentityPrecond
from energyformer.core.checks import check_descent, check_grad, check_reference
from energyformer.energies import hyperspherical_ffkernel as ffk
from energyformer.energies.hyperspherical import BiSoftmaxAttentionEnergy, ReLUFFEnergy

from .cem_cases import interpreted

HYPERSET = sorted(n for n in ENERGIES if n.startswith("hyperset_"))


def _takes_mask(cls) -> bool:
    return "mask" in inspect.signature(cls.prepare).parameters


def _mask(x):
    """(B, N) key padding: the last two tokens of row 0 and one inner token of row 1 padded."""
    m = torch.ones(x.shape[:2], dtype=torch.bool)
    m[0, -2:] = False
    m[1, 1] = False
    return m


def _cases(names=None):
    for name, cls in sorted(ENERGIES.items()):
        if (names is None or name in names) and _takes_mask(cls):
            for label, energy, ctx, x in cls.examples(torch.float64):
                yield pytest.param(energy, ctx, x, id=f"{name}[{label}]")


def _precond(kind, dim):
    if kind == "identity":
        return IdentityPrecond(dim)
    P = DiagonalPrecond(dim).double()
    with torch.no_grad():
        P.p.uniform_(-0.5, 0.5, generator=torch.Generator().manual_seed(1))
    return P


def _at(energy, state, x):
    return energy.reprepare(state, x) if energy.context_is_iterate else state


def test_the_hyperset_energies_take_a_mask():
    assert {"hyperset_attention", "hyperset_linear_attention", "hyperset_ff", "hyperset_gated_ff",
            "hyperset_softmax_ff"} <= {n for n in HYPERSET if _takes_mask(ENERGIES[n])}


@pytest.mark.parametrize("energy,ctx,x", list(_cases()))
@pytest.mark.parametrize("precond", ["identity", "diagonal"])
def test_masked_grad_and_direction(energy, ctx, x, precond):
    """grad == autograd at every token; direction == −P grad or == reference_direction. Where the context is the
    iterate (the mask hides padded tokens as keys and drops them as queries) grad is 0 at them; an energy of a
    fixed context masks its keys only and keeps a defined energy at a padded query row (interaction.py)."""
    mask = _mask(ctx)
    state, P = energy.prepare(ctx, mask=mask), _precond(precond, x.shape[-1])
    check_grad(energy, state, x)
    if energy.context_is_iterate:
        with torch.no_grad():
            g = energy.grad(x, _at(energy, state, x))
        assert g[~mask].abs().max() <= 1e-12, f"grad at padded tokens: {g[~mask].abs().max():.3g}"
    if energy.exact:
        check_descent(energy, state, x, P)
    else:
        check_reference(energy, state, x, P)


@pytest.mark.parametrize("energy,ctx,x", list(_cases(HYPERSET)))
def test_hyperset_updates_are_zero_at_padded_tokens(energy, ctx, x):
    """Hyper-SET: grad, direction and reference_direction are 0 at padded tokens (the sphere updates are no
    gradient, but the energy still does not depend on a padded token)."""
    mask = _mask(ctx)
    st = _at(energy, energy.prepare(ctx, mask=mask), x)
    P = _precond("diagonal", x.shape[-1])
    with torch.no_grad():
        for name, t in (("grad", energy.grad(x, st)), ("direction", energy.direction(x, st, P)),
                        ("reference_direction", energy.reference_direction(x, st, P) if not energy.exact
                         else torch.zeros_like(x))):
            assert torch.all(t[~mask] == 0), f"{name} at padded tokens: {t[~mask].abs().max():.3g}"


@pytest.mark.parametrize("sphere", [False, True])
@pytest.mark.parametrize("self_interaction", [True, False])
def test_bisoftmax_paths_agree_with_padding(sphere, self_interaction):
    """The fused, einsum and auto paths of hyperset_attention give one grad and direction under key padding."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 6, 8, generator=g, dtype=torch.float64)
    mask = _mask(x)
    out = {}
    for impl in ("fused", "einsum", "auto"):
        torch.manual_seed(0)
        e = BiSoftmaxAttentionEnergy(8, 2, sphere=sphere, self_interaction=self_interaction, impl=impl).double()
        st = e.prepare(x, mask=mask)
        with torch.no_grad():
            out[impl] = e.grad(x, st), e.direction(x, st, IdentityPrecond(8))
    for impl in ("einsum", "auto"):
        for a, b in zip(out[impl], out["fused"]):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert torch.all(out["fused"][1][~mask] == 0)


@interpreted
def test_ff_kernel_path_is_zero_at_padded_tokens(monkeypatch):
    """The fused ReLU(sphere) kernel (CUDA's path, here Triton's interpreter, float32) agrees with the PyTorch ops
    under a mask: 0 at padded tokens, the same direction at real ones."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 5, 6, generator=g)
    mask = _mask(x)
    torch.manual_seed(0)
    e = ReLUFFEnergy(6, 10)
    want = e.direction(x, e.prepare(x, mask=mask), IdentityPrecond(6))
    monkeypatch.setitem(ffk.FUSED_NORM_RELU, "cpu", True)
    assert ffk.applies(torch.empty(1, 10), None)
    d = e.direction(x, e.prepare(x, mask=mask), IdentityPrecond(6))
    assert torch.all(d[~mask] == 0)
    torch.testing.assert_close(d, want, rtol=1e-5, atol=1e-5)
