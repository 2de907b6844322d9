"""Descent rules = a step rule + one shared loop (DESIGN.md "Solver" and core table).

``Solver.run(energy, x0, state, steps, ...)`` descends ``energy`` from ``x0`` and returns a
:class:`SolverResult`. The base class owns the loop (:class:`Descent`); a subclass writes only its
step rule:

    init_memory(x0, carry, anchor) -> memory       state of the rule (velocity, anchor, ...)
    update(energy, x, u, state, memory, eta) -> (dx, memory)

One step of the loop, at step index t (``index = ctx.iteration * steps + t``, see
:mod:`energyformer.core.stepsize`):

    u_t   = point(x_t)                       (identity, or RMSNorm for CEM Algorithm 1)
    state = energy.reprepare(state, u_t)     (only for energies whose context is the iterate)
    eta   = step_size(index, x0, x_t[, ctx])  (a context-aware step size also sees the forward context)
    dx, memory = update(...);  x_{t+1} = x_t + dx   (tokens that stopped or are masked: dx = 0)

``point`` maps the iterate to where the gradient is evaluated: identity for an exact gradient
step, or RMSNorm as in CEM Algorithm 1 (then the update ``-eta P ∇E(RMSNorm(x))`` is *not* the
gradient of ``E(RMSNorm(x))``; the block reports ``exact = False``).

Stopping rules: the step count (always); ``tol``: per token, a token whose step norm
``||x_{t+1} - x_t||`` falls below ``tol`` stops (it keeps that last step) while the others
continue; ``energy_threshold``: per token, a token whose (traced) energy is at or below the
threshold stops before stepping. Tokens masked out by ``ctx.mask`` never move. The loop ends when
the budget is spent or no token is moving; only these data-dependent rules sync with the host
(one ``any()`` per step). Backward modes (unroll / truncated) live in
:mod:`energyformer.core.backward`; statistics follow torchdeq (steps taken and final step norm per
token, :class:`SolverStats`).

Solvers are registered by name in the one registry :data:`SOLVERS` (typed configs and classes,
``solver: {kind: gd | momentum | nesterov | proximal | ista | sphere, ...}``); a sublayer builds its
solver, step size and backward mode from one config shape (:mod:`energyformer.core.sublayer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

import torch
from pydantic import Field
from torch import Tensor, nn

from ..utils.config import KindConfig, Registry
from ..utils.validate import ConfigError, check_float, check_int
from .backward import Truncated, make_backward_mode
from .energy import Energy
from .precision import at_least_float32
from .precond import IdentityPrecond, Preconditioner, make_preconditioner
from .stepsize import FixedStepSize, StepSize, make_step_size, step_eta
from .trace import Trace

#: Solver kinds: name -> (config class, solver class; ``cls.from_config(cfg, dim, heads, ...)`` builds it).
SOLVERS = Registry("solver")


def register_solver(name: str, config: type[KindConfig]):
    """Class decorator adding a Solver and its config to :data:`SOLVERS` (names are unique)."""

    def deco(cls):
        SOLVERS.register(name, config)(cls)
        cls.registry_name = name
        return cls

    return deco


# ----------------------------------------------------------------------------- results
@dataclass
class SolverStats:
    """Per-token statistics of one run (torchdeq-style).

    steps:     (B, N) int64 steps each token took (0 for masked tokens).
    step_norm: (B, N) norm of each token's last step (its last non-zero move; 0 if it never moved).
    """

    steps: Tensor
    step_norm: Tensor


@dataclass
class SolverResult:
    x: Tensor                    # final iterate, like x0
    trace: Trace | None = None   # per-step record when asked for
    steps: int = 0               # steps taken (the maximum over tokens)
    carry: Any = None            # state a solver hands to the next layer (e.g. momentum velocity)
    stats: SolverStats | None = None  # when asked for (always when a data-dependent stop rule is on)


# ----------------------------------------------------------------------------- configs
class SolverConfig(KindConfig):
    """Options shared by every solver kind (the step size and the backward mode are keys of the
    sublayer, next to ``solver``: :class:`~energyformer.core.sublayer.DescentConfig`)."""

    precond: Literal["identity", "diagonal", "diag_low_rank"] = "identity"
    """Preconditioner P (CEM Eq. 13)."""
    precond_rank: int = Field(4, ge=1)
    """Rank of the low-rank part of 'diag_low_rank'."""
    precond_per_head: bool = False
    """One P per attention head (CEM Eq. 14); the block must give its head count."""
    tol: float | None = Field(None, gt=0)
    """Per-token stop once the step norm is below tol (host sync per step; None = off)."""
    energy_threshold: float | None = None
    """Per-token stop once the energy is at or below this value (None = off)."""


@dataclass(frozen=True)
class Budget:
    """Train / eval step budgets (torchdeq's ``f_max_iter`` / ``eval_f_max_iter``): ``train`` steps in
    training mode, ``eval`` (None: ``train``) in eval mode; ``ctx.steps`` (a test-time budget)
    overrides both."""

    train: int
    eval: int | None = None

    def resolve(self, ctx: Any, training: bool) -> int:
        if ctx is not None and ctx.steps is not None:
            return ctx.steps
        return self.train if training or self.eval is None else self.eval


# ----------------------------------------------------------------------------- the loop
def _scale(eta: Tensor | float, d: Tensor) -> Tensor:
    """eta * d with eta cast to d's dtype (a float32 eta must not upcast a bf16 direction)."""
    return (eta.to(d.dtype) if isinstance(eta, Tensor) else eta) * d


def _select(keep: Tensor, new: Any, old: Any) -> Any:
    """``new`` where ``keep`` (B, N, 1) else ``old``, through tensors, tuples and dicts; with no old
    value yet (``old`` None: momentum's first step) stopped tokens get 0."""
    if new is old:
        return new
    if isinstance(new, Tensor):
        return torch.where(keep, new, 0.0 if old is None else old)
    if isinstance(new, (tuple, list)):
        olds = old if old is not None else [None] * len(new)
        return type(new)(_select(keep, n, o) for n, o in zip(new, olds))
    if isinstance(new, dict):
        return {k: _select(keep, v, None if old is None else old[k]) for k, v in new.items()}
    return new


class Descent:
    """One run of the shared loop: its constants and its per-token bookkeeping.

    ``descend(x, state, memory, start, stop)`` runs steps ``start .. stop-1`` (a backward mode may
    call it several times, e.g. once without a graph and once with); ``step(...)`` is the bare
    one-step map (no stopping rules), for backward modes that need it (implicit differentiation).
    """

    def __init__(self, solver: Solver, energy: Energy, x0: Tensor, point: Callable | None,
                 index0: int, mask: Tensor | None, trace: bool, want_stats: bool,
                 ctx: Any = None, observer: Callable[[Tensor], None] | None = None):
        self.solver, self.energy, self.x0, self.point, self.index0 = solver, energy, x0, point, index0
        self.ctx, self.observer = ctx, observer
        self.iterate = bool(energy.context_is_iterate)
        ss = solver.step_size
        self.fixed_eta = ss.value if type(ss) is FixedStepSize else None  # skip a module call per step
        self.tol, self.threshold = solver.tol, solver.energy_threshold
        self.dynamic = self.tol is not None or self.threshold is not None
        self.rec = Trace() if trace else None
        self.need_energy = trace or self.threshold is not None
        self.want_stats = want_stats or self.dynamic
        B, N = x0.shape[:2]
        self.stat_dtype = torch.promote_types(x0.dtype, torch.float32)  # norms at least fp32
        if mask is not None:
            if mask.shape != (B, N):
                raise ValueError(f"ctx.mask has shape {tuple(mask.shape)}: expected (batch, seq) = {(B, N)}")
            mask = mask.to(device=x0.device, dtype=torch.bool)
        self.mask = mask
        if self.rec is not None:
            self.rec.mask = mask  # means over real tokens (Trace.mask)
        if self.dynamic:
            self.active = mask.clone() if mask is not None else torch.ones(B, N, dtype=torch.bool,
                                                                           device=x0.device)
            self.taken = torch.zeros(B, N, dtype=torch.long, device=x0.device)
            self.last_norm = torch.zeros(B, N, dtype=self.stat_dtype, device=x0.device)
        else:
            self.active = mask  # static: None or the padding mask
        self.done = False
        self.steps = 0               # steps taken (loop iterations that moved some token)
        self.last_dx: Tensor | None = None
        self.energy_is_current = False  # the last recorded energy is at the current iterate

    # -- one step without bookkeeping (the map x_t -> x_{t+1})
    def step(self, x: Tensor, state: Any, memory: Any, index: int) -> tuple[Tensor, Any, Any, Tensor]:
        u = x if self.point is None else self.point(x)
        if self.iterate:
            state = self.energy.reprepare(state, u)
        eta = self.eta(index, x)
        dx, memory = self.solver.update(self.energy, x, u, state, memory, eta)
        return x + dx, state, memory, dx

    def eta(self, index: int, x: Tensor) -> Tensor | float:
        """The step size of step ``index`` at iterate ``x`` (a context-aware module also sees ``ctx``)."""
        if self.fixed_eta is not None:
            return self.fixed_eta
        return step_eta(self.solver.step_size, index, self.x0, x, self.ctx)

    def descend(self, x: Tensor, state: Any, memory: Any, start: int, stop: int) -> tuple[Tensor, Any, Any]:
        solver, energy, point = self.solver, self.energy, self.point
        for t in range(start, stop):
            if self.done:
                break
            if self.observer is not None:
                self.observer(x)
            u = x if point is None else point(x)
            if self.iterate:
                state = energy.reprepare(state, u)
            if self.need_energy:
                self.observe(u, x, state, memory)
                if self.done:
                    break
            eta = self.eta(self.index0 + t, x)
            dx, new_memory = solver.update(energy, x, u, state, memory, eta)
            if self.active is not None:  # stopped / masked tokens do not move
                keep = self.active.unsqueeze(-1)  # (B, N, 1)
                dx = torch.where(keep, dx, 0.0)
                new_memory = _select(keep, new_memory, memory)
            memory = new_memory
            x = x + dx
            self.steps += 1
            self.energy_is_current = False
            if self.rec is not None:
                self.rec.add_step(dx)
            if self.dynamic:
                self.after_step(dx)
            else:
                self.last_dx = dx
        return x, state, memory

    # -- bookkeeping
    def energies(self, u: Tensor, x: Tensor, state: Any, memory: Any) -> tuple[Tensor, dict | None]:
        """Total traced energy (B, N) and its named terms (energy terms + solver terms)."""
        with torch.no_grad():
            terms = self.energy.energy_terms(u, state)
            total = sum(terms.values()) if terms else self.energy.energy(u, state)
            extra = self.solver.extra_energy(x, memory)
            if extra:
                terms = dict(terms) if terms else {self.energy.registry_name or "energy": total}
                terms.update(extra)
                total = total + sum(extra.values())
        return total, terms

    def observe(self, u: Tensor, x: Tensor, state: Any, memory: Any) -> None:
        total, terms = self.energies(u, x, state, memory)
        if self.rec is not None:
            self.rec.add_energy(total, terms)
            self.energy_is_current = True
        if self.threshold is not None:
            self.active = self.active & (total > self.threshold)
            if not bool(self.active.any()):  # host sync: data-dependent rule
                self.done = True

    def after_step(self, dx: Tensor) -> None:
        n = at_least_float32(dx.detach()).norm(dim=-1)  # (B, N)
        moved = self.active
        self.taken += moved
        self.last_norm = torch.where(moved, n.to(self.last_norm.dtype), self.last_norm)
        if self.tol is not None:
            self.active = moved & (n >= self.tol)
        if not bool(self.active.any()):  # host sync: data-dependent rule
            self.done = True

    def finish(self, x: Tensor, state: Any, memory: Any) -> tuple[Trace | None, SolverStats | None]:
        if self.observer is not None:
            self.observer(x)
        if self.rec is not None and not self.energy_is_current:
            with torch.no_grad():
                u = x if self.point is None else self.point(x)
                if self.iterate:
                    state = self.energy.reprepare(state, u)
                total, terms = self.energies(u, x, state, memory)
            self.rec.add_energy(total, terms)
        if not self.want_stats:
            return self.rec, None
        if self.dynamic:
            return self.rec, SolverStats(self.taken, self.last_norm)
        B, N = x.shape[:2]
        taken = torch.full((B, N), self.steps, dtype=torch.long, device=x.device)
        if self.mask is not None:
            taken = taken * self.mask
        norm = (at_least_float32(self.last_dx.detach()).norm(dim=-1) if self.last_dx is not None
                else torch.zeros(B, N, dtype=self.stat_dtype, device=x.device))
        return self.rec, SolverStats(taken, norm)


def check_stop_with_backward(backward: Any, tol: float | None, energy_threshold: float | None) -> None:
    """Refuse ``backward: truncated`` with a stopping rule (``tol``, ``energy_threshold``): the untracked prefix is
    fixed at steps − k before the run starts, so when every token stops inside it the tracked steps never run and
    the parameters get no gradient at all, silently (a probe: 60 steps, k 3, tol 1e-6 stopped at 21 steps, dW = 0).
    Unroll (the graph of every step taken) and implicit (the fixed point's) give the stopped run its gradient."""
    rules = [f"{k} = {v}" for k, v in (("tol", tol), ("energy_threshold", energy_threshold)) if v is not None]
    if isinstance(backward, Truncated) and rules:
        raise ConfigError(truncated_stop_message(backward.k, rules))


def truncated_stop_message(k: int, rules: list[str]) -> str:
    """The one line refusing ``backward: truncated`` (``k``) with the stopping ``rules`` (``key = value``)."""
    return (f"backward = truncated (k {k}) with {' and '.join(rules)}: a stopping rule can stop every token inside "
            "the untracked prefix (no gradient at all); allowed: backward unroll or implicit with a stopping rule, or "
            "truncated without one")


# ----------------------------------------------------------------------------- base solver
class Solver(nn.Module):
    """Base class: one shared loop (:meth:`run`); subclasses write the step rule.

    Arguments shared by every solver: ``precond`` P (default identity), ``step_size`` (a number, a
    :class:`~energyformer.core.stepsize.StepSize` module; ``learn_step_size`` turns a number into a
    learned softplus scalar), ``tol`` / ``energy_threshold`` (per-token stopping rules, see the
    module docstring), ``backward`` ('unroll' | 'truncated') with ``truncate`` = k.
    """

    registry_name = ""
    rule_exact = True  # is the rule's update -eta P grad (momentum: no)
    carry_key: str | None = None  # ctx.carry key of state handed across layers (momentum)
    lookahead = False  # the gradient is evaluated at x + shift(x, ctx) (one step per block call)

    def __init__(
        self, precond: Preconditioner | None = None, step_size: float | StepSize = 1.0,
        learn_step_size: bool = False, tol: float | None = None, *,
        energy_threshold: float | None = None, backward: str = "unroll", truncate: int | None = None,
        dim: int | None = None,
    ):
        super().__init__()
        if tol is not None:
            check_float("tol", tol, min=0.0, min_exclusive=True)
        if energy_threshold is not None:
            check_float("energy_threshold", energy_threshold)
        self.precond = precond if precond is not None else IdentityPrecond(1)
        self.step_size = make_step_size(step_size, dim, learn=learn_step_size)
        self.tol = None if tol is None else float(tol)
        self.energy_threshold = None if energy_threshold is None else float(energy_threshold)
        self.backward = make_backward_mode(backward, truncate)
        check_stop_with_backward(self.backward, self.tol, self.energy_threshold)
        self._register_load_state_dict_pre_hook(_old_theta_key, with_module=True)

    # -- construction from a config
    @classmethod
    def from_config(cls, cfg: SolverConfig, dim: int, heads: int | None = None, *,
                    step_size: Any = 1.0, backward: Any = "unroll", name: str = "solver") -> Solver:
        """Build from a :class:`SolverConfig`; ``dim`` is the model width, ``heads`` the head count
        of a per-head preconditioner bank; ``step_size`` (a number, module or step-size config) and
        ``backward`` (a name, mode or backward config) are the sublayer's keys next to ``solver``."""
        if cfg.precond_per_head and heads is None:
            raise ConfigError(f"{name}.precond_per_head = True: this block has no attention heads "
                              "(set precond_per_head = false)")
        precond = make_preconditioner(cfg.precond, dim, cfg.precond_rank,
                                      heads if cfg.precond_per_head else None, name=f"{name}.precond")
        return cls(precond, make_step_size(step_size, dim), tol=cfg.tol,
                   energy_threshold=cfg.energy_threshold, backward=make_backward_mode(backward),
                   **cls.config_kwargs(cfg))

    @classmethod
    def config_kwargs(cls, cfg: SolverConfig) -> dict[str, Any]:
        """Rule-specific constructor arguments from the config (subclasses)."""
        return {}

    # -- the step rule (subclasses)
    def init_memory(self, x0: Tensor, carry: Any, anchor: Tensor) -> Any:
        """Initial state of the rule (None for plain gradient descent)."""
        return None

    def update(self, energy: Energy, x: Tensor, u: Tensor, state: Any, memory: Any,
               eta: Tensor | float) -> tuple[Tensor, Any]:  # pragma: no cover
        """The step ``dx`` from iterate ``x`` (gradient point ``u``) and the new memory."""
        raise NotImplementedError

    def extra_energy(self, x: Tensor, memory: Any) -> dict[str, Tensor] | None:
        """Named (B, N) terms the rule adds to the descended objective (proximal term)."""
        return None

    def carry_out(self, memory: Any) -> Any:
        """What the rule hands to the next layer (None: nothing)."""
        return None

    @property
    def exact(self) -> bool:
        """True when every step is ``-eta P ∇E`` of the traced objective with one positive scalar eta."""
        return bool(self.rule_exact and self.step_size.exact)

    # -- the shared loop
    def budget(self, steps: int | Budget, ctx: Any = None) -> int:
        """The step count of a run: an int as given, a :class:`Budget` resolved against ``ctx.steps``
        and this solver's training mode."""
        return steps.resolve(ctx, self.training) if isinstance(steps, Budget) else steps

    def shift(self, x: Tensor, ctx: Any) -> Tensor | None:
        """Offset of the evaluation point from the iterate for a look-ahead rule (Sutskever's
        Nesterov: ``eta beta m``, from the carried state), or None. A block evaluates its energy's
        context and gradient at ``x + shift`` (:class:`~energyformer.core.block.EnergyBlock`)."""
        return None

    def carried(self, ctx: Any) -> Any:
        """The state this solver's rule carries across layers (``ctx.carry[carry_key]``), or None."""
        key = self.carry_key
        return ctx.carry.get(key) if key is not None and ctx is not None else None

    def run(
        self, energy: Energy, x0: Tensor, state: Any, steps: int | Budget, *,
        point: Callable[[Tensor], Tensor] | None = None, trace: bool = False, carry: Any = None,
        ctx: Any = None, anchor: Tensor | None = None, stats: bool = False,
        adaptive: tuple[Tensor, int] | None = None, observer: Callable[[Tensor], None] | None = None,
    ) -> SolverResult:
        """Descend ``energy`` from ``x0`` (B, N, D) for at most ``steps`` steps.

        ``steps`` is a count or a :class:`Budget` (train / eval counts, ``ctx.steps`` overrides).
        ``ctx`` (a :class:`~energyformer.core.context.ForwardContext`) supplies the padding mask,
        the iteration index and the carried state; ``carry`` overrides the carried state;
        ``anchor`` is the proximal anchor (default ``x0``); ``stats`` asks for :class:`SolverStats`.
        ``adaptive = (more, k)``: after the budget, the tokens where ``more`` (B, N) is True (and
        the padding mask allows) take ``k`` further steps (EqT §3.7 adaptive K; no trace of this
        phase; statistics add up). ``observer(x)`` sees every iterate x_0 .. x_T (x_T once more after
        an adaptive phase starts from it), e.g. to record relative changes.
        """
        steps = self.budget(steps, ctx)
        check_int("steps", steps, min=0)
        iteration = ctx.iteration if ctx is not None else 0
        index0 = iteration * steps
        if steps:
            self.step_size.check_index(index0 + steps - 1, iteration=iteration, steps=steps)
        key = self.carry_key
        if carry is None:
            carry = self.carried(ctx)
        anchor = x0 if anchor is None else anchor
        memory = self.init_memory(x0, carry, anchor)
        mask = ctx.mask if ctx is not None else None
        loop = Descent(self, energy, x0, point, index0, mask, trace, stats, ctx, observer)
        with self.precond.per_call():  # its weight-only factors built once for the call's steps (core/precond.py)
            x, state, memory = self.backward.run(loop, x0, state, memory, steps)
            if x.shape != x0.shape:  # an update broadcast against a state of more tokens or rows (probe AS)
                raise ValueError(f"{type(self).__name__}.run: the iterate went from shape {tuple(x0.shape)} to "
                                 f"{tuple(x.shape)}: the energy's state was prepared for other tokens (prepare it "
                                 "from a context of x0's (B, N))")
            rec, st = loop.finish(x, state, memory)
            if adaptive is not None and adaptive[1] > 0:
                more, k = adaptive
                more = more if mask is None else more & mask.to(torch.bool)
                loop2 = Descent(self, energy, x, point, index0, more, False, stats, ctx, observer)
                x, state, memory = self.backward.run(loop2, x, state, self.init_memory(x, carry, anchor), k)
                _, st2 = loop2.finish(x, state, memory)
                if stats:
                    st = SolverStats(st.steps + st2.steps, torch.where(st2.steps > 0, st2.step_norm, st.step_norm))
        out = self.carry_out(memory)
        if key is not None and ctx is not None and out is not None:
            ctx.carry[key] = out
        return SolverResult(x=x, trace=rec, steps=loop.steps, carry=out, stats=st)

    def extra_repr(self) -> str:
        parts = [f"backward={self.backward!r}"]
        if self.tol is not None:
            parts.append(f"tol={self.tol}")
        if self.energy_threshold is not None:
            parts.append(f"energy_threshold={self.energy_threshold}")
        return ", ".join(parts)


def _old_theta_key(module, state_dict, prefix, *args) -> None:
    """Checkpoints from before step-size modules stored a learned eta as ``solver.theta``."""
    old = prefix + "theta"
    if old in state_dict and prefix + "step_size.theta" not in state_dict:
        state_dict[prefix + "step_size.theta"] = state_dict.pop(old)


# ----------------------------------------------------------------------------- gradient descent
class GDConfig(SolverConfig):
    """Preconditioned gradient descent."""

    kind: Literal["gd"] = "gd"


@register_solver("gd", GDConfig)
class GradientDescent(Solver):
    """Preconditioned gradient descent (CEM seed Eq. 16-17 / Algorithm 1):

        u_t = point(x_t);   x_{t+1} = x_t + eta_t * direction(u_t)   (= x_t - eta_t P ∇E(u_t))

    ``step_size`` is eta (a fixed hyper-parameter, a step-size module, or learned when
    ``learn_step_size``: eta = softplus(theta), initialised at ``step_size``).
    """

    def update(self, energy, x, u, state, memory, eta):
        return _scale(eta, energy.direction(u, state, self.precond)), memory
