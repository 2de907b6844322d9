"""The dtype a product runs in under autocast (shared by layers that step outside autocast on purpose)."""

from __future__ import annotations

import contextlib

import torch


def autocast_dtype(dtype: torch.dtype, device_type: str) -> torch.dtype:
    """The dtype autocast would run a matmul of ``dtype`` operands in on ``device_type``: the autocast dtype
    while autocast is on there, except for float64, which autocast leaves alone; otherwise ``dtype``."""
    if dtype != torch.float64 and torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return dtype


def autocast_off(device_type: str) -> contextlib.AbstractContextManager:
    """``torch.autocast(device_type, enabled=False)`` while autocast is on there, else a no-op context: entering
    the autocast context costs about as much host time as a small kernel, paid per call on hot paths."""
    if torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()
