"""Backward modes: how gradients flow through a solver run (DESIGN.md core table; torchdeq
``core.py`` names the same choice "unrolled / phantom / implicit gradients").

A mode receives the run's :class:`Descent` (the shared loop, see :mod:`energyformer.core.solver`)
and decides which steps build an autograd graph:

``unroll``     every step builds its graph: exact gradients of the T-step map (default).
``truncated``  the first ``T - k`` steps run under ``torch.no_grad()``; only the last ``k`` steps
               build a graph. The displacement of the graph-free prefix is treated as a constant,
               the block's input path is kept:

                   x_{T-k} = x_0 + stopgrad(x_{T-k} - x_0)

               so d x_{T-k} / d x_0 = I (the residual stream still carries gradient to earlier
               layers) and parameters get gradient only from the last k steps. State updated
               by the step rule in the prefix (momentum velocity) has no graph either.

``implicit``   the run goes to (near) a fixed point without a graph; the gradient comes from the
               implicit function theorem, (I − Jᵀ) v = g solved by conjugate gradient or a damped
               fixed-point iteration (:mod:`energyformer.core.implicit`, :class:`Implicit`;
               non-convergence is reported). The forward value equals the unrolled one.

Options of a mode are constructor arguments (``Implicit(method='fixed_point', max_iter=...)``);
:func:`make_backward_mode` builds a mode by name with its defaults. A new mode subclasses
:class:`BackwardMode` and registers with :func:`register_backward_mode`; the loop exposes
``descent.descend`` (steps with the stopping rules) and ``descent.step`` (the bare one-step map).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..utils.validate import ConfigError, check_int

if TYPE_CHECKING:  # pragma: no cover
    from .solver import Descent

#: Registry of backward modes by name.
BACKWARD_MODES: dict[str, type[BackwardMode]] = {}


def register_backward_mode(name: str):
    """Class decorator adding a :class:`BackwardMode` to :data:`BACKWARD_MODES` (names are unique)."""

    def deco(cls):
        if name in BACKWARD_MODES:
            raise ValueError(f"backward mode {name!r} is already registered")
        BACKWARD_MODES[name] = cls
        cls.name = name
        return cls

    return deco


class BackwardMode:
    """Decides which steps of a run build a graph. ``run`` returns ``(x, state, memory)``."""

    name = ""

    def run(self, descent: Descent, x0: Tensor, state: Any, memory: Any, steps: int
            ) -> tuple[Tensor, Any, Any]:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


@register_backward_mode("unroll")
class Unroll(BackwardMode):
    """Backpropagate through every step (the graph of all T steps is kept)."""

    def run(self, descent, x0, state, memory, steps):
        return descent.descend(x0, state, memory, 0, steps)


@register_backward_mode("truncated")
class Truncated(BackwardMode):
    """Gradient through the last ``k`` steps only (see the module docstring for the exact rule)."""

    def __init__(self, k: int):
        check_int("truncate", k, min=1)
        self.k = k

    def run(self, descent, x0, state, memory, steps):
        prefix = max(steps - self.k, 0)
        if prefix == 0:
            return descent.descend(x0, state, memory, 0, steps)
        with torch.no_grad():
            xp, state, memory = descent.descend(x0, state, memory, 0, prefix)
            delta = xp - x0  # (B, N, D), no graph
        # memory updated in the prefix has no graph; memory it did not touch (a proximal anchor)
        # keeps its own; the prepared state keeps its graph (it is built once, outside the loop)
        return descent.descend(x0 + delta, state, memory, prefix, steps)

    def __repr__(self) -> str:
        return f"Truncated(k={self.k})"


def make_backward_mode(name: str, truncate: int | None = None) -> BackwardMode:
    """Build a backward mode by name: ``'unroll'``, ``'truncated'`` (with ``truncate`` = k) or
    ``'implicit'`` (default options; build :class:`~energyformer.core.implicit.Implicit` directly for others)."""
    if name not in BACKWARD_MODES:
        raise ConfigError(f"backward = {name!r}: allowed values are "
                          + ", ".join(repr(n) for n in BACKWARD_MODES))
    if name == "truncated":
        if truncate is None:
            raise ConfigError("backward = 'truncated' needs truncate = k (steps that build a graph), "
                              "an integer >= 1")
        return Truncated(truncate)
    if truncate is not None:
        raise ConfigError(f"truncate = {truncate!r}: only allowed with backward = 'truncated' "
                          f"(backward = {name!r})")
    return BACKWARD_MODES[name]()


from . import implicit as _implicit  # noqa: E402,F401  (registers "implicit"; imports BackwardMode from here)
