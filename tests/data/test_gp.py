"""GP data sets of the CEM seed's Table 3 (Appendix E): kernels, sampling, determinism."""

import math

import pytest
import torch

from energyformer.data.gp import (
    KERNELS, GPDataset, KernelConfig, bayes_rmse, kernel_matrix, make_gp_dataset, sample_gp,
    sample_inputs,
)
from energyformer.utils.validate import ConfigError


def _points(n=6, seed=0):
    return sample_inputs(n, 10, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", KERNELS)
def test_kernel_is_psd_symmetric_unit_variance(name):
    x = _points(300, seed=1)
    k = kernel_matrix(KernelConfig(name=name), x)
    assert torch.allclose(k, k.T, atol=1e-12)
    assert torch.allclose(torch.diagonal(k), torch.ones(300, dtype=k.dtype), atol=1e-12)
    assert float(torch.linalg.eigvalsh(k).min()) > -1e-8


@pytest.mark.parametrize("nu", [0.5, 1.5, 2.5])
def test_matern_nu_options_psd(nu):
    k = kernel_matrix(KernelConfig(name="matern", nu=nu), _points(200, seed=2))
    assert float(torch.linalg.eigvalsh(k).min()) > -1e-8


def test_matern_orders_by_smoothness_and_gibbs_reduces_to_rbf():
    x = _points(2, seed=3)
    r = lambda cfg: float(kernel_matrix(cfg, x)[0, 1])  # noqa: E731
    # at the same length scale a rougher Matérn decorrelates faster; RBF is the nu -> inf limit
    assert r(KernelConfig(name="matern", nu=0.5)) < r(KernelConfig(name="matern", nu=1.5)) < \
        r(KernelConfig(name="matern", nu=2.5)) < r(KernelConfig(name="rbf"))
    g = kernel_matrix(KernelConfig(name="gibbs", beta=0.0), x)
    assert torch.allclose(g, kernel_matrix(KernelConfig(name="rbf"), x), atol=1e-12)


def test_gibbs_is_non_stationary():
    x = _points(2, seed=4)
    shift = torch.zeros(1, 10, dtype=x.dtype)
    shift[0, 0] = 0.7  # moves the first coordinate, which drives l(x)
    k1 = kernel_matrix(KernelConfig(name="gibbs"), x)[0, 1]
    k2 = kernel_matrix(KernelConfig(name="gibbs"), x + shift)[0, 1]
    assert abs(float(k1 - k2)) > 1e-3
    r1 = kernel_matrix(KernelConfig(name="rbf"), x)[0, 1]
    assert torch.allclose(r1, kernel_matrix(KernelConfig(name="rbf"), x + shift)[0, 1])


@pytest.mark.parametrize("name", KERNELS)
def test_empirical_covariance_matches_kernel(name):
    """Many independent joint draws on a few fixed points: sample covariance ≈ K; other kernels ≉ K."""
    x = _points(6, seed=5)
    cfg = KernelConfig(name=name)
    draws = sample_gp(cfg, x, torch.Generator().manual_seed(6), n_draws=40000)  # (N, 6)
    emp = draws.T @ draws / draws.shape[0]  # zero-mean process
    k = kernel_matrix(cfg, x)
    tol = 0.04  # ~ 5 standard errors (sqrt(2 / N) ~ 0.007)
    assert float((emp - k).abs().max()) < tol
    for other in KERNELS:
        if other != name:
            assert float((emp - kernel_matrix(KernelConfig(name=other), x)).abs().max()) > tol, other


def test_dataset_shapes_dtypes_and_determinism():
    a = make_gp_dataset("rbf", 50, 20, seed=3)
    b = make_gp_dataset("rbf", 50, 20, seed=3)
    c = make_gp_dataset("rbf", 50, 20, seed=4)
    assert isinstance(a, GPDataset)
    assert a.x_train.shape == (50, 10) and a.x_test.shape == (20, 10)
    assert a.y_train.shape == (50,) and a.y_test.shape == (20,)
    assert a.x_train.dtype == torch.float32
    assert float(a.x_train.abs().max()) <= 1.0
    for f in ("x_train", "y_train", "x_test", "y_test"):
        assert torch.equal(getattr(a, f), getattr(b, f))
    assert not torch.equal(a.y_train, c.y_train)


def test_dataset_is_one_joint_draw_on_train_and_test():
    """The train and test targets are correlated through one GP sample: the posterior mean predicts y_test."""
    d = make_gp_dataset("rbf", 400, 100, seed=0)
    assert bayes_rmse(d) < 0.2 * float(d.y_test.std())


def test_noise_is_added_and_kernel_options_pass_through():
    clean = make_gp_dataset("matern", 40, 10, seed=1, nu=0.5)
    assert clean.kernel.nu == 0.5
    noisy = make_gp_dataset("matern", 40, 10, seed=1, nu=0.5, noise_std=0.5)
    assert not torch.allclose(clean.y_train, noisy.y_train)
    assert torch.equal(clean.x_train, noisy.x_train)


def test_bad_options_name_key_value_and_allowed():
    with pytest.raises(ConfigError, match=r"name = 'rbff'.*'rbf'"):
        make_gp_dataset("rbff", 10, 5, seed=0)
    with pytest.raises(ConfigError, match=r"nu = 1.0: input should be 0.5, 1.5 or 2.5"):
        KernelConfig(name="matern", nu=1.0)
    with pytest.raises(ConfigError, match=r"gp.n_train = 0"):
        make_gp_dataset("rbf", 0, 5, seed=0)
    with pytest.raises(ConfigError, match=r"lengthscale = -1.0: input should be greater than 0"):
        KernelConfig(name="rq", lengthscale=-1.0)


def test_periodic_kernel_has_the_period():
    x = _points(3, seed=7)
    cfg = KernelConfig(name="periodic")
    shifted = x.clone()
    shifted[:, 3] += cfg.period
    assert torch.allclose(kernel_matrix(cfg, x, shifted), kernel_matrix(cfg, x), atol=1e-10)
    assert not math.isclose(float(kernel_matrix(KernelConfig(name="rbf"), x, shifted)[0, 0]), 1.0)


def test_describe_names_the_options_in_use():
    assert KernelConfig(name="matern").describe() == "matern(nu=1.5, ell=3)"
    assert KernelConfig(name="rbf", lengthscale=2.0).describe() == "rbf(ell=2)"
    assert KernelConfig(name="periodic").describe() == "periodic(period=2, ell=5)"


def test_periodic_matches_direct_formula():
    x, y = _points(7, seed=8), _points(5, seed=9)
    cfg = KernelConfig(name="periodic")
    direct = torch.exp(-2 * torch.sin(math.pi * (x[:, None] - y[None]) / cfg.period).pow(2).sum(-1) / cfg.ell**2)
    assert torch.allclose(kernel_matrix(cfg, x, y), direct, atol=1e-12)


def test_bayes_rmse_includes_the_observation_noise():
    """With noise_std > 0 the Bayes floor is the posterior mean ``K*ᵀ (K + (σ² + jitter) I)⁻¹ y``, written out here
    on 20 points. Before, every test used noise_std = 0: a floor that left σ² out of the solve passed."""
    d = make_gp_dataset("rbf", 20, 10, seed=0, dim=2, noise_std=0.5)
    xtr, xte, y = d.x_train.double(), d.x_test.double(), d.y_train.double()
    k = kernel_matrix(d.kernel, xtr) + (0.25 + 1e-6) * torch.eye(20, dtype=torch.float64)
    mean = kernel_matrix(d.kernel, xte, xtr) @ torch.linalg.solve(k, y)
    want = float((mean - d.y_test.double()).pow(2).mean().sqrt())
    assert bayes_rmse(d) == pytest.approx(want, rel=1e-9)
    noiseless = kernel_matrix(d.kernel, xte, xtr) @ torch.linalg.solve(
        kernel_matrix(d.kernel, xtr) + 1e-6 * torch.eye(20, dtype=torch.float64), y)
    assert abs(want - float((noiseless - d.y_test.double()).pow(2).mean().sqrt())) > 1e-3  # σ² matters here
