"""What a checkpoint may hold: the state saved beside the weights made of tensors and plain values only
(:func:`check_plain`, so ``torch.load(weights_only=True)`` reads it back), and the names of the tensors that
hold NaN or inf (:func:`nonfinite_tensors`, refused when saving and reported when verifying). Used by
:mod:`energyformer.train.checkpoint`."""

from __future__ import annotations

from typing import Any

import torch

_ALLOWED_LEAVES = (bool, int, float, str, bytes, type(None), torch.Tensor, torch.dtype, torch.device,
                   torch.Size)


def check_plain(obj: Any, where: str = "state") -> None:
    """Raise TypeError unless ``obj`` is made of dicts/lists/tuples of tensors and plain values.

    ``state.pt`` is read with ``torch.load(weights_only=True)``, which refuses other objects (for
    example NumPy arrays); this check makes the mistake visible when saving, not when resuming.
    """
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, (str, int, float, bool, type(None))):
                raise TypeError(f"{where}: key {k!r} of type {type(k).__name__} cannot be saved")
            check_plain(v, f"{where}[{k!r}]")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            check_plain(v, f"{where}[{i}]")
    elif not isinstance(obj, _ALLOWED_LEAVES):
        raise TypeError(
            f"{where} is a {type(obj).__module__}.{type(obj).__name__}; checkpoint state may only "
            "hold tensors, numbers, strings, None and dicts/lists/tuples of them "
            "(convert NumPy arrays with torch.from_numpy)"
        )


def nonfinite_tensors(obj: Any, prefix: str = "") -> list[str]:
    """Names of floating-point tensors in ``obj`` (a module's state, an optimizer state, nested
    dicts/lists) that hold NaN or inf. Empty when everything is finite."""
    bad: list[str] = []
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point() and obj.numel() and not bool(torch.isfinite(obj).all()):
            bad.append(prefix or "tensor")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            bad += nonfinite_tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            bad += nonfinite_tensors(v, f"{prefix}[{i}]")
    return bad
