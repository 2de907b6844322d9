"""A per-head preconditioner bank (``solver.precond_per_head``) goes only to an energy that takes one (CEM
attention's interaction energy, Eq. 14). The intrinsic attention kinds accepted it and then applied the (H, D)
bank to (B, N, D) tensors: a crash at train time where N ≠ H, token i scaled by head i's diagonal where N = H,
and a one-token input came back H tokens long."""

from __future__ import annotations

import pytest
import torch

from energyformer.core import EnergyBlock, GradientDescent, make_preconditioner
from energyformer.energies import ElementwiseEnergy
from energyformer.energies.interaction import InteractionEnergy
from energyformer.models import MODELS
from energyformer.utils.validate import ConfigError


def test_an_energy_without_a_head_bank_refuses_one():
    assert InteractionEnergy.head_bank and not ElementwiseEnergy.head_bank
    bank = make_preconditioner("diagonal", 8, None, 2)
    with pytest.raises(ConfigError, match=r"precond_per_head = true: the ElementwiseEnergy energy .*allowed: false"):
        EnergyBlock(ElementwiseEnergy(8, 16), GradientDescent(bank, 0.5), 1)
    EnergyBlock(ElementwiseEnergy(8, 16), GradientDescent(make_preconditioner("diagonal", 8, None, None), 0.5), 1)


@pytest.mark.parametrize("kind", ["mha", "momen_mha", "linear_attn", "mha_tied"])
def test_intrinsic_attention_with_a_head_bank_is_refused_at_build(kind):
    from energyformer.experiment import load_run_config

    attn = "model.block.attention"
    with pytest.raises(ConfigError, match="precond_per_head = true"):  # at load (blocks/intrinsic.py), else build
        cfg = load_run_config("intrinsic/mha", ["model.dim=16", "model.heads=2", "model.n_layers=1",
                                                f"{attn}={kind}", f"{attn}.solver.precond=diagonal",
                                                f"{attn}.solver.precond_per_head=true"])
        MODELS.build(cfg.model, vocab_size=50)


def test_cem_attention_keeps_its_head_bank():
    from energyformer.experiment import load_run_config

    cfg = load_run_config("lm/cem_full", ["model.dim=32", "model.heads=2", "model.n_layers=1"])
    model = MODELS.build(cfg.model, vocab_size=50)
    banks = [m.solver.precond.heads for m in model.modules() if isinstance(m, EnergyBlock)
             and isinstance(m.energy, InteractionEnergy)]
    assert banks == [2]
    assert model(torch.randint(0, 50, (1, 5))).logits.shape == (1, 5, 50)
