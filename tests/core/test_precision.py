"""core/precision.py: the autocast dtype of a product, and the autocast-off context entered only where needed."""

import contextlib

import torch

from energyformer.core.precision import autocast_dtype, autocast_off


def test_autocast_dtype_follows_autocast_but_not_float64():
    assert autocast_dtype(torch.float32, "cpu") == torch.float32
    with torch.autocast("cpu", torch.bfloat16):
        assert autocast_dtype(torch.float32, "cpu") == torch.bfloat16
        assert autocast_dtype(torch.float64, "cpu") == torch.float64


def test_autocast_off_turns_autocast_off_only_where_it_is_on():
    assert isinstance(autocast_off("cpu"), contextlib.nullcontext)
    x = torch.randn(4, 4)
    with torch.autocast("cpu", torch.bfloat16):
        assert (x @ x).dtype == torch.bfloat16
        with autocast_off("cpu"):
            assert not torch.is_autocast_enabled("cpu")
            assert (x @ x).dtype == torch.float32
        assert torch.is_autocast_enabled("cpu")
