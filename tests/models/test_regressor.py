"""GP regressors (CEM seed Appendix E, Table 3): parameter counts, FLOPs, config errors."""

import pytest
import torch

from energyformer.analysis.gp_report import PAPER_TABLE3, parse_si
from energyformer.models.params import count_params
from energyformer.models.regressor import (
    FLOPS_BATCH, GPRegressor, RegressorConfig, analytic_flops, fit_flops_batch, measured_flops,
)
from energyformer.reproduce.cem_gp import MODEL_SPECS
from energyformer.utils.validate import ConfigError

EXPECTED_PARAMS = {"Plain": 33984, "Gated": 33953, "CEM-T1": 22673, "CEM-T2": 22673,
                   "CEM-T4": 22673, "CEM-T8": 22673}


@pytest.mark.parametrize("name", list(MODEL_SPECS))
def test_param_counts_match_reported_and_paper(name):
    n = count_params(GPRegressor(MODEL_SPECS[name]))["total"]
    assert n == EXPECTED_PARAMS[name]
    paper = parse_si(PAPER_TABLE3[("rbf", name)].params)
    assert abs(n - paper) / paper < 1e-3  # within 0.1% of the seed's Table 3


@pytest.mark.parametrize("name", list(MODEL_SPECS))
def test_analytic_flops_equal_flop_counter_and_shape(name):
    cfg = MODEL_SPECS[name]
    net = GPRegressor(cfg)
    assert analytic_flops(cfg) == measured_flops(net)
    assert analytic_flops(cfg, batch=7) == measured_flops(net, batch=7)
    assert net(torch.randn(5, 10)).shape == (5,)


def test_flops_grow_linearly_with_steps_and_fit_paper_batch():
    f = {t: analytic_flops(MODEL_SPECS[f"CEM-T{t}"]) for t in (1, 2, 4, 8)}
    assert f[2] - f[1] == (f[4] - f[2]) // 2 == (f[8] - f[4]) // 4
    assert analytic_flops(MODEL_SPECS["CEM-T1"]) == pytest.approx(analytic_flops(MODEL_SPECS["Gated"]), rel=0.01)
    per_sample = {m: analytic_flops(c) / FLOPS_BATCH for m, c in MODEL_SPECS.items()}
    paper = {m: parse_si(PAPER_TABLE3[("rbf", m)].flops) for m in MODEL_SPECS}
    assert 90 < fit_flops_batch(per_sample, paper) < 105


def test_cem_block_is_the_library_cem_mlp_with_steps():
    from energyformer.blocks.cem import CEMMLP

    net = GPRegressor(MODEL_SPECS["CEM-T4"])
    assert isinstance(net.block, CEMMLP) and net.block.steps == 4


def test_regressor_config_errors_name_key_value_allowed():
    with pytest.raises(ConfigError, match=r"block = 'mlp'.*'plain'"):
        RegressorConfig(block="mlp")
    with pytest.raises(ConfigError, match=r"model.steps = 2: only the 'cem' block recurses"):
        RegressorConfig(block="gated", steps=2)
