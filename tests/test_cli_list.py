"""``energyformer list WHAT`` is one registry lookup per WHAT; every listing names its registry's kinds."""

import pytest

from energyformer.cli import main
from energyformer.cli_list import LIST_CHOICES, listings


def test_every_choice_is_a_listing():
    assert set(LIST_CHOICES) == set(listings()) | {"keys"}


@pytest.mark.parametrize("what,kinds", [
    ("preconditioners", ["identity", "diagonal", "diag_low_rank"]),
    ("tokenizers", ["bpe", "gpt2", "llama", "bytes"]),
    ("positions", ["none", "learned", "sinusoidal"]),
    ("step_sizes", ["fixed", "learned", "per_iteration", "network"]),
    ("solvers", ["gd", "momentum", "nesterov", "proximal", "ista", "sphere"]),
    ("backward_modes", ["unroll", "truncated", "implicit"]),
    ("norms", ["rms", "layer", "energy_layer", "none"]),
    ("attentions", ["llama", "cem", "hyperset"]),
    ("models", ["transformer", "vision", "masked_vision", "regressor"]),
])
def test_list_prints_the_registered_kinds(what, kinds, capsys):
    assert main(["list", what]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert set(kinds) <= set(names), names
