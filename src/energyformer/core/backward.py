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
               A stopping rule (``tol``, ``energy_threshold``) is refused with it (ConfigError at
               load and in the Solver, :func:`~energyformer.core.solver.check_stop_with_backward`):
               the split T − k is fixed before the run, so a run where every token stops inside the
               prefix would build no graph and give the parameters no gradient, silently. Re-running
               "the last k steps actually taken" is not one rule either, since each token stops at its
               own step; unroll and implicit give a stopped run its exact gradient.

``implicit``   the run goes to (near) a fixed point without a graph; the gradient comes from the
               implicit function theorem, (I − Jᵀ) v = g solved by conjugate gradient or a damped
               fixed-point iteration (:mod:`energyformer.core.implicit`, :class:`Implicit`;
               non-convergence is reported). The forward value equals the unrolled one.

Modes are a tagged union of configs in the one registry :data:`BACKWARD_MODES`
(``backward: {kind: unroll | truncated | implicit, ...}`` in every energy sublayer's config; a bare
name is ``{kind: name}``); :func:`make_backward_mode` builds one from a config, a name or a module.
A new mode subclasses :class:`BackwardMode` and registers its config with
``@BACKWARD_MODES.register(name, ConfigClass)`` (``implicit`` does so in
:mod:`energyformer.core.implicit`, imported by the package, so this module imports nothing back);
the loop exposes ``descent.descend`` (steps with the stopping rules) and ``descent.step`` (the bare
one-step map).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import torch
from pydantic import Field
from torch import Tensor

from ..utils.config import KindConfig, Registry
from ..utils.validate import ConfigError, check_int

if TYPE_CHECKING:  # pragma: no cover
    from .solver import Descent

#: Backward modes: kind -> (config class, mode class with ``from_config(cfg)``).
BACKWARD_MODES = Registry("backward mode")


def register_backward_mode(name: str, config: type[KindConfig]):
    """Class decorator adding a :class:`BackwardMode` and its config to :data:`BACKWARD_MODES`."""

    def deco(cls):
        BACKWARD_MODES.register(name, config)(cls)
        cls.name = name
        return cls

    return deco


class BackwardMode:
    """Decides which steps of a run build a graph. ``run`` returns ``(x, state, memory)``."""

    name = ""

    @classmethod
    def from_config(cls, cfg: KindConfig) -> BackwardMode:
        return cls()

    def run(self, descent: Descent, x0: Tensor, state: Any, memory: Any, steps: int
            ) -> tuple[Tensor, Any, Any]:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class UnrollConfig(KindConfig):
    """Backpropagate through every step (exact gradient of the T-step map)."""

    kind: Literal["unroll"] = "unroll"


@register_backward_mode("unroll", UnrollConfig)
class Unroll(BackwardMode):
    """Backpropagate through every step (the graph of all T steps is kept)."""

    def run(self, descent, x0, state, memory, steps):
        return descent.descend(x0, state, memory, 0, steps)


class TruncatedConfig(KindConfig):
    """Gradient through the last k steps only (the prefix runs without a graph)."""

    kind: Literal["truncated"] = "truncated"
    k: int = Field(..., ge=1)
    """steps that build a graph (the last k of the run)"""


@register_backward_mode("truncated", TruncatedConfig)
class Truncated(BackwardMode):
    """Gradient through the last ``k`` steps only (see the module docstring for the exact rule; a
    stopping rule is refused with it, as the split is fixed before the run)."""

    def __init__(self, k: int):
        check_int("truncate", k, min=1)
        self.k = k

    @classmethod
    def from_config(cls, cfg: TruncatedConfig) -> Truncated:
        return cls(cfg.k)

    def run(self, descent, x0, state, memory, steps):
        from .solver import check_stop_with_backward  # the Solver checks at construction; this catches a tol or
        check_stop_with_backward(self, descent.tol, descent.threshold)  # a backward mode assigned after it
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


def make_backward_mode(spec: str | KindConfig | BackwardMode = "unroll", truncate: int | None = None
                       ) -> BackwardMode:
    """A backward mode from a config, a module, or a name (``'truncated'`` with ``truncate`` = k;
    other names with their default options)."""
    if isinstance(spec, BackwardMode):
        if truncate is not None:
            raise ConfigError(f"truncate = {truncate!r}: only allowed with backward = 'truncated' given by name")
        return spec
    if isinstance(spec, KindConfig):
        return BACKWARD_MODES.get(spec.kind).builder.from_config(spec)
    if spec not in BACKWARD_MODES.entries:
        raise ConfigError(f"backward = {spec!r}: allowed values are "
                          + ", ".join(repr(n) for n in BACKWARD_MODES.names()))
    if spec == "truncated":
        if truncate is None:
            raise ConfigError("backward = 'truncated' needs truncate = k (steps that build a graph), "
                              "an integer >= 1")
        return Truncated(truncate)
    if truncate is not None:
        raise ConfigError(f"truncate = {truncate!r}: only allowed with backward = 'truncated' "
                          f"(backward = {spec!r})")
    entry = BACKWARD_MODES.get(spec)
    return entry.builder.from_config(entry.config())
