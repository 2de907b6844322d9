"""GP regressors (CEM seed Appendix E, Table 3): parameter counts, FLOPs, config errors."""

import pytest
import torch

from energyformer.models.params import count_params
from energyformer.models.regressor import (
    FLOPS_BATCH, GPRegressor, RegressorConfig, analytic_flops, fit_flops_batch, measured_flops,
)
from energyformer.utils.validate import ConfigError

def parse_si(text: str) -> float:
    """'22.66K' -> 22660.0, '6.73M' -> 6.73e6."""
    mult = {"K": 1e3, "M": 1e6, "G": 1e9}
    return float(text[:-1]) * mult[text[-1]] if text[-1] in mult else float(text)


def _paper_table3() -> dict[tuple[str, str], dict]:
    """The seed's Table 3 as the cem-gp study states it (its page's ``paper:`` rows)."""
    from energyformer.studies import load_study

    table = next(b.table for b in load_study("cem-gp").report["README.md"] if b.table and b.table.title == "Table 3")
    return {(r["kernel"], r["model"]): r for r in table.paper}


PAPER_TABLE3 = _paper_table3()

#: Table 3's six rows: the model configs of the cem-gp study (configs/gp/)
_FILES = {"Plain": "plain", "Gated": "gated", "CEM-T1": "cem_t1", "CEM-T2": "cem_t2", "CEM-T4": "cem_t4",
          "CEM-T8": "cem_t8"}


def _spec(name: str) -> RegressorConfig:
    from energyformer.experiment import load_run_config

    return load_run_config(f"gp/{_FILES[name]}", []).model


MODEL_SPECS = {name: _spec(name) for name in _FILES}

EXPECTED_PARAMS = {"Plain": 33984, "Gated": 33953, "CEM-T1": 22673, "CEM-T2": 22673,
                   "CEM-T4": 22673, "CEM-T8": 22673}


@pytest.mark.parametrize("name", list(MODEL_SPECS))
def test_param_counts_match_reported_and_paper(name):
    n = count_params(GPRegressor(MODEL_SPECS[name]))["total"]
    assert n == EXPECTED_PARAMS[name]
    paper = parse_si(PAPER_TABLE3[("rbf", name)]["params"])
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
    paper = {m: parse_si(PAPER_TABLE3[("rbf", m)]["flops"]) for m in MODEL_SPECS}
    assert 90 < fit_flops_batch(per_sample, paper) < 105


def test_cem_block_is_the_library_cem_mlp_with_steps():
    from energyformer.blocks.cem import CEMMLP

    net = GPRegressor(MODEL_SPECS["CEM-T4"])
    assert isinstance(net.block, CEMMLP) and net.block.steps == 4


def test_regressor_config_errors_name_key_value_allowed():
    with pytest.raises(ConfigError, match=r"unknown mlp kind 'mlp'.*registered: .*gelu"):
        RegressorConfig(block="mlp")
    with pytest.raises(ConfigError, match=r"unknown key 'block.steps' for mlp kind 'swiglu'; kinds that accept it: cem"):
        RegressorConfig(block={"kind": "swiglu", "steps": 2})


@pytest.mark.parametrize("name,renames", [("Plain", {"fc.": "up.", "proj.": "down."}),
                                          ("Gated", {"w_gate.": "gate.", "w_up.": "up.", "w_down.": "down."})])
def test_checkpoints_of_the_hand_written_blocks_still_load(name, renames):
    """The block is now the registry's gelu / swiglu MLP; a state dict with the old names loads strictly."""
    torch.manual_seed(0)
    net = GPRegressor(MODEL_SPECS[name])
    old = {}
    for k, v in net.state_dict().items():
        for new, was in renames.items():
            k = k.replace("block." + new, "block." + was)
        old[k] = v.clone()
    assert any(k.startswith("block." + next(iter(renames.values()))) for k in old)
    fresh = GPRegressor(MODEL_SPECS[name])
    fresh.load_state_dict(old, strict=True)
    x = torch.randn(4, 10)
    torch.testing.assert_close(fresh(x), net(x), rtol=0, atol=0)


@pytest.mark.parametrize("x", [torch.randn(1, 4, 5), torch.randn(4), torch.randn(3, 2), torch.ones(3, 5).long()],
                         ids=["3-d", "1-d", "wrong-width", "integer"])
@pytest.mark.parametrize("name", ["Plain", "CEM-T2"])
def test_inputs_of_the_wrong_shape_or_dtype_are_refused(name, x):
    """(1, 4, 5) used to return one finite number for four samples; now every shape but (B, in_dim) is an error."""
    model = GPRegressor(MODEL_SPECS[name].model_copy(update={"in_dim": 5}))
    with pytest.raises(ValueError, match=r"x of shape .*: this model takes floating-point inputs \(B, 5\)"):
        model(x)
    assert model(torch.randn(3, 5)).shape == (3,)
