"""TransformerLayer hands its input to the context (mutation probe AI)."""

import torch

from energyformer.blocks.layer import BlockConfig, TransformerLayer
from energyformer.blocks.registry import SublayerSpec
from energyformer.core.context import ForwardContext


def test_layer_input_is_the_layers_input_for_both_sublayers():
    # Pins ``ctx.layer_input = x``: step sizes with condition 'layer' (Hyper-SET's shared network, whose γ
    # group serves the MLP) read it; unset, they silently fall back to the MLP's own start point (the
    # attention's output). Dropping the line survived tests/blocks and tests/models' fast files.
    layer = TransformerLayer(BlockConfig(), SublayerSpec(dim=8, heads=2, causal=True))
    seen = []
    layer.mlp.register_forward_pre_hook(lambda mod, args: seen.append(args[1].layer_input))
    x, ctx = torch.randn(1, 3, 8), ForwardContext()
    layer(x, ctx)
    assert seen and seen[0] is x
