"""Step sizes as modules (DESIGN.md core table: "step-size modules").

A solver multiplies its update direction by ``eta = step_size(index, x0, x)`` at every step. The
value is a Python float, a 0-d tensor, or a tensor broadcastable to the iterate (B, N, 1) or
(B, N, D). Kinds (config ``step_size: {kind: ...}``, registry :data:`STEP_SIZES`):

``fixed``          eta = value                                         (a hyper-parameter)
``learned``        eta = softplus(theta), theta_0 = softplus^-1(init)  (CEM seed §4: learned eta)
``per_iteration``  eta_t = softplus(theta_t), one theta per step index t < max_steps
``network``        eta_t(s) = base + MLP(sin-emb(t), RMSNorm(s))       (Hyper-SET Eq. 12, App. D.1)

**The index.** A step-size module sees ``index = ctx.iteration * steps + t``: the recurrent
iteration of the block (``ForwardContext.iteration``, 0 for a plain stack) times the block's step
count *in this call* (``ctx.steps`` / ``steps=`` override included), plus the step index ``t`` within
the call. A block iterated L times with T steps each thus sees indices 0 .. L*T - 1, one per step.

**The forward context.** A module with ``needs_context = True`` is called as
``step_size(index, x0, x, ctx=ctx)`` with the block's :class:`~energyformer.core.context.ForwardContext`
(iteration, model input ``ctx.embedded``, layer input ``ctx.layer_input``): the network's
``condition`` chooses the state it sees. One network may serve several sublayers (Hyper-SET: α of the
attention and γ of the feed-forward from one trunk, ``groups: 2``): :meth:`NetworkStepSize.group`
gives a view on one group; the sublayer that owns the network registers it, the others reference
it, and the output is computed once per (iteration, state) of a forward pass (``ctx.memo``); with
``condition: input`` (a state fixed for the whole forward) once per forward for all its iterations
(:meth:`NetworkStepSize.table`), and with the other conditions its weights-only part (the index embedding
and its two Linears) once per forward (:meth:`NetworkStepSize.tau_table`).

A float of the config (``step_size: 0.5``) is shorthand for ``{kind: fixed, value: 0.5}``.

Files: the base class and registry in :mod:`~energyformer.core.stepsize_base`, the network kind in
:mod:`~energyformer.core.stepsize_network`; this module defines the other kinds and re-exports all of them.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import torch
import torch.nn.functional as F
from pydantic import BeforeValidator, Field
from torch import Tensor, nn

from ..utils.config import KindConfig
from .stepsize_base import STEP_SIZES, StepSize
from ..utils.validate import ConfigError, check_float, check_int


def _inverse_softplus(y: float) -> float:
    """theta with softplus(theta) == y (y > 0), stable for small and large y."""
    return y + math.log(-math.expm1(-y))


# ----------------------------------------------------------------------------- fixed
class FixedStepSizeConfig(KindConfig):
    """A fixed step size eta (a hyper-parameter)."""

    kind: Literal["fixed"] = "fixed"
    value: float = Field(1.0, gt=0)
    """eta > 0."""


@STEP_SIZES.register("fixed", FixedStepSizeConfig)
class FixedStepSize(StepSize):
    """eta = value (a Python float: no tensor op, no parameter)."""

    def __init__(self, value: float = 1.0):
        super().__init__()
        check_float("step_size", value, min=0.0, min_exclusive=True)
        self.value = float(value)

    @classmethod
    def from_config(cls, cfg: FixedStepSizeConfig, dim: int | None = None) -> FixedStepSize:
        return cls(cfg.value)

    def forward(self, index: int, x0: Tensor, x: Tensor) -> float:
        return self.value

    def extra_repr(self) -> str:
        return f"value={self.value}"


# ----------------------------------------------------------------------------- learned scalar
class LearnedStepSizeConfig(KindConfig):
    """One learned positive step size eta = softplus(theta), initialised at ``init``."""

    kind: Literal["learned"] = "learned"
    init: float = Field(1.0, gt=0)
    """Initial eta > 0."""


@STEP_SIZES.register("learned", LearnedStepSizeConfig)
class LearnedStepSize(StepSize):
    """eta = softplus(theta), theta_0 = softplus^-1(init) (positive by construction)."""

    param_roles = {"theta": "step_size"}  # never weight-decayed (train/roles.py)

    def __init__(self, init: float = 1.0):
        super().__init__()
        check_float("step_size.init", init, min=0.0, min_exclusive=True)
        self.theta = nn.Parameter(torch.tensor(_inverse_softplus(float(init))))

    @classmethod
    def from_config(cls, cfg: LearnedStepSizeConfig, dim: int | None = None) -> LearnedStepSize:
        return cls(cfg.init)

    def forward(self, index: int, x0: Tensor, x: Tensor) -> Tensor:
        return F.softplus(self.theta)  # 0-d


# ----------------------------------------------------------------------------- per iteration
class PerIterationStepSizeConfig(KindConfig):
    """One learned positive step size per step index (softplus), all initialised at ``init``."""

    kind: Literal["per_iteration"] = "per_iteration"
    init: float = Field(1.0, gt=0)
    """Initial eta_t > 0 for every index."""
    max_steps: int = Field(16, ge=1)
    """Number of learned values: indices 0 .. max_steps - 1 (iterations x steps of the block)."""


@STEP_SIZES.register("per_iteration", PerIterationStepSizeConfig)
class PerIterationStepSize(StepSize):
    """eta_t = softplus(theta_t), t < max_steps; a larger index is an error (no silent reuse)."""

    param_roles = {"theta": "step_size"}

    def __init__(self, max_steps: int, init: float = 1.0):
        super().__init__()
        check_int("step_size.max_steps", max_steps, min=1)
        check_float("step_size.init", init, min=0.0, min_exclusive=True)
        self.max_steps = max_steps
        self.theta = nn.Parameter(torch.full((max_steps,), _inverse_softplus(float(init))))

    @classmethod
    def from_config(cls, cfg: PerIterationStepSizeConfig, dim: int | None = None) -> PerIterationStepSize:
        return cls(cfg.max_steps, cfg.init)

    def check_index(self, last: int, *, iteration: int = 0, steps: int = 1) -> None:
        if last >= self.max_steps:
            raise ConfigError(
                f"step_size.max_steps = {self.max_steps}: step index {last} (iteration {iteration} x "
                f"{steps} steps + step {last - iteration * steps}) has no learned value; allowed "
                f"indices are 0..{self.max_steps - 1} (raise max_steps or use fewer iterations/steps)")

    def forward(self, index: int, x0: Tensor, x: Tensor) -> Tensor:
        if index >= self.max_steps:  # also guards direct calls that skipped check_index
            self.check_index(index)
        return F.softplus(self.theta[index])  # 0-d

    def extra_repr(self) -> str:
        return f"max_steps={self.max_steps}"


# ----------------------------------------------------------------------------- helpers
def step_eta(step_size: StepSize, index: int, x0: Tensor, x: Tensor, ctx: Any = None) -> Tensor | float:
    """η of step ``index`` at iterate ``x`` of a run started at ``x0``: ``step_size(index, x0, x)``, with
    ``ctx=ctx`` for a context-aware module (``needs_context``), exactly as the loop's ``Descent.eta`` calls
    it. A caller that needs a step's η outside the loop (Nesterov's look-ahead) computes it here, so it cannot
    differ from the step's (probe N: the look-ahead once called a context-conditioned network without ctx)."""
    if getattr(step_size, "needs_context", False):
        return step_size(index, x0, x, ctx=ctx)
    return step_size(index, x0, x)


