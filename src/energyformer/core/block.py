"""``EnergyBlock`` = Energy + Solver + steps (DESIGN.md "Block").

A block normalises its input once (``h = norm(x)``), lets the energy do its once-only work
(``state = energy.prepare(h)``: keys, values, gates), then runs the solver from ``x0`` for ``steps``
steps. With ``init='residual'`` (default) ``x0`` is the raw residual stream ``x``, so with T = 1 the
block equals a pre-norm residual sublayer ``x + f(norm(x))``; ``init='normalized'`` starts from
``norm(x)`` as a literal reading of CEM Algorithm 1 ("x_i <- h_i" after "h <- RMSNorm(h)") would.

When ``norm_in_loop`` (CEM Algorithm 1, default) the gradient is evaluated at ``u = norm(x_t)``; the
step ``x_{t+1} = x_t - eta P ∇E(u_t)`` is then not a gradient step on ``x -> E(norm(x))`` (the norm's
Jacobian is missing), so ``exact`` is False. Without it every step is an exact (preconditioned)
gradient step on ``E(x | h)``.

Call-time options (DESIGN.md core table): the step count is ``steps=`` if given, else
``ctx.steps`` (test-time budgets), else the block's own; step sizes see the index
``ctx.iteration * steps + t``; the proximal anchor is ``anchor=`` if given, else x0; the padding
mask ``ctx.mask`` keeps masked tokens fixed. Records go to ``ctx.traces`` / ``ctx.stats`` under
``ctx.key(qualname)`` = (block name, iteration).
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
        """True when every step is ``-eta P ∇E(x | h)`` with one PD matrix P (see module docstring):
        the energy's update is its gradient, the solver's rule and step size are plain gradient
        steps, no norm sits in the loop and the preconditioner is a single matrix."""
        norm_free = isinstance(self.norm, nn.Identity) or not self.norm_in_loop
        precond = getattr(self.solver, "precond", None)
        p_ok = precond is None or self.energy.precond_exact(precond)
        return bool(self.energy.exact and self.solver.exact and norm_free and p_ok)

    def record(self, ctx, res) -> None:
        """Store a run's trace (marked with this block's ``exact``) and stats in ``ctx`` under (block, iteration)."""
        if ctx.traces is None and ctx.stats is None:
            return
        key = ctx.key(self.record_name())
        if ctx.traces is not None and res.trace is not None:
            res.trace.exact = self.exact
            ctx.traces[key] = res.trace
        if ctx.stats is not None:
            ctx.stats[key] = res.stats

    def record_name(self) -> str:
        """Name of this block's records (its qualified name; a stable fallback when unnamed)."""
        return self.qualname or f"{type(self).__name__}@{id(self):x}"

    def forward(self, x: Tensor, ctx: ForwardContext | None = None, steps: int | None = None,
                anchor: Tensor | None = None) -> Tensor:
        ctx = ctx or ForwardContext()
        if steps is None:
            steps = self.steps if ctx.steps is None else ctx.steps
        h = self.norm(x)  # (B, N, D)
        state = self.energy.prepare(h, cache=ctx.cache_slot(self.qualname), offset=ctx.offset,
                                    mask=ctx.mask)
        x0 = x if self.init == "residual" else h
        trace, stats = ctx.traces is not None, ctx.stats is not None
        in_loop = self.norm_in_loop and not isinstance(self.norm, nn.Identity)
        res = self.solver.run(
            self.energy, x0, state, steps, point=self.norm if in_loop else None,
            trace=trace, ctx=ctx, anchor=anchor, stats=stats)
        self.record(ctx, res)
        return res.x
