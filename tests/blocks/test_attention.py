"""blocks/attention.py: rotary tables in the model's precision."""
from __future__ import annotations

import math

import torch

from energyformer.blocks.attention import rope_cos_sin


def test_rope_tables_are_the_exact_angles_rounded_once_in_every_precision():
    """the tables are float64's cos/sin of the exact angle, rounded once to the model's dtype: float32 angles (as
    Llama's code forms them) are off by up to half an ulp of the angle, 2.4e-4 rad at position 4,096 and 6e-3 at
    10^5, which a float32 model carried into its logits, growing with the position (found by an outside probe)"""
    pos = torch.tensor([0, 1, 17, 4095, 4096, 100_000, 1_000_000])
    want_cos = torch.tensor([[math.cos(p / 10000.0 ** (i / 8)) for i in range(0, 8, 2)] for p in pos.tolist()],
                            dtype=torch.float64)
    want_sin = torch.tensor([[math.sin(p / 10000.0 ** (i / 8)) for i in range(0, 8, 2)] for p in pos.tolist()],
                            dtype=torch.float64)
    cos, sin = rope_cos_sin(pos, 8, 10000.0, torch.float64)
    assert cos.dtype == torch.float64
    torch.testing.assert_close(cos, want_cos, rtol=0, atol=1e-9)
    torch.testing.assert_close(sin, want_sin, rtol=0, atol=1e-9)
    for dtype in (torch.float32, torch.bfloat16):
        c, s = rope_cos_sin(pos, 8, 10000.0, dtype)
        assert c.dtype == dtype and torch.equal(c, want_cos.to(dtype)) and torch.equal(s, want_sin.to(dtype))
