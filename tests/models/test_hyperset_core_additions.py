"""The backward-compatible core additions made for Hyper-SET: ``ForwardContext.embedded`` (set by the
layer stack), ``NetworkStepSize(groups=k)`` and the ``after_model_init`` hook of ``TokenModel``."""

import torch
from torch import nn

from energyformer.core.context import ForwardContext
from energyformer.core.stepsize import NetworkStepSize
from energyformer.models import MODELS, ModelConfig
from energyformer.models.backbone import LayerStack


class _Spy(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, x, ctx):
        self.seen.append(ctx.embedded)
        return x + 1


def test_layer_stack_exposes_its_input_to_every_pass():
    spy = _Spy()
    x = torch.randn(2, 3, 4)
    ctx = ForwardContext()
    LayerStack([spy], iterations=3)(x, ctx)
    assert len(spy.seen) == 3 and all(e is x for e in spy.seen)


def test_network_groups_output_width_and_zero_start():
    net = NetworkStepSize(8, embed_dim=16, groups=2, zero_init="all")
    eta = net(3, torch.randn(2, 5, 8), torch.randn(2, 5, 8))
    assert eta.shape == (2, 5, 16) and float(eta.abs().max()) == 0.0
    assert NetworkStepSize(8, embed_dim=16, groups=3, output="scalar")(0, torch.randn(1, 2, 8), None).shape == (1, 2, 3)


def test_token_model_keeps_zero_initialised_networks_zero():
    """Before the hook, TokenModel's N(0, 0.02²) init overwrote the zero-initialised step-size network."""
    cfg = ModelConfig.model_validate(dict(vocab_size=10, dim=16, heads=2, n_layers=1, causal=False,
                                          block={"attention": "hyperset", "mlp": "hyperset"}))
    m = MODELS.build(cfg, n_out=4)
    net = m.layers[0].attn.step
    for lin in (net.time_in, net.time_out, net.out):
        assert float(lin.weight.detach().abs().max()) == 0.0 and float(lin.bias.detach().abs().max()) == 0.0
    assert float(m.layers[0].attn.energy.proj.weight.detach().std()) > 0.01  # ordinary weights still initialised
