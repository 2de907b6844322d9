"""The dtype a product runs in under autocast (shared by layers that step outside autocast on purpose)."""

from __future__ import annotations

import torch


def autocast_dtype(dtype: torch.dtype, device_type: str) -> torch.dtype:
    """The dtype autocast would run a matmul of ``dtype`` operands in on ``device_type``: the autocast dtype
    while autocast is on there, except for float64, which autocast leaves alone; otherwise ``dtype``."""
    if dtype != torch.float64 and torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return dtype
