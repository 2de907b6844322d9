"""Toy energies for the core tests (not registered: the library registry stays the library's)."""

from __future__ import annotations

import torch
from torch import Tensor

from energyformer.core import Energy, QuadraticEnergy


class FixedTarget(QuadraticEnergy):
    """E_i = ½ (x_i − c_i)ᵀ A (x_i − c_i) with a fixed target c (the block's context is ignored)."""

    def __init__(self, c: Tensor, scales=None):
        super().__init__(c.shape[-1], scales=scales)
        self.register_buffer("c", c.clone())

    def prepare(self, context, **kw):
        return self.c


class Counting(QuadraticEnergy):
    """Identity quadratic that counts prepare / reprepare calls."""

    def __init__(self, dim: int, iterate: bool = False):
        super().__init__(dim)
        self.context_is_iterate = iterate
        self.prepares = 0
        self.reprepares = 0

    def prepare(self, context, **kw):
        self.prepares += 1
        return context

    def reprepare(self, state, u):
        self.reprepares += 1
        return 0.5 * u  # context = half the iterate: E_i = ½‖x_i − u_i/2‖²


class LeaveOneOut(Energy):
    """Iterate-context energy with a deliberately inexact (per-token partial) update.

        E_i(x) = ½ ‖x_i − tanh(c_i)‖²,   c_i = mean_{j≠i} x_j   (context = the iterate)
        direction_i = −P (x_i − tanh(c_i))   (∂E_i/∂x_i with the context held fixed, as a
                                               pseudo-likelihood update; not −P ∇ Σ_j E_j)
    """

    exact = False
    context_is_iterate = True

    def prepare(self, context, **kw):
        n = context.shape[1]
        return (context.sum(1, keepdim=True) - context) / (n - 1)  # c: (B, N, D)

    def energy(self, x, c):
        return 0.5 * (x - torch.tanh(c)).pow(2).sum(-1)

    def grad(self, x, c):
        """Total derivative: own term plus every other token's dependence through its context."""
        n = x.shape[1]
        t = torch.tanh(c)
        r = (x - t) * (1 - t * t)  # (x_i − tanh c_i) ⊙ sech²(c_i)
        return (x - t) - (r.sum(1, keepdim=True) - r) / (n - 1)

    def direction(self, x, c, precond):
        return -precond(x - torch.tanh(c))

    def reference_direction(self, x, c, precond):
        """Slow: per token, autograd of E_i w.r.t. x_i with the other tokens fixed."""
        rows = []
        for i in range(x.shape[1]):
            xi = x[:, i].detach().clone().requires_grad_(True)
            others = torch.cat([x[:, :i], x[:, i + 1:]], 1).detach()
            ci = others.mean(1)
            (g,) = torch.autograd.grad(0.5 * (xi - torch.tanh(ci)).pow(2).sum(), xi)
            rows.append(g)
        return -precond(torch.stack(rows, 1))


class NoReference(LeaveOneOut):
    """Inexact energy that forgot its reference direction: the property checks must fail."""

    reference_direction = Energy.reference_direction


class WrongReference(LeaveOneOut):
    """Inexact energy whose reference disagrees with its direction: the checks must fail."""

    def reference_direction(self, x, c, precond):
        return 1.01 * super().reference_direction(x, c, precond)


class WrongGrad(QuadraticEnergy):
    """Closed-form gradient off by a factor: the grad check must fail."""

    def grad(self, x, c):
        return 1.001 * super().grad(x, c)


class IgnoresPrecond(QuadraticEnergy):
    """An exact energy whose direction leaves P out (−∇E): it still descends, but it is not −P ∇E."""

    def direction(self, x, state, precond):
        return -self.grad(x, state)
