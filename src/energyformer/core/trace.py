"""Per-step records of a descent run (DESIGN.md "Trace").

Tracing is off by default and then costs nothing: solvers only build a :class:`Trace` when asked.
When on, every block of a model adds its trace to one :class:`Traces` mapping keyed by the
block's qualified name, so a whole model's descent can be plotted from one object.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


def _at_least_fp32(t: Tensor) -> Tensor:
    """Upcast bf16/fp16 records; keep float64 ones (a float32 copy would hide small energy drops)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


@dataclass
class Trace:
    """What one block's solver did.

    energy:    (steps + 1, B, N) per-token energy at each iterate, detached (index 0 = start).
    step_norm: (steps, B, N) per-token norm of each update ``x_{t+1} - x_t``.
    steps:     number of steps actually taken (may be < requested when a tolerance stops early).
    exact:     whether each update was exactly ``-eta * P * grad`` of the traced energy.
    """

    energy: list[Tensor] = field(default_factory=list)
    step_norm: list[Tensor] = field(default_factory=list)
    exact: bool = True

    @property
    def steps(self) -> int:
        return len(self.step_norm)

    def add_energy(self, e: Tensor) -> None:
        self.energy.append(_at_least_fp32(e.detach()))

    def add_step(self, dx: Tensor) -> None:
        self.step_norm.append(_at_least_fp32(dx.detach()).norm(dim=-1))

    def mean_energy(self) -> list[float]:
        """Mean energy over batch and tokens at each iterate (for plotting)."""
        return [float(e.mean()) for e in self.energy]

    def mean_step_norm(self) -> list[float]:
        return [float(s.mean()) for s in self.step_norm]

    def energy_tensor(self) -> Tensor:
        """(steps + 1, B, N) stacked energies."""
        return torch.stack(self.energy)


class Traces(dict):
    """Ordered mapping ``block name -> Trace`` for a whole model (like x-transformers' intermediates)."""

    def summary(self) -> dict[str, dict[str, list[float]]]:
        return {k: {"energy": v.mean_energy(), "step_norm": v.mean_step_norm()} for k, v in self.items()}
