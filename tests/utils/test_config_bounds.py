"""Config integers fit int64: a larger one (``task.batch_size=99999999999999999999``, ``model.dim=...``) went on to
an internal error from torch ("Overflow when unpacking long long", "int too big to convert") naming no key; now
one line naming the key and the range. A size inside int64 but too large to allocate says "not enough memory"."""

from __future__ import annotations

import pytest

from energyformer.cli import main
from energyformer.cli_errors import describe_error
from energyformer.experiment import load_run_config
from energyformer.utils.validate import ConfigError

HUGE = 99999999999999999999


@pytest.mark.parametrize("config,key", [("lm/llama", "task.batch_size"), ("lm/llama", "train.grad_accum"),
                                        ("lm/llama", "model.dim"), ("lm/llama", "train.seed"),
                                        ("hyperset/sudoku_hyperset", "task.eval_iterations")])
def test_an_integer_outside_int64_names_its_key(config, key):
    value = f"[{HUGE}]" if key == "task.eval_iterations" else str(HUGE)
    with pytest.raises(ConfigError, match=rf"{key}.*{HUGE}.*(out of range|less than or equal)"):
        load_run_config(config, [f"{key}={value}"])


def test_int64_edges_and_negatives_are_left_to_each_field():
    cfg = load_run_config("lm/llama", [f"train.seed={2**63 - 1}", "train.steps=9223372036854775807"])
    assert cfg.train.seed == 2**63 - 1 and cfg.train.steps == 2**63 - 1
    with pytest.raises(ConfigError, match="out of range"):
        load_run_config("lm/llama", [f"train.steps={2**63}"])


def test_the_cli_says_it_in_one_line(capsys):
    assert main(["config", "lm/llama", "--set", f"task.batch_size={HUGE}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "task.batch_size" in err and "out of range" in err, err


def test_a_tensor_too_large_to_address_is_a_memory_line():
    line, code = describe_error(RuntimeError("Storage size calculation overflowed with sizes=[9223372036854775807]"))
    assert code == 1 and line.startswith("not enough memory for this configuration"), line
