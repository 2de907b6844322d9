import pytest
import torch

from energyformer.analysis.traces import energy_drops, plot_traces
from energyformer.blocks.cem import CEMAttentionConfig, CEMMLPConfig
from energyformer.blocks.layer import BlockConfig
from energyformer.core import Traces
from energyformer.models.lm import CausalLM, ModelConfig


def test_small_steps_descend_every_block_and_plot(tmp_path):
    torch.manual_seed(0)
    cfg = BlockConfig(attention=CEMAttentionConfig(steps=4, step_size=0.02, norm={"in_loop": False}),
                      mlp=CEMMLPConfig(steps=4, step_size=0.02, norm={"in_loop": False}))
    m = CausalLM(ModelConfig(vocab_size=40, dim=32, n_layers=2, heads=4, block=cfg)).double()
    out = m(torch.randint(0, 40, (2, 12)), trace=True)
    drops = energy_drops(out.traces)
    assert len(drops) == 4 and all(d < 0 for d in drops.values()), drops
    p = plot_traces(out.traces, tmp_path / "t.png")
    assert p.stat().st_size > 1000
    with pytest.raises(ValueError, match="no traces"):
        plot_traces(Traces(), tmp_path / "empty.png")


def test_iterated_model_traces_are_plotted_per_block_and_iteration(tmp_path):
    from energyformer.analysis.traces import block_name, trace_label

    torch.manual_seed(0)
    cfg = BlockConfig(attention=CEMAttentionConfig(steps=3, step_size=0.02, norm={"in_loop": False}), mlp="swiglu")
    m = CausalLM(ModelConfig(vocab_size=40, dim=32, n_layers=1, heads=4, iterations=3, block=cfg)).double()
    out = m(torch.randint(0, 40, (2, 12)), trace=True)
    drops = energy_drops(out.traces)
    assert list(drops) == [("layers.0.attn", 0), ("layers.0.attn", 1), ("layers.0.attn", 2)]
    assert all(d < 0 for d in drops.values()), drops
    assert [trace_label(k) for k in drops] == ["layers.0.attn", "layers.0.attn @1", "layers.0.attn @2"]
    assert {block_name(k) for k in drops} == {"layers.0.attn"}
    assert plot_traces(out.traces, tmp_path / "it.png").stat().st_size > 1000
