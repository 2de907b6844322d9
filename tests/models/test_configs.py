"""Every configs/lm/*.yaml model section is a valid ``transformer`` model in the new layout."""

from pathlib import Path

import pytest

from energyformer.models import CausalLM, ModelConfig
from energyformer.utils.config import load_config, read_yaml

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs" / "lm").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_lm_config_model_section_loads_and_builds(path):
    data = read_yaml(path)
    cfg = load_config(ModelConfig, data.get("model", {}))
    m = CausalLM(cfg)
    assert m.layers[0].attn.part == "attention" and m.layers[0].mlp.part == "mlp"


def test_the_seed_variants_read_as_intended():
    load = lambda name: load_config(ModelConfig, read_yaml(CONFIGS[0].parent / f"{name}.yaml")["model"])  # noqa: E731
    full = load("cem_full")
    assert (full.block.attention.kind, full.block.attention.steps, full.block.attention.solver.precond) == ("cem", 2, "diag_low_rank")
    assert (full.block.mlp.kind, full.block.mlp.steps, full.block.mlp.solver.precond) == ("cem", 2, "diag_low_rank")
    gpt = load("gpt")
    assert (gpt.block.attention.kind, gpt.block.mlp.kind, gpt.block.dropout, gpt.hidden) == ("gpt", "gelu", 0.1, 512)
    assert load("llama").hidden == 352 and load("cem_mlp_t1_param_matched").hidden == 528
    assert load("attn_plain_reuse").block.attn_reuse == 2 and load("cem_kq_none").block.attention.diagonal == "none"
