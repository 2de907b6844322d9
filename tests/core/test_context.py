"""``block(x, ctx)`` with something other than a ForwardContext as ``ctx`` is a one-line TypeError naming the
block (before: "Boolean value of Tensor with more than one value is ambiguous" from deep in the forward)."""

import pytest
import torch
from torch import nn

from energyformer.core import EnergyBlock, ForwardContext, GradientDescent
from energyformer.core.context import context_or_new
from energyformer.energies.hopfield import HopfieldEnergy


def test_a_tensor_as_ctx_is_a_clear_error():
    block = EnergyBlock(HopfieldEnergy(8, 16), GradientDescent(step_size=0.5), steps=2, norm=nn.LayerNorm(8))
    x = torch.randn(2, 3, 8)
    assert block(x).shape == x.shape and block(x, ForwardContext()).shape == x.shape
    with pytest.raises(TypeError, match=r"EnergyBlock\(x, ctx\): ctx must be a ForwardContext or None, not Tensor"):
        block(x, torch.randn(2, 3, 8))


def test_context_or_new():
    ctx = ForwardContext()
    assert context_or_new(ctx, "b") is ctx and isinstance(context_or_new(None, "b"), ForwardContext)
    with pytest.raises(TypeError, match="not int"):
        context_or_new(3, "b")
