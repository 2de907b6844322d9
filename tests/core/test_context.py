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


@pytest.mark.parametrize("mask", [torch.zeros(2, 3), torch.full((2, 3), float("-inf")), torch.ones(2, 3).long(),
                                  torch.ones(2, 1, 3, dtype=torch.bool), [[True, True, False]]],
                         ids=["additive-zeros", "additive-neginf", "long", "3-d", "list"])
def test_a_mask_that_is_not_a_bool_key_padding_mask_is_refused(mask):
    """Probe AS: the blocks cast ``ctx.mask`` to bool, so an additive 0 / −inf float mask handed to a sublayer came out
    inverted (the real tokens hidden, the padding kept) with no error; the models refused it, their sublayers did
    not. The context now refuses anything but a (B, N) bool mask, in one line."""
    with pytest.raises(ValueError, match=r"ForwardContext mask of .*expected a \(B, N\) torch.bool key-padding mask"):
        ForwardContext(mask=mask)
    assert ForwardContext(mask=torch.ones(2, 3, dtype=torch.bool)).mask.all()
