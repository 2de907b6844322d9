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

**Variants** (options of both kinds): ``ema`` — velocity ``m ← β m + (1 − β) d`` (an exponential
moving average; ``torch.optim.SGD(dampening=β)`` except that SGD does not dampen its first step);
``nesterov.form`` — ``'sgd'`` (above: the stream holds the look-ahead point) or ``'sutskever'``: the
stream holds the iterate x and the step is heavy ball with the gradient evaluated at the look-ahead
point ``x + η β m`` (:meth:`Solver.shift`; one step per block call, the velocity carried).

``beta`` is a fixed number in [0, 1), or learned (``learn_beta``): beta = sigmoid(theta),
initialised at ``beta`` in (0, 1) (reconstructed.md §1.2: learnable per layer and sublayer;
recommended start beta = 0.5).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from pydantic import Field, model_validator
from torch import Tensor, nn

from ..utils.validate import ConfigError, check_float
from .solver import Solver, SolverConfig, _scale, register_solver
from .stepsize import step_eta


class _MomentumConfig(SolverConfig):
    beta: float = Field(0.5, ge=0, lt=1)
    """Momentum coefficient beta in [0, 1) (reconstructed.md §1.2 recommends 0.5 to start)."""
    learn_beta: bool = False
    """Learn beta = sigmoid(theta), initialised at beta (then 0 < beta < 1)."""
    carry_key: str | None = None
    """Share the velocity across layers through ctx.carry[carry_key] (None: fresh per call)."""
    ema: bool = False
    """velocity m <- beta m + (1 - beta) d (EMA) instead of m <- beta m + d"""

    @model_validator(mode="after")
    def _learn_beta_needs_open_interval(self):
        if self.learn_beta and not 0 < self.beta < 1:
            raise ValueError(f"beta = {self.beta}: must be in (0, 1) when learn_beta = true "
                             "(beta = sigmoid(theta)); set learn_beta: false for beta = 0")
        if self.carry_key == "":
            raise ValueError("carry_key = '': must be a non-empty string or null")
        return self


class MomentumConfig(_MomentumConfig):
    """Heavy-ball momentum (torch.optim.SGD(momentum=beta))."""

    kind: Literal["momentum"] = "momentum"


class NesterovConfig(_MomentumConfig):
    """Nesterov momentum (torch.optim.SGD(momentum=beta, nesterov=True))."""

    kind: Literal["nesterov"] = "nesterov"
    form: Literal["sgd", "sutskever"] = "sgd"
    """'sgd': the stream holds the look-ahead point (torch.optim.SGD(nesterov=True)); 'sutskever': the
    stream holds x, the gradient is evaluated at x + eta beta m (one step per call, carried velocity)"""


def check_lookahead_start(step_size: Any, init: str) -> None:
    """Refuse a look-ahead rule (Nesterov ``form: sutskever``) whose η reads the block's start point when that
    start point is ``norm.init: normalized``. The look-ahead η (:meth:`Nesterov.shift`) must be known before
    the block computes its start point x0 = norm(x + η β m), so it can only see x; the step then used
    η(x0 = norm(x + η β m)), another value (probe N: 3e-4 apart for a network conditioned on x0). With
    ``init: residual`` x0 = x and the two agree; a step size of the index and the forward context (fixed,
    learned, per_iteration, network conditioned on input | layer) is the same at either point."""
    reads = getattr(step_size, "reads_block_state", None)
    if init == "normalized" and callable(reads) and reads():
        raise ConfigError(
            f"step_size.condition = {step_size.condition!r} with norm.init = 'normalized': a look-ahead rule "
            "(Nesterov form 'sutskever', readout 'seed') needs its step's η before the normalised start point it "
            "defines; allowed: norm.init 'residual', or step_size.condition 'input' | 'layer'")


