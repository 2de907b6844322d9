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


@pytest.mark.parametrize("x,says", [
    (torch.randn(3, 8), r"x of shape \(3, 8\) and dtype torch.float32: expected token states \(B, N, D\)"),
    (torch.randn(2, 0, 8), r"x of shape \(2, 0, 8\)"),
    (torch.ones(2, 3, 8, dtype=torch.long), r"x of shape \(2, 3, 8\) and dtype torch.int64"),
    (torch.randn(1, 2, 3, 8), r"x of shape \(1, 2, 3, 8\)")], ids=["2-d", "no-tokens", "long", "4-d"])
def test_an_energy_block_called_directly_names_a_bad_input(x, says):
    """Probe AS: sublayers called directly with another rank, no tokens or an integer dtype failed deep inside
    (einops, torch.cat of an empty list, amax); the models check their inputs first, the blocks now do too."""
    block = EnergyBlock(HopfieldEnergy(8, 16), GradientDescent(step_size=0.5), steps=2, norm=nn.LayerNorm(8))
    with pytest.raises(ValueError, match=r"EnergyBlock: " + says):
        block(x)
    with pytest.raises(ValueError, match=r"EnergyBlock: ctx.mask of shape \(2, 4\): expected the tokens' \(B, N\) = "
                                         r"\(2, 3\)"):
        block(torch.randn(2, 3, 8), ForwardContext(mask=torch.ones(2, 4, dtype=torch.bool)))
