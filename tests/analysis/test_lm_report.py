import numpy as np
import pytest

from energyformer.analysis.lm_report import akima_optimum, markdown_table


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


def test_table_marks_best_and_unigram():
    p = {"attention": 1000, "mlp": 2000, "embedding": 500, "total": 3500}
    rows = [{"name": "a", "params": p, "val_ppl": 50.0, "val_bpb": 2.0, "tokens_per_s": 100.0},
            {"name": "b", "params": p, "val_ppl": 900.0, "val_bpb": 3.0, "tokens_per_s": 90.0}]
    t = markdown_table(rows, unigram_ppl=500.0)
    assert "**50.00**" in t and "| NO |" in t and "| yes |" in t and "500.00" in t
