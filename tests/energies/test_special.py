import math

import numpy as np
import pytest
import torch
from scipy.integrate import quad
from scipy.special import expit

from energyformer.energies.special import silu_integral


def _phi_ref(z: float) -> float:
    f = lambda t: t * expit(t)  # noqa: E731
    return quad(f, -np.inf, min(z, 0.0), limit=500)[0] + (quad(f, 0.0, z, limit=500)[0] if z > 0 else 0.0)


@pytest.mark.parametrize("z", [-40.0, -8.0, -1.5, -0.2, 0.0, 0.2, 1.5, 8.0, 40.0])
def test_phi_matches_quadrature(z):
    v = silu_integral(torch.tensor(z, dtype=torch.float64)).item()
    assert v == pytest.approx(_phi_ref(z), rel=1e-9, abs=1e-14)


def test_phi_derivative_is_silu_and_limits():
    z = torch.linspace(-60, 60, 4001, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(silu_integral(z).sum(), z)
    torch.testing.assert_close(g, torch.nn.functional.silu(z.detach()), rtol=0, atol=1e-12)
    assert silu_integral(torch.tensor(0.0, dtype=torch.float64)).item() == pytest.approx(-math.pi**2 / 12)


def test_phi_stable_in_float32_extremes():
    z = torch.tensor([-1e4, -100.0, 0.0, 100.0, 1e4], dtype=torch.float32, requires_grad=True)
    y = silu_integral(z)
    (g,) = torch.autograd.grad(y.sum(), z)
    assert torch.isfinite(y).all() and torch.isfinite(g).all()
    assert y[-1].item() == pytest.approx(0.5e8 - math.pi**2 / 6, rel=1e-6)


@pytest.mark.parametrize("dtype,scale", [(torch.float32, 1e-6), (torch.float32, 1e-3), (torch.bfloat16, 1e-3),
                                         (torch.bfloat16, 1.0)])
def test_phi_autograd_in_low_precision_is_silu_near_zero(dtype, scale):
    """Near z = 0 the series' terms have O(1) derivatives that cancel to SiLU(z) ≈ z/2: autograd of a float32
    evaluation was 10 % off at |z| ~ 1e-6 (bf16: 4x at 1e-3). Evaluated in float64, φ' is SiLU to the dtype's
    rounding of z and of the gradient, and φ keeps the input's dtype."""
    z = (torch.randn(64, generator=torch.Generator().manual_seed(0)) * scale).to(dtype).requires_grad_(True)
    y = silu_integral(z)
    (g,) = torch.autograd.grad(y.sum(), z)
    assert y.dtype == g.dtype == dtype
    ref = torch.nn.functional.silu(z.detach().double())
    eps = torch.finfo(dtype).eps
    assert ((g.double() - ref).abs() <= eps * ref.abs() + torch.finfo(dtype).tiny).all()
