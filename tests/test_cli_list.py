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


def _rows(capsys, *what):
    assert main(["list", *what]) == 0
    return {line.split()[0]: line.split(None, 1)[1] if len(line.split()) > 1 else ""
            for line in capsys.readouterr().out.splitlines()}


def test_list_without_what_lists_the_configs(capsys):
    assert "lm/llama" in _rows(capsys) and "energies" not in _rows(capsys)


def test_a_configs_description_is_its_first_comment_line_without_the_hash(capsys):
    rows = _rows(capsys, "configs")
    assert rows["lm/llama"].startswith("Llama baseline: "), rows["lm/llama"]
    assert not any(text.startswith("#") for text in rows.values())


def test_reproductions_are_listed_with_their_description(capsys):
    from energyformer.reproduce import REPRODUCTIONS

    rows = _rows(capsys, "reproductions")
    assert set(rows) == set(REPRODUCTIONS)
    assert rows["eqt"] == REPRODUCTIONS["eqt"].description and "energyformer.studies" not in "".join(rows.values())


def test_the_tasks_descriptions_start_in_one_column(capsys):
    """The model kinds are one column as wide as its longest entry (a task building three kinds pushed its
    description out of line)."""
    from energyformer.tasks import TASKS

    assert main(["list", "tasks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    starts = {line.index(TASKS.entries[line.split()[0]].doc) for line in lines}
    assert len(lines) == len(TASKS.entries) and len(starts) == 1, lines


def test_tasks_name_the_model_kinds_they_build(capsys):
    rows = _rows(capsys, "tasks")
    assert rows["gp"].startswith("models: regressor ") and rows["parity"].startswith("models: transformer, equilibrium")


def test_a_registered_name_is_listed_once_with_its_own_description(capsys):
    rows = _rows(capsys, "norms")
    assert {"rms", "layer"} <= set(rows) and "gd" not in rows


def test_a_reproduction_name_is_registered_once():
    from energyformer.reproduce import REPRODUCTIONS, register_reproduction

    before = dict(REPRODUCTIONS)
    with pytest.raises(ValueError, match=r"^reproduction 'eqt' is already registered \(energyformer\.studies\.command\)$"):
        register_reproduction("eqt", "my.module", "another")
    assert REPRODUCTIONS == before
