"""Implicit differentiation of a solver run (backward mode ``implicit``; EqT seed 003 §3.5 Eq. 19,
torchdeq's implicit backward; Bai et al. 2019).

The forward pass descends to (approximately) a fixed point x* = T(x*) of the one-step map
T(x) = x + update(x) without building a graph. For the proximal step of EqT,
T(x) = x − α(∇ℒ(x) + (x − f)/γ), and x* satisfies the equilibrium condition ∇ℒ(x*) + (x* − f)/γ = 0.
By the implicit function theorem, for any quantity θ the fixed point depends on (parameters, the
anchor f, the prepared context),

    dx*/dθ = (I − J)^{-1} ∂T/∂θ,     J = ∂T/∂x at x*,

so the gradient of a loss with upstream gradient g = ∂loss/∂x* is v^T ∂T/∂θ with v the solution of

    (I − Jᵀ) v = g.                                             (for EqT: α(∇²ℒ + I/γ) v = g, Eq. 19)

The mode applies T once more at x* with a graph, and a hook on its output replaces the incoming
gradient g by v. The forward value is x* itself (``x* + (T(x*) − stopgrad T(x*))``), so a run with
``implicit`` returns exactly what ``unroll`` returns; only the gradient differs.

Linear solvers (``method``):

``cg``           conjugate gradient on (I − Jᵀ) v = g. Valid only when I − J is symmetric: an exact
                 gradient step with a scalar step size, an identity preconditioner and no norm in
                 the loop (checked). Stops on ‖r‖ ≤ tol·‖g‖. A direction with pᵀ(I − Jᵀ)p ≤ 0
                 (negative curvature: ℒ is not convex there, the fixed point is not a strict
                 minimum of the proximal objective) stops it: reported as non-convergence.
``fixed_point``  damped iteration v ← (1 − d) v + d (g + Jᵀ v) (torchdeq), any step rule; converges
                 when the spectral radius of (1 − d) I + d Jᵀ is below 1. Stops on
                 ‖v_{k+1} − v_k‖ ≤ tol·‖v_{k+1}‖.

Non-convergence is never silent: the forward residual ‖T(x*) − x*‖ (how far the run is from a
fixed point, where the implicit gradient is only approximate) and the backward solve's
iterations, relative residual and status are kept in :attr:`Implicit.last` and counted in
:attr:`Implicit.failures`; ``on_fail`` chooses what happens to a failed solve: ``'warn'``
(default: warn and use the last iterate), ``'raise'``, or ``'fallback'`` (warn and use v = g, the
one-step "Jacobian-free" gradient). Only step rules whose update is x − η P ∇E (``rule_exact``) are
accepted: momentum carries memory across steps and has its fixed point in (x, memory) jointly, and
ISTA's threshold and the sphere's projection are not gradient steps; they are rejected.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any, Callable, Literal

import torch
from pydantic import Field
from torch import Tensor

from ..utils.config import KindConfig
from ..utils.validate import ConfigError, check_choice, check_float, check_int
from .backward import BackwardMode, register_backward_mode

if TYPE_CHECKING:  # pragma: no cover
    from .solver import Descent

METHODS = ("cg", "fixed_point")
ON_FAIL = ("warn", "raise", "fallback")


class ImplicitSolveError(RuntimeError):
    """The implicit backward linear solve did not converge (``on_fail='raise'``)."""


def _dot(a: Tensor, b: Tensor) -> Tensor:
    return (a.double() * b.double()).sum()


def solve_cg(apply_a: Callable[[Tensor], Tensor], g: Tensor, max_iter: int, tol: float) -> tuple[Tensor, dict]:
    """Conjugate gradient for A v = g (A symmetric); returns v and {iterations, rel_residual, status}.

    One host read per iteration (a sync on a GPU): the curvature pᵀAp and the new residual ‖r‖² come in one
    transfer, the update they guard computed before it and dropped on negative curvature (it was two reads, one
    for each test, and two more around the loop). ‖g‖² is the first ‖r‖² (r₀ = g), read once."""
    v = torch.zeros_like(g)
    r, p = g.clone(), g.clone()
    rr = _dot(r, r)
    rr_f = float(rr)
    g_norm = math.sqrt(rr_f) or 1.0
    status, it = "max_iter", 0
    if math.sqrt(rr_f) <= tol * g_norm:
        return v, {"iterations": 0, "rel_residual": 0.0, "status": "converged"}
    for it in range(1, max_iter + 1):
        ap = apply_a(p)
        pap = _dot(p, ap)
        a = (rr / pap).to(g.dtype)
        v_new, r_new = v + a * p, r - a * ap
        rr_new = _dot(r_new, r_new)
        pap_f, rr_new_f = torch.stack((pap, rr_new)).tolist()
        if not pap_f > 0:
            status = "negative_curvature"
            break
        v, r = v_new, r_new
        if math.sqrt(rr_new_f) <= tol * g_norm:
            status, rr_f = "converged", rr_new_f
            break
        p = r + (rr_new / rr).to(g.dtype) * p
        rr, rr_f = rr_new, rr_new_f
    return v, {"iterations": it, "rel_residual": math.sqrt(rr_f) / g_norm, "status": status}


def solve_fixed_point(jtv: Callable[[Tensor], Tensor], g: Tensor, max_iter: int, tol: float,
                      damping: float) -> tuple[Tensor, dict]:
    """Damped iteration v ← (1 − d) v + d (g + Jᵀ v) from v = g; returns v and its statistics.

    The step's size and the iterate's norm come to the host in one transfer (one sync per iteration on a GPU,
    not two)."""
    v, rel = g.clone(), float("inf")
    status, it = "max_iter", 0
    for it in range(1, max_iter + 1):
        new = (1 - damping) * v + damping * (g + jtv(v))
        diff2, scale2 = torch.stack((_dot(new - v, new - v), _dot(new, new))).tolist()
        diff, scale = math.sqrt(diff2), math.sqrt(scale2) or 1.0
        v, rel = new, diff / scale
        if not math.isfinite(rel):
            status = "diverged"
            break
        if rel <= tol:
            status = "converged"
            break
    return v, {"iterations": it, "rel_residual": rel, "status": status}


class ImplicitConfig(KindConfig):
    """Implicit differentiation at the run's end point (implicit function theorem)."""

    kind: Literal["implicit"] = "implicit"
    method: Literal["cg", "fixed_point"] = "cg"
    """linear solver of (I - J^T) v = g: conjugate gradient (symmetric steps only) or damped fixed point"""
    max_iter: int = Field(50, ge=1)
    """iterations of the linear solve"""
    tol: float = Field(1e-6, gt=0)
    """relative tolerance of the linear solve"""
    damping: float = Field(1.0, gt=0, le=1)
    """d of the damped fixed-point iteration"""
    on_fail: Literal["warn", "raise", "fallback"] = "warn"
    """what a solve that does not converge does: warn, raise, or warn and use v = g"""


