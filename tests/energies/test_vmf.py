"""log I_ν and the von Mises–Fisher normaliser (energies/vmf.py) against scipy and quadrature."""

import math

import numpy as np
import pytest
import scipy.special as sp
import torch
from scipy.integrate import quad

from energyformer.energies.vmf import bessel_ratios, log_bessel_iv, sphere_log_area, vmf_log_normalizer


@pytest.mark.parametrize("nu", [0.0, 0.5, 1.0, 3.0, 4.0, 7.5, 15.0, 47.0, 60.0])
def test_log_bessel_and_ratio_match_scipy(nu):
    k = torch.logspace(-8, 4, 300, dtype=torch.float64)
    log_iv, ratio = bessel_ratios(nu, k)
    kn = k.numpy()
    with np.errstate(divide="ignore", invalid="ignore"):  # scipy under- and overflows at the ends
        ref = np.log(sp.ive(nu, kn)) + kn
        ref_ratio = sp.ive(nu + 1, kn) / sp.ive(nu, kn)
        ok = np.isfinite(ref) & np.isfinite(ref_ratio) & (ref_ratio > 0)
        assert ok.sum() > 100
        assert np.abs(log_iv.numpy() - ref)[ok].max() < 1e-9
        assert (np.abs(ratio.numpy() - ref_ratio) / ref_ratio)[ok].max() < 1e-10


def test_normaliser_matches_quadrature_and_closed_forms():
    for kappa in (1e-6, 0.3, 2.0, 25.0):
        z2 = quad(lambda t: math.exp(kappa * (math.cos(t) - 1)), 0, 2 * math.pi)[0]  # d = 2
        z3 = 2 * math.pi * quad(lambda t: math.exp(kappa * (t - 1)), -1, 1)[0]        # d = 3
        got = vmf_log_normalizer(2, torch.tensor([kappa], dtype=torch.float64))[0]
        assert abs(float(got) - (math.log(z2) + kappa)) < 1e-9
        got3 = vmf_log_normalizer(3, torch.tensor([kappa], dtype=torch.float64))[0]
        assert abs(float(got3) - (math.log(z3) + kappa)) < 1e-9
    for d in (2, 3, 10, 96):
        z0 = vmf_log_normalizer(d, torch.tensor([0.0], dtype=torch.float64))[0]
        assert abs(float(z0) - sphere_log_area(d)) < 1e-9


@pytest.mark.parametrize("d", [2, 5, 10, 32])
def test_mean_resultant_length_is_derivative_of_log_normaliser(d):
    k = torch.tensor([1e-3, 0.5, 4.0, 80.0], dtype=torch.float64, requires_grad=True)
    logz, a_over_k = vmf_log_normalizer(d, k)
    (g,) = torch.autograd.grad(logz.sum(), k)
    torch.testing.assert_close(g, (a_over_k * k).detach(), rtol=1e-8, atol=1e-9)
    assert float(log_bessel_iv(1.0, torch.tensor([3.0], dtype=torch.float64))) == pytest.approx(
        math.log(sp.iv(1, 3.0)), abs=1e-10)


def test_bad_orders_and_dims_are_refused():
    with pytest.raises(ValueError, match="nu = -1"):
        bessel_ratios(-1.0, torch.ones(1))
    with pytest.raises(ValueError, match="d = 1"):
        vmf_log_normalizer(1, torch.ones(1))


@pytest.mark.parametrize("nu", [0.0, 0.5, 1.5, 10.0])
def test_log_bessel_and_ratio_at_huge_kappa(nu):
    """Issue 23: the starting ratio subtracted two logs of size κ and was inf from κ ~ 1e16 on. Against
    Hankel's expansion I_ν(κ) ~ e^κ/sqrt(2πκ) (1 − (4ν² − 1)/(8κ)), exact to O(κ⁻²) here."""
    k = torch.tensor([1e8, 1e12, 1e16, 1e20, 1e30], dtype=torch.float64)
    log_iv, ratio = bessel_ratios(nu, k)
    mu = 4 * nu * nu
    want = k - 0.5 * torch.log(2 * math.pi * k) + torch.log1p(-(mu - 1) / (8 * k))
    torch.testing.assert_close(log_iv, want, rtol=1e-15, atol=1e-9)
    torch.testing.assert_close(ratio, 1 - (2 * nu + 1) / (2 * k), rtol=1e-12, atol=0)
    logz, a_over_k = vmf_log_normalizer(3, k)  # Z_3 = 4π sinh κ / κ
    torch.testing.assert_close(logz, math.log(2 * math.pi) + k - torch.log(k), rtol=1e-15, atol=1e-9)
