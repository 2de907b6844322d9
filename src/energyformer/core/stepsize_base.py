"""The step-size base class and registry (DESIGN.md core table: "step-size modules").

The kinds are in :mod:`energyformer.core.stepsize` (fixed, learned, per-iteration) and
:mod:`energyformer.core.stepsize_network` (network); import them from there or from :mod:`energyformer.core`.
"""

from __future__ import annotations

from torch import Tensor, nn

from ..utils.config import Registry

#: Registry of step-size kinds: name -> (config class, builder ``(cfg, dim) -> StepSize``).
STEP_SIZES = Registry("step size")



class StepSize(nn.Module):
    """Base class: ``forward(index, x0, x)`` gives the step size of step ``index``.

    ``exact`` is True when the value is one positive scalar for every token and channel, so that a
    step ``eta * (-P grad)`` is still an exact (preconditioned) gradient step.
    """

    exact: bool = True
    needs_context: bool = False  # called with ctx= (the forward context) when True

    def forward(self, index: int, x0: Tensor, x: Tensor) -> Tensor | float:  # pragma: no cover
        raise NotImplementedError

    def check_index(self, last: int, *, iteration: int = 0, steps: int = 1) -> None:
        """Raise a clear error if step index ``last`` is not supported (checked before a run)."""