def _number_is_fixed(value: Any) -> Any:
    """``step_size: 0.5`` is shorthand for ``{kind: fixed, value: 0.5}``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"kind": "fixed", "value": value}
    return value


#: Annotation of a config field holding a step-size config (default kind 'fixed'; numbers accepted).
StepSizeField = Annotated[STEP_SIZES.type("fixed"), BeforeValidator(_number_is_fixed)]


def make_step_size(spec: float | StepSize | KindConfig, dim: int | None = None,
                   learn: bool = False) -> StepSize:
    """A :class:`StepSize` from a number (fixed, or learned when ``learn``), a module or a config."""
    if isinstance(spec, StepSize):
        if learn:
            raise ConfigError("learn_step_size = True: only allowed with a numeric step_size "
                              f"(got a {type(spec).__name__} module)")
        return spec
    if isinstance(spec, KindConfig):
        entry = STEP_SIZES.get(spec.kind)
        if spec.kind == "network" and dim is None:
            raise ConfigError("step_size.kind = 'network': the solver needs the model width (dim)")
        return entry.builder.from_config(spec, dim)
    if isinstance(spec, bool) or not isinstance(spec, (int, float)):
        raise ConfigError(f"step_size = {spec!r}: must be a positive number, a StepSize module or a "
                          f"step-size config (kinds: {', '.join(STEP_SIZES.names())})")
    return LearnedStepSize(spec) if learn else FixedStepSize(spec)


# the network kind last, so the registry lists the kinds in this order: fixed, learned, per_iteration, network
from .stepsize_network import (  # noqa: E402
    NetworkStepSize, NetworkStepSizeConfig, StepSizeGroup, sinusoidal_embedding, sinusoidal_table, timestep_freqs,
)

__all__ = [
    "STEP_SIZES", "StepSize", "StepSizeField", "make_step_size", "step_eta", "FixedStepSize", "FixedStepSizeConfig",
    "LearnedStepSize", "LearnedStepSizeConfig", "PerIterationStepSize", "PerIterationStepSizeConfig",
    "NetworkStepSize", "NetworkStepSizeConfig", "StepSizeGroup", "sinusoidal_embedding", "sinusoidal_table",
    "timestep_freqs",
]