class _Momentum(Solver):
    rule_exact = False  # the step is a momentum step, not -eta P grad
    param_roles = {"beta_logit": "step_size"}  # a learned optimiser coefficient: never decayed

    def __init__(self, precond=None, step_size=1.0, learn_step_size=False, tol=None, *,
                 beta: float = 0.5, learn_beta: bool = False, carry_key: str | None = None,
                 ema: bool = False, **kw: Any):
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
        self.ema = bool(ema)

    @classmethod
    def config_kwargs(cls, cfg: _MomentumConfig) -> dict[str, Any]:
        return dict(beta=cfg.beta, learn_beta=cfg.learn_beta, carry_key=cfg.carry_key, ema=cfg.ema)

    def beta(self) -> Tensor | float:
        return torch.sigmoid(self.beta_logit) if self.learn_beta else self._beta

    def init_memory(self, x0: Tensor, carry: Any, anchor: Tensor) -> Tensor | None:
        if carry is not None and carry.shape != x0.shape:
            raise ValueError(f"carried velocity ctx.carry[{self.carry_key!r}] has shape "
                             f"{tuple(carry.shape)}, the iterate {tuple(x0.shape)}: blocks sharing a "
                             f"carry_key must act on the same stream")
        return carry  # None: v_0 = 0, the first velocity is the first direction (as SGD)

    def velocity(self, d: Tensor, m: Tensor | None) -> Tensor:
        """m_{t+1} = beta m_t + d_t, or beta m_t + (1 - beta) d_t with ``ema`` (descent velocity m = -v)."""
        if self.ema:
            b = self.beta()
            d = _scale(1 - b, d)
            return d if m is None else _scale(b, m) + d
        if m is None:
            # v_0 = 0, so β does not act on the first velocity; a zero-weight edge keeps a learned β in the graph
            # with a zero gradient (layer 0 of a carried stream, nag_mha / momen_mha: DDP stopped on a parameter
            # that received no gradient)
            return d + 0.0 * self.beta() if self.learn_beta else d
        return _scale(self.beta(), m) + d

    def carry_out(self, memory: Any) -> Any:
        return memory

    def extra_repr(self) -> str:
        b = "learned" if self.learn_beta else self._beta
        e = ", ema=True" if self.ema else ""
        return f"beta={b}{e}, carry_key={self.carry_key!r}, " + super().extra_repr()


@register_solver("momentum", MomentumConfig)
class Momentum(_Momentum):
    """Heavy-ball momentum: v <- beta v + P∇E(u);  x <- x - eta v  (torch.optim.SGD(momentum=beta))."""

    def update(self, energy, x, u, state, memory, eta):
        m = self.velocity(energy.direction(u, state, self.precond), memory)
        return _scale(eta, m), m


@register_solver("nesterov", NesterovConfig)
class Nesterov(_Momentum):
    """Nesterov: v <- beta v + g;  x <- x - eta (g + beta v),  g = P∇E(u)  (SGD(..., nesterov=True));
    ``form='sutskever'``: x <- x - eta v with g evaluated at x + eta beta v_prev (:meth:`shift`)."""

    def __init__(self, *args: Any, form: str = "sgd", **kw: Any):
        super().__init__(*args, **kw)
        if form not in ("sgd", "sutskever"):
            raise ConfigError(f"form = {form!r}: allowed values are 'sgd', 'sutskever'")
        self.form = form
        self.lookahead = form == "sutskever"

    @classmethod
    def config_kwargs(cls, cfg: NesterovConfig) -> dict[str, Any]:
        return dict(super().config_kwargs(cfg), form=cfg.form)

    def shift(self, x: Tensor, ctx: Any) -> Tensor | None:
        if self.form != "sutskever":
            return None
        m = self.carried(ctx)
        if m is None:
            return None
        # η of this call's one step, computed as the loop computes it (step_eta: index = iteration × 1 step, the
        # forward context for a context-aware step size, x0 = x_0 = the block input x under norm.init 'residual';
        # 'normalized' with a step size reading its start point is refused at load, check_lookahead_start)
        eta = step_eta(self.step_size, ctx.iteration, x, x, ctx)
        return _scale(eta, _scale(self.beta(), m))  # eta beta m, like x

    def update(self, energy, x, u, state, memory, eta):
        d = energy.direction(u, state, self.precond)
        m = self.velocity(d, memory)
        if self.form == "sutskever":
            return _scale(eta, m), m
        return _scale(eta, d + _scale(self.beta(), m)), m

    def extra_repr(self) -> str:
        return ("form='sutskever', " if self.form != "sgd" else "") + super().extra_repr()
