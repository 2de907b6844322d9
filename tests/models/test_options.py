"""Issue 25: call-time options a model cannot honour are errors naming the option and the model kind."""

import sys
from pathlib import Path

import pytest

from energyformer.errors import ConfigError
from energyformer.models.options import check_forward_options, supported_forward_options

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from system_cases import build_case  # noqa: E402

EXPECTED = {
    "llama": {"iterations"}, "sudoku_transformer": {"iterations"}, "img_transformer": {"iterations"},
    "cem_full": {"iterations", "steps"}, "sudoku_hyperset": {"iterations", "steps"},
    "eqt": {"iterations", "steps"}, "potts_bare_sa": {"iterations", "steps"},
    "potts_factored": set(), "gp_cem": set(),
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
    with pytest.raises(ConfigError, match=r"--iterations 2: a 'regressor' model.*none"):
        check_forward_options(gp, {"iterations": 2}, "regressor")


def test_factored_attention_refuses_more_steps_as_a_config_error():
    task, model, batch = build_case("potts_factored")
    with pytest.raises(ConfigError, match="steps = 3.*allowed: 1"):
        model(batch[0], steps=3)
