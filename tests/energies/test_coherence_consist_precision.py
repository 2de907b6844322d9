"""``coherence_consist`` in float32 (probe P, finding 2): ℒ = ‖h − F̃(F(h))‖² with residual maps F(u) = u + b(u)
was computed as h minus F̃(F(h)) = h + r₁ + r₂ rounded at the size of h, so its float32 error was u·‖h‖ not
u·‖r₁ + r₂‖: at inputs x1e4 with branches x0.01 (the loss drives F̃ towards inverting F, so its residual
shrinks) the energy was 1.2e-3 and the gradient 0.56 off float64, while float64 on the same float32-rounded
data moves by 4e-8. Now ℒ = ‖r₁ + b̃(h + r₁)‖², nothing large subtracted."""

import copy

import pytest
import torch
from torch import nn

import energyformer.energies  # noqa: F401  (registers all energies)
from energyformer.core import ENERGIES
from energyformer.core.fuzz import scale_weights_


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().double() - b).norm() / b.norm())


@pytest.mark.parametrize("s_in,s_w", [(1e4, 1.0), (1e2, 0.01), (1e4, 0.01)])
def test_float32_energy_and_gradient_match_float64(s_in, s_w):
    """float32 against float64 on the float32-rounded inputs and parameters (so only the arithmetic differs):
    within 1e-5 (old: energy 4.8e-4 / 1.3e-3 and gradient 1.2e-3 / 0.52 at inputs x1e4 with weights x1 / x0.01)."""
    torch.manual_seed(0)
    e32 = scale_weights_(ENERGIES["coherence_consist"](8, hidden=12), s_w).eval()  # as in its examples()
    e64 = copy.deepcopy(e32).double()
    h32 = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1)) * s_in
    h64 = h32.double()
    assert _rel(e32.energy(h32, None), e64.energy(h64, None)) < 1e-5
    assert _rel(e32.grad(h32, None), e64.grad(h64, None)) < 1e-5


class _OpaqueMap(nn.Module):
    """A residual position-wise map with no ``branch`` (as a sublayer): u + tanh(W u)."""

    def __init__(self, dim: int):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, u: torch.Tensor, ctx=None) -> torch.Tensor:
        return u + torch.tanh(self.lin(u))


@pytest.mark.parametrize("own", [True, False])
def test_energy_is_the_reconstruction_error_and_its_gradient_autograd(own):
    """The same function as before: ‖h − F̃(F(h))‖² in float64 (own F with a branch, and a shared map without
    one), its gradient autograd's. Fails on the old code, which had no ``branch`` on the residual MLP."""
    torch.manual_seed(0)
    fmap = None if own else _OpaqueMap(8).double()
    e = ENERGIES["coherence_consist"](8, hidden=12, forward_map=fmap).double()
    assert torch.equal(e.inverse(torch.ones(1, 8, dtype=torch.float64)),
                       1 + e.inverse.branch(torch.ones(1, 8, dtype=torch.float64)))
    h = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
    F = e._held("forward_map")
    want = (h - e.inverse(F(h))).pow(2).sum(-1)
    torch.testing.assert_close(e.energy(h, None), want, rtol=1e-12, atol=1e-12)
    (g,) = torch.autograd.grad(want.sum(), h)
    torch.testing.assert_close(e.grad(h.detach(), None), g, rtol=1e-10, atol=1e-12)
