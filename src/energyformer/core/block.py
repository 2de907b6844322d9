"""``EnergyBlock`` = Energy + Solver + steps (DESIGN.md "Block"), and the context passed down a model.

A block normalises its input once (``h = norm(x)``), lets the energy do its once-only work
(``state = energy.prepare(h)``: keys, values, gates), then runs the solver from ``x0`` for ``steps``
steps. With ``init='residual'`` (default) ``x0`` is the raw residual stream ``x``, so with T = 1 the
block equals a pre-norm residual sublayer ``x + f(norm(x))``; ``init='normalized'`` starts from
``norm(x)`` as a literal reading of CEM Algorithm 1 ("x_i <- h_i" after "h <- RMSNorm(h)") would.

When ``norm_in_loop`` (CEM Algorithm 1, default) the gradient is evaluated at ``u = norm(x_t)``; the
step ``x_{t+1} = x_t - eta P ∇E(u_t)`` is then not a gradient step on ``x -> E(norm(x))`` (the norm's
Jacobian is missing), so ``exact`` is False. Without it every step is an exact (preconditioned)
gradient step on ``E(x | h)``.
"""

from __future__ import annotations

from torch import Tensor, nn

from ..utils.validate import check_choice, check_int
from .context import ForwardContext
from .energy import Energy
from .solver import Solver


class EnergyBlock(nn.Module):
    """One sublayer realised as descent on an energy."""

    def __init__(
        self, energy: Energy, solver: Solver, steps: int, norm: nn.Module | None = None,
        norm_in_loop: bool = True, init: str = "residual",
    ):
        super().__init__()
        check_int("steps", steps, min=1)
        check_choice("init", init, ("residual", "normalized"))
        self.energy = energy
        self.solver = solver
        self.steps = steps
        self.norm = norm if norm is not None else nn.Identity()
        self.norm_in_loop = norm_in_loop
        self.init = init
        self.qualname = ""  # set by models.naming.name_blocks

    @property
    def exact(self) -> bool:
        """True when every step is ``-eta P ∇E(x | h)`` with one PD matrix P (see module docstring)."""
        norm_free = isinstance(self.norm, nn.Identity) or not self.norm_in_loop
        precond = getattr(self.solver, "precond", None)
        p_ok = precond is None or self.energy.precond_exact(precond)
        return bool(self.energy.exact and self.solver.exact and norm_free and p_ok)

    def forward(self, x: Tensor, ctx: ForwardContext | None = None, steps: int | None = None) -> Tensor:
        ctx = ctx or ForwardContext()
        h = self.norm(x)  # (B, N, D)
        state = self.energy.prepare(h, cache=ctx.cache_slot(self.qualname), offset=ctx.offset)
        x0 = x if self.init == "residual" else h
        point = self.norm if self.norm_in_loop else None
        res = self.solver.run(
            self.energy, x0, state, self.steps if steps is None else steps,
            point=point, trace=ctx.traces is not None, carry=ctx.carry.get(self.solver.registry_name),
        )
        if res.carry is not None:
            ctx.carry[self.solver.registry_name] = res.carry
        if ctx.traces is not None and res.trace is not None:
            res.trace.exact = self.exact
            ctx.traces[ctx.key(self.qualname)] = res.trace
        return res.x
