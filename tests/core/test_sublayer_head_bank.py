"""``solver.precond_per_head: true`` is refused when the config loads on every energy sublayer whose energy takes no
per-head preconditioner bank (``DescentConfig.head_bank``; only CEM attention's energy does, Eq. 14). Hyper-SET's,
ET's and CRATE's sublayers (and CEM's MLP) accepted it at load and refused it only when the model was built; the
intrinsic sublayers had a rule of their own."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import energyformer.energies  # noqa: F401 - registers the sublayer kinds
import energyformer.models  # noqa: F401
from energyformer.blocks.registry import ATTENTIONS, MLPS
from energyformer.core.sublayer import DescentConfig
from energyformer.experiment import load_run_config
from energyformer.utils.validate import ConfigError

SUBLAYERS = [(part, name) for part, reg in (("attention", ATTENTIONS), ("mlp", MLPS)) for name in reg.names()
             if issubclass(reg.get(name).config, DescentConfig)]


@pytest.mark.parametrize("part, kind", SUBLAYERS)
def test_a_head_bank_is_refused_at_load_unless_the_energy_takes_one(part, kind):
    cls = (ATTENTIONS if part == "attention" else MLPS).get(kind).config
    data = {"kind": kind, "solver": {"precond": "diagonal", "precond_per_head": True}}
    if cls.head_bank:
        assert cls.model_validate(data).solver.precond_per_head
        return
    with pytest.raises(ValidationError, match=rf"precond_per_head = true: the {kind} sublayer .*allowed: false"):
        cls.model_validate(data)


def test_only_cem_attention_takes_a_head_bank():
    assert sorted(f"{p}.{k}" for p, k in SUBLAYERS
                  if (ATTENTIONS if p == "attention" else MLPS).get(k).config.head_bank) == ["attention.cem"]


@pytest.mark.parametrize("config, key", [("hyperset/sudoku_hyperset", "attention"), ("hyperset/sudoku_hyperset", "mlp"),
                                         ("hyperset/sudoku_et", "attention"), ("hyperset/sudoku_crate", "mlp"),
                                         ("lm/cem_full", "mlp")])
def test_a_run_config_with_a_head_bank_on_such_a_sublayer_does_not_load(config, key):
    with pytest.raises(ConfigError, match=rf"model\.block\.{key}: solver\.precond_per_head = true"):
        load_run_config(config, [f"model.block.{key}.solver.precond_per_head=true"])
