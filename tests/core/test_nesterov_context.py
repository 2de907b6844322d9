"""Nesterov ``form: sutskever`` evaluates its gradient at x + η β v: that η is the step's own, with the forward
context where the step size reads it (a network conditioned on the embedded input). The old look-ahead called
the step size without ctx, so a context-conditioned network gave the shift another η than the step."""

from __future__ import annotations

import torch

from energyformer.core import ForwardContext, Nesterov, NetworkStepSize

DT = torch.float64


def test_the_look_ahead_uses_the_steps_eta_with_the_context():
    torch.manual_seed(0)
    D = 4
    net = NetworkStepSize(D, embed_dim=8, condition="input", output="vector", zero_init="none", base=0.5).to(DT)
    solver = Nesterov(None, net, beta=0.5, carry_key="v", form="sutskever")
    g = torch.Generator().manual_seed(1)
    emb, m, x = (torch.randn(1, 3, D, dtype=DT, generator=g) for _ in range(3))
    ctx = ForwardContext(embedded=emb, iteration=2, iterations=4)
    ctx.carry["v"] = m
    eta = net(2, x, x, ctx=ctx)  # the η of this call's step (index = iteration × 1 step)
    torch.testing.assert_close(solver.shift(x, ctx), eta * 0.5 * m, rtol=1e-14, atol=0)
