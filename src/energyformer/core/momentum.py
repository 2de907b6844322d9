"""Heavy-ball momentum and Nesterov descent (intrinsic optimizers, MomenMHA / NagMHA;
reconstructed.md §1.2, whose update semantics are pinned to ``torch.optim.SGD``).

With g_t = P ∇E(u_t) (the preconditioned gradient, ``-direction``) and eta_t the step size:

    momentum:  v_{t+1} = beta v_t + g_t;   x_{t+1} = x_t - eta_t v_{t+1}
    nesterov:  v_{t+1} = beta v_t + g_t;   x_{t+1} = x_t - eta_t (g_t + beta v_{t+1})

exactly ``torch.optim.SGD(momentum=beta)`` and ``SGD(momentum=beta, nesterov=True)`` (dampening 0,
v_0 = 0, so the first velocity is g_0 as SGD's buffer). The Nesterov form is SGD's: the stream
holds the look-ahead point, so one gradient evaluation per step suffices (reconstructed.md §1.2,
"equivalent form"). The loop stores the *descent* velocity ``m = -v`` (same sign as ``direction``).

**Carry across layers.** With ``carry_key`` set, the velocity is read from and written back to
``ctx.carry[carry_key]``: a model whose layers each take one step then runs one optimiser over
depth with one velocity stream shared by every block using that key (MomenMHA applies the rule to
attention and FFN alike). The carried velocity keeps its graph (unrolled through depth).

``beta`` is a fixed number in [0, 1), or learned (``learn_beta``): beta = sigmoid(theta),
initialised at ``beta`` in (0, 1) (reconstructed.md §1.2: learnable per layer and sublayer;
recommended start beta = 0.5).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from pydantic import Field
from torch import Tensor, nn

from ..utils.validate import ConfigError, check_float
from .solver import Solver, SolverConfig, _scale, register_solver


class _MomentumConfig(SolverConfig):
    beta: float = Field(0.5, ge=0, lt=1)
    """Momentum coefficient beta in [0, 1) (reconstructed.md §1.2 recommends 0.5 to start)."""
    learn_beta: bool = False
    """Learn beta = sigmoid(theta), initialised at beta (then 0 < beta < 1)."""
    carry_key: str | None = None
    """Share the velocity across layers through ctx.carry[carry_key] (None: fresh per call)."""


class MomentumConfig(_MomentumConfig):
    """Heavy-ball momentum (torch.optim.SGD(momentum=beta))."""

    kind: Literal["momentum"] = "momentum"


class NesterovConfig(_MomentumConfig):
    """Nesterov momentum (torch.optim.SGD(momentum=beta, nesterov=True))."""

    kind: Literal["nesterov"] = "nesterov"


class _Momentum(Solver):
    rule_exact = False  # the step is a momentum step, not -eta P grad
    param_roles = {"beta_logit": "step_size"}  # a learned optimiser coefficient: never decayed

    def __init__(self, precond=None, step_size=1.0, learn_step_size=False, tol=None, *,
                 beta: float = 0.5, learn_beta: bool = False, carry_key: str | None = None, **kw: Any):
        super().__init__(precond, step_size, learn_step_size, tol, **kw)
        check_float("beta", beta, min=0.0, max=1.0)
        if beta >= 1.0:
            raise ConfigError(f"beta = {beta!r}: must be < 1")
        if learn_beta:
            if not 0.0 < beta < 1.0:
                raise ConfigError(f"beta = {beta!r}: must be in (0, 1) when learn_beta = True (sigmoid)")
            self.beta_logit = nn.Parameter(torch.tensor(math.log(beta / (1.0 - beta))))
        self.learn_beta = learn_beta
        self._beta = float(beta)
        if carry_key is not None and not (isinstance(carry_key, str) and carry_key):
            raise ConfigError(f"carry_key = {carry_key!r}: must be a non-empty string or None")
        self.carry_key = carry_key

    @classmethod
    def config_kwargs(cls, cfg: _MomentumConfig) -> dict[str, Any]:
        return dict(beta=cfg.beta, learn_beta=cfg.learn_beta, carry_key=cfg.carry_key)

    def beta(self) -> Tensor | float:
        return torch.sigmoid(self.beta_logit) if self.learn_beta else self._beta

    def init_memory(self, x0: Tensor, carry: Any, anchor: Tensor) -> Tensor | None:
        if carry is not None and carry.shape != x0.shape:
            raise ValueError(f"carried velocity ctx.carry[{self.carry_key!r}] has shape "
                             f"{tuple(carry.shape)}, the iterate {tuple(x0.shape)}: blocks sharing a "
                             f"carry_key must act on the same stream")
        return carry  # None: v_0 = 0, the first velocity is the first direction (as SGD)

    def velocity(self, d: Tensor, m: Tensor | None) -> Tensor:
        """m_{t+1} = beta m_t + d_t (descent velocity m = -v)."""
        return d if m is None else _scale(self.beta(), m) + d

    def carry_out(self, memory: Any) -> Any:
        return memory

    def extra_repr(self) -> str:
        b = "learned" if self.learn_beta else self._beta
        return f"beta={b}, carry_key={self.carry_key!r}, " + super().extra_repr()


@register_solver("momentum", MomentumConfig)
class Momentum(_Momentum):
    """Heavy-ball momentum: v <- beta v + P∇E(u);  x <- x - eta v  (torch.optim.SGD(momentum=beta))."""

    def update(self, energy, x, u, state, memory, eta):
        m = self.velocity(energy.direction(u, state, self.precond), memory)
        return _scale(eta, m), m


@register_solver("nesterov", NesterovConfig)
class Nesterov(_Momentum):
    """Nesterov: v <- beta v + g;  x <- x - eta (g + beta v),  g = P∇E(u)  (SGD(..., nesterov=True))."""

    def update(self, energy, x, u, state, memory, eta):
        d = energy.direction(u, state, self.precond)
        m = self.velocity(d, memory)
        return _scale(eta, d + _scale(self.beta(), m)), m
