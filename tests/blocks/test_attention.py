"""blocks/attention.py: rotary tables in the model's precision."""
from __future__ import annotations

import math

import torch

from energyformer.blocks.attention import rope_cos_sin


def test_rope_angles_are_float64_for_a_float64_model():
    """a float64 model's tables are float64's cos/sin of the exact angle (float32 angles are off by up to half an
    ulp of the angle: 2.4e-4 rad at position 4,096); lower precisions keep float32 angles, as Llama's code does"""
    pos = torch.tensor([0, 1, 17, 4095, 4096])
    cos, sin = rope_cos_sin(pos, 8, 10000.0, torch.float64)
    want = torch.tensor([[math.cos(p / 10000.0 ** (i / 8)) for i in range(0, 8, 2)] for p in pos.tolist()],
                        dtype=torch.float64)
    assert cos.dtype == torch.float64
    torch.testing.assert_close(cos, want, rtol=0, atol=1e-12)
    torch.testing.assert_close(sin, torch.tensor([[math.sin(p / 10000.0 ** (i / 8)) for i in range(0, 8, 2)]
                                                  for p in pos.tolist()], dtype=torch.float64), rtol=0, atol=1e-12)
    c32, _ = rope_cos_sin(pos, 8, 10000.0, torch.float32)
    inv = 1.0 / 10000.0 ** (torch.arange(0, 8, 2, dtype=torch.float32) / 8)
    assert torch.equal(c32, (pos.float()[:, None] * inv[None, :]).cos())
    cb, _ = rope_cos_sin(pos, 8, 10000.0, torch.bfloat16)
    assert cb.dtype == torch.bfloat16 and torch.equal(cb, c32.to(torch.bfloat16))
