"""The core refactor (issue 7) must not change what a model computes.

``tests/fixtures/refactor_logits.safetensors`` holds, for four tiny fixed-seed models (Llama, GPT-2,
full CEM T=2 with diagonal + low-rank preconditioners, CEM attention with a per-head diagonal), their
float64 weights (perturbed so that zero-initialised parts matter) and logits, written by
``tests/fixtures/make_refactor_logits.py`` from the code before the refactor (commit 3decd96).
Today's code must load the same weights and give the same logits. One deliberate change since: Llama's RoPE
angles are formed in float64 for a float64 model (``blocks.attention.rope_cos_sin``), which moved its logits by
3.7e-9; they were stored again then, the weights kept.
"""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from energyformer.blocks.cem import CEMAttentionConfig, CEMMLPConfig
from energyformer.blocks.layer import BlockConfig
from energyformer.models.lm import CausalLM, ModelConfig

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "refactor_logits.safetensors"

VARIANTS = {
    "llama": dict(block=BlockConfig()),
    "gpt": dict(block=BlockConfig(attention="gpt", mlp="gelu", dropout=0.0), positions="learned",
                final_norm="layer"),
    "cem_full": dict(block=BlockConfig(
        attention=CEMAttentionConfig(steps=2, precond="diag_low_rank"),
        mlp=CEMMLPConfig(steps=2, precond="diag_low_rank"))),
    "cem_attn_per_head": dict(block=BlockConfig(
        attention=CEMAttentionConfig(steps=1, diagonal="per_head", precond="diagonal"))),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_logits_unchanged_by_refactor(name):
    data = load_file(FIXTURE)
    model = CausalLM(ModelConfig(vocab_size=64, dim=32, n_layers=2, heads=4, max_seq_len=16,
                                 **VARIANTS[name])).double().eval()
    prefix = f"{name}/param/"
    state = {k[len(prefix):]: v for k, v in data.items() if k.startswith(prefix)}
    model.load_state_dict(state, strict=True)
    with torch.no_grad():
        logits = model(data["idx"]).logits
    torch.testing.assert_close(logits, data[f"{name}/logits"], rtol=0, atol=1e-12)
