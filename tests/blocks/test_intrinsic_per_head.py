"""``solver.precond_per_head: true`` on an intrinsic sublayer is refused when the config loads. Their energies act
on the merged (B, N, D) output and take no per-head preconditioner bank (only CEM attention's does). The old
config loaded. The (H, D) bank then broadcast against the sequence axis: a crash at train time after the run
directory was written, or token i scaled by head i's diagonal when N = H. Later the model build refused it, but
the config still loaded."""

from __future__ import annotations

import pytest
import torch

from energyformer.experiment import load_run_config
from energyformer.models import MODELS
from energyformer.utils.validate import ConfigError

BASE = ["model.dim=16", "model.heads=2", "model.n_layers=1"]
ATTENTION = ["mha", "momen_mha", "nag_mha", "mha_tied", "linear_attn", "mha2nd", "mha2nd1st", "mha2nd1st_simple",
             "mha2nd_lite"]


@pytest.mark.parametrize("kind", ATTENTION)
def test_an_intrinsic_attention_refuses_a_head_bank_at_load(kind):
    a = "model.block.attention"
    sets = BASE + [f"{a}={kind}", f"{a}.solver.precond=diagonal", f"{a}.solver.precond_per_head=true"]
    with pytest.raises(ConfigError, match=rf"precond_per_head = true: the {kind} sublayer .*allowed: false"):
        load_run_config("intrinsic/mha", sets)


@pytest.mark.parametrize("config, kind", [("intrinsic/momen_mha", "momen_gelu"), ("intrinsic/nag_mha", "nag_gelu")])
def test_an_intrinsic_ffn_refuses_a_head_bank_at_load(config, kind):
    with pytest.raises(ConfigError, match=rf"precond_per_head = true: the {kind} sublayer"):
        load_run_config(config, BASE + ["model.block.mlp.solver.precond_per_head=true"])


def test_a_shared_preconditioner_still_works_and_cem_keeps_its_bank():
    a = "model.block.attention"
    cfg = load_run_config("intrinsic/mha", BASE + [f"{a}.solver.precond=diagonal"])
    torch.manual_seed(0)
    model = MODELS.build(cfg.model, vocab_size=50).eval()
    assert model(torch.randint(0, 50, (1, 1))).logits.shape == (1, 1, 50)  # a bank made this (1, 2, 50)
    cem = load_run_config("lm/cem_full", ["model.dim=32", "model.heads=2", "model.n_layers=1"])
    assert cem.model.block.attention.solver.precond_per_head
