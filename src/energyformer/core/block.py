"""``EnergyBlock`` = Energy + Solver + steps (DESIGN.md "Block").

A block normalises its input once (``h = norm(x)``), lets the energy do its once-only work
(``state = energy.prepare(h)``: keys, values, gates), then runs the solver from ``x0`` for ``steps``
steps. With ``init='residual'`` (default; the config's ``norm.init``) ``x0`` is the raw residual
stream ``x``, so with T = 1 the block equals a pre-norm residual sublayer ``x + f(norm(x))``;
``init='normalized'`` starts from ``norm(x)`` as a literal reading of CEM Algorithm 1
("x_i <- h_i" after "h <- RMSNorm(h)") would.

When ``norm_in_loop`` (CEM Algorithm 1, default; the config's ``norm.in_loop``) the gradient is
evaluated at ``u = norm(x_t)``; the step ``x_{t+1} = x_t - eta P ∇E(u_t)`` is then not a gradient step
on ``x -> E(norm(x))`` (the norm's Jacobian is missing), so ``exact`` is False. Without it every step
is an exact (preconditioned) gradient step on ``E(x | h)``.

Call-time options (DESIGN.md core table): the step count is ``steps=`` if given, else
``ctx.steps`` (test-time budgets), else the block's own (``eval_steps`` in eval mode when set,
:class:`~energyformer.core.solver.Budget`); step sizes see the index
``ctx.iteration * steps + t``; the proximal anchor is ``anchor=`` if given, else x0; the padding
mask ``ctx.mask`` keeps masked tokens fixed. Records go to ``ctx.traces`` / ``ctx.stats`` under
``ctx.key(qualname)`` = (block name, iteration).

**Look-ahead point.** A rule that evaluates its gradient away from the iterate (Sutskever's Nesterov,
``solver.lookahead``) gives ``shift = solver.shift(x, ctx)`` (``η β m`` from its carried velocity);
the block then normalises and prepares at ``y = x + shift`` and evaluates every step at
``point(x_t + shift)`` while the stream keeps x (one step per call). The normalised input ``h`` is
reused for the first step's gradient point (no second norm of the same tensor).

**KV cache.** With ``ctx.cache`` the block hands the energy its slot (``ctx.cache_slot``) and the call holds
only the new tokens. An energy that is not token-local (:func:`~energyformer.core.energy.is_token_local`:
it reads other tokens) must fill that slot in ``prepare``; a slot still empty afterwards is a ConfigError naming
the sublayer and the energy (:meth:`EnergyBlock.check_cache`): such an energy used to decode silently wrong
tokens, each new token attending only to itself.

**Adapters.** ``adapter(energy, iteration)`` (e.g. :class:`~energyformer.core.adapter.DepthLoRA`) gives
the energy this iteration's weights for the call (a view; the shared module is not modified).

:meth:`EnergyBlock.from_config` is the one generic builder of an energy sublayer from its
:class:`~energyformer.core.sublayer.DescentConfig` (solver, step budgets, and the ``norm`` key:
norm module, ``norm_in_loop``, ``init``; :mod:`energyformer.core.norm`); a subclass with its own
constructor passes :meth:`EnergyBlock.config_args` to ``super().__init__``.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from ..utils.validate import ConfigError, check_choice, check_int
from .context import ForwardContext, context_or_new
from .energy import ENERGIES, Energy, is_token_local
from .norm import make_norm
from .solver import Budget, Solver


class EnergyBlock(nn.Module):
    """One sublayer realised as descent on an energy."""

    def __init__(
        self, energy: Energy, solver: Solver, steps: int, norm: nn.Module | None = None,
        norm_in_loop: bool = True, init: str = "residual", eval_steps: int | None = None,
        adapter: nn.Module | None = None,
    ):
        super().__init__()
        check_int("steps", steps, min=1)
        if eval_steps is not None:
            check_int("eval_steps", eval_steps, min=1)
        check_choice("init", init, ("residual", "normalized"))
        bank = getattr(getattr(solver, "precond", None), "heads", None)
        if bank is not None and not energy.head_bank:  # the bank acted on (B, N, D) as if N were the heads
            raise ConfigError(f"solver.precond_per_head = true: the {type(energy).__name__} energy takes no per-head "
                              "preconditioner bank (CEM attention's does); allowed: false")
        self.energy = energy
        self.solver = solver
        self.steps = steps
        self.eval_steps = eval_steps
        self.norm = norm if norm is not None else nn.Identity()
        self.norm_in_loop = norm_in_loop
        self.init = init
        self.adapter = adapter  # (energy, iteration) -> energy with this iteration's weights (core/adapter.py)
        self.qualname = ""  # set by models.naming.name_blocks

    @classmethod
    def from_config(cls, energy: Energy, cfg: Any, dim: int, heads: int | None = None, *,
                    step_size: Any = None, name: str = "sublayer", **kw: Any) -> EnergyBlock:
        """The block of a sublayer config (:class:`~energyformer.core.sublayer.DescentConfig`): the
        energy with the config's solver (rule, step size, backward mode), ``steps``, ``eval_steps`` and
        ``norm`` (module, in-loop flag, start point); ``step_size`` overrides the config's (a sublayer
        default that depends on the model, a shared module). ``kw`` goes to the constructor."""
        return cls(energy, **cls.config_args(cfg, dim, heads, step_size=step_size, name=name), **kw)

    @staticmethod
    def config_args(cfg: Any, dim: int, heads: int | None = None, *, step_size: Any = None,
                    name: str = "sublayer") -> dict[str, Any]:
        """The constructor arguments :meth:`from_config` builds from a sublayer config (``solver``,
        ``steps``, ``eval_steps``, ``norm``, ``norm_in_loop``, ``init``), for a subclass whose own
        constructor builds the energy and then calls ``super().__init__(energy, **config_args)``."""
        from .sublayer import build_solver

        solver = build_solver(cfg, dim, heads, step_size=step_size, name=name)
        norm, in_loop, init = make_norm(cfg.norm, dim)
        return dict(solver=solver, steps=cfg.steps, eval_steps=cfg.eval_steps, norm=norm, norm_in_loop=in_loop,
                    init=init)

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
        ctx = context_or_new(ctx, type(self).__name__)
        if x.dim() != 3 or x.shape[1] == 0 or not x.is_floating_point():  # failed deep inside (einops, cat, amax)
            raise ValueError(f"{type(self).__name__}: x of shape {tuple(x.shape)} and dtype {x.dtype}: expected token "
                             "states (B, N, D) of a floating dtype with N >= 1")
        if ctx.mask is not None and ctx.mask.shape != x.shape[:2]:
            raise ValueError(f"{type(self).__name__}: ctx.mask of shape {tuple(ctx.mask.shape)}: expected the "
                             f"tokens' (B, N) = {tuple(x.shape[:2])}")
        n = self.solver.budget(Budget(self.steps, self.eval_steps) if steps is None else steps, ctx)
        shift = None
        if self.solver.lookahead:
            if n != 1:
                raise ConfigError(f"steps = {n}: a look-ahead rule ({type(self.solver).__name__}, "
                                  "form 'sutskever') takes one step per call")
            shift = self.solver.shift(x, ctx)
        y = x if shift is None else x + shift
        h = self.norm(y)  # (B, N, D)
        energy = self.adapted_energy(ctx.iteration)
        slot = ctx.cache_slot(self.qualname)
        state = energy.prepare(h, cache=slot, offset=ctx.offset, mask=ctx.mask)
        self.check_cache(slot)
        x0 = x if self.init == "residual" else h
        trace, stats = ctx.traces is not None, ctx.stats is not None
        in_loop = self.norm_in_loop and not isinstance(self.norm, nn.Identity)
        res = self.solver.run(
            energy, x0, state, n, point=self._point(x, h, shift, in_loop),
            trace=trace, ctx=ctx, anchor=anchor, stats=stats)
        self.record(ctx, res)
        return res.x

    def check_cache(self, slot: dict | None) -> None:
        """Raise a one-line ConfigError when ``prepare`` left a KV-cache slot empty although the energy reads
        other tokens (not :func:`~energyformer.core.energy.is_token_local` in this block's ``part``).

        Training and eval never pass a cache, so such an energy only goes wrong in cached decoding
        (``generate``), where each new token would see only itself: silently different tokens."""
        if slot is None or slot or is_token_local(self.energy, getattr(self, "part", None)):
            return
        cls = type(self.energy)
        registered = ENERGIES.get(cls.registry_name) is cls  # not a subclass inheriting its parent's name
        name = cls.__name__ + (f" ('{cls.registry_name}')" if registered else "")
        raise ConfigError(
            f"{self.record_name()}: the {name} energy left its KV-cache slot empty, so cached decoding would let "
            "each new token see only itself: append the keys/values it reads to the cache slot in prepare "
            "(core.attention.append_cache; see Energy.prepare), or set token_local = True if it reads only its "
            "own token")

    def adapted_energy(self, iteration: int) -> Energy:
        """The energy with iteration ``iteration``'s adapter applied (itself without an adapter)."""
        return self.energy if self.adapter is None else self.adapter(self.energy, iteration)

    def _point(self, x: Tensor, h: Tensor, shift: Tensor | None, in_loop: bool):
        """Where step t's gradient is evaluated: norm(x_t + shift) in the loop (h itself at x_t = x),
        x_t + shift outside it (None: the iterate itself)."""
        norm = self.norm
        if in_loop:
            if shift is None:
                return lambda v: h if v is x else norm(v)
            return lambda v: h if v is x else norm(v + shift)
        return None if shift is None else (lambda v: v + shift)
