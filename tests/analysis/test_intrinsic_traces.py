"""Depth traces: per-layer free energy before/after each sublayer and the carried velocity norm."""

import math

import torch

from energyformer.analysis.intrinsic_traces import depth_traces
from energyformer.models.lm import CausalLM, ModelConfig


def _model(att, mlp="gelu", layers=3):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=40, dim=16, n_layers=layers, heads=2, positions="learned", final_norm="layer",
                      block={"attention": att, "mlp": mlp})
    return CausalLM(cfg)


def test_momentum_traces_have_one_velocity_per_sublayer():
    tr = depth_traces(_model("momen_mha", "momen_gelu"), torch.randint(0, 40, (2, 10)))
    assert len(tr["before"]) == len(tr["after_attn"]) == len(tr["after_ffn"]) == 3
    assert len(tr["velocity"]) == 6 and all(v > 0 for v in tr["velocity"])
    assert all(math.isfinite(x) for k in ("before", "after_attn", "after_ffn") for x in tr[k])
    assert depth_traces(_model("mha"), torch.randint(0, 40, (2, 10)))["velocity"] == []


def test_an_exact_small_step_lowers_each_layers_free_energy():
    """Tied MHA without the norm in the loop is exact GD on F(x | LN(context)): the trace must show
    F_l going down across the attention sublayer (a check of the trace, which can fail)."""
    m = _model({"kind": "mha_tied", "norm": {"in_loop": False}, "form": "elastic", "step_size": 0.05,
                "learn_step_size": False})
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3)
    tr = depth_traces(m, torch.randint(0, 40, (2, 10)))
    assert all(a < b for a, b in zip(tr["after_attn"], tr["before"]))


def test_traces_follow_their_definition_and_leave_the_mode():
    """Outside-probe mutants that survived: the context taken from the state after attention, the velocity norm
    over the whole batch (it grew with the batch), the training mode left at eval."""
    m = _model("momen_mha", "momen_gelu", layers=2)
    idx = torch.randint(0, 40, (2, 10))
    seen = {}
    h = m.layers[0].attn.register_forward_pre_hook(lambda mod, args: seen.update(x=args[0]))  # (returns None)
    m.train()
    tr = depth_traces(m, idx)
    h.remove()
    assert m.training
    attn = m.layers[0].attn
    u = attn.norm(seen["x"])
    assert math.isclose(tr["before"][0], float(attn.energy.energy(u, attn.energy.prepare(u)).mean()), rel_tol=1e-6)
    twice = depth_traces(m, torch.cat([idx, idx]))
    assert all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(tr["velocity"], twice["velocity"]))
