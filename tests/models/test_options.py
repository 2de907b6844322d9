"""Issue 25: call-time options a model cannot honour are errors naming the option and the model kind."""

import sys
from pathlib import Path

import pytest

from energyformer.errors import ConfigError
from energyformer.models.options import check_forward_options, supported_forward_options

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from system_cases import build_case  # noqa: E402

EXPECTED = {
    "llama": {"iterations": 1}, "sudoku_transformer": {"iterations": 1}, "img_transformer": {"iterations": 1},
    "cem_full": {"iterations": 1, "steps": 1}, "sudoku_hyperset": {"iterations": 1, "steps": 1},
    "eqt": {"iterations": 1, "steps": 0}, "potts_bare_sa": {"iterations": 1, "steps": 1},
    "potts_factored": {}, "gp_cem": {"steps": 1},   # the CEM block's T (eval --steps)
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_supported_options(name):
    _, model, _ = build_case(name)
    assert supported_forward_options(model) == EXPECTED[name]


def test_unsupported_option_names_option_and_kind():
    _, model, _ = build_case("llama")
    with pytest.raises(ConfigError, match=r"--steps 3: a 'transformer' model has no energy descent steps.*--iterations"):
        check_forward_options(model, {"steps": 3}, "transformer")
    check_forward_options(model, {"iterations": 2}, "transformer")  # honoured: no error
    _, gp, _ = build_case("gp_cem")
    with pytest.raises(ConfigError, match=r"--iterations 2: a 'regressor' model.*--steps"):
        check_forward_options(gp, {"iterations": 2}, "regressor")


def test_factored_attention_refuses_more_steps_as_a_config_error():
    task, model, batch = build_case("potts_factored")
    with pytest.raises(ConfigError, match="steps = 3.*allowed: 1"):
        model(batch[0], steps=3)


def test_least_values():
    _, eqt, _ = build_case("eqt")
    check_forward_options(eqt, {"steps": 0}, "equilibrium")  # K = 0: the paper's ablation
    _, cem, _ = build_case("cem_full")
    with pytest.raises(ConfigError, match=r"--steps 0: a 'transformer' model takes --steps >= 1"):
        check_forward_options(cem, {"steps": 0}, "transformer")
