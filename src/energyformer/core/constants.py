"""Fixed numbers (temperatures, √d_h, ALiBi slopes) that are exact in every dtype.

A fixed temperature stored as a float32 buffer keeps float32's rounding when the module is moved to
float64 (``.double()`` converts the rounded value): T = 0.7 becomes 0.7 − 1.2e-8, √32 is off by 9.7e-8,
so a float64 reference is no longer the same model (issue 23). :class:`ExactConstant` remembers the
Python floats and, after every dtype or device conversion of its module (``.to``, ``.double``,
``.half``, ``.cuda``, ``to_empty``), refills its buffer from them: the value in a dtype is the
correctly rounded number, never a rounding of a rounding. :class:`ExactTable` does the same for a
computed table (sinusoidal positions, the step network's time frequencies): a float64 function of
its shape, re-evaluated after a conversion, so a float64 model holds the float64 table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn


class ExactConstant(nn.Module):
    """A non-persistent (not in the state dict) buffer ``value`` of fixed numbers, shape ``shape``
    (default: ``(len(values),)``), re-derived from the exact Python floats after every conversion.

    ``forward()`` returns it; ``values`` are the numbers as given (float64 precision)."""

    def __init__(self, values: Sequence[float], shape: Sequence[int] | None = None,
                 dtype: torch.dtype | None = None):
        super().__init__()
        self.values = tuple(float(v) for v in values)
        self.shape = tuple(shape) if shape is not None else (len(self.values),)
        self.register_buffer("value", self._fill(dtype or torch.get_default_dtype(), None), persistent=False)

    def _fill(self, dtype: torch.dtype, device) -> Tensor:
        if dtype.is_floating_point:  # on the CPU even inside a device context (Hugging Face's meta-device init)
            cpu = torch.tensor(self.values, dtype=torch.float64, device="cpu")
            self._rounded = tuple(cpu.to(dtype).tolist())
        return torch.tensor(self.values, dtype=torch.float64).reshape(self.shape).to(dtype=dtype, device=device)

    def _apply(self, fn, recurse: bool = True):
        # the conversion is learnt from an empty probe, never applied to the old value: a value on the
        # meta device (a model built by Hugging Face's from_pretrained) has no data to copy out
        v = self.value
        probe = fn(torch.empty(0, dtype=v.dtype, device="cpu" if v.is_meta else v.device))
        self.value = self._fill(probe.dtype, probe.device) if probe.is_floating_point() else probe
        return self

    def forward(self) -> Tensor:
        return self.value

    def rounded(self) -> tuple[float, ...]:
        """The numbers as the buffer holds them (rounded to its dtype) as Python floats, worked out on the
        CPU whenever the buffer is filled: ``value.tolist()`` of a buffer on a GPU waits for the device, on
        every call."""
        return self._rounded

    def extra_repr(self) -> str:
        return f"values={self.values if len(self.values) <= 4 else self.values[:4] + ('...',)}"


class ExactTable(ExactConstant):
    """An :class:`ExactConstant` whose numbers come from ``make()`` (a float64 tensor, computed again
    after every conversion instead of being stored as Python floats: tables of any size).
    ``make`` must be picklable (a module-level function or a ``functools.partial`` of one)."""

    def __init__(self, make: Callable[[], Tensor], dtype: torch.dtype | None = None):
        nn.Module.__init__(self)
        self.make = make
        self.register_buffer("value", self._fill(dtype or torch.get_default_dtype(), None), persistent=False)

    def _fill(self, dtype: torch.dtype, device) -> Tensor:
        v = self.make()
        if v.dtype != torch.float64:
            raise TypeError(f"ExactTable: make() returned {v.dtype}; it must compute in float64")
        return v.to(dtype=dtype, device=device)

    def extra_repr(self) -> str:
        return f"shape={tuple(self.value.shape)}"