@register_backward_mode("implicit", ImplicitConfig)
class Implicit(BackwardMode):
    """Implicit-function-theorem gradients at the run's end point (see the module docstring)."""

    @classmethod
    def from_config(cls, cfg: ImplicitConfig) -> Implicit:
        return cls(cfg.method, cfg.max_iter, cfg.tol, cfg.damping, cfg.on_fail)

    def __init__(self, method: str = "cg", max_iter: int = 50, tol: float = 1e-6, damping: float = 1.0,
                 on_fail: str = "warn"):
        check_choice("implicit.method", method, METHODS)
        check_int("implicit.max_iter", max_iter, min=1)
        check_float("implicit.tol", tol, min=0.0, min_exclusive=True)
        check_float("implicit.damping", damping, min=0.0, max=1.0, min_exclusive=True)
        check_choice("implicit.on_fail", on_fail, ON_FAIL)
        self.method, self.max_iter, self.tol, self.damping, self.on_fail = method, max_iter, tol, damping, on_fail
        self._last: dict[str, Any] = {}
        self._pending: tuple[Tensor, Tensor] | None = None  # the forward residuals, on the device until read
        self.failures = 0
        self.solves = 0

    @property
    def last(self) -> dict[str, Any]:
        """Statistics of the last run (floats): ``forward_residual`` and ``forward_rel_residual`` (the largest
        ‖T(x*) − x*‖ and its ratio to ‖x*‖ over tokens), then the backward solve's ``iterations``,
        ``rel_residual`` and ``status``. The forward residuals stay on the device until read here, in one
        transfer: the forward read them with two ``float()`` per block call (two syncs on a GPU) for diagnostics
        nothing might read."""
        if self._pending is not None:
            res, rel = torch.stack(self._pending).tolist()
            self._last = {"forward_residual": res, "forward_rel_residual": rel, **self._last}
            self._pending = None
        return self._last

    def _check_rule(self, descent: Descent) -> None:
        solver = descent.solver
        if not solver.rule_exact:
            raise ConfigError(f"backward = 'implicit' with the {type(solver).__name__} step rule: implicit "
                              "takes only a step x − η P ∇E (momentum carries memory across steps, its fixed "
                              "point is in (x, memory); ISTA's threshold and the sphere's projection are not "
                              "gradient steps); allowed: backward unroll or truncated")
        if self.method == "cg":
            p = getattr(solver, "precond", None)
            if not (solver.exact and descent.energy.exact and descent.point is None
                    and (p is None or p.is_identity)):
                raise ConfigError("implicit.method = 'cg' needs a symmetric step Jacobian (an exact "
                                  "gradient step, scalar step size, identity preconditioner, no norm in "
                                  "the loop); use implicit.method = 'fixed_point'")

    def run(self, descent, x0, state, memory, steps):
        if not torch.is_grad_enabled() or steps == 0:  # 0 steps: the output is x0 itself (d out / d x0 = I, no
            return descent.descend(x0, state, memory, 0, steps)  # parameter gradient), not a fixed point's
        self._check_rule(descent)
        with torch.no_grad():
            xs, _, _ = descent.descend(x0, state, memory, 0, steps)
        z = xs.detach().requires_grad_(True)
        y, _, _, dx = descent.step(z, state, memory, descent.index0 + max(steps - 1, 0))  # T(x*) with a graph
        keep = None if descent.mask is None else descent.mask.unsqueeze(-1)       # (B, N, 1)
        if keep is not None:
            y = torch.where(keep, y, z.detach())
        with torch.no_grad():
            res = dx.detach().float().norm(dim=-1)
            if descent.mask is not None:
                res = res * descent.mask
            rel = res / xs.detach().float().norm(dim=-1).clamp_min(1e-12)
        if res.numel():
            self._last, self._pending = {}, (res.max(), rel.max())
        else:
            self._last, self._pending = {"forward_residual": 0.0, "forward_rel_residual": 0.0}, None
        if y.requires_grad:
            y.register_hook(lambda g: self._backward(g, y, z))
        out = xs.detach() + (y - y.detach())
        if keep is not None:
            out = torch.where(keep, out, x0)  # masked tokens never move: gradient straight to x0
        return out, state, memory

    def _backward(self, g: Tensor, y: Tensor, z: Tensor) -> Tensor:
        # the hook sits on y, so it also fires for the vector-Jacobian products below: pass those through
        if getattr(self, "_solving", False):
            return g

        def jtv(v: Tensor) -> Tensor:
            (out,) = torch.autograd.grad(y, z, v, retain_graph=True)
            return out

        self._solving = True
        try:
            with torch.enable_grad():
                if self.method == "cg":
                    v, info = solve_cg(lambda p: p - jtv(p), g, self.max_iter, self.tol)
                else:
                    v, info = solve_fixed_point(jtv, g, self.max_iter, self.tol, self.damping)
        finally:
            self._solving = False
        self.solves += 1
        self._last.update(info)
        if info["status"] != "converged":
            self.failures += 1
            msg = (f"implicit backward ({self.method}) did not converge: {info['status']} after "
                   f"{info['iterations']} iterations, relative residual {info['rel_residual']:.2e} "
                   f"(forward residual {self.last.get('forward_residual', float('nan')):.2e})")
            if self.on_fail == "raise":
                raise ImplicitSolveError(msg)
            warnings.warn(msg + ("; using the one-step gradient" if self.on_fail == "fallback"
                                 else "; using the last iterate"), stacklevel=2)
            if self.on_fail == "fallback":
                return g
        return v.detach()

    def __repr__(self) -> str:
        return (f"Implicit(method={self.method!r}, max_iter={self.max_iter}, tol={self.tol}"
                + (f", damping={self.damping}" if self.method == "fixed_point" else "")
                + f", on_fail={self.on_fail!r})")
