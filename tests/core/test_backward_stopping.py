"""``backward: truncated`` with a stopping rule is refused when the run starts too, not only when the Solver is
built: a ``tol`` (or a truncated backward) assigned to a built solver used to run, every token stopped inside the
untracked prefix (fixed at steps − k before the run) and the parameters got zero gradient, silently."""

from __future__ import annotations

import pytest
import torch

from energyformer.core import GradientDescent
from energyformer.core.backward import Truncated
from energyformer.core.energy import Energy
from energyformer.utils.validate import ConfigError

DT = torch.float64


class _Quadratic(Energy):
    """E_i = ½‖x_i‖² − x_i · (h_i W): converges to h W in a few GD steps (η 0.5)."""

    def __init__(self):
        super().__init__()
        self.W = torch.nn.Parameter(torch.randn(3, 3, dtype=DT, generator=torch.Generator().manual_seed(0)) * 0.5)

    def prepare(self, h, **kwargs):
        return h @ self.W

    def energy(self, x, st):
        return 0.5 * (x * x).sum(-1) - (x * st).sum(-1)


@pytest.mark.parametrize("late", ["tol", "backward"])
def test_a_stopping_rule_set_after_construction_is_refused_at_run(late):
    energy = _Quadratic()
    g = torch.Generator().manual_seed(1)
    h, x0 = torch.randn(1, 2, 3, dtype=DT, generator=g), torch.randn(1, 2, 3, dtype=DT, generator=g)
    if late == "tol":
        solver = GradientDescent(None, 0.5, backward="truncated", truncate=3)
        solver.tol = 1e-6
    else:
        solver = GradientDescent(None, 0.5, tol=1e-6)
        solver.backward = Truncated(3)
    with pytest.raises(ConfigError, match=r"backward = truncated \(k 3\) with tol = 1e-06: .*untracked prefix"):
        solver.run(energy, x0, energy.prepare(h), 60)
