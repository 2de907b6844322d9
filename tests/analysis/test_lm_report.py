import numpy as np
import pytest

from energyformer.analysis.lm_report import akima_optimum


def test_akima_recovers_the_minimum_of_a_smooth_curve_in_log_lr():
    lrs = [5e-4, 1e-3, 2e-3, 4e-3, 8e-3]
    true_opt = 2.8e-3
    losses = [3.0 + 0.2 * (np.log2(lr) - np.log2(true_opt)) ** 2 for lr in lrs]
    lr, loss = akima_optimum(lrs, losses)
    assert lr == pytest.approx(true_opt, rel=0.08)
    assert loss == pytest.approx(3.0, abs=0.01)


def test_akima_ignores_diverged_runs():
    lr, _ = akima_optimum([1e-3, 2e-3, 4e-3, 8e-3], [3.2, 3.0, 3.1, float("nan")])
    assert 1e-3 < lr < 4e-3

