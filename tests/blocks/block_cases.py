"""Helpers shared by the block tests."""

from __future__ import annotations

import torch
from torch import nn


def randomise(m: nn.Module, seed: int) -> nn.Module:
    """Add N(0, 0.3²) noise (generator seeded with ``seed``) to every parameter, in place: zero-initialised
    parts (step-size networks, preconditioner factors, biases) leave their initial values, so every term acts."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)
    return m
